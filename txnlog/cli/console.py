"""The ``txnlog`` command: table maintenance from a shell. A thin layer over
:mod:`txnlog.maintenance` (see docs/cli.md); what it prints is :mod:`txnlog.cli.output`'s.

Exit codes: 0 ok; 1 a problem found (validate) or an operation refused or failed; 2 a usage
error; 3 no table at the URI; 4 a conflict with a concurrent commit.
"""

from __future__ import annotations

import datetime as _dt
import functools
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
import orjson

import txnlog
from txnlog import maintenance
from txnlog.cli.output import Document, Output, Rows, output_for
from txnlog.errors import (
    CommitConflictError,
    InvalidArgumentError,
    InvalidPredicateError,
    TableNotFoundError,
    TxnLogError,
)

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_TABLE_NOT_FOUND = 3
EXIT_CONFLICT = 4

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


def exit_code_of(error: BaseException) -> int:
    if isinstance(error, TableNotFoundError):  # before InvalidArgumentError: a path that is a file is both
        return EXIT_TABLE_NOT_FOUND
    if isinstance(error, CommitConflictError):
        return EXIT_CONFLICT
    if isinstance(error, (InvalidArgumentError, InvalidPredicateError)):  # what the command line said is wrong
        return EXIT_USAGE
    return EXIT_PROBLEM


# --- arguments and options every command takes ------------------------------------------------


class _TableUri(click.ParamType):  # type: ignore[type-arg]
    name = "URI"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.strip():
            # txnlog.Table('') would open the current directory.
            self.fail("the table URI is empty: give a path (. for the current directory) or a URI", param, ctx)
        return text


class _Duration(click.ParamType):  # type: ignore[type-arg]
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return maintenance.parse_duration_ms(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class _Timestamp(click.ParamType):  # type: ignore[type-arg]
    name = "TIMESTAMP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> _dt.datetime:
        if isinstance(value, _dt.datetime):
            return value
        try:
            ts = _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"expected an ISO 8601 timestamp like 2024-05-01T12:00:00Z, got {value!r}", param, ctx)
        return ts if ts.tzinfo else ts.replace(tzinfo=_dt.timezone.utc)


TABLE_URI = _TableUri()
DURATION = _Duration()
TIMESTAMP = _Timestamp()


def _storage_options(ctx: click.Context, /, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", ctx=ctx, param=param)
        options[key] = value
    return options


class Settings:
    """The common options, from the command and (for ``tag``/``consumer``) its group."""

    def __init__(self, json_output: bool = False, storage_options: dict[str, str] | None = None, debug: bool = False) -> None:
        self.json = json_output
        self.storage_options = dict(storage_options or {})
        self.debug = debug

    def merged(self, other: Settings) -> Settings:
        return Settings(self.json or other.json, {**other.storage_options, **self.storage_options}, self.debug or other.debug)


def common_options(f: F) -> F:
    f = click.option("--debug", is_flag=True, help="On error, show the traceback.")(f)
    f = click.option(
        "--storage-option",
        "-o",
        "storage_options",
        multiple=True,
        callback=_storage_options,
        metavar="KEY=VALUE",
        help="A storage option (credentials, endpoint...), as for txnlog.Table; repeatable.",
    )(f)
    f = click.option("--json", "json_output", is_flag=True, help="Print one JSON document on stdout and nothing else there.")(f)
    return f


def _settings(ctx: click.Context, /, json_output: bool, storage_options: dict[str, str], debug: bool) -> Settings:
    own = Settings(json_output, storage_options, debug)
    parent = ctx.find_object(Settings)
    return own.merged(parent) if parent is not None else own


def _table(uri: str, settings: Settings) -> txnlog.Table:
    return txnlog.Table(uri, settings.storage_options)


def _run(
    settings: Settings,
    body: Callable[[maintenance.Progress | None], R],
    show: Callable[[Output], Callable[[R], None]],
    exit_code: Callable[[R], int] = lambda _: EXIT_OK,
) -> None:
    """Run ``body`` (which returns the result's document) and hand it to the output's method that
    ``show`` picks; an error becomes one line on stderr (and the JSON error document with --json)
    and its exit code."""
    output = output_for(settings.json)
    try:
        with output.progress() as progress:
            document = body(progress)
    except (TxnLogError, OSError) as e:
        if settings.debug:
            traceback.print_exc(file=sys.stderr)
        code = exit_code_of(e)
        output.error(type(e).__name__, " ".join(str(e).split()) or type(e).__name__, code)
        sys.exit(code)
    show(output)(document)
    sys.exit(exit_code(document))


# --- the command group -----------------------------------------------------------------------


def _wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for --json (read from the words themselves, for the usage
    errors click finds before any option is parsed)."""
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


class _CommandGroup(click.Group):
    """The top command: usage errors go through the output too, so --json gets its JSON error."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        words = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(words, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            output_for(_wants_json(words)).usage_error(e)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(EXIT_PROBLEM)
        sys.exit(code if isinstance(code, int) else EXIT_OK)  # --help, --version


@click.group(cls=_CommandGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(txnlog.__version__, prog_name="txnlog")
def cli() -> None:
    """Maintain Delta tables: checkpoints, log expiry, tags, consumers, vacuum, restore, validation.

    Every command takes a table URI (a path, file://, s3://, az://, gs://, memory://), --json and
    --storage-option KEY=VALUE. Exit codes: 0 ok, 1 a problem found or refused, 2 usage error,
    3 table not found, 4 conflict with a concurrent commit.
    """


def _command(name: str, **kwargs: Any) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return cli.command(name, **kwargs)(common_options(f))  # type: ignore[return-value]

    return decorate


@_command("checkpoint")
@click.argument("uri", type=TABLE_URI)
@click.option("--version", "version", type=click.IntRange(min=0), help="The version to checkpoint (default: the latest).")
@click.pass_context
def checkpoint_command(ctx: click.Context, /, uri: str, version: int | None, **common: Any) -> None:
    """Write a checkpoint (classic or V2, as the table's protocol says) and _last_checkpoint."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> Document:
        if progress:
            progress("checkpoint", 0, 1)
        result = maintenance.checkpoint(_table(uri, settings), version)
        if progress:
            progress("checkpoint", 1, 1)
        return {
            "version": result.version,
            "paths": list(result.paths),
            "numActions": result.num_actions,
            "numAddFiles": result.num_add_files,
            "sizeInBytes": result.size_in_bytes,
        }

    _run(settings, body, lambda out: out.checkpoint)


@_command("describe")
@click.argument("uri", type=TABLE_URI)
@click.option("--version", "version", type=click.IntRange(min=0), help="Describe this version (default: the latest).")
@click.pass_context
def describe_command(ctx: click.Context, /, uri: str, version: int | None, **common: Any) -> None:
    """Version, protocol and features, files, bytes, rows, partitions, checkpoint, properties, tags, consumers."""
    settings = _settings(ctx, **common)
    _run(settings, lambda progress: maintenance.describe(_table(uri, settings), version).to_dict(), lambda out: out.description)


@_command("history")
@click.argument("uri", type=TABLE_URI)
@click.option("--limit", type=click.IntRange(min=0), help="Only the newest N versions.")
@click.pass_context
def history_command(ctx: click.Context, /, uri: str, limit: int | None, **common: Any) -> None:
    """The commits still in the log, newest first."""
    settings = _settings(ctx, **common)
    _run(settings, lambda progress: [e.to_dict() for e in maintenance.history(_table(uri, settings), limit)], lambda out: out.history)


@_command("files")
@click.argument("uri", type=TABLE_URI)
@click.option("--version", "version", type=click.IntRange(min=0), help="List the files of this version.")
@click.option("--timestamp", type=TIMESTAMP, help="List the files of the version current at this ISO 8601 time.")
@click.option("--where", help="A SQL predicate on partition columns and stats, e.g. \"region = 'EU'\".")
@click.pass_context
def files_command(ctx: click.Context, /, uri: str, version: int | None, timestamp: _dt.datetime | None, where: str | None, **common: Any) -> None:
    """The live data files (path, size, partition values, rows)."""
    settings = _settings(ctx, **common)
    if version is not None and timestamp is not None:
        raise click.UsageError("give --version or --timestamp, not both")

    def body(progress: maintenance.Progress | None) -> Rows:
        files = maintenance.list_files(_table(uri, settings), version=version, timestamp=timestamp, where=where)
        rows = []
        for path, size, parts, mtime, stats in zip(
            files.column("path").to_pylist(),
            files.column("size").to_pylist(),
            files.column("partition_values").to_pylist(),
            files.column("modification_time").to_pylist(),
            files.column("stats").to_pylist(),
        ):
            try:
                records = orjson.loads(stats).get("numRecords") if stats else None
            except (orjson.JSONDecodeError, AttributeError):
                records = None
            rows.append({"path": path, "size": size, "partitionValues": dict(parts or []), "modificationTime": mtime, "numRecords": records})
        return rows

    _run(settings, body, lambda out: out.files)


@_command("validate")
@click.argument("uri", type=TABLE_URI)
@click.pass_context
def validate_command(ctx: click.Context, /, uri: str, **common: Any) -> None:
    """Check the log and the files; exit 1 if anything is wrong."""
    settings = _settings(ctx, **common)
    _run(
        settings,
        lambda progress: maintenance.validate(_table(uri, settings), progress=progress).to_dict(),
        lambda out: out.validation,
        lambda report: EXIT_OK if report["ok"] else EXIT_PROBLEM,
    )


@_command("expire")
@click.argument("uri", type=TABLE_URI)
@click.option("--retain-min", type=click.IntRange(min=1), help="Keep at least this many versions (default txnlog.log.retain.min, 10).")
@click.option("--retain-max", type=click.IntRange(min=1), help="Keep at most this many versions (default txnlog.log.retain.max, unbounded).")
@click.option("--older-than", type=DURATION, help="Expire only versions older than this, e.g. 30d (default delta.logRetentionDuration).")
@click.option("--limit", type=click.IntRange(min=1), help="Expire at most this many versions (default txnlog.log.expire.limit, 50).")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; change nothing.")
@click.pass_context
def expire_command(
    ctx: click.Context,
    /,
    uri: str,
    retain_min: int | None,
    retain_max: int | None,
    older_than: int | None,
    limit: int | None,
    dry_run: bool,
    **common: Any,
) -> None:
    """Expire old log versions (Paimon's rules); tags and consumers pin versions."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> Document:
        return maintenance.expire(
            _table(uri, settings), retain_min=retain_min, retain_max=retain_max, older_than=older_than, limit=limit, dry_run=dry_run, progress=progress
        ).to_dict()

    _run(settings, body, lambda out: out.expiry)


@_command("vacuum")
@click.argument("uri", type=TABLE_URI)
@click.option("--retention", type=DURATION, help="Keep files removed or written less than this ago, e.g. 168h (default delta.deletedFileRetentionDuration).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted and what is kept, and why; change nothing.")
@click.option("--force", is_flag=True, help="Allow a retention below the table's delta.deletedFileRetentionDuration.")
@click.option(
    "--rule",
    type=click.Choice(["versions", "delta"]),
    default="versions",
    show_default=True,
    help="versions: keep every file a version still in the log reads (time travel stays whole); "
    "delta: Delta's rule, keep only what the latest version reads and what was removed less than the retention ago.",
)
@click.pass_context
def vacuum_command(ctx: click.Context, /, uri: str, retention: int | None, dry_run: bool, force: bool, rule: str, **common: Any) -> None:
    """Delete data files nothing keeps any more (old tombstones, orphans), older than the retention."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> Document:
        return maintenance.vacuum(_table(uri, settings), retention=retention, dry_run=dry_run, force=force, rule=rule, progress=progress).to_dict()

    _run(settings, body, lambda out: out.vacuum)


@_command("export-iceberg")
@click.argument("uri", type=TABLE_URI)
@click.option("--full", is_flag=True, help="Rebuild the Iceberg snapshot from the full file list instead of commit by commit.")
@click.pass_context
def export_iceberg_command(ctx: click.Context, /, uri: str, full: bool, **common: Any) -> None:
    """Write Iceberg metadata under URI/metadata/: one Iceberg snapshot per Delta commit since the last export."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> Document:
        try:
            from txnlog.iceberg import export  # optional: needs the pyiceberg extra (txnlog[iceberg])
        except ImportError as e:  # the optional extra is not installed
            raise TxnLogError(f"export-iceberg needs pyiceberg: pip install 'txnlog[iceberg]' ({e})") from None
        return export(_table(uri, settings), full=full).to_dict()

    _run(settings, body, lambda out: out.iceberg_export)


@_command("restore")
@click.argument("uri", type=TABLE_URI)
@click.option("--version", "version", type=click.IntRange(min=0), help="Restore to this version.")
@click.option("--timestamp", type=TIMESTAMP, help="Restore to the version current at this ISO 8601 time.")
@click.pass_context
def restore_command(ctx: click.Context, /, uri: str, version: int | None, timestamp: _dt.datetime | None, **common: Any) -> None:
    """Restore the table to an earlier version with a RESTORE commit."""
    settings = _settings(ctx, **common)
    if (version is None) == (timestamp is None):
        raise click.UsageError("give exactly one of --version and --timestamp")

    def body(progress: maintenance.Progress | None) -> Document:
        return maintenance.restore(_table(uri, settings), version=version, timestamp=timestamp, progress=progress).to_dict()

    _run(settings, body, lambda out: out.restore)


# --- tag and consumer: a URI, then a subcommand ------------------------------------------------


def _group(name: str, help_text: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        @functools.wraps(f)
        def with_settings(ctx: click.Context, uri: str, json_output: bool, storage_options: dict[str, str], debug: bool) -> None:
            ctx.obj = {"uri": uri}
            ctx.ensure_object(dict)
            ctx.meta["cli-settings"] = Settings(json_output, storage_options, debug)

        command = cli.group(name, help=help_text)(click.pass_context(click.argument("uri", type=TABLE_URI)(common_options(with_settings))))
        return command  # type: ignore[return-value]

    return decorate


def _sub_settings(ctx: click.Context, /, **common: Any) -> tuple[str, Settings]:
    parent: Settings = ctx.meta["cli-settings"]
    return ctx.obj["uri"], Settings(common["json_output"], common["storage_options"], common["debug"]).merged(parent)


@_group("tag", "Tags pin a version: tag URI create NAME [--version N] | delete NAME | list.")
def tag_group() -> None: ...


def _tag_command(name: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return tag_group.command(name)(common_options(f))  # type: ignore[attr-defined, no-any-return]

    return decorate


@_tag_command("create")
@click.argument("name")
@click.option("--version", "version", type=click.IntRange(min=0), help="The version to tag (default: the latest).")
@click.pass_context
def tag_create(ctx: click.Context, /, name: str, version: int | None, **common: Any) -> None:
    """Tag a version."""
    uri, settings = _sub_settings(ctx, **common)
    _run(settings, lambda progress: maintenance.tags.create(_table(uri, settings), name, version).to_dict(), lambda out: out.tag_created)


@_tag_command("delete")
@click.argument("name")
@click.pass_context
def tag_delete(ctx: click.Context, /, name: str, **common: Any) -> None:
    """Delete a tag (its version is then expired like any other)."""
    uri, settings = _sub_settings(ctx, **common)
    _run(settings, lambda progress: maintenance.tags.delete(_table(uri, settings), name).to_dict(), lambda out: out.tag_deleted)


@_tag_command("list")
@click.pass_context
def tag_list(ctx: click.Context, /, **common: Any) -> None:
    """List the tags."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> Rows:
        table = _table(uri, settings)
        table.latest_version()  # TableNotFoundError for a URI with no table
        return [t.to_dict() for t in maintenance.tags.list_tags(table)]

    _run(settings, body, lambda out: out.tags)


@_group("consumer", "Consumers pin the versions a streaming reader still needs: consumer URI list | reset ID --version N | delete ID.")
def consumer_group() -> None: ...


def _consumer_command(name: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return consumer_group.command(name)(common_options(f))  # type: ignore[attr-defined, no-any-return]

    return decorate


@_consumer_command("list")
@click.pass_context
def consumer_list(ctx: click.Context, /, **common: Any) -> None:
    """List the consumers."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> Rows:
        table = _table(uri, settings)
        table.latest_version()  # TableNotFoundError for a URI with no table
        return [c.to_dict() for c in maintenance.consumers.list_consumers(table)]

    _run(settings, body, lambda out: out.consumers)


@_consumer_command("reset")
@click.argument("consumer_id", metavar="ID")
@click.option("--version", "version", type=click.IntRange(min=0), required=True, help="The next version the consumer will read.")
@click.pass_context
def consumer_reset(ctx: click.Context, /, consumer_id: str, version: int, **common: Any) -> None:
    """Move a consumer to another next version."""
    uri, settings = _sub_settings(ctx, **common)
    _run(settings, lambda progress: maintenance.consumers.reset(_table(uri, settings), consumer_id, version).to_dict(), lambda out: out.consumer_reset)


@_consumer_command("delete")
@click.argument("consumer_id", metavar="ID")
@click.pass_context
def consumer_delete(ctx: click.Context, /, consumer_id: str, **common: Any) -> None:
    """Delete a consumer: it no longer pins any version."""
    uri, settings = _sub_settings(ctx, **common)
    _run(settings, lambda progress: maintenance.consumers.delete(_table(uri, settings), consumer_id).to_dict(), lambda out: out.consumer_deleted)


def main() -> None:
    cli(prog_name="txnlog")


if __name__ == "__main__":
    main()
