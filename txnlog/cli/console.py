"""The ``txnlog`` command: table maintenance from a shell. A thin layer over
:mod:`txnlog.maintenance`; see docs/cli.md.

Exit codes: 0 ok; 1 a problem found (validate) or an operation refused or failed; 2 a usage
error; 3 no table at the URI; 4 a conflict with a concurrent commit.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable

import txnlog
from txnlog import maintenance
from txnlog.errors import (
    CommitConflictError,
    InvalidArgumentError,
    TableNotFoundError,
    TxnLogError,
)

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_TABLE_NOT_FOUND = 3
EXIT_CONFLICT = 4

F = TypeVar("F", bound=Callable[..., Any])


def exit_code_of(error: BaseException) -> int:
    if isinstance(error, TableNotFoundError):
        return EXIT_TABLE_NOT_FOUND
    if isinstance(error, CommitConflictError):
        return EXIT_CONFLICT
    if isinstance(error, InvalidArgumentError):
        return EXIT_USAGE
    return EXIT_PROBLEM


# --- options every command takes ---------------------------------------------------------------


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


# --- output ----------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Any:

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        # Piped: no 80-column wrapping, so every line is whole for grep and friends.
        console = Console(stderr=stderr, highlight=False, width=10_000)
    return console


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    raise TypeError(f"cannot encode {type(value).__name__}")


def _emit_json(document: Any) -> None:
    sys.stdout.write(orjson.dumps(document, default=_json_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")
    sys.stdout.flush()


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@contextlib.contextmanager
def _progress(settings: Settings) -> Iterator[maintenance.Progress | None]:
    """A rich progress bar on stderr when it is a terminal and the output is not JSON."""
    if settings.json or not sys.stderr.isatty():
        yield None
        return

    console = _console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    tasks: dict[str, Any] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield report


def _run(settings: Settings, body: Callable[[maintenance.Progress | None], tuple[Any, Callable[[Any], None], int]]) -> None:
    """Run ``body`` (which returns its JSON document, a human printer and an exit code), turning
    errors into one line on stderr and an exit code."""
    try:
        with _progress(settings) as progress:
            document, show, code = body(progress)
    except (TxnLogError, OSError) as e:
        code = exit_code_of(e)
        message = " ".join(str(e).split()) or type(e).__name__
        if settings.debug:
            traceback.print_exc(file=sys.stderr)
        click.echo(f"txnlog: error: {message}", err=True)
        if settings.json:
            _emit_json({"error": {"type": type(e).__name__, "message": message, "exitCode": code}})
        sys.exit(code)
    if settings.json:
        _emit_json(document)
    else:
        show(document)
    sys.exit(code)


def _table(uri: str, settings: Settings) -> txnlog.Table:
    return txnlog.Table(uri, settings.storage_options)


def _rich_table(*columns: str, title: str | None = None) -> Any:

    table = RichTable(*columns, title=title, title_justify="left")
    return table


# --- the command group -----------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
@click.argument("uri")
@click.option("--version", "version", type=click.IntRange(min=0), help="The version to checkpoint (default: the latest).")
@click.pass_context
def checkpoint_command(ctx: click.Context, /, uri: str, version: int | None, **common: Any) -> None:
    """Write a checkpoint (classic or V2, as the table's protocol says) and _last_checkpoint."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        if progress:
            progress("checkpoint", 0, 1)
        result = maintenance.checkpoint(_table(uri, settings), version)
        if progress:
            progress("checkpoint", 1, 1)
        document = {
            "version": result.version,
            "paths": list(result.paths),
            "numActions": result.num_actions,
            "numAddFiles": result.num_add_files,
            "sizeInBytes": result.size_in_bytes,
        }

        def show(d: dict[str, Any]) -> None:
            _console().print(
                f"Checkpoint of version {d['version']}: {d['numAddFiles']} files, {d['numActions']} actions, "
                f"{_size(d['sizeInBytes'])} in {', '.join(d['paths'])}"
            )

        return document, show, EXIT_OK

    _run(settings, body)


@_command("describe")
@click.argument("uri")
@click.option("--version", "version", type=click.IntRange(min=0), help="Describe this version (default: the latest).")
@click.pass_context
def describe_command(ctx: click.Context, /, uri: str, version: int | None, **common: Any) -> None:
    """Version, protocol and features, files, bytes, rows, partitions, checkpoint, properties, tags, consumers."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        return maintenance.describe(_table(uri, settings), version).to_dict(), _show_description, EXIT_OK

    _run(settings, body)


def _show_description(d: dict[str, Any]) -> None:
    console = _console()
    protocol = d["protocol"]
    features = sorted(set(protocol["readerFeatures"]) | set(protocol["writerFeatures"]))
    rows = [
        ("table", d["uri"]),
        ("version", f"{d['version']} (earliest retained {d['earliestVersion']})"),
        ("protocol", f"reader {protocol['minReaderVersion']}, writer {protocol['minWriterVersion']}" + (f"; features {', '.join(features)}" if features else "")),
        ("id", d["id"]),
        ("name", d["name"] or "-"),
        ("partition columns", ", ".join(d["partitionColumns"]) or "-"),
        ("files", f"{d['numFiles']} in {d['numPartitions']} partitions" if d["partitionColumns"] else str(d["numFiles"])),
        ("size", _size(d["sizeInBytes"])),
        ("rows", f"{d['numRows']}" + (f" ({d['filesWithoutRowCount']} files without a row count)" if d["filesWithoutRowCount"] else "")),
        ("last checkpoint", str(d["lastCheckpoint"]["version"]) if d["lastCheckpoint"] else "-"),
        ("checkpoints", ", ".join(map(str, d["checkpointVersions"])) or "-"),
    ]
    table = _rich_table("", "", title=None)
    table.show_header = False
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    if d["properties"]:
        props_table = _rich_table("property", "value", title="Properties")
        for key, value in sorted(d["properties"].items()):
            props_table.add_row(key, value)
        console.print(props_table)
    if d["tags"]:
        _print_tags(d["tags"])
    if d["consumers"]:
        _print_consumers(d["consumers"])


@_command("history")
@click.argument("uri")
@click.option("--limit", type=click.IntRange(min=0), help="Only the newest N versions.")
@click.pass_context
def history_command(ctx: click.Context, /, uri: str, limit: int | None, **common: Any) -> None:
    """The commits still in the log, newest first."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        entries = [e.to_dict() for e in maintenance.history(_table(uri, settings), limit)]

        def show(items: list[dict[str, Any]]) -> None:
            table = _rich_table("version", "timestamp", "operation", "parameters", "metrics")
            for e in items:
                params = e.get("operationParameters") or {}
                metrics = e.get("operationMetrics") or {}
                table.add_row(
                    str(e["version"]),
                    _iso(e["timestamp"]),
                    e.get("operation") or "-",
                    ", ".join(f"{k}={v}" for k, v in params.items()),
                    ", ".join(f"{k}={v}" for k, v in metrics.items()),
                )
            _console().print(table)

        return entries, show, EXIT_OK

    _run(settings, body)


@_command("files")
@click.argument("uri")
@click.option("--version", "version", type=click.IntRange(min=0), help="List the files of this version.")
@click.option("--timestamp", type=TIMESTAMP, help="List the files of the version current at this ISO 8601 time.")
@click.option("--where", help="A SQL predicate on partition columns and stats, e.g. \"region = 'EU'\".")
@click.pass_context
def files_command(ctx: click.Context, /, uri: str, version: int | None, timestamp: _dt.datetime | None, where: str | None, **common: Any) -> None:
    """The live data files (path, size, partition values, rows)."""
    settings = _settings(ctx, **common)
    if version is not None and timestamp is not None:
        raise click.UsageError("give --version or --timestamp, not both")

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
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

        def show(items: list[dict[str, Any]]) -> None:
            table = _rich_table("path", "size", "partition", "rows", "modified")
            for r in items:
                partition = ", ".join(f"{k}={v}" for k, v in r["partitionValues"].items())
                table.add_row(r["path"], str(r["size"]), partition, "-" if r["numRecords"] is None else str(r["numRecords"]), _iso(r["modificationTime"]))
            console = _console()
            console.print(table)
            console.print(f"{len(items)} files, {_size(sum(r['size'] for r in items))}")

        return rows, show, EXIT_OK

    _run(settings, body)


@_command("validate")
@click.argument("uri")
@click.pass_context
def validate_command(ctx: click.Context, /, uri: str, **common: Any) -> None:
    """Check the log and the files; exit 1 if anything is wrong."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        report = maintenance.validate(_table(uri, settings), progress=progress)

        def show(d: dict[str, Any]) -> None:
            console = _console()
            checked = d["checked"]
            summary = (
                f"{checked.get('commits', 0)} commits, {checked.get('checkpoints', 0)} checkpoints "
                f"({checked.get('checkpointsCompared', 0)} compared with the commits), {checked.get('files', 0)} files"
            )
            if d["ok"]:
                console.print(f"OK: {d['table']} versions {d['earliestVersion']}..{d['latestVersion']}: {summary}")
                return
            table = _rich_table("problem", "version", "file", "detail", title=f"{len(d['problems'])} problem(s) in {d['table']}")
            for p in d["problems"]:
                table.add_row(p["kind"], "-" if p["version"] is None else str(p["version"]), p["path"] or "-", p["message"])
            console.print(table)
            console.print(f"checked {summary}")

        return report.to_dict(), show, EXIT_OK if report.ok else EXIT_PROBLEM

    _run(settings, body)


@_command("expire")
@click.argument("uri")
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

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        result = maintenance.expire(
            _table(uri, settings), retain_min=retain_min, retain_max=retain_max, older_than=older_than, limit=limit, dry_run=dry_run, progress=progress
        )

        def show(d: dict[str, Any]) -> None:
            console = _console()
            verb = "Would expire" if d["dryRun"] else "Expired"
            if d["earliestAfter"] == d["earliestBefore"] and not d["deletedFiles"]:
                console.print(f"Nothing to expire: versions {d['earliestBefore']}..{d['latestVersion']} are all retained.")
                return
            console.print(
                f"{verb} {d['expiredVersions']} versions ({d['earliestBefore']}..{d['earliestAfter'] - 1}); "
                f"earliest retained version {'would be' if d['dryRun'] else 'is now'} {d['earliestAfter']}; "
                f"{len(d['deletedFiles'])} log files {'to delete' if d['dryRun'] else 'deleted'}."
            )
            if d["checkpointWritten"] is not None:
                console.print(f"Checkpoint {'needed' if d['dryRun'] else 'written'} at version {d['checkpointWritten']}.")
            if d["keptTags"]:
                console.print(f"Kept tagged versions: {', '.join(d['keptTags'])}.")
            if d["droppedConsumers"]:
                console.print(f"{'Would drop' if d['dryRun'] else 'Dropped'} inactive consumers: {', '.join(d['droppedConsumers'])}.")

        return result.to_dict(), show, EXIT_OK

    _run(settings, body)


@_command("vacuum")
@click.argument("uri")
@click.option("--retention", type=DURATION, help="Keep files removed or written less than this ago, e.g. 168h (default delta.deletedFileRetentionDuration).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted and its size; change nothing.")
@click.option("--force", is_flag=True, help="Allow a retention below the table's delta.deletedFileRetentionDuration.")
@click.pass_context
def vacuum_command(ctx: click.Context, /, uri: str, retention: int | None, dry_run: bool, force: bool, **common: Any) -> None:
    """Delete data files no retained or tagged version references (old tombstones, orphans)."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        result = maintenance.vacuum(_table(uri, settings), retention=retention, dry_run=dry_run, force=force, progress=progress)

        def show(d: dict[str, Any]) -> None:
            console = _console()
            if d["dryRun"]:
                for path in d["files"]:
                    console.print(path)
                console.print(f"Would delete {d['numFiles']} files, {_size(d['sizeInBytes'])} ({d['sizeInBytes']} bytes).")
            else:
                console.print(
                    f"Deleted {d['numFiles']} files, {_size(d['sizeInBytes'])} ({d['sizeInBytes']} bytes); "
                    f"VACUUM START at version {d['startVersion']}, VACUUM END at version {d['endVersion']}."
                )

        return result.to_dict(), show, EXIT_OK

    _run(settings, body)


@_command("export-iceberg")
@click.argument("uri")
@click.option("--full", is_flag=True, help="Rebuild the Iceberg snapshot from the full file list instead of commit by commit.")
@click.pass_context
def export_iceberg_command(ctx: click.Context, /, uri: str, full: bool, **common: Any) -> None:
    """Write Iceberg metadata under URI/metadata/: one Iceberg snapshot per Delta commit since the last export."""
    settings = _settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        try:
            from txnlog.iceberg import export  # optional: needs the pyiceberg extra (txnlog[iceberg])
        except ImportError as e:  # the optional extra is not installed
            raise TxnLogError(f"export-iceberg needs pyiceberg: pip install 'txnlog[iceberg]' ({e})") from None
        result = export(_table(uri, settings), full=full)

        def show(d: dict[str, Any]) -> None:
            console = _console()
            if not d["snapshotIds"]:
                console.print(f"Iceberg metadata already shows version {d['deltaVersion']}: {d['metadataLocation']}")
                return
            how = f"rebuilt ({d['rebuildReason']})" if d["rebuilt"] else "incremental"
            console.print(
                f"Exported Delta version {d['deltaVersion']} as {len(d['snapshotIds'])} Iceberg snapshot(s), {how}: {d['metadataLocation']}"
            )

        return result.to_dict(), show, EXIT_OK

    _run(settings, body)


@_command("restore")
@click.argument("uri")
@click.option("--version", "version", type=click.IntRange(min=0), help="Restore to this version.")
@click.option("--timestamp", type=TIMESTAMP, help="Restore to the version current at this ISO 8601 time.")
@click.pass_context
def restore_command(ctx: click.Context, /, uri: str, version: int | None, timestamp: _dt.datetime | None, **common: Any) -> None:
    """Restore the table to an earlier version with a RESTORE commit."""
    settings = _settings(ctx, **common)
    if (version is None) == (timestamp is None):
        raise click.UsageError("give exactly one of --version and --timestamp")

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        result = maintenance.restore(_table(uri, settings), version=version, timestamp=timestamp, progress=progress)

        def show(d: dict[str, Any]) -> None:
            _console().print(
                f"Restored {d['table']} to version {d['restoredVersion']} as version {d['version']}: "
                f"{d['numRestoredFiles']} files re-added, {d['numRemovedFiles']} removed; "
                f"{d['numOfFilesAfterRestore']} files, {_size(d['tableSizeAfterRestore'])} now."
            )

        return result.to_dict(), show, EXIT_OK

    _run(settings, body)


# --- tag and consumer: a URI, then a subcommand ------------------------------------------------


def _group(name: str, help_text: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        @functools.wraps(f)
        def with_settings(ctx: click.Context, uri: str, json_output: bool, storage_options: dict[str, str], debug: bool) -> None:
            ctx.obj = {"uri": uri}
            ctx.ensure_object(dict)
            ctx.meta["cli-settings"] = Settings(json_output, storage_options, debug)

        command = cli.group(name, help=help_text)(click.pass_context(click.argument("uri")(common_options(with_settings))))
        return command  # type: ignore[return-value]

    return decorate


def _sub_settings(ctx: click.Context, /, **common: Any) -> tuple[str, Settings]:
    parent: Settings = ctx.meta["cli-settings"]
    return ctx.obj["uri"], Settings(common["json_output"], common["storage_options"], common["debug"]).merged(parent)


@_group("tag", "Tags pin a version: tag URI create NAME [--version N] | delete NAME | list.")
def tag_group() -> None: ...


def _print_tags(items: list[dict[str, Any]]) -> None:
    if not items:
        _console().print("No tags.")
        return
    table = _rich_table("tag", "version", "created", title="Tags")
    for t in items:
        table.add_row(t["name"], str(t["version"]), _iso(t["createdTime"]))
    _console().print(table)


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

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        tag = maintenance.tags.create(_table(uri, settings), name, version)
        return tag.to_dict(), lambda d: _console().print(f"Tagged version {d['version']} as {d['name']}."), EXIT_OK

    _run(settings, body)


@_tag_command("delete")
@click.argument("name")
@click.pass_context
def tag_delete(ctx: click.Context, /, name: str, **common: Any) -> None:
    """Delete a tag (its version is then expired like any other)."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        tag = maintenance.tags.delete(_table(uri, settings), name)
        return tag.to_dict(), lambda d: _console().print(f"Deleted tag {d['name']} (version {d['version']})."), EXIT_OK

    _run(settings, body)


@_tag_command("list")
@click.pass_context
def tag_list(ctx: click.Context, /, **common: Any) -> None:
    """List the tags."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        table = _table(uri, settings)
        table.latest_version()  # TableNotFoundError for a URI with no table
        return [t.to_dict() for t in maintenance.tags.list_tags(table)], _print_tags, EXIT_OK

    _run(settings, body)


@_group("consumer", "Consumers pin the versions a streaming reader still needs: consumer URI list | reset ID --version N | delete ID.")
def consumer_group() -> None: ...


def _print_consumers(items: list[dict[str, Any]]) -> None:
    if not items:
        _console().print("No consumers.")
        return
    table = _rich_table("consumer", "next version", "last heartbeat", title="Consumers")
    for c in items:
        table.add_row(c["id"], str(c["nextVersion"]), _iso(c["lastHeartbeat"]))
    _console().print(table)


def _consumer_command(name: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return consumer_group.command(name)(common_options(f))  # type: ignore[attr-defined, no-any-return]

    return decorate


@_consumer_command("list")
@click.pass_context
def consumer_list(ctx: click.Context, /, **common: Any) -> None:
    """List the consumers."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        table = _table(uri, settings)
        table.latest_version()
        return [c.to_dict() for c in maintenance.consumers.list_consumers(table)], _print_consumers, EXIT_OK

    _run(settings, body)


@_consumer_command("reset")
@click.argument("consumer_id", metavar="ID")
@click.option("--version", "version", type=click.IntRange(min=0), required=True, help="The next version the consumer will read.")
@click.pass_context
def consumer_reset(ctx: click.Context, /, consumer_id: str, version: int, **common: Any) -> None:
    """Move a consumer to another next version."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        consumer = maintenance.consumers.reset(_table(uri, settings), consumer_id, version)
        return consumer.to_dict(), lambda d: _console().print(f"Consumer {d['id']} now reads from version {d['nextVersion']}."), EXIT_OK

    _run(settings, body)


@_consumer_command("delete")
@click.argument("consumer_id", metavar="ID")
@click.pass_context
def consumer_delete(ctx: click.Context, /, consumer_id: str, **common: Any) -> None:
    """Delete a consumer: it no longer pins any version."""
    uri, settings = _sub_settings(ctx, **common)

    def body(progress: maintenance.Progress | None) -> tuple[Any, Callable[[Any], None], int]:
        consumer = maintenance.consumers.delete(_table(uri, settings), consumer_id)
        return consumer.to_dict(), lambda d: _console().print(f"Deleted consumer {d['id']}."), EXIT_OK

    _run(settings, body)


# export-iceberg (txnlog.iceberg.export) is added here by the Iceberg integration.


def main() -> None:
    cli(prog_name="txnlog")


if __name__ == "__main__":
    main()
