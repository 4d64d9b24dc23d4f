"""What the ``txnlog`` command prints: rich tables and sentences for people
(:class:`ConsoleOutput`), or exactly one JSON document on stdout for ``--json``
(:class:`JsonOutput`).

Commands hand every result over as its JSON-ready document (the result's ``to_dict()``), so both
outputs show the same facts and ``--json`` is the contract docs/cli.md describes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from txnlog import maintenance

#: A result as JSON-ready data: an object, or a list of objects for listings.
Document = dict[str, Any]
Rows = list[dict[str, Any]]


class Output(ABC):
    """One method per kind of result; the command decides which, the output how it looks."""

    @abstractmethod
    def progress(self) -> contextlib.AbstractContextManager[maintenance.Progress | None]:
        """A progress callback for long work while the block runs, or None to show none."""

    def error(self, kind: str, message: str, exit_code: int) -> None:
        """A failed command: one line on stderr, whatever the output."""
        click.echo(f"txnlog: error: {message}", err=True)

    @abstractmethod
    def usage_error(self, error: click.ClickException) -> None: ...

    @abstractmethod
    def checkpoint(self, d: Document) -> None: ...

    @abstractmethod
    def description(self, d: Document) -> None: ...

    @abstractmethod
    def history(self, rows: Rows) -> None: ...

    @abstractmethod
    def files(self, rows: Rows) -> None: ...

    @abstractmethod
    def validation(self, d: Document) -> None: ...

    @abstractmethod
    def expiry(self, d: Document) -> None: ...

    @abstractmethod
    def vacuum(self, d: Document) -> None: ...

    @abstractmethod
    def iceberg_export(self, d: Document) -> None: ...

    @abstractmethod
    def restore(self, d: Document) -> None: ...

    @abstractmethod
    def tag_created(self, d: Document) -> None: ...

    @abstractmethod
    def tag_deleted(self, d: Document) -> None: ...

    @abstractmethod
    def tags(self, rows: Rows) -> None: ...

    @abstractmethod
    def consumer_reset(self, d: Document) -> None: ...

    @abstractmethod
    def consumer_deleted(self, d: Document) -> None: ...

    @abstractmethod
    def consumers(self, rows: Rows) -> None: ...


def output_for(json_output: bool) -> Output:
    return JsonOutput() if json_output else ConsoleOutput()


# --- --json ----------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    raise TypeError(f"cannot encode {type(value).__name__}")


class JsonOutput(Output):
    """Exactly one JSON document on stdout: the result, or ``{"error": {...}}``."""

    def _emit(self, document: Any) -> None:
        text = orjson.dumps(document, default=_json_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def progress(self) -> contextlib.AbstractContextManager[maintenance.Progress | None]:
        return contextlib.nullcontext(None)

    def error(self, kind: str, message: str, exit_code: int) -> None:
        super().error(kind, message, exit_code)
        self._emit({"error": {"type": kind, "message": message, "exitCode": exit_code}})

    def usage_error(self, error: click.ClickException) -> None:
        # Every usage error has the same type, whichever click class found it.
        kind = "UsageError" if isinstance(error, click.UsageError) else type(error).__name__
        self.error(kind, " ".join(error.format_message().split()), error.exit_code)

    def checkpoint(self, d: Document) -> None:
        self._emit(d)

    def description(self, d: Document) -> None:
        self._emit(d)

    def history(self, rows: Rows) -> None:
        self._emit(rows)

    def files(self, rows: Rows) -> None:
        self._emit(rows)

    def validation(self, d: Document) -> None:
        self._emit(d)

    def expiry(self, d: Document) -> None:
        self._emit(d)

    def vacuum(self, d: Document) -> None:
        self._emit(d)

    def iceberg_export(self, d: Document) -> None:
        self._emit(d)

    def restore(self, d: Document) -> None:
        self._emit(d)

    def tag_created(self, d: Document) -> None:
        self._emit(d)

    def tag_deleted(self, d: Document) -> None:
        self._emit(d)

    def tags(self, rows: Rows) -> None:
        self._emit(rows)

    def consumer_reset(self, d: Document) -> None:
        self._emit(d)

    def consumer_deleted(self, d: Document) -> None:
        self._emit(d)

    def consumers(self, rows: Rows) -> None:
        self._emit(rows)


# --- people ----------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        # Piped: no 80-column wrapping, so every line is whole for grep and friends.
        console = Console(stderr=stderr, highlight=False, width=10_000)
    return console


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _size(n: int) -> str:
    """``n`` bytes for people: "1 byte", "512 bytes", "1.5 KiB (1536 bytes)"."""
    if n < 1024:
        return _count(n, "byte")
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit} ({n} bytes)"


#: How the summary of a vacuum names each reason to keep a file.
_KEPT_BECAUSE = {
    "tagged": "live at a tagged version",
    "retained-version": "read by versions still in the log",
    "change-data-in-log": "change data of commits still in the log",
    "removed-recently": "removed less than the retention ago",
    "written-recently": "written less than the retention ago",
}


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """"1 file", "0 files", "2 files"."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def _table(*columns: str, title: str | None = None) -> RichTable:
    return RichTable(*columns, title=title, title_justify="left")


class ConsoleOutput(Output):
    """Tables and sentences on stdout; a progress bar on stderr when it is a terminal."""

    def __init__(self) -> None:
        self.console = _console()

    @contextlib.contextmanager
    def _bar(self) -> Iterator[maintenance.Progress | None]:
        console = _console(stderr=True)
        if not sys.stderr.isatty() or not console.is_terminal:
            yield None
            return
        tasks: dict[str, Any] = {}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:

            def report(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = bar.add_task(stage, total=total)
                bar.update(tasks[stage], completed=done, total=total)

            yield report

    def progress(self) -> contextlib.AbstractContextManager[maintenance.Progress | None]:
        return self._bar()

    def usage_error(self, error: click.ClickException) -> None:
        error.show()  # click's own: the usage line, a hint to --help, then the error

    def checkpoint(self, d: Document) -> None:
        self.console.print(
            f"Checkpoint of version {d['version']}: {_count(d['numAddFiles'], 'file')}, {_count(d['numActions'], 'action')}, "
            f"{_size(d['sizeInBytes'])} in {', '.join(d['paths'])}"
        )

    def description(self, d: Document) -> None:
        protocol = d["protocol"]
        features = sorted(set(protocol["readerFeatures"]) | set(protocol["writerFeatures"]))
        rows = [
            ("table", d["uri"]),
            ("version", f"{d['version']} (earliest retained {d['earliestVersion']})"),
            ("protocol", f"reader {protocol['minReaderVersion']}, writer {protocol['minWriterVersion']}" + (f"; features {', '.join(features)}" if features else "")),
            ("id", d["id"]),
            ("name", d["name"] or "-"),
            ("partition columns", ", ".join(d["partitionColumns"]) or "-"),
            ("files", f"{d['numFiles']} in {_count(d['numPartitions'], 'partition')}" if d["partitionColumns"] else str(d["numFiles"])),
            ("size", _size(d["sizeInBytes"])),
            ("rows", f"{d['numRows']}" + (f" ({_count(d['filesWithoutRowCount'], 'file')} without a row count)" if d["filesWithoutRowCount"] else "")),
            ("last checkpoint", str(d["lastCheckpoint"]["version"]) if d["lastCheckpoint"] else "-"),
            ("checkpoints", ", ".join(map(str, d["checkpointVersions"])) or "-"),
        ]
        table = _table("", "")
        table.show_header = False
        for key, value in rows:
            table.add_row(key, value)
        self.console.print(table)
        if d["properties"]:
            props_table = _table("property", "value", title="Properties")
            for key, value in sorted(d["properties"].items()):
                props_table.add_row(key, value)
            self.console.print(props_table)
        if d["tags"]:
            self.tags(d["tags"])
        if d["consumers"]:
            self.consumers(d["consumers"])

    def history(self, rows: Rows) -> None:
        table = _table("version", "timestamp", "operation", "parameters", "metrics")
        for e in rows:
            params = e.get("operationParameters") or {}
            metrics = e.get("operationMetrics") or {}
            table.add_row(
                str(e["version"]),
                _iso(e["timestamp"]),
                e.get("operation") or "-",
                ", ".join(f"{k}={v}" for k, v in params.items()),
                ", ".join(f"{k}={v}" for k, v in metrics.items()),
            )
        self.console.print(table)

    def files(self, rows: Rows) -> None:
        table = _table("path", "size", "partition", "rows", "modified")
        for r in rows:
            partition = ", ".join(f"{k}={v}" for k, v in r["partitionValues"].items())
            table.add_row(r["path"], str(r["size"]), partition, "-" if r["numRecords"] is None else str(r["numRecords"]), _iso(r["modificationTime"]))
        self.console.print(table)
        self.console.print(f"{_count(len(rows), 'file')}, {_size(sum(r['size'] for r in rows))}")

    def validation(self, d: Document) -> None:
        checked = d["checked"]
        summary = (
            f"{_count(checked.get('commits', 0), 'commit')}, {_count(checked.get('checkpoints', 0), 'checkpoint')} "
            f"({checked.get('checkpointsCompared', 0)} compared with the commits), {_count(checked.get('files', 0), 'file')}"
        )
        if checked.get("deletionVectors"):
            summary += f", {_count(checked['deletionVectors'], 'deletion vector')}"
        if d["ok"]:
            self.console.print(f"OK: {d['table']} versions {d['earliestVersion']}..{d['latestVersion']}: {summary}")
            return
        table = _table("problem", "version", "file", "detail", title=f"{_count(len(d['problems']), 'problem')} in {d['table']}")
        for p in d["problems"]:
            table.add_row(p["kind"], "-" if p["version"] is None else str(p["version"]), p["path"] or "-", p["message"])
        self.console.print(table)
        self.console.print(f"checked {summary}")

    def expiry(self, d: Document) -> None:
        dry = d["dryRun"]
        if d["earliestAfter"] == d["earliestBefore"] and not d["deletedFiles"]:
            self.console.print(f"Nothing to expire: versions {d['earliestBefore']}..{d['latestVersion']} are all retained.")
            return
        self.console.print(
            f"{'Would expire' if dry else 'Expired'} {_count(d['expiredVersions'], 'version')} ({d['earliestBefore']}..{d['earliestAfter'] - 1}); "
            f"earliest retained version {'would be' if dry else 'is now'} {d['earliestAfter']}; "
            f"{_count(len(d['deletedFiles']), 'log file')} {'to delete' if dry else 'deleted'}."
        )
        if d["checkpointWritten"] is not None:
            self.console.print(f"Checkpoint {'needed' if dry else 'written'} at version {d['checkpointWritten']}.")
        if d["keptTags"]:
            self.console.print(f"Kept tagged versions: {', '.join(d['keptTags'])}.")
        if d["droppedConsumers"]:
            self.console.print(f"{'Would drop' if dry else 'Dropped'} inactive consumers: {', '.join(d['droppedConsumers'])}.")

    def vacuum(self, d: Document) -> None:
        decisions = d["decisions"]
        if d["dryRun"]:
            table = _table("action", "path", "why")
            for decision in decisions:
                table.add_row(decision["action"], decision["path"], decision["detail"])
            if decisions:
                self.console.print(table)
            self.console.print(f"Would delete {_count(d['numFiles'], 'file')}, {_size(d['sizeInBytes'])} (rule: {d['rule']}).")
        else:
            self.console.print(
                f"Deleted {_count(d['numFiles'], 'file')}, {_size(d['sizeInBytes'])} (rule: {d['rule']}); "
                f"VACUUM START at version {d['startVersion']}, VACUUM END at version {d['endVersion']}."
            )
        kept: dict[str, int] = {}
        for decision in decisions:
            if decision["action"] == "keep":
                kept[decision["reason"]] = kept.get(decision["reason"], 0) + 1
        summary = [f"{n} {_KEPT_BECAUSE.get(reason, reason)}" for reason, n in kept.items()]
        self.console.print(f"Kept {_count(d['numLiveFiles'], 'file')} live at the latest version" + "".join(f"; {s}" for s in summary) + ".")
        if kept.get("retained-version"):
            self.console.print("(The versions rule keeps what time travel to versions still in the log needs; --rule delta would not.)")

    def iceberg_export(self, d: Document) -> None:
        if not d["snapshotIds"]:
            self.console.print(f"Iceberg metadata already shows version {d['deltaVersion']}: {d['metadataLocation']}")
            return
        how = f"rebuilt ({d['rebuildReason']})" if d["rebuilt"] else "incremental"
        self.console.print(
            f"Exported Delta version {d['deltaVersion']} as {_count(len(d['snapshotIds']), 'Iceberg snapshot')}, {how}: {d['metadataLocation']}"
        )

    def restore(self, d: Document) -> None:
        self.console.print(
            f"Restored {d['table']} to version {d['restoredVersion']} as version {d['version']}: "
            f"{_count(d['numRestoredFiles'], 'file')} re-added, {d['numRemovedFiles']} removed; "
            f"{_count(d['numOfFilesAfterRestore'], 'file')}, {_size(d['tableSizeAfterRestore'])} now."
        )

    def tag_created(self, d: Document) -> None:
        self.console.print(f"Tagged version {d['version']} as {d['name']}.")

    def tag_deleted(self, d: Document) -> None:
        self.console.print(f"Deleted tag {d['name']} (version {d['version']}).")

    def tags(self, rows: Rows) -> None:
        if not rows:
            self.console.print("No tags.")
            return
        table = _table("tag", "version", "created", title="Tags")
        for t in rows:
            table.add_row(t["name"], str(t["version"]), _iso(t["createdTime"]))
        self.console.print(table)

    def consumer_reset(self, d: Document) -> None:
        self.console.print(f"Consumer {d['id']} now reads from version {d['nextVersion']}.")

    def consumer_deleted(self, d: Document) -> None:
        self.console.print(f"Deleted consumer {d['id']}.")

    def consumers(self, rows: Rows) -> None:
        if not rows:
            self.console.print("No consumers.")
            return
        table = _table("consumer", "next version", "last heartbeat", title="Consumers")
        for c in rows:
            table.add_row(c["id"], str(c["nextVersion"]), _iso(c["lastHeartbeat"]))
        self.console.print(table)
