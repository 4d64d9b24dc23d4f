"""Row-level conflict resolution: a commit that lost the race is rebased onto the winners'
files instead of failing, where the outcome equals running the two one after the other.

Two kinds of transaction know enough about their rows to be rebased:

- a merge-on-read DML (:meth:`OptimisticTransaction.delete_rows`): per file it touched, the
  rows it matched and the rows it deletes. When a winner
  * compacted the file (a ``dataChange=false`` rewrite), its deleted rows are found in the
    compacted files by their stable row ids (row tracking) and deleted there;
  * put a deletion vector on the file, the two vectors are unioned when the winner deleted
    none of the rows this transaction matched, and a :class:`ConcurrentRowsError` names the
    file and rows when it did;
- a compaction (only ``dataChange=false`` rewrites, row tracking on): a winner's deletion
  vector on a file it compacted is carried onto its output by row id.

Anything else a winner did to those files (a copy-on-write rewrite, removing them) is left to
the ordinary checks, which raise today's errors. Which winner actions were resolved is handed
to the checks (:class:`Resolved`) so that they do not raise for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import ConcurrentRowsError
from txnlog.expressions import FilePredicate
from txnlog.file_facts import file_keys
from txnlog.log.file_actions import FILES_SCHEMA
from txnlog.read import ReadContext, deletion_vector_diff
from txnlog.storage.base import LogStore
from txnlog.txn.conflicts import Resolved, Winners
from txnlog.write import RowDeletes, delete_rows

#: The most bytes of a winner's new files read to judge read predicates on rows.
NEW_ROWS_BYTES = 64 * 1024 * 1024
_ROW = "__txnlog_position"
_ID = "__txnlog_row_id"
_NO_ROWS = np.array([], dtype=np.uint64)


def _positions(values: pa.Array | pa.ChunkedArray | np.ndarray | None) -> np.ndarray:
    if values is None:
        return _NO_ROWS
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    array = values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array) else values
    return np.unique(np.asarray(array, dtype=np.uint64))


@dataclass
class RowTarget:
    """One file a merge-on-read DML changes: ``file`` (one row of ``Snapshot.files()``) as the
    commit would remove it now, the rows this transaction deletes in it (beyond its vector) and
    the rows its condition matched (None: not known, so any concurrent deletion conflicts)."""

    file: pa.Table
    deleted: np.ndarray
    matched: np.ndarray | None

    @property
    def key(self) -> str:
        return str(file_keys(self.file)[0].as_py())

    @property
    def path(self) -> str:
        return str(self.file.column("path")[0].as_py())


@dataclass(frozen=True)
class RebaseStep:
    """One winner this commit was rebased over: its version and operation, and how many of this
    transaction's files it had changed (``kind``: "compaction" or "deletion vector")."""

    version: int
    operation: str | None
    kind: str
    files: int

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version, "operation": self.operation, "kind": self.kind, "files": self.files}


@dataclass
class _Outcome:
    resolved: Resolved = field(default_factory=Resolved)
    hints: dict[str, str] = field(default_factory=dict)


class Rebase:
    """The row-level state of one transaction across its attempts. ``absorb(winners)`` (from
    the committer, before the ordinary checks) moves it over the winners or raises; ``files``
    gives the file actions to commit at the current state."""

    def __init__(self, store: LogStore, read_context: ReadContext, *, row_ids: bool) -> None:
        self.store = store
        self.ctx = read_context
        self.row_ids = row_ids
        self.targets: list[RowTarget] = []
        self.staged: list[RowDeletes] = []  # what the DML staged at its read version
        self.read_keys: set[str] | None = None  # other files it read and matched nothing in
        self.read_predicates: list[FilePredicate] = []  # judged on a winner's new rows, not only its stats
        self.sources: list[pa.Table] = []  # a compaction's removed files, as it would remove them now
        self.outputs: pa.Table | None = None  # a compaction's new files
        self.carried: dict[int, np.ndarray] = {}  # output index -> positions deleted since
        self.steps: list[RebaseStep] = []
        self._cache: tuple[int, pa.Table, pa.Table] | None = None
        self._read_ids: dict[str, pa.Table] = {}  # file key -> (position, row id) of its live rows
        self._output_ids: list[pa.Table] | None = None  # a compaction's outputs: (position, materialized row id)

    @property
    def moved(self) -> bool:
        return bool(self.steps)

    # -- what the transaction declares ------------------------------------------------------------

    def add_targets(self, files: pa.Table, deleted: Sequence[pa.Array | None], matched: Sequence[pa.Array | None] | None,
                    exact: bool, staged: RowDeletes) -> None:
        for i in range(files.num_rows):
            mine = _positions(deleted[i])
            also = _positions(matched[i]) if matched is not None else _NO_ROWS
            seen = np.union1d(also, mine).astype(np.uint64) if exact else None
            self.targets.append(RowTarget(files.slice(i, 1), mine, seen))
        self.staged.append(staged)

    def compaction(self, removes: pa.Table, adds: pa.Table) -> None:
        self.sources = [removes.slice(i, 1) for i in range(removes.num_rows)]
        self.outputs = adds

    # -- absorbing winners --------------------------------------------------------------------

    def absorb(self, winners: Winners) -> tuple[Resolved, dict[str, str]]:
        outcome = _Outcome()
        for version in winners.versions:
            removes = winners.removes.filter(pc.equal(winners.removes.column("version"), version))
            if not removes.num_rows:
                continue
            added = winners.files_added.filter(pc.equal(winners.files_added.column("version"), version))
            operation = winners.operation(version)
            if self.outputs is not None:
                self._carry(version, operation, removes, added, outcome)
            else:
                self._rebase(version, operation, removes, added, outcome)
        if self.outputs is None and self.read_predicates:
            self._check_new_rows(winners, outcome)
        return outcome.resolved, outcome.hints

    def _check_new_rows(self, winners: Winners, outcome: _Outcome) -> None:
        """New files of a winning DML (not a blind append) whose stats may hold rows matching
        this transaction's read predicates, read (the predicates' columns only) to see whether a
        row does: the ones where none does are no conflict. Up to NEW_ROWS_BYTES of files; beyond,
        the stats decide as before."""
        adds = winners.adds
        if not adds.num_rows:
            return
        files = adds.drop_columns(["version", "blind"])
        # Blind appends stay judged as before, by their files' stats; the new row versions of a
        # winning DML are what rows of other statements on the same files look like.
        candidates = pa.repeat(pa.scalar(False), adds.num_rows)
        for predicate in self.read_predicates:
            candidates = pc.or_(candidates, pc.fill_null(predicate.may_match(files), False))
        candidates = pc.and_(candidates, pc.invert(pc.fill_null(adds.column("blind"), False)))
        chosen = pc.indices_nonzero(candidates).to_pylist()
        sizes = adds.column("size").to_pylist()
        if not chosen or sum(sizes[i] or 0 for i in chosen) > NEW_ROWS_BYTES:
            return
        versions, paths = adds.column("version").to_pylist(), adds.column("path").to_pylist()
        for i in chosen:
            if (versions[i], paths[i]) in outcome.resolved.adds:
                continue
            file = files.slice(i, 1)
            if not any(self.ctx.read(file, columns=[], row_filter=p.rows(), filter_columns=p.columns, store=self.store).num_rows
                       for p in self.read_predicates):
                outcome.resolved.adds.add((versions[i], paths[i]))

    def _rebase(self, version: int, operation: str | None, removes: pa.Table, added: pa.Table, outcome: _Outcome) -> None:
        removed = dict(zip(removes.column("key").to_pylist(), range(removes.num_rows), strict=True))
        compacted = 0
        vectors = 0
        targets: list[RowTarget] = []
        for target in self.targets:
            at = removed.get(target.key)
            if at is None:
                targets.append(target)
                continue
            remove = removes.slice(at, 1)
            readd = _readded(added, target.path)
            if readd is not None and _data_change(remove) and _data_change(readd):
                winner_deleted = self._newly_deleted(target.file, readd)
                if winner_deleted is None:
                    targets.append(target)  # not a pure deletion: the ordinary checks decide
                    continue
                clash = winner_deleted if target.matched is None else np.intersect1d(winner_deleted, target.matched)
                if len(clash):
                    raise ConcurrentRowsError(
                        f"a concurrent commit at version {version} ({operation or 'unknown operation'}) deleted or updated "
                        f"{len(clash)} row(s) of {target.path} that this transaction also matched "
                        f"(row positions {_sample(clash)})",
                        winning_version=version, winning_operation=operation, conflicting_file=target.path,
                        detail=[int(p) for p in clash[:100]],
                    )
                outcome.resolved.removes.add((version, target.key))
                outcome.resolved.adds.add((version, target.path))
                targets.append(RowTarget(readd, target.deleted, target.matched))
                vectors += 1
            elif readd is None and not _data_change(remove):
                moved = self._follow_compaction(target, added.filter(pc.invert(pc.fill_null(added.column("data_change"), True))))
                if moved is None:
                    if not self.row_ids:
                        outcome.hints[target.path] = (
                            "; enabling row tracking (delta.enableRowTracking=true) would let this commit through: "
                            "its deleted rows would be found in the compacted files by their row ids"
                        )
                    targets.append(target)
                    continue
                outcome.resolved.removes.add((version, target.key))
                targets.extend(moved)
                compacted += 1
            else:
                targets.append(target)
        self.targets = _merged(targets)
        # Files this DML read and matched nothing in: a winner's deletions there change nothing it did.
        if self.read_keys is not None:
            mine = {t.key for t in self.targets}
            for key, path, i in zip(removes.column("key").to_pylist(), removes.column("path").to_pylist(), range(removes.num_rows), strict=True):
                if key in mine or key not in self.read_keys or (version, key) in outcome.resolved.removes:
                    continue
                if not _data_change(removes.slice(i, 1)):
                    continue
                readd = _readded(added, path)
                if readd is not None and self._newly_deleted(removes.slice(i, 1), readd) is not None:
                    outcome.resolved.removes.add((version, key))
                    outcome.resolved.adds.add((version, path))
        if compacted:
            self.steps.append(RebaseStep(version, operation, "compaction", compacted))
        if vectors:
            self.steps.append(RebaseStep(version, operation, "deletion vector", vectors))

    def _newly_deleted(self, before: pa.Table, after: pa.Table) -> np.ndarray | None:
        """The rows ``after`` (the same data file with another vector) deletes that ``before``
        did not; None unless ``after`` deletes a superset of ``before``'s rows."""
        if after.column("deletion_vector")[0].as_py() is None:
            return None
        old, new = self.ctx.deleted_rows(pa.concat_tables([_files_layout(before), _files_layout(after)]), self.store)
        deleted, restored = deletion_vector_diff(old, new)
        if len(restored):
            return None  # rows came back (a restore): not a deletion
        return deleted.astype(np.uint64)

    def _ids(self, file: pa.Table) -> pa.Table:
        """Each live row's position and stable row id in ``file``, read once per file key (a
        file's rows never change under one key)."""
        key = str(file_keys(file)[0].as_py())
        if key not in self._read_ids:
            self._read_ids[key] = self.ctx.read(_files_layout(file), columns=[], row_index=_ROW, row_id=_ID, store=self.store)
        return self._read_ids[key]

    def _row_ids(self, file: pa.Table, positions: np.ndarray) -> np.ndarray:
        """The stable row ids of rows ``positions`` of ``file`` (live under its vector)."""
        rows = self._ids(file)
        at = pc.is_in(rows.column(_ROW), value_set=pa.array(positions.astype(np.int64)))
        return np.asarray(rows.filter(at).column(_ID).to_numpy(), dtype=np.int64)

    def _follow_compaction(self, target: RowTarget, outputs: pa.Table) -> list[RowTarget] | None:
        """``target``'s rows in the files a compaction wrote, found by row id; None when row
        tracking is off or a row is not there."""
        if not self.row_ids or not outputs.num_rows:
            return None
        wanted = target.matched if target.matched is not None else target.deleted
        ids = self._row_ids(target.file, wanted)
        if len(ids) != len(wanted):
            return None
        deleted_ids = self._row_ids(target.file, target.deleted) if target.matched is not None else ids
        same_partition = _same_partition(outputs, target.file)
        found = 0
        moved: list[RowTarget] = []
        for i in range(same_partition.num_rows):
            output = same_partition.slice(i, 1)
            rows = self._ids(output)
            id_column = rows.column(_ID)
            hit = pc.is_in(id_column, value_set=pa.array(ids))
            if not pc.any(hit).as_py():
                continue
            positions = rows.column(_ROW).filter(hit)
            found += len(positions)
            deleted = rows.column(_ROW).filter(pc.is_in(id_column, value_set=pa.array(deleted_ids)))
            moved.append(RowTarget(output, _positions(deleted), _positions(positions) if target.matched is not None else None))
        return moved if found == len(ids) else None

    def _carry(self, version: int, operation: str | None, removes: pa.Table, added: pa.Table, outcome: _Outcome) -> None:
        """A compaction over a winner that deleted rows of files it compacted: carry them."""
        assert self.outputs is not None
        removed = dict(zip(removes.column("key").to_pylist(), range(removes.num_rows), strict=True))
        carried = 0
        for s, source in enumerate(self.sources):
            key = str(file_keys(source)[0].as_py())
            at = removed.get(key)
            if at is None or not self.row_ids:
                continue
            path = str(source.column("path")[0].as_py())
            readd = _readded(added, path)
            if readd is None or not _data_change(removes.slice(at, 1)):
                continue
            winner_deleted = self._newly_deleted(source, readd)
            if winner_deleted is None:
                continue
            ids = self._row_ids(source, winner_deleted)
            if len(ids) != len(winner_deleted) or not self._mark_in_outputs(ids):
                continue
            outcome.resolved.removes.add((version, key))
            outcome.resolved.adds.add((version, path))
            # The compaction now removes the file as the winner left it, keeping its data_change=false.
            self.sources[s] = _files_layout(readd)
            carried += 1
        if carried:
            self.steps.append(RebaseStep(version, operation, "deletion vector", carried))

    def _mark_in_outputs(self, ids: np.ndarray) -> bool:
        assert self.outputs is not None
        column = self.ctx.table_configuration.materialized_row_id_column
        if not column:
            return False
        if self._output_ids is None:
            self._output_ids = [
                self.ctx.read(_files_layout(self.outputs.slice(i, 1)), columns=[], row_index=_ROW,
                              file_columns=[pa.field(column, pa.int64())], store=self.store)
                for i in range(self.outputs.num_rows)
            ]
        marks: dict[int, np.ndarray] = {}
        found = 0
        for i, rows in enumerate(self._output_ids):
            hit = pc.is_in(rows.column(column), value_set=pa.array(ids))
            positions = _positions(rows.column(_ROW).filter(hit))
            if len(positions):
                marks[i] = positions
                found += len(positions)
        if found != len(ids):
            return False
        for i, positions in marks.items():
            self.carried[i] = np.union1d(self.carried.get(i, _NO_ROWS), positions).astype(np.uint64)
        return True

    # -- the file actions to commit -------------------------------------------------------------

    def files(self, removes: pa.Table, adds: pa.Table, tombstones: Callable[[pa.Table, bool], pa.Table]) -> tuple[pa.Table, pa.Table]:
        """The commit's (removes, adds) at the current state, from the ones staged at the read
        version (``tombstones`` turns files into removes)."""
        if not self.moved:
            return removes, adds
        if self._cache is not None and self._cache[0] == len(self.steps):
            return self._cache[1], self._cache[2]
        if self.outputs is not None:
            new_removes = tombstones(pa.concat_tables([_files_layout(s) for s in self.sources]), False)
            if self.carried:
                indexes = sorted(self.carried)
                marked = self.outputs.take(pa.array(indexes, pa.int64()))
                rd = delete_rows(self.store, marked, [pa.array(self.carried[i]) for i in indexes], [None] * len(indexes))
                untouched = self.outputs.filter(pc.invert(pc.is_in(pa.array(range(self.outputs.num_rows), pa.int64()), pa.array(indexes, pa.int64()))))
                new_adds = pa.concat_tables([untouched, rd.added.set_column(
                    rd.added.schema.get_field_index("data_change"), "data_change", pa.array([False] * rd.added.num_rows, pa.bool_()))])
            else:
                new_adds = self.outputs
            others = removes.filter(pc.invert(pc.is_in(removes.column("path"), pa.concat_arrays([s.column("path").combine_chunks() for s in self.sources]))))
            result = (pa.concat_tables([others, new_removes]), new_adds)
        else:
            staged_removes = pa.concat_arrays([file_keys(rd.removed).cast(pa.string()) for rd in self.staged]) if self.staged else pa.array([], pa.string())
            staged_adds = pa.concat_arrays([file_keys(rd.added).cast(pa.string()) for rd in self.staged]) if self.staged else pa.array([], pa.string())
            keep_removes = removes.filter(pc.invert(pc.is_in(file_keys(removes).cast(pa.string()), value_set=staged_removes)))
            keep_adds = adds.filter(pc.invert(pc.is_in(file_keys(adds).cast(pa.string()), value_set=staged_adds)))
            live = [t for t in self.targets if len(t.deleted)]
            if live:
                files = pa.concat_tables([_files_layout(t.file) for t in live])
                rd = delete_rows(self.store, files, [pa.array(t.deleted) for t in live], self.ctx.deleted_rows(files, self.store))
                keep_removes = pa.concat_tables([keep_removes, tombstones(rd.removed, True)])
                keep_adds = pa.concat_tables([keep_adds, rd.added.select(keep_adds.schema.names)])
            result = (keep_removes, keep_adds)
        self._cache = (len(self.steps), *result)
        return result


def _merged(targets: list[RowTarget]) -> list[RowTarget]:
    """One target per file: rows of several files compacted into one come together."""
    by_key: dict[str, RowTarget] = {}
    for target in targets:
        seen = by_key.get(target.key)
        if seen is None:
            by_key[target.key] = target
            continue
        matched = None if seen.matched is None or target.matched is None else np.union1d(seen.matched, target.matched).astype(np.uint64)
        by_key[target.key] = RowTarget(seen.file, np.union1d(seen.deleted, target.deleted).astype(np.uint64), matched)
    return list(by_key.values())


def _files_layout(table: pa.Table) -> pa.Table:
    """``table`` (a file or tombstone row) in the ``Snapshot.files()`` layout."""
    if table.schema.names == FILES_SCHEMA.names:
        return table
    columns = [table.column(name) if name in table.column_names else pa.nulls(table.num_rows, FILES_SCHEMA.field(name).type)
               for name in FILES_SCHEMA.names]
    return pa.Table.from_arrays([c.cast(FILES_SCHEMA.field(n).type) for c, n in zip(columns, FILES_SCHEMA.names, strict=True)],
                                schema=FILES_SCHEMA)


def _readded(added: pa.Table, path: str) -> pa.Table | None:
    hit = added.filter(pc.equal(added.column("path"), path))
    return _files_layout(hit.slice(hit.num_rows - 1, 1)) if hit.num_rows else None


def _data_change(row: pa.Table) -> bool:
    value = row.column("data_change")[0].as_py()
    return value is None or bool(value)


def _same_partition(files: pa.Table, file: pa.Table) -> pa.Table:
    wanted = file.column("partition_values")[0].as_py()
    values = files.column("partition_values").to_pylist()
    keep = [sorted(v or []) == sorted(wanted or []) for v in values]
    return files.filter(pa.array(keep, pa.bool_()))


def _sample(rows: np.ndarray) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:10])
    return shown + (", ..." if len(rows) > 10 else "")


__all__ = ["Rebase", "RebaseStep", "RowTarget"]
