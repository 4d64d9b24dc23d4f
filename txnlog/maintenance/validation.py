"""validate: check a table's log and files without changing anything.

- the log is contiguous from the earliest retained version (tagged versions below it may stand
  alone; a commit missing below versions that still exist is a gap);
- every checkpoint is readable and agrees with a replay of the JSON commits that lead to it,
  where those commits still exist;
- every live data file exists with its recorded size;
- every deletion vector of a live file can be read: its file exists, the vector's size and CRC-32
  match, it holds the descriptor's ``cardinality`` rows, and no row index reaches the data file's
  ``numRecords`` (inline vectors decode);
- ``_last_checkpoint`` parses, names a complete checkpoint, the newest one, with its counts;
- no path in the log leaves the table root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txnlog import properties as props
from txnlog.documents import document
from txnlog.errors import (
    CorruptCheckpointError,
    LogCorruptError,
    ObjectNotFoundError,
    TxnLogError,
    UnsafePathError,
)
from txnlog.file_facts import decode_stats
from txnlog.log import LAST_CHECKPOINT
from txnlog.maintenance import arguments, core, tags
from txnlog.maintenance.deletes import Progress
from txnlog.maintenance.layout import LogLayout
from txnlog.maintenance.vacuuming import _hidden
from txnlog.storage import LogStore

if TYPE_CHECKING:
    from txnlog import Table


@dataclass(frozen=True)
class Problem:
    """One thing wrong: ``kind`` is one of version-gap, corrupt-log, corrupt-checkpoint,
    checkpoint-mismatch, missing-file, wrong-size, corrupt-deletion-vector, last-checkpoint,
    unsafe-path. ``deletion_vector`` names the vector of a data file (``path``) when that is what
    is wrong: ``<its file>@<offset>``, or ``inline``."""

    kind: str
    message: str
    version: int | None = None
    path: str | None = None
    deletion_vector: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return document(self)


@dataclass(frozen=True)
class ValidationReport:
    table_uri: str
    latest_version: int
    earliest_version: int | None
    problems: tuple[Problem, ...]
    #: How much was looked at: commits, checkpoints, checkpointsCompared, files.
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return document(self, keys={"table_uri": "table"}, extra={"ok": self.ok})


def _gaps(layout: LogLayout, tagged: set[int]) -> list[Problem]:
    commits, rec = layout.listing.commits, layout.reconstructable
    if layout.latest not in rec:
        try:
            _ = layout.earliest
        except LogCorruptError as e:
            return [Problem("version-gap", str(e), e.version, e.path)]
    earliest = layout.earliest
    lowest = min([*commits, earliest])
    problems: list[Problem] = []
    seen_history = False  # a reconstructable, untagged version below the current one
    v = lowest
    while v < earliest:
        if v not in commits and not layout.checkpoint(v):
            run_end = v
            while run_end + 1 < earliest and run_end + 1 not in commits:
                run_end += 1
            stranded = [w for w in range(run_end + 1, earliest) if w in commits and w not in rec]
            if seen_history and stranded:
                problems.append(
                    Problem(
                        "version-gap",
                        f"commit {v} is missing: versions {stranded[0]}..{stranded[-1]} still have commits but cannot be reconstructed",
                        v,
                        f"{core.LOG_DIR}/{v:020d}.json",
                    )
                )
            v = run_end + 1
            continue
        if v in rec and v not in tagged:
            seen_history = True
        v += 1
    return problems


def _compare(json_state: core.TableState, cp_state: core.TableState) -> list[str]:
    differences = []
    if json_state.protocol != cp_state.protocol:
        differences.append("protocol")
    a, b = json_state.metadata, cp_state.metadata
    if (a.id, a.schema_string, tuple(a.partition_columns), dict(a.configuration)) != (b.id, b.schema_string, tuple(b.partition_columns), dict(b.configuration)):
        differences.append("metaData")
    if props.SET_TRANSACTION_RETENTION.get(a.configuration) is None:
        if {k: t.version for k, t in json_state.app_transactions.items()} != {k: t.version for k, t in cp_state.app_transactions.items()}:
            differences.append("txn")
    if {k: d.configuration for k, d in json_state.domains.items()} != {k: d.configuration for k, d in cp_state.domains.items()}:
        differences.append("domainMetadata")
    ja, ca = _keyed(json_state.files), _keyed(cp_state.files)
    if ja.num_rows != ca.num_rows or not ja.column("key").equals(ca.column("key")):
        only_json = pc.invert(pc.is_in(ja.column("key"), value_set=ca.column("key")))
        only_cp = pc.invert(pc.is_in(ca.column("key"), value_set=ja.column("key")))
        examples = ja.filter(only_json).column("key").to_pylist()[:3] + ca.filter(only_cp).column("key").to_pylist()[:3]
        differences.append(
            f"files ({ja.num_rows} by the commits, {ca.num_rows} in the checkpoint; e.g. {', '.join(map(str, examples))})"
        )
    elif not ja.column("size").equals(ca.column("size")):
        differences.append("file sizes")
    return differences


def _keyed(files: pa.Table) -> pa.Table:
    t = pa.table({"key": core.file_keys(files).cast(pa.string()), "size": files.column("size")})
    return t.sort_by("key") if t.num_rows else t


def _check_checkpoints(table: Table, layout: LogLayout, problems: list[Problem], checked: dict[str, int]) -> core.TableState | None:
    """Walk the log oldest first, replaying JSON commits where they exist and comparing every
    checkpoint with that replay; returns the state at the latest version if one could be built."""
    store = table.store
    commits = layout.listing.commits
    state: core.TableState | None = None
    at = -1
    for c in sorted({*layout.checkpoint_versions, layout.latest}):
        json_state = None
        if all(v in commits for v in range(at + 1, c + 1)):
            batch = [commits[v] for v in range(at + 1, c + 1)]
            try:
                if state is None and at == -1:
                    json_state = core.json_state(store, batch, c)
                elif state is not None:
                    json_state = core.advance_state(state, core.read_commit_files(store, batch), f"{table.uri} version {c}")
            except LogCorruptError as e:
                problems.append(Problem("corrupt-log", str(e), e.version, e.path))
        files = layout.checkpoint(c)
        cp_state = None
        if files:
            checked["checkpoints"] += 1
            try:
                cp_state = core.checkpoint_state(store, files)
                _check_checkpoint_files(store, files)
            except LogCorruptError as e:
                cp_state = None
                problems.append(Problem("corrupt-checkpoint", str(e), c, e.path or files[0].path))
            if cp_state is not None and json_state is not None:
                checked["checkpointsCompared"] += 1
                differences = _compare(json_state, cp_state)
                if differences:
                    problems.append(
                        Problem(
                            "checkpoint-mismatch",
                            f"checkpoint {files[0].path} disagrees with the commits up to version {c}: {'; '.join(differences)}",
                            c,
                            files[0].path,
                        )
                    )
        if json_state is not None or cp_state is not None:
            state, at = json_state if json_state is not None else cp_state, c
    return state if at == layout.latest else None


def _check_checkpoint_files(store: Any, files: list[core.CheckpointFile]) -> None:
    """The whole of each Parquet checkpoint decodes (replay reads only some columns)."""
    for part in files:
        if part.v2_format == "json":
            continue
        try:
            pq.ParquetFile(store.open_input(part.path)).read()
        except (OSError, pa.ArrowException) as e:
            raise CorruptCheckpointError(f"checkpoint {part.path} (version {part.version}) is unreadable: {e}", path=part.path, version=part.version) from e


def _check_hint(table: Table, layout: LogLayout, problems: list[Problem]) -> None:
    try:
        data = table.store.read(LAST_CHECKPOINT)
    except ObjectNotFoundError:
        return
    try:
        hint = orjson.loads(data)
        version = int(hint["version"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        problems.append(Problem("last-checkpoint", f"{LAST_CHECKPOINT} does not parse: {e}", None, LAST_CHECKPOINT))
        return
    files = layout.checkpoint(version)
    newest = layout.checkpoint_versions[-1] if layout.checkpoint_versions else None
    if files is None:
        problems.append(Problem("last-checkpoint", f"{LAST_CHECKPOINT} names version {version}, which has no complete checkpoint", version, LAST_CHECKPOINT))
        return
    if newest is not None and newest > version:
        problems.append(
            Problem("last-checkpoint", f"{LAST_CHECKPOINT} is stale: it names version {version} but the newest checkpoint is {newest}", version, LAST_CHECKPOINT)
        )
    if hint.get("size") is not None and all(not f.v2_format for f in files):
        try:
            rows = sum(pq.ParquetFile(table.store.open_input(f.path)).metadata.num_rows for f in files)
        except (OSError, pa.ArrowException, TxnLogError):
            return  # reported as a corrupt checkpoint
        if rows != int(hint["size"]):
            problems.append(
                Problem("last-checkpoint", f"{LAST_CHECKPOINT} says checkpoint {version} holds {hint['size']} actions; it holds {rows}", version, LAST_CHECKPOINT)
            )


def _added_at(table: Table, layout: LogLayout, paths: set[str]) -> dict[str, int]:
    """The newest retained commit that added each of ``paths`` (log paths)."""
    found: dict[str, int] = {}
    versions = [v for v in sorted(layout.listing.commits, reverse=True) if v in layout.reconstructable]
    for start in range(0, len(versions), 500):
        for commit in core.read_commit_files(table.store, [layout.listing.commits[v] for v in versions[start : start + 500]]):
            for p in core.added_files([commit]).column("path").to_pylist():
                if p in paths and p not in found:
                    found[p] = commit.version
        if len(found) == len(paths):
            break
    return found


def _check_files(table: Table, state: core.TableState, layout: LogLayout, problems: list[Problem], checked: dict[str, int]) -> None:
    files = state.files
    on_disk = {f.path: f.size for f in table.store.walk_files("") if not _hidden(f.path, frozenset())}
    checked["files"] = files.num_rows
    bad: dict[str, tuple[str, str, str | None]] = {}  # data file -> (kind, message, its vector if that is what is wrong)
    for log_path, size in zip(files.column("path").to_pylist(), files.column("size").to_pylist()):
        try:
            path = core.locate(table.uri, log_path, version=state.version)
        except UnsafePathError as e:
            problems.append(Problem("unsafe-path", str(e), state.version, log_path))
            continue
        actual = on_disk.get(path)
        if actual is None:
            bad[log_path] = ("missing-file", f"data file {path} is missing", None)
        elif actual != size:
            bad[log_path] = ("wrong-size", f"data file {path} is {actual} bytes; the log says {size}", None)
    vectors = _check_deletion_vectors(table, state, on_disk, problems, checked)
    for log_path, found in vectors.items():
        bad.setdefault(log_path, found)
    added = _added_at(table, layout, set(bad)) if bad else {}
    for log_path, (kind, message, vector) in sorted(bad.items()):
        version = added.get(log_path, layout.earliest)
        problems.append(Problem(kind, f"{message} (added at or before version {version})", version, log_path, vector))
    tombstones = state.tombstones()
    for log_path in tombstones.column("path").to_pylist():
        try:
            core.locate(table.uri, log_path)
        except UnsafePathError as e:
            problems.append(Problem("unsafe-path", str(e), None, log_path))


class _LastFileRead:
    """A store whose ``read`` keeps the last file it read. Vectors are checked in the order of
    their files, so a DV file holding the vectors of many data files is read once, not once per
    vector (and only one is held in memory)."""

    def __init__(self, store: LogStore) -> None:
        self._store = store
        self._path: str | None = None
        self._data = b""

    def read(self, path: str) -> bytes:
        if path != self._path:
            self._data = self._store.read(path)
            self._path = path
        return self._data


def _vector_name(storage_type: str, path_or_inline: str, dv_path: str | None, offset: int | None) -> str:
    if dv_path is None:
        return "inline" if storage_type == "i" else f"{storage_type}:{path_or_inline}"
    return f"{dv_path}@{offset if offset is not None else 1}"


def _check_deletion_vectors(
    table: Table, state: core.TableState, on_disk: dict[str, int], problems: list[Problem], checked: dict[str, int]
) -> dict[str, tuple[str, str, str | None]]:
    """Per data file whose deletion vector is wrong: (kind, message, the vector as
    ``file@offset`` or ``inline``). Each vector must decode (inline) or be found in its file with
    the right size and CRC, hold ``cardinality`` rows, and name no row at or past ``numRecords``."""
    files = state.files
    dvs = files.column("deletion_vector").combine_chunks()
    checked["deletionVectors"] = len(dvs) - dvs.null_count
    if dvs.null_count == len(dvs):
        return {}
    found: dict[str, tuple[str, str, str | None]] = {}
    paths, stats = files.column("path").to_pylist(), files.column("stats").to_pylist()
    pending: list[tuple[str, int, dict[str, Any], str | None]] = []  # store path of its file ("": inline), row, vector, log path
    for i in pc.indices_nonzero(dvs.is_valid()).to_pylist():
        vector = dvs[i].as_py()
        try:
            dv_path = core.dv_file_path(vector["storage_type"], vector["path_or_inline_dv"])
            location = core.locate(table.uri, dv_path, version=state.version) if dv_path is not None else None
        except UnsafePathError as e:
            problems.append(Problem("unsafe-path", str(e), state.version, paths[i]))
            continue
        name = _vector_name(vector["storage_type"], vector["path_or_inline_dv"], dv_path, vector["offset"])
        if location is not None and location not in on_disk:
            found[paths[i]] = ("missing-file", f"deletion vector file {dv_path} of data file {paths[i]} of table {table.uri} is missing", name)
            continue
        pending.append((location or "", i, vector, dv_path))
    reads = _LastFileRead(table.store)
    for _, i, vector, dv_path in sorted(pending, key=lambda p: (p[0], p[1])):
        name = _vector_name(vector["storage_type"], vector["path_or_inline_dv"], dv_path, vector["offset"])
        try:
            # The reader only calls ``read`` on the store it is given.
            rows = core.deleted_rows(cast(LogStore, reads), table.uri, paths[i], vector, version=state.version)
        except TxnLogError as e:
            found[paths[i]] = ("corrupt-deletion-vector", f"{e} (deletion vector {name})", name)
            continue
        records = (decode_stats(stats[i]) or {}).get("numRecords")
        if len(rows) and isinstance(records, int) and int(rows[-1].as_py()) >= records:
            found[paths[i]] = (
                "corrupt-deletion-vector",
                f"deletion vector {name} of data file {paths[i]} of table {table.uri} deletes row {rows[-1].as_py()}, "
                f"but the file has {records} rows (numRecords)",
                name,
            )
    return found


@arguments.takes_table
def validate(table: Table, *, progress: Progress | None = None) -> ValidationReport:
    """Check ``table`` (see the module docstring); every problem names its version and file."""
    layout = LogLayout.of(table.store)
    problems: list[Problem] = []
    checked: dict[str, int] = {"commits": len(layout.listing.commits), "checkpoints": 0, "checkpointsCompared": 0}
    tagged = {t.version for t in tags.list_tags(table)}
    problems += _gaps(layout, tagged)
    if progress:
        progress("checking checkpoints", 0, 3)
    state = _check_checkpoints(table, layout, problems, checked)
    if state is None:
        try:
            state = core.state_of(table.snapshot())
        except TxnLogError as e:
            if not any(p.kind in ("version-gap", "corrupt-log", "corrupt-checkpoint") for p in problems):
                problems.append(Problem("corrupt-log", str(e), getattr(e, "version", None), getattr(e, "path", None)))
    if progress:
        progress("checking files", 1, 3)
    if state is not None:
        _check_files(table, state, layout, problems, checked)
    _check_hint(table, layout, problems)
    if progress:
        progress("checking files", 3, 3)
    try:
        earliest: int | None = layout.earliest
    except LogCorruptError:
        earliest = None
    return ValidationReport(table.uri, layout.latest, earliest, tuple(problems), checked)
