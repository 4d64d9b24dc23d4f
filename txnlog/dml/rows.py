"""DELETE, UPDATE and MERGE over Arrow, staged in an open transaction (the caller commits).

Two ways to change a row, chosen by the table (``delta.enableDeletionVectors``):

- merge-on-read (deletion vectors): a deleted or replaced row's position is added to its file's
  deletion vector (one vector file for all of them, old vectors unioned), and only the new row
  versions are written;
- copy-on-write: a file holding a changed row is rewritten with its other rows copied; a DELETE
  whose predicate names only partition columns removes the files it matches, unread.

Every operation first skips files by stats (``txn.filter_files``: the predicate and the files
are recorded as read, so a concurrent commit that adds matching rows or removes a read file
conflicts), then reads the candidates file by file: a pass over the columns the condition needs
finds the changed rows, a second pass over the changed files alone writes their new contents.
The metrics are delta-spark's names; they are also recorded as the commit's operation metrics.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.dml.clauses import Assignments, MergeCondition, assignments, merge_parameters
from txnlog.dml.pruning import merge_candidates, ordered_as_int
from txnlog.errors import DuplicateMatchError, InvalidArgumentError, InvalidArgumentTypeError, InvalidPredicateError, TxnLogError
from txnlog.expressions.parser import parse_value
from txnlog.expressions.predicate import FilePredicate
from txnlog.expressions.tree import Reference
from txnlog.expressions.values import Resolver, ValueExpression, condition_mask, evaluate_value, target_columns_read
from txnlog.read import READ_THREADS, ROW_COMMIT_VERSION, ROW_ID, ReadContext
from txnlog.snapshot import Snapshot
from txnlog.storage import locate
from txnlog.txn.transaction import OptimisticTransaction
from txnlog.write import WrittenFiles, write_change_files
from txnlog.write.changes import CHANGE_TYPE_COLUMN

ROW_INDEX = "__txnlog_row_index"
SOURCE_ROW = "__txnlog_source_row"
Metrics = dict[str, int]


@dataclass(frozen=True)
class DmlResult:
    """What a DELETE, UPDATE or MERGE staged: its operation metrics (delta-spark's names, also
    recorded in the commit), and whether it staged any file action (False: nothing to commit)."""

    metrics: Mapping[str, int]
    changed: bool


# --- shared pieces -------------------------------------------------------------------------------


def _snapshot(txn: OptimisticTransaction, what: str) -> Snapshot:
    if txn.snapshot is None:
        raise InvalidArgumentError(f"{what} on {txn.uri}: the table does not exist yet")
    return txn.snapshot


def _predicate(snapshot: Snapshot, text: str, what: str) -> FilePredicate:
    """``text`` bound to the table; its errors also name the table."""
    try:
        return snapshot.predicate(text)
    except InvalidPredicateError as e:
        raise InvalidPredicateError(f"{what} on table {snapshot.uri}: {e}", predicate=text) from None


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _total_size(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def _with_vector(files: pa.Table) -> int:
    """How many of ``files`` have a deletion vector."""
    return int(files.num_rows - files.column("deletion_vector").null_count)


class _Scope:
    """What a column reference means in one expression: unqualified names, or ``t.``/``s.``
    qualified ones, resolved case-insensitively against one or two sides' columns."""

    def __init__(self, sides: Mapping[str, tuple[pa.Table, str]], *, default: Sequence[str]) -> None:
        self.sides = sides  # alias -> (rows, what they are, e.g. "table file:///t")
        self.default = default  # the sides an unqualified name may come from
        self.lowered = {alias: {n.lower(): n for n in rows.column_names} for alias, (rows, _) in sides.items()}

    def resolver(self, text: str) -> Resolver:
        def resolve(ref: Reference) -> pa.ChunkedArray:
            path = ref.path
            alias = path[0].lower() if len(path) > 1 and path[0].lower() in self.sides else None
            if alias is not None:
                candidates, rest = [alias], path[1:]
            else:
                candidates, rest = [a for a in self.default if path[0].lower() in self.lowered[a]], path
                if len(candidates) > 1:
                    raise InvalidPredicateError(
                        f"expression {text!r} names column {path[0]!r}, which both {' and '.join(self.sides[a][1] for a in candidates)} "
                        f"have: qualify it ({', '.join(f'{a}.{path[0]}' for a in candidates)})", predicate=text)
                if not candidates:
                    where = " or ".join(self.sides[a][1] for a in self.default)
                    raise InvalidPredicateError(f"expression {text!r} names column {path[0]!r}, which {where} does not have", predicate=text)
            side = candidates[0]
            rows, what = self.sides[side]
            name = self.lowered[side].get(rest[0].lower())
            if name is None:
                columns = ", ".join(rows.column_names)
                raise InvalidPredicateError(
                    f"expression {text!r} names column {'.'.join(path)!r}, which {what} does not have (columns: {columns})", predicate=text)
            values: pa.ChunkedArray = rows.column(name)
            for part in rest[1:]:
                if not pa.types.is_struct(values.type):
                    raise InvalidPredicateError(f"expression {text!r}: {'.'.join(path)!r} is not a field of a struct", predicate=text)
                index = {values.type.field(i).name.lower(): i for i in range(values.type.num_fields)}.get(part.lower())
                if index is None:
                    raise InvalidPredicateError(f"expression {text!r} names field {'.'.join(path)!r}, which {what} does not have", predicate=text)
                values = pc.struct_field(values, [index])
            return values

        return resolve

    def evaluate(self, node: ValueExpression, text: str, num_rows: int) -> pa.ChunkedArray:
        return evaluate_value(node, self.resolver(text), num_rows, text=text)

    def mask(self, node: ValueExpression, text: str, num_rows: int) -> pa.ChunkedArray:
        return condition_mask(node, self.resolver(text), num_rows, text=text)


def _parse(text: object, what: str) -> ValueExpression:
    if not isinstance(text, str):
        raise InvalidArgumentTypeError(f"{what} must be a SQL expression string, got {type(text).__name__}")
    return parse_value(text)


def _cast_to(values: pa.ChunkedArray, target: pa.Field, *, table: str, what: str, text: str) -> pa.ChunkedArray:
    """``values`` as column ``target``'s type: numbers are narrowed (fractions truncated, as SQL's
    assignment does), but a value that does not fit, or text that is not a number, is an error."""
    if values.type == target.type:
        return values
    if values.type == pa.null():
        return pa.chunked_array([pa.nulls(len(values), target.type)], target.type)
    options = pc.CastOptions(target.type, allow_float_truncate=True, allow_decimal_truncate=True)
    try:
        return pc.cast(values, options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        message = str(e).splitlines()[0]
        raise InvalidArgumentError(
            f"{what} sets column {target.name!r} of table {table} to {text!r}, whose value cannot be cast to {target.type}: {message}"
        ) from None


def _files_at(files: pa.Table, indexes: Sequence[int]) -> pa.Table:
    return files.take(pa.array(indexes, pa.int64()))


T = TypeVar("T")


def _each(work: Callable[[int], T], items: Iterable[int], *, undo: Callable[[T], None] | None = None) -> list[T]:
    """``work(item)`` for each item, in order, ``READ_THREADS`` at once (Arrow's reads, compute
    and Parquet writes release the GIL). On an error, the items not yet started are cancelled,
    ``undo`` is given the results of those that finished, and the error is raised."""
    chosen = list(items)
    if len(chosen) <= 1 or READ_THREADS <= 1:
        done: list[T] = []
        try:
            for item in chosen:
                done.append(work(item))
        except BaseException:
            _undo(undo, done)
            raise
        return done
    with ThreadPoolExecutor(min(READ_THREADS, len(chosen)), thread_name_prefix="txnlog-dml") as pool:
        futures = [pool.submit(work, item) for item in chosen]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            f.cancel()  # those not started; a failure's siblings already running finish
    failed = [f for f in futures if not f.cancelled() and f.exception() is not None]
    if not failed:
        return [f.result() for f in futures]
    _undo(undo, [f.result() for f in futures if not f.cancelled() and f.exception() is None])
    error = failed[0].exception()
    assert error is not None
    raise error


def _undo(undo: Callable[[T], None] | None, results: Sequence[T]) -> None:
    if undo is not None:
        for result in results:
            undo(result)


def matching_positions(ctx: ReadContext, files: pa.Table, predicate: FilePredicate) -> list[pa.Array]:
    """Per file: the physical positions of its live rows on which ``predicate`` is TRUE (only the
    predicate's columns are read)."""
    found = ctx.read_each(files, parallel=READ_THREADS, columns=[], row_filter=predicate.rows(), filter_columns=predicate.columns, row_index=ROW_INDEX)
    return [rows.column(ROW_INDEX).combine_chunks() for _, rows in found]


@dataclass
class _RowChanges:
    """What a DML stages: rows to write, positions to mark deleted (DV mode), files to drop."""

    dv_mode: bool
    positions: dict[int, pa.Array] = field(default_factory=dict)  # file index -> rows deleted by DV
    matched: dict[int, pa.Array] = field(default_factory=dict)  # file index -> rows a MERGE matched (DV mode)
    rewritten: list[int] = field(default_factory=list)  # file indexes removed (copy-on-write)
    copied_rows: int = 0

    @classmethod
    def of_matches(cls, dv_mode: bool, positions: Sequence[pa.Array]) -> _RowChanges:
        """The files holding a matched row (``positions[i]``: file i's matched positions): their
        positions to mark deleted, or the files to rewrite."""
        touched = [i for i, p in enumerate(positions) if len(p)]
        if dv_mode:
            return cls(dv_mode, positions={i: positions[i] for i in touched})
        return cls(dv_mode, rewritten=touched)

    def touched(self) -> list[int]:
        """The indexes of the files this DML changes, ascending."""
        return sorted(self.positions) if self.dv_mode else list(self.rewritten)


class _Output:
    """What a DML writes, kind of row by kind of row.

    Data rows: the table's columns and, where the table tracks rows
    (``delta.enableRowTracking``), each row's stable id and commit version, which the write
    preserves: a copied row keeps both, an updated row keeps its id and gets the commit's version
    (a null one), an inserted row gets new ones (nulls). Change rows, where the table records
    change data (``delta.enableChangeDataFeed``): the deleted, updated (before and after) and
    inserted rows with their ``_change_type``, staged as ``_change_data/`` files."""

    def __init__(self, txn: OptimisticTransaction, schema: pa.Schema) -> None:
        config = txn.table_configuration
        self.schema = schema  # the table's logical columns
        self.tracking = config.row_tracking_enabled
        self.change_data = config.change_data_feed_enabled
        ids = [pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())] if self.tracking else []
        self.write_schema = pa.schema([*schema, *ids])
        self.change_schema = schema.append(pa.field(CHANGE_TYPE_COLUMN, pa.string()))
        self.change_rows: list[pa.Table] = []

    def part(self) -> _Output:
        """An output for one file's rows, with change rows of its own (files are worked on in
        threads); the caller adds them to this one's, in file order."""
        part = copy.copy(self)
        part.change_rows = []
        return part

    # The ``ReadContext.read`` options under which old rows carry their ids.
    @property
    def row_id(self) -> str | None:
        return ROW_ID if self.tracking else None

    @property
    def row_commit_version(self) -> str | None:
        return ROW_COMMIT_VERSION if self.tracking else None

    def copied(self, rows: pa.Table) -> pa.Table:
        """Rows written again unchanged (ids and commit versions kept)."""
        return self._conform(rows, {})

    def deleted(self, old: pa.Table) -> None:
        self._change(old, "delete")

    def updated(self, old: pa.Table, new: pa.Table) -> pa.Table:
        """``new`` (the table's columns) replacing ``old`` row for row: each keeps its row id."""
        self._change(old, "update_preimage")
        self._change(new, "update_postimage")
        if not self.tracking:
            return self._conform(new, {})
        return self._conform(new, {ROW_ID: old.column(ROW_ID), ROW_COMMIT_VERSION: pa.nulls(new.num_rows, pa.int64())})

    def inserted(self, new: pa.Table) -> pa.Table:
        self._change(new, "insert")
        nulls = pa.nulls(new.num_rows, pa.int64())
        return self._conform(new, {ROW_ID: nulls, ROW_COMMIT_VERSION: nulls} if self.tracking else {})

    def _conform(self, rows: pa.Table, replaced: Mapping[str, pa.Array | pa.ChunkedArray]) -> pa.Table:
        columns = [replaced[n] if n in replaced else rows.column(n) for n in self.write_schema.names]
        return pa.Table.from_arrays(columns, schema=self.write_schema)

    def _change(self, rows: pa.Table, change_type: str) -> None:
        if self.change_data and rows.num_rows:
            columns = [rows.column(n) for n in self.schema.names]
            kinds = pa.repeat(pa.scalar(change_type, pa.string()), rows.num_rows)
            self.change_rows.append(pa.Table.from_arrays([*columns, kinds], schema=self.change_schema))

    def stage_changes(self, txn: OptimisticTransaction) -> int:
        """Write the change rows and stage their files; how many files."""
        if not self.change_rows:
            return 0
        batches = [batch for table in self.change_rows for batch in table.to_batches()]
        reader = pa.RecordBatchReader.from_batches(self.change_schema, batches)
        files = write_change_files(txn.write_context(), reader, store=txn.location.store)
        txn.add_cdc_files(files)
        return len(files)


def _stage(txn: OptimisticTransaction, snapshot: Snapshot, candidates: pa.Table, changes: _RowChanges,
           new_rows: Iterator[pa.Table], output: _Output, *, written: Sequence[WrittenFiles] = (), written_rows: int = 0,
           started: float | None = None) -> Metrics:
    """Write ``new_rows`` (a lazy stream of ``output.write_schema`` tables: it fills ``changes``
    and ``output``'s change rows as it goes), then the change files, then stage the removes and
    the deletion vectors; ``written`` (``written_rows`` rows) were already written, and are
    staged with them. File counts as delta-spark reports them: a file whose vector changes
    is not counted as removed nor added (its remove+add pair only swaps the vector); only new
    data files are added and only dropped files are removed. ``rewriteTimeMs`` counts from
    ``started`` (default: now)."""
    start = time.monotonic() if started is None else started
    counted_rows = [written_rows]

    def counted() -> Iterator[pa.RecordBatch]:
        for table in new_rows:
            counted_rows[0] += table.num_rows
            yield from table.to_batches()

    adds = txn.write(pa.RecordBatchReader.from_batches(output.write_schema, counted()), preserve_row_ids=output.tracking)
    for files in written:
        txn.add_files(files.files)
        adds = [*adds, *files.add_files]
    metrics: Metrics = {
        # The transaction's own counts would include a vector's remove+add: these are the data.
        "numFiles": len(adds),
        "numOutputRows": counted_rows[0],
        "numOutputBytes": sum(a.size for a in adds),
        "numAddedFiles": len(adds),
        "numAddedBytes": sum(a.size for a in adds),
        "numCopiedRows": changes.copied_rows,
        "numDeletionVectorsAdded": 0,
        "numDeletionVectorsUpdated": 0,
        "numDeletionVectorsRemoved": 0,
        "numAddedChangeFiles": output.stage_changes(txn),
    }
    if changes.dv_mode and changes.positions:
        # The files with matched rows, changed or not: what lets the commit through concurrent
        # changes to other rows of them.
        indexes = sorted(set(changes.positions) | set(changes.matched))
        touched = _files_at(candidates, indexes)
        deletes = txn.delete_rows(touched, [changes.positions.get(i) for i in indexes], matched=[changes.matched.get(i) for i in indexes])
        kept = set(deletes.added.column("path").to_pylist())
        dropped = deletes.removed.filter(pc.invert(pc.is_in(deletes.removed.column("path"), pa.array(sorted(kept), pa.string()))))
        metrics.update(
            numRemovedFiles=dropped.num_rows,
            numRemovedBytes=_total_size(dropped),
            numDeletionVectorsAdded=deletes.vectors_added,
            numDeletionVectorsUpdated=deletes.vectors_updated,
            numDeletionVectorsRemoved=deletes.vectors_removed,
        )
    else:
        removed = _files_at(candidates, changes.rewritten)
        if removed.num_rows:
            txn.remove_files(removed)
        # A rewritten file's old vector goes with it.
        metrics.update(numRemovedFiles=removed.num_rows, numRemovedBytes=_total_size(removed),
                       numDeletionVectorsRemoved=_with_vector(removed))
    metrics["rewriteTimeMs"] = _ms(start)
    return metrics


def _record(txn: OptimisticTransaction, metrics: Metrics, start: float, scan_ms: int, changed: bool) -> DmlResult:
    metrics["scanTimeMs"] = scan_ms
    metrics["executionTimeMs"] = _ms(start)
    txn.set_operation_metrics(**metrics)
    return DmlResult(metrics, changed)


def _changed(metrics: Metrics, prefix: str = "num") -> bool:
    """Whether the staged work has any file action: a new file, a dropped file, a new vector."""
    names = ("AddedFiles", "RemovedFiles", "DeletionVectorsAdded", "DeletionVectorsUpdated")
    if prefix == "numTarget":
        names = ("FilesAdded", "FilesRemoved", "DeletionVectorsAdded", "DeletionVectorsUpdated")
    return any(metrics.get(prefix + n, 0) for n in names)


def _record_predicate(txn: OptimisticTransaction, predicate: str) -> None:
    """``operationParameters.predicate``: the JSON list of the conditions, as delta-spark and
    ``txnlog.spark.transaction`` record them."""
    previous = txn.operation_parameters.get("predicate")
    txn.operation_parameters["predicate"] = [*(previous if isinstance(previous, list) else []), predicate]


# --- DELETE --------------------------------------------------------------------------------------


def delete(txn: OptimisticTransaction, predicate: str) -> DmlResult:
    """Stage ``DELETE FROM table WHERE predicate`` in ``txn``; the metrics it records."""
    start = time.monotonic()
    snapshot = _snapshot(txn, "delete")
    if not isinstance(predicate, str):
        raise InvalidArgumentTypeError(f"delete() takes the predicate as SQL text, got {type(predicate).__name__}")
    condition = _predicate(snapshot, predicate, "delete")
    _record_predicate(txn, predicate)
    candidates = txn.filter_files(condition)
    ctx = snapshot.read_context()
    dv_mode = txn.table_configuration.deletion_vectors_enabled
    if condition.matches_partition_only():
        # The partition values decide: the files skipping kept hold only matching rows.
        # (With the row index: a batch of no columns would have no length.)
        deleted = ctx.read(candidates, columns=[], row_index=ROW_INDEX).num_rows if candidates.num_rows else 0
        if candidates.num_rows:
            txn.remove_files(candidates)
        metrics: Metrics = {
            "numFiles": 0, "numOutputRows": 0, "numOutputBytes": 0, "numRemovedFiles": candidates.num_rows, "numAddedFiles": 0, "numDeletedRows": deleted, "numCopiedRows": 0,
            "numAddedChangeFiles": 0, "numAddedBytes": 0, "numRemovedBytes": _total_size(candidates),
            "numDeletionVectorsAdded": 0, "numDeletionVectorsUpdated": 0,
            "numDeletionVectorsRemoved": _with_vector(candidates),
            "rewriteTimeMs": 0,
        }
        return _record(txn, metrics, start, _ms(start), _changed(metrics))
    positions = matching_positions(ctx, candidates, condition)
    scan_ms = _ms(start)
    changes = _RowChanges.of_matches(dv_mode, positions)
    touched = changes.touched()
    output = _Output(txn, ctx.output_schema())
    matches = condition.rows()

    def kept_rows() -> Iterator[pa.Table]:
        for i in touched:
            file = candidates.slice(i, 1)
            if dv_mode:  # the deleted rows only matter as change data
                if output.change_data:
                    for batch in ctx.batches(file, row_filter=matches, filter_columns=condition.columns):
                        output.deleted(pa.Table.from_batches([batch]))
                continue
            for batch in ctx.batches(file, row_id=output.row_id, row_commit_version=output.row_commit_version):
                rows = pa.Table.from_batches([batch])
                mask = matches.mask(rows)
                output.deleted(rows.filter(mask))
                kept = rows.filter(pc.invert(mask))
                changes.copied_rows += kept.num_rows
                yield output.copied(kept)

    metrics = _stage(txn, snapshot, candidates, changes, kept_rows(), output)
    metrics["numDeletedRows"] = sum(len(positions[i]) for i in touched)
    return _record(txn, metrics, start, scan_ms, _changed(metrics))


# --- UPDATE --------------------------------------------------------------------------------------


def _assigned(rows: pa.Table, scope: _Scope, values: Mapping[str, tuple[ValueExpression, str]], schema: pa.Schema,
              *, table: str, what: str) -> pa.Table:
    """``rows`` (target columns, maybe prefixed) with the assigned columns replaced."""
    arrays = []
    for f in schema:
        if f.name in values:
            node, text = values[f.name]
            arrays.append(_cast_to(scope.evaluate(node, text, rows.num_rows), f, table=table, what=what, text=text))
        else:
            arrays.append(rows.column(f.name))
    return pa.Table.from_arrays(arrays, schema=schema)


def _check_expressions(scope: _Scope, expressions: Sequence[tuple[ValueExpression, str]]) -> None:
    """Evaluate each expression on no rows: unknown columns and type errors surface before any
    file is read or written."""
    for node, text in expressions:
        scope.evaluate(node, text, 0)


def update(txn: OptimisticTransaction, predicate: str | None, set: Mapping[str, str]) -> DmlResult:  # noqa: A002 - the SQL word
    """Stage ``UPDATE table SET column = expression ... WHERE predicate`` (every row when
    ``predicate`` is None) in ``txn``; the metrics it records."""
    start = time.monotonic()
    snapshot = _snapshot(txn, "update")
    if not isinstance(set, Mapping) or not set:
        raise InvalidArgumentError("update() needs at least one column in set= (a dict of column -> SQL expression)")
    ctx = snapshot.read_context()
    schema = ctx.output_schema()
    by_lower = {f.name.lower(): f.name for f in schema}
    values: dict[str, tuple[ValueExpression, str]] = {}
    for name, text in set.items():
        if not isinstance(name, str) or name.lower() not in by_lower:
            raise InvalidArgumentError(f"update() sets column {name!r}, which table {txn.uri} does not have (columns: {', '.join(schema.names)})")
        values[by_lower[name.lower()]] = (_parse(text, f"update() set[{name!r}]"), text)
    empty = _Scope({"t": (schema.empty_table(), f"table {txn.uri}")}, default=["t"])
    _check_expressions(empty, list(values.values()))
    condition = _predicate(snapshot, predicate if predicate is not None else "TRUE", "update")
    _record_predicate(txn, predicate if predicate is not None else "true")
    candidates = txn.filter_files(condition)
    positions = matching_positions(ctx, candidates, condition)
    scan_ms = _ms(start)
    dv_mode = txn.table_configuration.deletion_vectors_enabled
    changes = _RowChanges.of_matches(dv_mode, positions)
    touched = changes.touched()
    matches = condition.rows()
    output = _Output(txn, schema)

    def new_rows() -> Iterator[pa.Table]:
        for i in touched:
            file = candidates.slice(i, 1)
            if dv_mode:  # only the new versions of the matching rows
                batches = ctx.batches(file, row_filter=matches, filter_columns=condition.columns, row_id=output.row_id, row_commit_version=output.row_commit_version)
            else:
                batches = ctx.batches(file, row_id=output.row_id, row_commit_version=output.row_commit_version)
            for batch in batches:
                rows = pa.Table.from_batches([batch])
                if dv_mode:
                    hit = rows
                else:
                    mask = matches.mask(rows)
                    hit, kept = rows.filter(mask), rows.filter(pc.invert(mask))
                    changes.copied_rows += kept.num_rows
                    yield output.copied(kept)
                scope = _Scope({"t": (hit.select(schema.names), f"table {txn.uri}")}, default=["t"])
                yield output.updated(hit, _assigned(hit, scope, values, schema, table=txn.uri, what="update()"))

    metrics = _stage(txn, snapshot, candidates, changes, new_rows(), output)
    metrics["numUpdatedRows"] = sum(len(positions[i]) for i in touched)
    return _record(txn, metrics, start, scan_ms, _changed(metrics))


# --- MERGE ---------------------------------------------------------------------------------------


def _source_table(source: object) -> pa.Table:
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatchReader):
        return source.read_all()
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    raise InvalidArgumentTypeError(f"merge source must be a pyarrow Table, RecordBatch or RecordBatchReader, got {type(source).__name__}")


def _prefixed(rows: pa.Table, prefix: str) -> pa.Table:
    return rows.rename_columns([f"{prefix}{n}" if n not in (ROW_INDEX, SOURCE_ROW) else n for n in rows.column_names])


class _PrefixedScope(_Scope):
    """The joined rows of a MERGE: target columns as ``t.<name>``, source columns as ``s.<name>``."""

    def __init__(self, joined: pa.Table, target: Sequence[str], source: Sequence[str], uri: str, *, with_target: bool = True) -> None:
        sides = {}
        if with_target:
            sides["t"] = (joined.select([f"t.{c}" for c in target]).rename_columns(list(target)), f"target table {uri}")
        sides["s"] = (joined.select([f"s.{c}" for c in source]).rename_columns(list(source)), "the merge source")
        super().__init__(sides, default=list(sides))


@dataclass
class _MergedFile:
    """One target file's part of a MERGE: its changed rows' positions and counts, the new rows
    to write (merge-on-read) or the file that replaces it, already written (copy-on-write)."""

    changed: pa.Array  # physical positions of the rows deleted or updated
    output: _Output  # with this file's change rows
    deleted: int = 0
    updated: int = 0
    copied: int = 0
    rows: list[pa.Table] = field(default_factory=list)
    written: WrittenFiles | None = None
    written_rows: int = 0


class _KeyLookup:
    """The source's unique values of its one key, looked up for each target file's rows.
    Integer and date keys are also kept sorted: a file then looks up only the keys within its
    own [min, max], hashing a few of them instead of all (with keys in every file, the hash
    table of all of them was most of the matching time)."""

    def __init__(self, values: pa.Array) -> None:
        self.values = values
        self.sorted: np.ndarray | None = None
        self.order: np.ndarray | None = None
        self.as_int = ordered_as_int(values.type)
        if self.as_int is not None:
            numbers = values.cast(self.as_int).to_numpy(zero_copy_only=False)
            self.order = np.argsort(numbers, kind="stable")
            self.sorted = numbers[self.order]

    def find(self, column: pa.ChunkedArray) -> pa.Array:
        """For each value of ``column``, the index of the equal source value, or null."""
        if self.sorted is None or self.order is None or self.as_int is None:
            return pc.index_in(column, value_set=self.values)
        bounds = pc.min_max(column.cast(self.as_int))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None:  # every value is null
            return pa.nulls(len(column), pa.int32())
        start, stop = np.searchsorted(self.sorted, low, side="left"), np.searchsorted(self.sorted, high, side="right")
        within = pa.array(self.order[start:stop])
        return within.take(pc.index_in(column, value_set=self.values.take(within)))


def _with_columns(rows: pa.Table, columns: Sequence[str], schema: pa.Schema, have: pa.Table | None, at: np.ndarray | None) -> pa.Table:
    """``rows`` with each of ``columns`` it lacks: from ``have`` (what was read before, aligned
    with the file's rows, taken ``at`` when given), else NULL (a column no clause reads)."""
    for c in columns:
        if c in rows.column_names:
            continue
        field = schema.field(c)
        if have is not None and c in have.column_names:
            values = have.column(c) if at is None else have.column(c).take(at)
        else:
            values = pa.nulls(rows.num_rows, field.type)
        rows = rows.append_column(field, values)
    return rows


def _lookup_key(keyed_source: pa.Table, pairs: Sequence[tuple[str, str]], residual: Sequence[object]) -> _KeyLookup | None:
    """The source's key values, when matching a target row is a lookup of its one key among
    them: ON is one equality, the values are unique and compare exactly (not floating point,
    whose NaN and -0.0 the join treats its own way). None otherwise (the rows are joined)."""
    if len(pairs) != 1 or residual:
        return None
    keys = keyed_source.column(f"s.{pairs[0][1]}")
    kind = keys.type
    exact = (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
             or pa.types.is_large_binary(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind) or pa.types.is_decimal(kind)
             or pa.types.is_boolean(kind))
    if not exact:
        return None
    values = keys.combine_chunks()
    return _KeyLookup(values) if pc.count_distinct(values).as_py() == len(values) else None


def merge(
    txn: OptimisticTransaction,
    source: pa.Table | pa.RecordBatchReader,
    on: str | Sequence[str],
    *,
    when_matched_update: Assignments = None,
    when_matched_delete: bool | str = False,
    when_not_matched_insert: Assignments = None,
) -> DmlResult:
    """Stage ``MERGE INTO table t USING source s ON on`` in ``txn``; the metrics it records.

    ``on``: a key column, a list of them, or a SQL condition over ``t`` and ``s`` with at least
    one ``t.x = s.y``. ``when_matched_update``: {column: expression} or ``"*"``;
    ``when_matched_delete``: True or a condition (applied before the update);
    ``when_not_matched_insert``: {column: expression over ``s``} or ``"*"``. A target row that
    two source rows match raises :class:`~txnlog.errors.DuplicateMatchError` before anything is
    written."""
    start = time.monotonic()
    snapshot = _snapshot(txn, "merge")
    if when_matched_update is None and not when_matched_delete and when_not_matched_insert is None:
        raise InvalidArgumentError("merge needs at least one of when_matched_update, when_matched_delete, when_not_matched_insert")
    if when_matched_update is not None and when_matched_delete is True:
        raise InvalidArgumentError("when_matched_delete=True deletes every matched row: when_matched_update would never apply")
    src = _source_table(source)
    condition = MergeCondition.parse(on)
    txn.operation_parameters.update(merge_parameters(on, when_matched_update, when_matched_delete, when_not_matched_insert))
    ctx = snapshot.read_context()
    schema = ctx.output_schema()
    columns = schema.names
    source_columns = src.column_names
    target_lower = {c.lower(): c for c in columns}
    source_lower = {c.lower(): c for c in source_columns}
    pairs: list[tuple[str, str]] = []
    for target_key, source_key in condition.pairs:
        if target_key.lower() not in target_lower:
            raise InvalidArgumentError(f"merge key {target_key!r} is not a column of table {txn.uri} (columns: {', '.join(columns)})")
        if source_key.lower() not in source_lower:
            raise InvalidArgumentError(f"merge key {source_key!r} is not a column of the source (columns: {', '.join(source_columns)})")
        pairs.append((target_lower[target_key.lower()], source_lower[source_key.lower()]))
    updates = assignments("when_matched_update", when_matched_update, columns, source_columns)
    inserts = assignments("when_not_matched_insert", when_not_matched_insert, columns, source_columns)
    update_values = {c: (_parse(e, f"when_matched_update[{c!r}]"), e) for c, e in (updates or {}).items()}
    insert_values = {c: (_parse(e, f"when_not_matched_insert[{c!r}]"), e) for c, e in (inserts or {}).items()}
    delete_condition = None
    if isinstance(when_matched_delete, str):
        delete_condition = (_parse(when_matched_delete, "when_matched_delete"), when_matched_delete)
    elif not isinstance(when_matched_delete, bool):
        raise InvalidArgumentTypeError(f"when_matched_delete must be a bool or a SQL condition, got {type(when_matched_delete).__name__}")
    residual = [(node, condition.sql) for node in condition.residual]
    matched_clause = updates is not None or bool(when_matched_delete)

    # Everything is checked on no rows first: an error names the expression before any work.
    src = src.append_column(SOURCE_ROW, pa.array(np.arange(src.num_rows, dtype=np.int64)))
    joined_empty = pa.Table.from_arrays(
        [pa.array([], f.type) for f in schema] + [pa.array([], t) for t in src.schema.types],
        names=[f"t.{c}" for c in columns] + [f"s.{c}" if c != SOURCE_ROW else c for c in src.column_names],
    )
    empty_scope = _PrefixedScope(joined_empty, columns, source_columns, txn.uri)
    _check_expressions(empty_scope, list(update_values.values()))
    _check_expressions(_PrefixedScope(joined_empty, columns, source_columns, txn.uri, with_target=False), list(insert_values.values()))
    for node, text in residual + ([delete_condition] if delete_condition else []):
        empty_scope.mask(node, text, 0)  # and each condition is boolean

    metrics: Metrics = {"numSourceRows": src.num_rows}
    if src.num_rows == 0:
        return _record(txn, metrics, start, 0, False)

    # The source's key range prunes the target's files (and is the read predicate).
    typed_keys = _with_key_types(rows_with_keys(src, [s for _, s in pairs]), pairs, schema, txn.uri)
    candidates = merge_candidates(snapshot, typed_keys, pairs, txn=txn)
    keyed_source = _prefixed(typed_keys, "s.")

    # 1. Match, file by file, reading the keys and what the rest of ON needs. One key without
    # residual condition, whose source values are unique, is looked up (a target row can then
    # match one source row at most); other conditions join.
    needed = sorted({t for t, _ in pairs} | set(target_columns_read([node for node, _ in residual], list(target_lower.values()))))
    store = txn.location.store
    lookup = _lookup_key(keyed_source, pairs, residual)

    def match(i: int) -> tuple[pa.Table, pa.Table] | None:
        """File i's matched rows, (ROW_INDEX, SOURCE_ROW), and the rows read; None when none match."""
        rows = ctx.read(candidates.slice(i, 1), columns=needed, row_index=ROW_INDEX, store=store)
        if lookup is not None:
            at = lookup.find(rows.column(pairs[0][0]))  # the source has no NULL key
            hit = at.is_valid()
            if not pc.any(hit).as_py():
                return None
            source_rows = keyed_source.column(SOURCE_ROW).take(at.filter(hit))
            return pa.table({ROW_INDEX: rows.column(ROW_INDEX).filter(hit), SOURCE_ROW: source_rows}), rows
        keys = _prefixed(rows_with_keys(rows, [t for t, _ in pairs]), "t.")
        if keys.num_rows == 0:
            return None
        joined = keys.join(keyed_source, keys=[f"t.{t}" for t, _ in pairs], right_keys=[f"s.{s}" for _, s in pairs],
                           join_type="inner", coalesce_keys=False, use_threads=False)
        if residual and joined.num_rows:
            scope = _PrefixedScope(_complete(joined, columns), columns, source_columns, txn.uri)
            keep = None
            for node, text in residual:
                mask = scope.mask(node, text, joined.num_rows)
                keep = mask if keep is None else pc.and_(keep, mask)
            joined = joined.filter(keep)
        if joined.num_rows == 0:
            return None
        if matched_clause:
            _refuse_duplicates(joined, pairs, candidates, i, txn.uri)
        return joined.select([ROW_INDEX, SOURCE_ROW]).combine_chunks(), rows

    # 2. Each touched file's new rows (copy-on-write: with its unchanged rows, written as one new
    # file per file, files in parallel); mark the changed rows (merge-on-read), whose new
    # versions are written with the inserts, once.
    dv_mode = txn.table_configuration.deletion_vectors_enabled
    changes = _RowChanges(dv_mode)
    counts = dict.fromkeys(("updated", "deleted", "inserted"), 0)
    output = _Output(txn, schema)

    # Merge-on-read writes only the new row versions: of the old rows it needs just what the
    # clauses read and the columns an update leaves as they are (all of them for change data).
    read_columns = columns
    if dv_mode and not output.change_data:
        clause_nodes = [node for node, _ in update_values.values()] + ([delete_condition[0]] if delete_condition else [])
        kept = set(columns) - set(update_values) if updates is not None else set()
        read_columns = [c for c in columns if c in kept | set(target_columns_read(clause_nodes, list(target_lower.values())))]
    write_ctx = txn.write_context()
    if not dv_mode:
        txn.table_configuration.check_writable(f"table {txn.uri}")

    def merged(i: int, matched: pa.Table, have: pa.Table | None) -> _MergedFile | None:
        """File i's part: ``matched`` its matched rows, ``have`` what was read of it already (its
        live rows in file order, with ROW_INDEX), if kept."""
        part = output.part()
        missing = [c for c in read_columns if have is None or c not in have.column_names]
        if missing or output.row_id is not None or have is None:
            rows = ctx.read(candidates.slice(i, 1), columns=missing, row_index=ROW_INDEX, store=store,
                            row_id=output.row_id, row_commit_version=output.row_commit_version)
            if have is not None and rows.num_rows != have.num_rows:
                raise TxnLogError(f"merge into {txn.uri}: data file {candidates.column('path')[i]} changed while it was read")
        else:
            rows = have.select([ROW_INDEX])
        # Both ascending: each matched row's place among the rows read.
        at = np.searchsorted(rows.column(ROW_INDEX).to_numpy(), matched.column(ROW_INDEX).to_numpy())
        if not dv_mode:  # the file is written again: every column of every row
            rows = _with_columns(rows, columns, schema, have, None)
            target_rows = rows.take(at)
        else:  # merge-on-read keeps no old row: of them it needs only the matched ones
            target_rows = _with_columns(rows.take(at), columns, schema, have, at)
        joined = pa.Table.from_arrays(
            [target_rows.column(c) for c in columns] + [src.column(c).take(matched.column(SOURCE_ROW)) for c in source_columns],
            names=[f"t.{c}" for c in columns] + [f"s.{c}" for c in source_columns],
        )
        scope = _PrefixedScope(joined, columns, source_columns, txn.uri)
        n = joined.num_rows
        if when_matched_delete is True:
            deleted = pa.chunked_array([pa.repeat(True, n)], pa.bool_())
        elif delete_condition is not None:
            deleted = scope.mask(delete_condition[0], delete_condition[1], n)
        else:
            deleted = pa.chunked_array([pa.repeat(False, n)], pa.bool_())
        updated = pc.invert(deleted) if updates is not None else pa.chunked_array([pa.repeat(False, n)], pa.bool_())
        changed = pc.fill_null(pc.or_(deleted, updated), False).to_numpy(zero_copy_only=False)
        if not changed.any():
            return None
        out = _MergedFile(matched.column(ROW_INDEX).filter(pa.array(changed)).combine_chunks(), part,
                          deleted=int(pc.sum(deleted).as_py() or 0), updated=int(pc.sum(updated).as_py() or 0))
        part.deleted(target_rows.filter(deleted))
        if not dv_mode:
            unchanged = np.ones(rows.num_rows, dtype=bool)
            unchanged[at[changed]] = False
            copied = rows.filter(pa.array(unchanged))
            out.copied = copied.num_rows
            out.rows.append(part.copied(copied))
        if updates is not None:
            new = joined.filter(updated)
            new_scope = _PrefixedScope(new, columns, source_columns, txn.uri)
            plain = new.select([f"t.{c}" for c in columns]).rename_columns(columns)
            assigned = _assigned(plain, new_scope, update_values, schema, table=txn.uri, what="when_matched_update")
            out.rows.append(part.updated(target_rows.filter(updated), assigned))
        if not dv_mode:  # this file's new contents
            batches = [batch for table in out.rows for batch in table.to_batches()]
            out.written = write_ctx.write(pa.RecordBatchReader.from_batches(output.write_schema, batches), store=store,
                                          preserve_row_ids=output.tracking)
            out.written_rows = sum(t.num_rows for t in out.rows)
            out.rows = []
        return out

    def forget(result: tuple[pa.Table, _MergedFile | None] | None) -> None:
        """Delete the file a failed MERGE wrote for one target file (it would be an orphan)."""
        done = result[1] if result is not None else None
        for add in done.written.add_files if done is not None and done.written is not None else []:
            relative = locate(txn.uri, add.path).relative
            if relative is not None:
                with contextlib.suppress(TxnLogError):
                    store.delete(relative)

    results: dict[int, tuple[pa.Table, _MergedFile | None]] = {}  # file index -> its matched rows, its part
    if lookup is not None and matched_clause:
        # No target row can match twice (no DuplicateMatchError to raise before writing): each
        # file is matched and rewritten at once, its keys read once.
        def whole(i: int) -> tuple[pa.Table, _MergedFile | None] | None:
            found = match(i)
            return None if found is None else (found[0], merged(i, found[0], found[1]))

        indexes = range(candidates.num_rows)
        results = {i: r for i, r in zip(indexes, _each(whole, indexes, undo=forget), strict=True) if r is not None}
        scan_ms = _ms(start)
    else:
        # Every file is matched (and duplicates refused) before any is rewritten; the rows read
        # to match are not kept meanwhile.
        found = _each(lambda i: None if (m := match(i)) is None else m[0], range(candidates.num_rows))
        matches = {i: m for i, m in enumerate(found) if m is not None}
        scan_ms = _ms(start)
        touched = sorted(matches) if matched_clause else []
        rewritten = _each(lambda i: (matches[i], merged(i, matches[i], None)), touched, undo=forget)
        results = {i: (m, None) for i, m in matches.items()} | dict(zip(touched, rewritten, strict=True))
    rewrite_start = time.monotonic()

    if dv_mode:
        changes.matched = {i: m.column(ROW_INDEX).combine_chunks() for i, (m, _) in sorted(results.items())}
    written = []
    written_rows = 0
    new_versions: list[pa.Table] = []
    for i, (_, result) in sorted(results.items()):
        if result is None:
            continue
        counts["deleted"] += result.deleted
        counts["updated"] += result.updated
        output.change_rows.extend(result.output.change_rows)
        if dv_mode:
            changes.positions[i] = result.changed
        else:
            changes.rewritten.append(i)
            changes.copied_rows += result.copied
        if result.written is not None:
            written.append(result.written)
            written_rows += result.written_rows
        new_versions.extend(result.rows)

    def new_rows() -> Iterator[pa.Table]:
        yield from new_versions
        if inserts is not None:
            matched_sources = [m.column(SOURCE_ROW) for m, _ in results.values()]
            taken = pa.chunked_array(matched_sources, pa.int64()) if matched_sources else pa.chunked_array([], pa.int64())
            fresh = src.filter(pc.invert(pc.is_in(src.column(SOURCE_ROW), value_set=taken.combine_chunks())))
            counts["inserted"] = fresh.num_rows
            for chunk in fresh.to_batches():
                part = _prefixed(pa.Table.from_batches([chunk]), "s.")
                scope = _PrefixedScope(part, columns, source_columns, txn.uri, with_target=False)
                arrays = []
                for f in schema:
                    if f.name in insert_values:
                        node, text = insert_values[f.name]
                        arrays.append(_cast_to(scope.evaluate(node, text, part.num_rows), f, table=txn.uri, what="when_not_matched_insert", text=text))
                    else:
                        arrays.append(pa.nulls(part.num_rows, f.type))
                yield output.inserted(pa.Table.from_arrays(arrays, schema=schema))

    staged = _stage(txn, snapshot, candidates, changes, new_rows(), output, written=written, written_rows=written_rows,
                    started=rewrite_start)
    metrics.update(
        {name: staged[name] for name in ("numFiles", "numOutputBytes", "numAddedFiles", "numRemovedFiles")},
        numTargetRowsInserted=counts["inserted"],
        numTargetRowsUpdated=counts["updated"],
        numTargetRowsMatchedUpdated=counts["updated"],
        numTargetRowsDeleted=counts["deleted"],
        numTargetRowsMatchedDeleted=counts["deleted"],
        numTargetRowsNotMatchedBySourceUpdated=0,
        numTargetRowsNotMatchedBySourceDeleted=0,
        numTargetRowsCopied=staged["numCopiedRows"],
        numOutputRows=counts["inserted"] + counts["updated"] + staged["numCopiedRows"],
        numTargetFilesAdded=staged["numAddedFiles"],
        numTargetFilesRemoved=staged["numRemovedFiles"],
        numTargetChangeFilesAdded=staged["numAddedChangeFiles"],
        numTargetBytesAdded=staged["numAddedBytes"],
        numTargetBytesRemoved=staged["numRemovedBytes"],
        numTargetDeletionVectorsAdded=staged["numDeletionVectorsAdded"],
        numTargetDeletionVectorsUpdated=staged["numDeletionVectorsUpdated"],
        numTargetDeletionVectorsRemoved=staged["numDeletionVectorsRemoved"],
        rewriteTimeMs=staged["rewriteTimeMs"],
    )
    return _record(txn, metrics, start, scan_ms, _changed(metrics, "numTarget"))


def rows_with_keys(rows: pa.Table, names: Sequence[str]) -> pa.Table:
    """The rows where every one of ``names`` is set: a NULL key matches nothing (a MERGE's
    source keys, Python or Spark)."""
    mask = None
    for name in names:
        if not rows.column(name).null_count:
            continue
        valid = pc.is_valid(rows.column(name))
        mask = valid if mask is None else pc.and_(mask, valid)
    return rows if mask is None else rows.filter(mask)


def _with_key_types(source: pa.Table, pairs: Sequence[tuple[str, str]], schema: pa.Schema, uri: str) -> pa.Table:
    """The source with each key column cast to its target column's type (the join compares
    equal types)."""
    for target, key in pairs:
        wanted = schema.field(target).type
        column = source.column(key)
        if column.type == wanted:
            continue
        try:
            cast = pc.cast(column, wanted)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidArgumentError(
                f"merge key {key!r} of the source ({column.type}) cannot be compared with column {target!r} of table {uri} ({wanted}): {e}"
            ) from None
        source = source.set_column(source.column_names.index(key), key, cast)
    return source


def _complete(joined: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``joined`` with every target column (the unread ones as NULL: no condition reads them)."""
    for c in columns:
        if f"t.{c}" not in joined.column_names:
            joined = joined.append_column(f"t.{c}", pa.nulls(joined.num_rows))
    return joined


def _refuse_duplicates(joined: pa.Table, pairs: Sequence[tuple[str, str]], candidates: pa.Table, i: int, uri: str) -> None:
    """Raise DuplicateMatchError when a target row of this file is matched by two source rows."""
    counts = joined.group_by(ROW_INDEX, use_threads=False).aggregate([(SOURCE_ROW, "count")])
    worst = pc.max(counts.column(f"{SOURCE_ROW}_count")).as_py()
    if worst is None or worst <= 1:
        return
    row = counts.filter(pc.equal(counts.column(f"{SOURCE_ROW}_count"), worst)).column(ROW_INDEX)[0]
    first = joined.filter(pc.equal(joined.column(ROW_INDEX), row)).slice(0, 1)
    key = {t: first.column(f"t.{t}")[0].as_py() for t, _ in pairs}
    path = candidates.column("path")[i].as_py()
    raise DuplicateMatchError(
        f"merge into {uri}: {worst} source rows match the same target row (key {key}, in file {path}); "
        "a target row may be updated or deleted by one source row only: deduplicate the source",
        uri=uri,
        key=key,
        source_rows=int(worst),
    )


__all__ = ["DmlResult", "Metrics", "delete", "merge", "update"]
