"""Small row-level statements on the driver: finding the rows a DELETE, UPDATE or MERGE
changes with txnlog's own Python reader instead of a Spark job.

A DELETE or UPDATE with deletion vectors needs, of each candidate file, only the positions of
the rows its predicate selects; a MERGE needs only the target rows whose keys some source row
holds. When the columns that takes are small, reading them on the driver with
:class:`txnlog.read.ReadContext` (the code ``txnlog.dml`` uses: partition values, column
mapping and deletion vectors applied, each row's physical position) costs a fraction of
planning and running Spark jobs, whose fixed cost dominates such statements. The predicate is
evaluated by the same txnlog expression code that already decides which files are candidates
(and refuses what it cannot compute), so both ways select the same rows; the transaction
records the same read predicates and files either way, so conflicts are the same.

The bound is the number of values read: the candidate files' rows (by their stats) times the
columns read, at most :data:`DEFAULT_DRIVER_SCAN_CELLS` unless the Spark conf
:data:`DRIVER_SCAN_CELLS_CONF` says otherwise (``0`` always uses Spark). Above it, or when a
file has no ``numRecords``, Spark reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from txnlog.dml import MergeCondition
from txnlog.dml import matching_positions as positions_in_files
from txnlog.errors import InvalidArgumentError, TxnLogError
from txnlog.expressions import (
    COMPARISONS,
    And,
    CaseValue,
    ColumnComparison,
    ColumnValue,
    Comparison,
    Constant,
    Expression,
    FilePredicate,
    FunctionCall,
    In,
    InList,
    IsNull,
    Like,
    LikeValue,
    LiteralValue,
    NullTest,
    Opaque,
    Operation,
    Or,
    Reference,
    ValueExpression,
    parse_value,
    target_columns_read,
)
from txnlog.file_facts import decode_stats, num_records
from txnlog.read import READ_THREADS, ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import SPARK_FAILURES, job_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from txnlog import Snapshot

#: The Spark conf giving how many values (rows times columns) a statement may read on the driver.
DRIVER_SCAN_CELLS_CONF = "spark.txnlog.dml.driverScanCells"
#: 32M values: a few hundred milliseconds of Parquet decoding on one core, well under the
#: fixed cost of the Spark jobs it replaces; the columns are read a file at a time per thread.
DEFAULT_DRIVER_SCAN_CELLS = 32_000_000
#: The stored (compressed) bytes of the candidate files a statement may read on the driver, in
#: proportion to the columns read: the bound of values alone would let a few rows of a wide
#: text column fill the driver's memory.
MAX_DRIVER_SCAN_BYTES = 256 * 1024 * 1024
#: How many source rows a MERGE collects to the driver (its key columns only) to prune the
#: target's files key by key and to find the matching rows there.
MAX_SOURCE_KEYS = 2_000_000


def driver_scan_cells(spark: SparkSession) -> int:
    """The session's bound on values read on the driver (:data:`DRIVER_SCAN_CELLS_CONF`)."""
    value = spark.conf.get(DRIVER_SCAN_CELLS_CONF, None)
    if value is None:
        return DEFAULT_DRIVER_SCAN_CELLS
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"Spark conf {DRIVER_SCAN_CELLS_CONF} must be a whole number of values (0: always use Spark), not {value!r}") from None


def fits_driver(spark: SparkSession, files: pa.Table, columns: int, *, of: int) -> bool:
    """Whether reading ``columns`` of the table's ``of`` columns of ``files`` stays within the
    session's bound of values (every file must give its ``numRecords``) and within
    :data:`MAX_DRIVER_SCAN_BYTES` of the files' stored bytes, counted in proportion to the
    columns read (a wide text column makes few values large)."""
    limit = driver_scan_cells(spark)
    if limit <= 0 or files.num_rows == 0:
        return limit > 0
    stats = files.column("stats")
    if stats.null_count:
        return False
    if files.num_rows <= 64 and any(not isinstance((decode_stats(t) or {}).get("numRecords"), int) for t in stats.to_pylist()):
        return False
    stored = int(pc.sum(files.column("size")).as_py() or 0)
    if stored * min(columns, of) > MAX_DRIVER_SCAN_BYTES * max(of, 1):
        return False
    return num_records(files) * max(columns, 1) <= limit


# Categories of values whose comparisons Spark and Arrow agree on without a cast.
_NUMBER, _TEXT, _BOOL, _DATE, _NULL = "number", "text", "bool", "date", "null"
# Functions computed alike: no overflow, no whitespace or Unicode case table of their own.
_FUNCTIONS_ALIKE = {"coalesce": None, "nullif": None, "if": None, "concat": _TEXT, "length": _NUMBER}


def _category(t: pa.DataType | None) -> str | None:
    if t is None or pa.types.is_null(t):
        return _NULL
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return _NUMBER
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _TEXT
    if pa.types.is_boolean(t):
        return _BOOL
    if pa.types.is_date(t):
        return _DATE
    return None  # floating point, timestamps, binary, nested: left to Spark


def _same(*categories: str | None) -> str | None:
    known = {c for c in categories if c != _NULL}
    if None in known or len(known) > 1:
        return None
    return known.pop() if known else _NULL


def _non_zero_literal(node: Any) -> bool:
    return isinstance(node, LiteralValue) and node.value is not None and node.value.is_valid and node.value.as_py() != 0


class _Agreement:
    """Whether Spark SQL (ANSI mode: overflow, a failed cast or a division by zero is an error)
    and txnlog's evaluator give the same rows for a condition: only comparisons of values of one
    kind (integers, decimals, strings, booleans, dates), ``%`` by a non-zero constant, LIKE
    (case-sensitive), IN, IS NULL, CASE and a few functions with no overflow and no character
    tables of their own. Anything else goes to Spark."""

    def __init__(self, types: dict[str, pa.DataType]) -> None:
        self.types = types

    def column(self, ref: Reference) -> str | None:
        return _category(self.types.get(ref.path[0].lower())) if len(ref.path) == 1 else None

    def literal(self, value: pa.Scalar | None) -> str | None:
        return _NULL if value is None else _category(value.type)

    def condition(self, node: Expression) -> bool:
        if isinstance(node, (And, Or)):
            return all(self.condition(c) for c in node.children)
        if isinstance(node, Constant):
            return True
        if isinstance(node, Comparison):
            return _same(self.column(node.column), self.literal(node.value)) is not None
        if isinstance(node, ColumnComparison):
            return _same(self.column(node.left), self.column(node.right)) is not None
        if isinstance(node, In):
            return _same(self.column(node.column), *(self.literal(v) for v in node.values)) is not None
        if isinstance(node, IsNull):
            return self.column(node.column) is not None
        if isinstance(node, Like):
            return self.column(node.column) == _TEXT and not node.ignore_case
        if isinstance(node, Opaque):
            return self.value(node.value) == _BOOL
        return False

    def value(self, node: ValueExpression) -> str | None:
        if isinstance(node, ColumnValue):
            return self.column(node.ref)
        if isinstance(node, LiteralValue):
            return self.literal(node.value)
        if isinstance(node, NullTest):
            return _BOOL if self.value(node.operand) is not None else None
        if isinstance(node, LikeValue):
            return _BOOL if self.value(node.operand) == _TEXT and not node.ignore_case else None
        if isinstance(node, InList):
            return _BOOL if _same(self.value(node.operand), *(self.value(i) for i in node.items)) is not None else None
        if isinstance(node, CaseValue):
            if not all(self.value(c) == _BOOL for c, _ in node.branches):
                return None
            results = [self.value(v) for _, v in node.branches]
            return _same(*results, *([self.value(node.otherwise)] if node.otherwise is not None else []))
        if isinstance(node, Operation):
            kinds = [self.value(o) for o in node.operands]
            if node.op in ("AND", "OR", "NOT"):
                return _BOOL if all(k in (_BOOL, _NULL) for k in kinds) else None
            if node.op in COMPARISONS:
                return _BOOL if len(kinds) == 2 and _same(*kinds) is not None else None
            if node.op == "%" and len(kinds) == 2 and _same(*kinds) == _NUMBER and _non_zero_literal(node.operands[1]):
                return _NUMBER
            return None  # + - * may overflow, / gives a double; || and the rest are left to Spark
        if isinstance(node, FunctionCall) and node.name in _FUNCTIONS_ALIKE:
            kinds = [self.value(a) for a in node.args]
            result = _FUNCTIONS_ALIKE[node.name]
            if node.name == "if":
                return _same(*kinds[1:]) if len(kinds) == 3 and kinds[0] == _BOOL else None
            if result is None:
                return _same(*kinds)
            wanted = _TEXT
            return result if kinds and all(k in (wanted, _NULL) for k in kinds) else None
        return None


def spark_agrees(snapshot: Snapshot, condition: FilePredicate) -> bool:
    """Whether txnlog's evaluator selects exactly the rows Spark SQL would for ``condition`` on
    ``snapshot``'s columns, and Spark would not fail on any row (see :class:`_Agreement`)."""
    types = {f.name.lower(): f.type for f in snapshot.schema}
    return _Agreement(types).condition(condition.expression)


def _interchangeable(value: pa.DataType | None, column: pa.DataType) -> bool:
    """Whether a value of type ``value`` stored in a column of type ``column`` is unchanged:
    the same type, or the same kind whose Arrow layout differs (what ``toArrow`` may give)."""
    if value is None:
        return False
    if value == column:
        return True
    for kind in (pa.types.is_string, pa.types.is_large_string), (pa.types.is_binary, pa.types.is_large_binary):
        if any(k(value) for k in kind) and any(k(column) for k in kind):
            return True
    return (pa.types.is_timestamp(value) and pa.types.is_timestamp(column) and value.unit == column.unit
            and value.tz is not None and column.tz is not None)  # one instant, shown in another zone


class _MergeAgreement(_Agreement):
    """:class:`_Agreement` over a MERGE's two tables: ``t.x`` the target's, ``s.x`` the
    source's, a bare name whichever one of them has it."""

    def __init__(self, target: pa.Schema, source: pa.Schema) -> None:
        super().__init__({})
        self.sides = {"t": {f.name.lower(): f.type for f in target}, "s": {f.name.lower(): f.type for f in source}}

    def type_of(self, ref: Reference) -> pa.DataType | None:
        path = [p.lower() for p in ref.path]
        if len(path) == 2 and path[0] in self.sides:
            return self.sides[path[0]].get(path[1])
        if len(path) == 1:
            found = [side[path[0]] for side in self.sides.values() if path[0] in side]
            return found[0] if len(found) == 1 else None  # Spark refuses an ambiguous name
        return None

    def column(self, ref: Reference) -> str | None:
        return _category(self.type_of(ref))

    def assigned(self, text: str, column: pa.DataType) -> bool:
        """Whether ``text`` gives the same values in both engines once stored in ``column``:
        a column of an interchangeable type, NULL, or a text, boolean or date expression of the
        column's kind (numbers are left to Spark: its casts round and overflow its own way)."""
        try:
            node = parse_value(text)
        except TxnLogError:
            return False
        if isinstance(node, ColumnValue):
            return _interchangeable(self.type_of(node.ref), column)
        if isinstance(node, LiteralValue) and node.value is None:
            return True
        kind = self.value(node)
        return kind in (_TEXT, _BOOL, _DATE) and kind == _category(column)


def keys_compare_alike(target: pa.Schema, source: pa.Schema, condition: MergeCondition) -> bool:
    """Whether each source key column has its target column's exact type, one whose equality
    Arrow and Spark agree on (not floating point: Spark's join makes NaN equal to NaN; not
    nested), and no column is in two equalities: then the driver matches keys as Spark's join
    would."""
    for side in zip(*condition.pairs):
        if len({name.lower() for name in side}) != len(side):
            return False
    target_types = {f.name.lower(): f.type for f in target}
    source_types = {f.name.lower(): f.type for f in source}
    for t, s in condition.pairs:
        t_type = target_types.get(t.lower())
        if t_type is None or source_types.get(s.lower()) != t_type or pa.types.is_floating(t_type) or pa.types.is_nested(t_type):
            return False
    return True


def merge_agrees(target: pa.Schema, source: pa.Schema, condition: MergeCondition, updates: Mapping[str, str] | None,
                 inserts: Mapping[str, str] | None, when_matched_delete: bool | str) -> bool:
    """Whether ``txnlog.dml.merge`` changes exactly the rows Spark's MERGE would, to the same
    values, with ``source`` as ``toArrow`` gave it: an ON condition of key equalities alone
    between columns of one exact type (not floating point, whose NaN Spark's join equates),
    a delete condition and assignments :class:`_Agreement` accepts, and no nested columns."""
    if condition.residual or any(pa.types.is_nested(f.type) for f in (*target, *source)):
        return False
    if len({n.lower() for n in source.names}) != len(source.names):
        return False
    if not keys_compare_alike(target, source, condition):
        return False
    agreement = _MergeAgreement(target, source)
    if isinstance(when_matched_delete, str):
        try:
            if agreement.value(parse_value(when_matched_delete)) != _BOOL:
                return False
        except TxnLogError:
            return False
    types = {f.name: f.type for f in target}
    return all(agreement.assigned(text, types[column]) for clause in (updates, inserts) for column, text in (clause or {}).items())


def matching_positions(snapshot: Snapshot, candidates: pa.Table, condition: FilePredicate) -> tuple[pa.Table, list[pa.Array]]:
    """Of ``candidates``, the files holding a live row on which ``condition`` is TRUE, and each
    one's physical positions of those rows (int64): only the condition's columns are read."""
    found = positions_in_files(snapshot.read_context(), candidates, condition)
    hit = [i for i, positions in enumerate(found) if len(positions)]
    return candidates.take(pa.array(hit, pa.int64())), [found[i] for i in hit]


def referenced_columns(texts: Iterable[str], columns: Sequence[str]) -> list[str]:
    """The target ``columns`` a MERGE's SQL ``texts`` (its ON condition and clauses, ``t.x`` the
    target's, ``s.x`` the source's) may read, by txnlog's parser; every column when a text uses
    SQL that parser does not know (Spark evaluates it, and it may read anything)."""
    try:
        nodes = [parse_value(text) for text in texts]
    except TxnLogError:
        return list(columns)
    return target_columns_read(nodes, columns)


def collect_keys(source: Any, key_columns: Sequence[str], extra: Sequence[str], limit: int, what: str) -> pa.Table | None:
    """The ``key_columns`` and ``extra`` columns of every row of ``source`` (a DataFrame), or
    None when it has more than ``limit`` rows. One Spark job (two when the first partition
    alone does not reach the limit)."""
    names = list(dict.fromkeys([*key_columns, *extra]))
    try:
        rows = source.select(*[F.col(f"`{n.replace('`', '``')}`") for n in names]).limit(limit + 1).toArrow()
    except SPARK_FAILURES as e:
        raise job_error(e, what) from e
    if rows.num_rows > limit:
        return None
    return rows.rename_columns(names)


def matching_target_rows(
    snapshot: Snapshot,
    files: pa.Table,
    columns: Sequence[str],
    keys: pa.Table,
    key_pairs: Sequence[tuple[str, str]],
    *,
    file_column: str,
    row_index_column: str,
    with_row_ids: bool,
) -> pa.Table:
    """The live rows of ``files`` whose key columns equal those of some row of ``keys`` (the
    source's distinct non-null keys, named by the source columns of ``key_pairs``), with
    ``columns``, the file's ``add.path`` in ``file_column``, the row's physical position in
    ``row_index_column`` and, ``with_row_ids``, ``row_id``/``row_commit_version``."""
    ctx = snapshot.read_context()
    read_columns = list(dict.fromkeys([*columns, *(t for t, _ in key_pairs)]))
    single = len(key_pairs) == 1
    key_set = keys.column(key_pairs[0][1]).combine_chunks() if single else None
    parts: list[pa.Table] = []
    paths = files.column("path")
    for i, rows in ctx.read_each(files, parallel=READ_THREADS, columns=read_columns, row_index=row_index_column,
                                  row_id=ROW_ID if with_row_ids else None, row_commit_version=ROW_COMMIT_VERSION if with_row_ids else None):
        if single:
            assert key_set is not None
            rows = rows.filter(pc.is_in(rows.column(key_pairs[0][0]), value_set=key_set))
        else:
            rows = rows.join(keys, keys=[t for t, _ in key_pairs], right_keys=[s for _, s in key_pairs], join_type="left semi", use_threads=False)
        if rows.num_rows:
            path = paths[i].as_py()
            parts.append(rows.append_column(file_column, pa.array([path] * rows.num_rows, pa.string())))
    schema = ctx.output_schema(read_columns)
    extra = [pa.field(file_column, pa.string()), pa.field(row_index_column, pa.int64())]
    if with_row_ids:
        extra += [pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())]
    out_schema = pa.schema([*schema, *extra])
    if not parts:
        return out_schema.empty_table()
    return pa.concat_tables([p.select(out_schema.names).cast(out_schema) for p in parts])


__all__ = [
    "DEFAULT_DRIVER_SCAN_CELLS",
    "DRIVER_SCAN_CELLS_CONF",
    "MAX_DRIVER_SCAN_BYTES",
    "MAX_SOURCE_KEYS",
    "collect_keys",
    "driver_scan_cells",
    "fits_driver",
    "keys_compare_alike",
    "matching_positions",
    "matching_target_rows",
    "merge_agrees",
    "referenced_columns",
    "spark_agrees",
]
