"""The Python executor of DELETE and UPDATE plans, and what it shares with MERGE's.

Two ways to change a row, chosen by the plan (the table's ``delta.enableDeletionVectors``):

- merge-on-read (deletion vectors): a deleted or replaced row's position is added to its file's
  deletion vector (one vector file for all of them, old vectors unioned), and only the new row
  versions are written;
- copy-on-write: a file holding a changed row is rewritten with its other rows copied; a DELETE
  whose predicate names only partition columns removes the files it matches, unread.

Every statement first skips files by stats (``txn.filter_files``: the predicate and the files
are recorded as read, so a concurrent commit that adds matching rows or removes a read file
conflicts), then reads the candidates file by file: a pass over the columns the condition needs
finds the changed rows, a second pass over the changed files alone writes their new contents.
Nothing is recorded in the commit's parameters or metrics: the caller records the plan's
parameters and the metrics value returned.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.dml.metrics import FileCounts, RowChangeMetrics, Timing
from txnlog.dml.plans import RowChangePlan
from txnlog.errors import InvalidArgumentError, InvalidPredicateError
from txnlog.expressions import FilePredicate, Reference, ValueExpression
from txnlog.expressions.values import Resolver, condition_mask, evaluate_value
from txnlog.read import READ_THREADS, ROW_COMMIT_VERSION, ROW_ID, ReadContext
from txnlog.snapshot import Snapshot
from txnlog.txn.transaction import OptimisticTransaction
from txnlog.write import ConformSpec, RowKind, WrittenFiles, write_change_files
from txnlog.write.changes import CHANGE_TYPE_COLUMN

ROW_INDEX = "__txnlog_row_index"


# --- shared pieces -------------------------------------------------------------------------------


def open_snapshot(txn: OptimisticTransaction, what: str) -> Snapshot:
    """The snapshot ``txn`` reads; a DML on a table that does not exist yet is refused."""
    if txn.snapshot is None:
        raise InvalidArgumentError(f"{what} on {txn.uri}: the table does not exist yet")
    return txn.snapshot


def ms_since(start: float, end: float | None = None) -> int:
    return int(((time.monotonic() if end is None else end) - start) * 1000)


class Scope:
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


def check_expressions(scope: Scope, expressions: Iterable[tuple[ValueExpression, str]]) -> None:
    """Evaluate each expression on no rows: unknown columns and type errors surface before any
    file is read or written."""
    for node, text in expressions:
        scope.evaluate(node, text, 0)


def cast_to(values: pa.ChunkedArray, target: pa.Field, *, table: str, what: str, text: str) -> pa.ChunkedArray:
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


def assigned(rows: pa.Table, scope: Scope, values: Mapping[str, tuple[ValueExpression, str]], schema: pa.Schema,
             *, table: str, what: str) -> pa.Table:
    """``rows`` (the table's columns) with the assigned columns replaced by their new values."""
    arrays = []
    for f in schema:
        if f.name in values:
            node, text = values[f.name]
            arrays.append(cast_to(scope.evaluate(node, text, rows.num_rows), f, table=table, what=what, text=text))
        else:
            arrays.append(rows.column(f.name))
    return pa.Table.from_arrays(arrays, schema=schema)


def files_at(files: pa.Table, indexes: Sequence[int]) -> pa.Table:
    return files.take(pa.array(indexes, pa.int64()))


T = TypeVar("T")


def each(work: Callable[[int], T], items: Iterable[int], *, undo: Callable[[T], None] | None = None) -> list[T]:
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


def find_rows(ctx: ReadContext, files: pa.Table, condition: FilePredicate) -> list[pa.Array]:
    """Per file: the physical positions of its live rows on which ``condition`` is TRUE (only
    the condition's columns are read). How a DELETE or UPDATE finds its rows, in Python and on
    Spark's driver."""
    found = ctx.read_each(files, parallel=READ_THREADS, columns=[], row_filter=condition.rows(), filter_columns=condition.columns, row_index=ROW_INDEX)
    return [rows.column(ROW_INDEX).combine_chunks() for _, rows in found]


@dataclass
class RowChanges:
    """What a DML stages besides new rows: positions to mark deleted (merge-on-read), files to
    drop (copy-on-write)."""

    dv_mode: bool
    positions: dict[int, pa.Array] = field(default_factory=dict)  # file index -> rows deleted by DV
    matched: dict[int, pa.Array] = field(default_factory=dict)  # file index -> rows a MERGE matched (DV mode)
    rewritten: list[int] = field(default_factory=list)  # file indexes removed (copy-on-write)

    @classmethod
    def of_matches(cls, dv_mode: bool, positions: Sequence[pa.Array]) -> RowChanges:
        """The files holding a matched row (``positions[i]``: file i's matched positions): their
        positions to mark deleted, or the files to rewrite."""
        touched = [i for i, p in enumerate(positions) if len(p)]
        if dv_mode:
            return cls(dv_mode, positions={i: positions[i] for i in touched})
        return cls(dv_mode, rewritten=touched)

    def touched(self) -> list[int]:
        """The indexes of the files this DML changes, ascending."""
        return sorted(self.positions) if self.dv_mode else list(self.rewritten)


#: New rows, each part with the kind of its rows (which decides their stable ids).
NewRows = Iterable[tuple[RowKind, pa.Table]]


class RowOutput:
    """What a DML writes, kind of row by kind of row, through the table's conform step (each
    row's columns and, where the table preserves row ids, the id and commit version its kind
    keeps); and the change rows, where the table records change data
    (``delta.enableChangeDataFeed``): deleted, updated (before and after) and inserted rows with
    their ``_change_type``, staged as ``_change_data/`` files."""

    def __init__(self, spec: ConformSpec, change_data: bool) -> None:
        self.spec = spec
        self.tracking = spec.row_ids is not None
        self.change_data = change_data
        self.write_schema = spec.output_schema
        self.schema = spec.schema  # the table's logical columns
        self.change_schema = self.schema.append(pa.field(CHANGE_TYPE_COLUMN, pa.string()))
        self.change_rows: list[pa.Table] = []

    def part(self) -> RowOutput:
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

    def copied(self, rows: pa.Table) -> tuple[RowKind, pa.Table]:
        """Rows written again unchanged."""
        return RowKind.COPY, self.spec.conform(rows, RowKind.COPY)

    def deleted(self, old: pa.Table) -> None:
        self._change(old, "delete")

    def updated(self, old: pa.Table, new: pa.Table) -> tuple[RowKind, pa.Table]:
        """``new`` (the table's columns) replacing ``old`` row for row."""
        self._change(old, "update_preimage")
        self._change(new, "update_postimage")
        return RowKind.UPDATE, self.spec.conform(new, RowKind.UPDATE, previous=old)

    def inserted(self, new: pa.Table, supplied: Sequence[str] | None = None) -> tuple[RowKind, pa.Table]:
        """New rows, supplying the columns ``supplied`` (default: those ``new`` has); the
        conform step fills the others."""
        rows = self.spec.conform(new, RowKind.INSERT, supplied=supplied)
        self._change(rows, "insert")
        return RowKind.INSERT, rows

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


class _Tally:
    """The rows of each kind a stream of new rows held, counted by whoever consumes it."""

    def __init__(self, rows: NewRows, schema: pa.Schema) -> None:
        self.rows = rows
        self.schema = schema
        self.counts: Counter[RowKind] = Counter()

    def reader(self) -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            for kind, table in self.rows:
                self.counts[kind] += table.num_rows
                yield from table.to_batches()

        return pa.RecordBatchReader.from_batches(self.schema, batches())


@dataclass(frozen=True)
class Staged:
    """What :func:`stage` staged: the data files, the rows written by kind, the change files."""

    files: FileCounts
    written: Counter[RowKind]
    change_files: int


def stage(txn: OptimisticTransaction, candidates: pa.Table, changes: RowChanges, new_rows: NewRows, output: RowOutput, *,
          written: Sequence[WrittenFiles] = (), written_rows: Mapping[RowKind, int] | None = None) -> Staged:
    """Write ``new_rows`` (a lazy stream, each part with its kind; it may add change rows to
    ``output`` as it goes), then the change files, then stage the removes and the deletion
    vectors; ``written`` (holding ``written_rows``) were already written, and are staged with them."""
    tally = _Tally(new_rows, output.write_schema)
    adds = txn.write(tally.reader(), preserve_row_ids=output.tracking)
    for files in written:
        txn.add_files(files.files)
        adds = [*adds, *files.add_files]
    counts = tally.counts + Counter(written_rows or {})
    change_files = output.stage_changes(txn)
    if changes.dv_mode and changes.positions:
        # The files with matched rows, changed or not: what lets the commit through concurrent
        # changes to other rows of them.
        indexes = sorted(set(changes.positions) | set(changes.matched))
        touched = files_at(candidates, indexes)
        deletes = txn.delete_rows(touched, [changes.positions.get(i) for i in indexes],
                                  matched=[changes.matched.get(i) for i in indexes])
        return Staged(FileCounts.vectors_of(deletes, adds), counts, change_files)
    removed = files_at(candidates, changes.rewritten)
    if removed.num_rows:
        txn.remove_files(removed)
    return Staged(FileCounts.rewrite(removed, adds), counts, change_files)


# --- DELETE and UPDATE ---------------------------------------------------------------------------


def run_row_change(txn: OptimisticTransaction, plan: RowChangePlan) -> RowChangeMetrics:
    """Stage ``plan`` (a DELETE or UPDATE) in ``txn``; what it did."""
    start = time.monotonic()
    snapshot = open_snapshot(txn, plan.operation.lower())
    ctx = snapshot.read_context()
    schema = plan.conform.schema
    values = {c: (e.parsed(), e.sql) for c, e in plan.assignments.items()}
    if values:
        check_expressions(Scope({"t": (schema.empty_table(), f"table {txn.uri}")}, default=["t"]), values.values())
    candidates = txn.filter_files(plan.condition)
    if plan.partition_only:
        # The partition values decide: the files skipping kept hold only matching rows.
        # (With the row index: a batch of no columns would have no length.)
        deleted = ctx.read(candidates, columns=[], row_index=ROW_INDEX).num_rows if candidates.num_rows else 0
        if candidates.num_rows:
            txn.remove_files(candidates)
        elapsed = ms_since(start)
        return RowChangeMetrics("DELETE", FileCounts.rewrite(candidates, []), rows=deleted, timing=Timing(elapsed, 0, elapsed))
    positions = find_rows(ctx, candidates, plan.condition)
    scanned = time.monotonic()
    dv_mode = plan.deletion_vectors
    changes = RowChanges.of_matches(dv_mode, positions)
    touched = changes.touched()
    output = RowOutput(plan.conform, plan.change_data)
    matches = plan.condition.rows()
    row_id, row_commit_version = output.row_id, output.row_commit_version

    def deleted_rows() -> Iterator[tuple[RowKind, pa.Table]]:
        for i in touched:
            file = candidates.slice(i, 1)
            if dv_mode:  # the deleted rows only matter as change data
                if output.change_data:
                    for batch in ctx.batches(file, row_filter=matches, filter_columns=plan.condition.columns):
                        output.deleted(pa.Table.from_batches([batch]))
                continue
            for batch in ctx.batches(file, row_id=row_id, row_commit_version=row_commit_version):
                rows = pa.Table.from_batches([batch])
                mask = matches.mask(rows)
                output.deleted(rows.filter(mask))
                yield output.copied(rows.filter(pc.invert(mask)))

    def updated_rows() -> Iterator[tuple[RowKind, pa.Table]]:
        for i in touched:
            file = candidates.slice(i, 1)
            if dv_mode:  # only the new versions of the matching rows
                batches = ctx.batches(file, row_filter=matches, filter_columns=plan.condition.columns, row_id=row_id,
                                      row_commit_version=row_commit_version)
            else:
                batches = ctx.batches(file, row_id=row_id, row_commit_version=row_commit_version)
            for batch in batches:
                rows = pa.Table.from_batches([batch])
                if dv_mode:
                    hit = rows
                else:
                    mask = matches.mask(rows)
                    hit = rows.filter(mask)
                    yield output.copied(rows.filter(pc.invert(mask)))
                scope = Scope({"t": (hit.select(schema.names), f"table {txn.uri}")}, default=["t"])
                yield output.updated(hit, assigned(hit, scope, values, schema, table=txn.uri, what="update()"))

    staged = stage(txn, candidates, changes, updated_rows() if plan.operation == "UPDATE" else deleted_rows(), output)
    copied = staged.written[RowKind.COPY]
    return RowChangeMetrics(
        plan.operation,
        staged.files,
        rows=sum(len(positions[i]) for i in touched),
        copied_rows=copied,
        output_rows=copied + staged.written[RowKind.UPDATE],
        change_files=staged.change_files,
        timing=Timing(ms_since(start, scanned), ms_since(scanned), ms_since(start)),
    )


def delete(txn: OptimisticTransaction, predicate: str) -> RowChangeMetrics:
    """Stage ``DELETE FROM table WHERE predicate`` in ``txn`` (plan and run); what it did."""
    snapshot = open_snapshot(txn, "delete")
    return run_row_change(txn, RowChangePlan.delete(snapshot, predicate, config=txn.table_configuration))


def update(txn: OptimisticTransaction, predicate: str | None, set: Mapping[str, str]) -> RowChangeMetrics:  # noqa: A002 - the SQL word
    """Stage ``UPDATE table SET column = expression ... WHERE predicate`` (every row when
    ``predicate`` is None) in ``txn`` (plan and run); what it did."""
    snapshot = open_snapshot(txn, "update")
    return run_row_change(txn, RowChangePlan.update(snapshot, predicate, set, config=txn.table_configuration))


__all__ = ["delete", "find_rows", "run_row_change", "update"]
