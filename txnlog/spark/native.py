"""Data files written by Spark's own Parquet writer: no row crosses into Python.

The DataFrame is conformed to the table by Spark column expressions compiled from the core's
:class:`~txnlog.write.ConformSpec` (:mod:`txnlog.spark.conform`), renamed to physical names
(with Parquet field ids under column mapping), and written with ``df.write.parquet`` into a new
job directory below the table root (:data:`txnlog.write.OUTPUT_DIRECTORY`), partitioned by the
physical partition columns so that they are partition values, not file columns. The driver then
lists that directory and turns each file into an ``AddFile``: partition values from its
directories and statistics from its footer (:func:`txnlog.write.parquet_file_stats`, the rules
of txnlog's own writer), in the table's own serialization.

Change data files (:func:`write_native_changes`) go the same way into a job directory below
``_change_data/``, with ``_change_type`` beside the physical columns, as ``cdc`` actions.

Spark's output committer stages the files in the job directory's ``_temporary/`` and moves them
into place when the job commits; no ``_SUCCESS`` marker is written. A killed job leaves files
no commit names in the job directory, ``_temporary/`` included, and vacuum removes them.

What this path does not do yet falls back to the Python tasks (:mod:`txnlog.spark.tasks`), which
give the same result: see :func:`unsupported`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from txnlog import AddFile, WriteContext
from txnlog import properties as props
from txnlog.dml import replace_where_violation
from txnlog.errors import SchemaError, TxnLogError
from txnlog.expressions import FilePredicate
from txnlog.file_facts import non_utf8_partition_value
from txnlog.log import AddCDCFile
from txnlog.read import CHANGE_TYPE, CHANGE_TYPES, ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import (
    SPARK_FAILURES,
    SparkJobError,
    analysed_lazily,
    arrow_schema_of_struct,
    column,
    hadoop_table_path,
    in_utc,
    job_error,
    session_confs,
    spark_schema_of,
    utc_session,
)
from txnlog.spark.conform import conformed, spark_types
from txnlog.write import (
    CHANGE_DATA_DIR,
    MAX_TASKS,
    TASK_SPAN,
    CastCheck,
    Fill,
    IdentityAllocator,
    RowKind,
    cast_check,
    check_change_columns,
    constraint_violation,
    encode_log_path,
    generated_mismatch,
    identity_overflow,
    invalid_change_type,
    last_identity_index,
    null_elements,
    null_map_values,
    null_values,
    output_directory,
    parquet_file_stats,
    unescape_path_name,
    unsafe_cast,
    written_partition_values,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from txnlog import TableConfiguration
    from txnlog.storage import FileInfo, LogStore
    from txnlog.write import ConformSpec

W = TypeVar("W", AddFile, AddCDCFile)
#: What one written file becomes: from the file, its partition values and its footer.
_Describe = Callable[["FileInfo", dict[str, str | None], pq.ParquetFile], W]

logger = logging.getLogger(__name__)

#: ``"false"`` in the session sends every write through the Python tasks; ``"true"`` writes
#: tables outside the local file system natively too (Spark's Hadoop must reach the store);
#: unset (``"auto"``): local tables natively.
NATIVE_WRITE_CONF = "spark.txnlog.write.native"

# Session confs for the write (the Parquet writer reads them from the session, not the options).
_WRITE_CONFS = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.fieldId.write.enabled": "true",
}
_FIELD_ID = "parquet.field.id"
# Partition column types whose directory text Spark writes parses back as the same value: its cast
# to string for all but TimestampType (Java's shortest round-tripping text for floats, plain
# decimals with their scale, wall-clock text for timestamp_ntz), which Spark renders in the
# session's time zone: outside UTC it is written as its UTC wall clock (:func:`_utc_wall_clock`);
# and BinaryType, whose bytes are the UTF-8 text Delta stores, with NUL escaped (:func:`_binary_text`).
_PARTITION_TYPES = (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType, T.DateType, T.FloatType,
                    T.DoubleType, T.DecimalType, T.TimestampType, T.TimestampNTZType, T.BinaryType)
# Hadoop refuses NUL in a path: in a binary partition's directory text this character escapes
# itself (doubled) and NUL (followed by "0"). Spark's own escaping leaves both as they are.
_NUL_ESCAPE = "\uffff"
_NUL_ESCAPED = re.compile(_NUL_ESCAPE + "(.)", re.S)
_LEAF_TYPES = (T.StringType, T.BinaryType, T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType,
               T.DoubleType, T.DecimalType, T.DateType, T.TimestampType, T.TimestampNTZType)
# A value whose cast to the table's type would change it, flagged per row beside the written rows.
_CAST_LOSS = "_txnlog_cast_loss_"
# A given generated value that its expression does not give, flagged (and the expected value) likewise.
_GENERATED = "_txnlog_generated_"
_FOOTER_THREADS = 8
# The row id columns' names between the two projections (never a table column's).
_STAGED_ROW_ID, _STAGED_COMMIT_VERSION = "_txnlog_staged_row_id", "_txnlog_staged_row_commit_version"
# Each row's task and Spark id, for numbering identity values.
_TASK, _POSITION = "_txnlog_identity_task", "_txnlog_identity_position"
# A failing row's expected value beside it in an error's example.
_SHOWN = "_txnlog_expected"


def unsupported(df: DataFrame, ctx: WriteContext, *, data_change: bool, target_file_size: int | None = None,
                require: str | None = None) -> str | None:
    """Why ``df`` cannot be written natively to the table ``ctx`` describes (the Python tasks
    write it then), or None. Not yet native: generated columns, CHECK constraints and a
    replaceWhere (``require``) in a Spark Connect session whose time zone is not UTC, casts the
    Python tasks treat apart (see :func:`_cast_rule`; narrowing casts are written natively with
    their rows counted), files cut at an
    explicit ``target_file_size`` (Spark writes one file per task and partition, as
    delta-spark does), tables in
    ``memory://``, and tables outside the local file system unless :data:`NATIVE_WRITE_CONF` is
    ``true``. Change rows are asked as a rewrite's (``data_change`` False, the table's columns
    and ``_change_type``, which is no table column): the reasons about types, casts, location
    and the session apply to them; generated columns and a target size do not."""
    setting = (df.sparkSession.conf.get(NATIVE_WRITE_CONF, "auto") or "auto").lower()
    if setting == "false":
        return f"{NATIVE_WRITE_CONF}=false"
    if ctx.table_uri.startswith("memory://"):
        return "a memory:// table"
    if setting != "true" and not ctx.table_uri.startswith("file:"):
        # The Python tasks reach an object store with the write's storage options; Spark's writer
        # needs the session's own Hadoop file system and credentials for it, so it is opted into.
        return f"a table outside the local file system (set {NATIVE_WRITE_CONF}=true when Spark's Hadoop reaches it)"
    if target_file_size is not None:
        return "files cut at an explicit target size"
    spec = ctx.conform_spec
    if analysed_lazily(df) and not utc_session(df.sparkSession):
        # txnlog reads timestamps in UTC (and prunes files so): a classic session's expressions
        # are analysed in UTC when made (:func:`~txnlog.spark.common.in_utc`), Connect's only when run.
        if data_change and any(c.fill is Fill.GENERATED for c in spec.columns):
            return "generated columns in a Spark Connect session whose time zone is not UTC"
        if require is not None or ctx.constraints():
            return "CHECK constraints or a replaceWhere in a Spark Connect session whose time zone is not UTC"
    types = spark_types(spec)
    partitions = {c.lower() for c in ctx.partition_columns}
    for name, kind in types.items():
        if not _leaves_supported(kind):
            return f"column '{name}' of type {kind.simpleString()}"
        if name.lower() in partitions and not isinstance(kind, _PARTITION_TYPES):
            return f"partition column '{name}' of type {kind.simpleString()}"
    given = {f.name: f.dataType for f in df.schema.fields}
    for name, table_column in zip(given, spec.supplied(given)):
        if table_column is None:
            continue
        rule = _cast_rule(given[name], types[table_column.name], spec.schema.field(table_column.name).type, name)
        if rule is None or (rule.needed and not data_change):
            return f"column '{name}' cast from {given[name].simpleString()} to {types[table_column.name].simpleString()}"
    if not data_change and spec.missing(given):
        return "a rewrite that does not supply every column"
    return None


def _cast_rule(have: Any, want: Any, table_type: pa.DataType, name: str) -> CastCheck | None:
    """How the cast of column ``name`` (of Spark type ``have``) to the table's type ``want``
    (``table_type`` in Arrow) is checked, by the core's description of the Python tasks' safe
    cast (:func:`txnlog.write.cast_check`); None for a cast not written natively."""
    if have.simpleString() == want.simpleString():  # nested types too, whatever their NOT NULLs
        return CastCheck()
    return cast_check(arrow_schema_of_struct(T.StructType([T.StructField(name, have)])).field(0).type, table_type)


def _cast_loss(check: CastCheck, have: Any, want: Any, name: str) -> Column:
    """True on the rows whose value of column ``name`` the cast from ``have`` to ``want`` would
    change, by ``check`` (one that is needed)."""
    value: Column = column(name)
    if check.round_trip:  # Spark's cast rounds or (ANSI) fails: kept only if it comes back unchanged
        return ~value.eqNullSafe(value.try_cast(want).try_cast(have))
    assert check.low is not None and check.high is not None
    return ~value.between(check.low, check.high)


def _cast_checks(df: DataFrame, spec: ConformSpec, logical: Mapping[str, Any]) -> tuple[dict[str, Column], list[Column], list[_Check]]:
    """For the columns of ``df`` whose cast to the table's type can change a value: each one's
    value cast without failing (``try_cast``: a changed value is refused, not written), a flag
    per row where the cast changes it (staged beside the rows, not written), and the check
    refusing those rows with the Python tasks' error (the value as given shown in its example)."""
    values: dict[str, Column] = {}
    flags: list[Column] = []
    checks: list[_Check] = []
    for field, table_column in zip(df.schema.fields, spec.supplied([f.name for f in df.schema.fields])):
        if table_column is None:
            continue
        want, table_type = logical[table_column.name].dataType, spec.schema.field(table_column.name).type
        rule = _cast_rule(field.dataType, want, table_type, field.name)
        if rule is None or not rule.needed:
            continue
        flag, given = f"{_CAST_LOSS}{len(checks)}", f"{_CAST_LOSS}{len(checks)}_given"
        values[table_column.name] = column(field.name).try_cast(want)
        loss = _cast_loss(rule, field.dataType, want, field.name)
        flags += [F.coalesce(loss, F.lit(False)).alias(flag), column(field.name).cast("string").alias(given)]
        checks.append(_Check(column(flag), functools.partial(_lossy_cast, table_column.name, field.dataType.simpleString(), table_type),
                             shown=column(given)))
    return values, flags, checks


def _lossy_cast(name: str, source: str, target: object, count: int, example: object | None) -> TxnLogError:
    shown = example.get(_SHOWN) if isinstance(example, dict) else None
    return unsafe_cast(name, source, target, f"{count} value(s) would change" + (f", e.g. {shown}" if shown is not None else ""))


def _leaves_supported(kind: Any) -> bool:
    if isinstance(kind, T.StructType):
        return all(_leaves_supported(f.dataType) for f in kind.fields)
    if isinstance(kind, T.ArrayType):
        return _leaves_supported(kind.elementType)
    if isinstance(kind, T.MapType):
        return _leaves_supported(kind.keyType) and _leaves_supported(kind.valueType)
    return isinstance(kind, _LEAF_TYPES)


def _physical_type(kind: Any, mapped: bool) -> Any:
    """A logical Spark type with physical names and Parquet field ids at every level (its
    nullability kept)."""
    if isinstance(kind, T.StructType):
        return T.StructType([T.StructField(_physical_name(f, mapped), _physical_type(f.dataType, mapped), f.nullable, _field_id(f, mapped))
                             for f in kind.fields])
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(_physical_type(kind.elementType, mapped), kind.containsNull)
    if isinstance(kind, T.MapType):
        return T.MapType(_physical_type(kind.keyType, mapped), _physical_type(kind.valueType, mapped), kind.valueContainsNull)
    return kind


def _nested_not_null(kind: Any) -> bool:
    if isinstance(kind, T.StructType):
        return any(not f.nullable or _nested_not_null(f.dataType) for f in kind.fields)
    if isinstance(kind, T.ArrayType):
        return not kind.containsNull or _nested_not_null(kind.elementType)
    if isinstance(kind, T.MapType):
        return not kind.valueContainsNull or _nested_not_null(kind.keyType) or _nested_not_null(kind.valueType)
    return False


def _with_nested_not_null(value: Column, kind: Any) -> Column:
    """``value`` rebuilt so that Spark knows the NOT NULLs inside ``kind`` (its Parquet fields then
    ``required``, as txnlog's own writer writes them): a NOT NULL field's null under a null
    struct, which the rules allow, becomes a placeholder of its type, as in txnlog's writer (a
    reader sees only the null struct). Nulls the rules forbid were counted by the checks, which
    refuse the write; the placeholders they got are never committed."""
    if not _nested_not_null(kind):
        return value

    def required(item: Column, item_kind: Any, nullable: bool) -> Column:
        item = _with_nested_not_null(item, item_kind)
        return item if nullable else F.coalesce(item, _placeholder(item_kind))

    if isinstance(kind, T.StructType):
        fields = [required(value.getField(f.name), f.dataType, f.nullable).alias(f.name) for f in kind.fields]
        return F.when(value.isNotNull(), F.struct(*fields))
    if isinstance(kind, T.ArrayType):
        return F.transform(value, lambda item: required(item, kind.elementType, kind.containsNull))
    if isinstance(kind, T.MapType):
        keyed = F.transform_keys(value, lambda key, _value: _with_nested_not_null(key, kind.keyType)) if _nested_not_null(kind.keyType) else value
        return F.transform_values(keyed, lambda _key, item: required(item, kind.valueType, kind.valueContainsNull))
    return value


def _placeholder(kind: Any) -> Column:
    """A non-null value of ``kind`` (zero, empty, the epoch), NOT NULL at every level."""
    if isinstance(kind, T.StructType):
        return F.struct(*[_placeholder(f.dataType).alias(f.name) for f in kind.fields])
    if isinstance(kind, T.ArrayType | T.MapType):
        return (F.array() if isinstance(kind, T.ArrayType) else F.create_map()).cast(kind)
    if isinstance(kind, T.StringType):
        return F.lit("")
    if isinstance(kind, T.BinaryType):
        return F.expr("X''")
    if isinstance(kind, T.BooleanType):
        return F.lit(False)
    if isinstance(kind, T.DateType):
        return F.expr("DATE'1970-01-01'")
    if isinstance(kind, T.TimestampType):
        return F.expr("TIMESTAMP'1970-01-01 00:00:00Z'")
    if isinstance(kind, T.TimestampNTZType):
        return F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'")
    if isinstance(kind, T.DecimalType):  # from a zero whose cast cannot overflow (a cast that can is nullable)
        return F.expr("0.0BD" if kind.precision == kind.scale else "0BD").cast(kind)
    return F.lit(0).cast(kind)


def _physical_name(field: Any, mapped: bool) -> str:
    name = field.metadata.get(props.PHYSICAL_NAME_KEY) if mapped else None
    if mapped and not name:
        raise SchemaError(f"column '{field.name}' has no {props.PHYSICAL_NAME_KEY} but the table uses column mapping", field=field.name)
    return str(name) if name else str(field.name)


def _field_id(field: Any, mapped: bool) -> dict[str, Any]:
    column_id = field.metadata.get(props.COLUMN_MAPPING_ID_KEY) if mapped else None
    return {_FIELD_ID: int(column_id)} if column_id is not None else {}


def _has_nested_mapping(kind: Any) -> bool:
    return isinstance(kind, T.StructType | T.ArrayType | T.MapType)


def write_native(
    df: DataFrame,
    ctx: WriteContext,
    *,
    partition_by: Sequence[str] | None,
    data_change: bool,
    preserve_row_ids: bool,
    require: str | None = None,
    rows_per_file: int | None = None,
) -> list[AddFile]:
    """Write ``df`` (already checked against the table, :func:`unsupported` None) as data files
    of the table ``ctx`` describes with Spark's Parquet writer; their ``AddFile`` records.
    ``require``: a replaceWhere every row must match (ProtocolViolationError, nothing kept).
    ``rows_per_file``: the rows are written in their order (no repartition), a file cut every
    that many rows of a task."""
    spec = ctx.conform_spec
    config = ctx.table_configuration
    logical = _logical_fields(spec)
    # Rows of a rewrite that changes no data (a compaction) are copies: nothing is filled or refused.
    kind = RowKind.INSERT if data_change else RowKind.COPY
    cast_values, loss_flags, cast_checks = _cast_checks(df, spec, logical) if data_change else ({}, [], [])
    values = _table_values(df, spec, kind, logical, cast_values)
    overflows: dict[str, TxnLogError] = {}
    if kind is RowKind.INSERT and any(c.identity is not None for c in spec.columns):
        df, numbered, overflows = _numbered(df, ctx)
        values |= {name: F.coalesce(values[name], value) for name, value in numbered.items()}
    # The rows with the table's logical columns first: NOT NULL, CHECK constraints and a
    # replaceWhere are counted on them (their SQL names logical columns), then renamed.
    staged = [value.alias(name) for name, value in values.items()] + loss_flags
    if preserve_row_ids:
        staged += [column(ROW_ID).cast("long").alias(_STAGED_ROW_ID), column(ROW_COMMIT_VERSION).cast("long").alias(_STAGED_COMMIT_VERSION)]
    rows = df.select(*staged)
    generated: list[_Check] = []
    if kind is RowKind.INSERT and any(c.fill is Fill.GENERATED for c in spec.columns):
        rows, generated = _generated(rows, ctx, logical)
    select = _physical_columns(values, logical, config.is_column_mapped)
    if preserve_row_ids:
        hidden = config.row_id_columns(f"table {ctx.table_uri}")
        select += [column(_STAGED_ROW_ID).alias(hidden.row_id), column(_STAGED_COMMIT_VERSION).alias(hidden.row_commit_version)]
    job = _SparkWrite(ctx, logical, output_directory(), "data file", cast_checks + generated + _checks(ctx, logical, require), overflows)

    def added(info: FileInfo, partition_values: dict[str, str | None], parquet: pq.ParquetFile) -> AddFile:
        stats = parquet_file_stats(parquet, config.schema, ctx.stats_columns, mapped=config.is_column_mapped, nan_in_max=True)
        return AddFile(path=encode_log_path(info.path), partition_values=partition_values, size=info.size,
                       modification_time=info.modification_time, data_change=data_change, stats=stats)

    return job.run(rows, select, added, partition_by=partition_by, rows_per_file=rows_per_file)


def write_native_changes(df: DataFrame, ctx: WriteContext) -> list[AddCDCFile]:
    """Write change rows ``df`` (the table's columns and ``_change_type``; :func:`unsupported`
    None for them as a rewrite) as change data files of the table ``ctx`` describes with Spark's
    Parquet writer: in a job directory below ``_change_data/``, partitioned like the table, with
    physical column names and ``_change_type`` under that name, as
    :func:`txnlog.write.write_change_files` writes them; their ``cdc`` actions. The rows are old
    or already checked (pre-images, deleted rows, rows a statement wrote): no identity,
    generated column or constraint applies, only that each ``_change_type`` is one of
    :data:`txnlog.read.CHANGE_TYPES` (InvalidArgumentError, nothing kept)."""
    check_change_columns(ctx, df.columns)
    spec = ctx.conform_spec
    logical = _logical_fields(spec)
    values = _table_values(df, spec, RowKind.COPY, logical)
    rows = df.select(*[value.alias(name) for name, value in values.items()], column(CHANGE_TYPE).cast("string").alias(CHANGE_TYPE))
    select = [*_physical_columns(values, logical, ctx.table_configuration.is_column_mapped), column(CHANGE_TYPE)]
    valid = _Check(~F.coalesce(column(CHANGE_TYPE).isin(*CHANGE_TYPES), F.lit(False)),
                   lambda _count, example: invalid_change_type(ctx.table_uri, example.get(CHANGE_TYPE) if isinstance(example, dict) else None))
    job = _SparkWrite(ctx, logical, f"{CHANGE_DATA_DIR}/{output_directory()}", "change data file", [valid])

    def change_file(info: FileInfo, partition_values: dict[str, str | None], _parquet: pq.ParquetFile) -> AddCDCFile:
        return AddCDCFile(encode_log_path(info.path), partition_values, info.size, data_change=False)

    return job.run(rows, select, change_file, partition_by=None)


def _logical_fields(spec: ConformSpec) -> dict[str, Any]:
    """The table's columns as Spark fields (with their column mapping metadata), by name."""
    return {f.name: f for f in spark_schema_of(spec.schema_string).fields}


def _table_values(df: DataFrame, spec: ConformSpec, kind: RowKind, logical: Mapping[str, Any],
                  cast: Mapping[str, Column] | None = None) -> dict[str, Column]:
    """Each table column's value in ``df``'s rows of ``kind``, by logical name (row ids apart);
    ``cast``: values already cast to the table's type, by table column."""
    supplied = {table_column.name: column(name) for name, table_column in zip(df.columns, spec.supplied(df.columns)) if table_column is not None}
    supplied |= dict(cast or {})
    previous = (F.lit(None), F.lit(None)) if kind is RowKind.COPY else None  # the ids are written apart, as given
    # The write planner has refused a GENERATED ALWAYS column given by a user's rows; these may be a
    # statement's, whose kept rows carry their ids (only NULLs are numbered, as in the Python tasks).
    values = conformed(spec, kind, supplied, previous=previous, types={n: f.dataType for n, f in logical.items()}, refuse_always=False)
    values.pop(ROW_ID, None)
    values.pop(ROW_COMMIT_VERSION, None)
    return values


def _physical_columns(names: Iterable[str], logical: Mapping[str, Any], mapped: bool) -> list[Column]:
    """The ``select`` list renaming the logical columns ``names`` to their physical names, with
    Parquet field ids (nested ones by a cast) under column mapping."""
    select: list[Column] = []
    for name in names:
        field = logical[name]
        value = _with_nested_not_null(column(name), field.dataType)
        if mapped and _has_nested_mapping(field.dataType):
            value = value.cast(_physical_type(field.dataType, mapped))
        select.append(value.alias(_physical_name(field, mapped), metadata=_field_id(field, mapped)))
    return select


class _SparkWrite:
    """One job of Spark's Parquet writer into ``directory`` (below the table root), writing files
    of ``file_kind`` ("data file", "change data file") of the table whose columns ``logical``
    gives: its rows counted for ``checks`` on the way, then each file it wrote described from its
    footer; the directory's files deleted when anything fails. ``overflows``: an identity
    overflow's error by the mark Spark's failure text carries for it."""

    def __init__(self, ctx: WriteContext, logical: Mapping[str, Any], directory: str, file_kind: str, checks: list[_Check],
                 overflows: Mapping[str, TxnLogError] | None = None) -> None:
        self.ctx = ctx
        self.logical = logical
        self.store = ctx.open_store()
        self.directory = directory
        self.file_kind = file_kind
        self.job = f"the Spark job writing {file_kind}s of table {ctx.table_uri} with Spark's Parquet writer"
        self.checks = checks
        self.overflows = dict(overflows or {})

    def run(self, rows: DataFrame, select: list[Column], describe: _Describe[W], *,
            partition_by: Sequence[str] | None, rows_per_file: int | None = None) -> list[W]:
        """Write ``rows`` (logical columns) as ``select`` gives them (physical ones), repartitioned
        by ``partition_by`` (default: the table's partition columns) unless ``rows_per_file`` cuts
        the files; ``describe`` turns each non-empty file into its action."""
        ctx, spec, store, logical = self.ctx, self.ctx.conform_spec, self.store, self.logical
        mapped = ctx.table_configuration.is_column_mapped
        checks = self.checks
        observation = Observation("txnlog native write") if checks else None
        if observation is not None:
            with in_utc(rows.sparkSession):  # the checks read timestamps as txnlog does; the rows keep their zone
                rows = rows.observe(observation, *[check.count.alias(f"check{i}") for i, check in enumerate(checks)])
        partition_keys = [_physical_name(logical[_table_name(spec, c)], mapped) for c in ctx.partition_columns]
        repartition_by = partition_keys if partition_by is None else [_physical_name(logical[_table_name(spec, c)], mapped) for c in partition_by]
        out = rows.select(*select)
        # A timestamp partition's directory carries its UTC wall clock (parsed back as the instant):
        # Spark's own text in a UTC session, a timestamp_ntz of it in any other.
        zoned = [f.name for f in out.schema.fields if f.name in partition_keys and isinstance(f.dataType, T.TimestampType)]
        if zoned and not utc_session(rows.sparkSession):
            out = out.withColumns({name: _utc_wall_clock(column(name)) for name in zoned})
        binary = [f.name for f in out.schema.fields if f.name in partition_keys and isinstance(f.dataType, T.BinaryType)]
        if binary:
            out = out.withColumns({name: _binary_text(column(name)) for name in binary})
        if repartition_by and rows_per_file is None:
            out = out.repartition(*[column(k) for k in repartition_by])
        target = hadoop_table_path(store.uri_of(self.directory))
        # "error", not its alias "errorifexists", which Spark Connect's client refuses.
        writer = out.write.mode("error").option("compression", ctx.compression)
        # No _SUCCESS marker: it is hidden, so vacuum would keep it forever.
        writer = writer.option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        if target.startswith("file:") or "://" not in target:
            # No .crc side files: hidden too, and stale ones fail later reads.
            writer = writer.option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem").option("fs.file.impl.disable.cache", "true")
        if partition_keys:
            writer = writer.partitionBy(*partition_keys)
        if rows_per_file is not None:
            writer = writer.option("maxRecordsPerFile", str(rows_per_file))
        try:
            with session_confs(rows.sparkSession, _WRITE_CONFS):
                writer.parquet(target)
        except SPARK_FAILURES as e:
            _delete_directory(store, self.directory)  # what Spark's abort left (a killed job's files wait for vacuum)
            overflow = next((error for mark, error in self.overflows.items() if mark in str(e)), None)
            if overflow is not None:
                raise overflow from None
            raise job_error(e, self.job) from e
        try:
            results = _observed(observation)
            if results is not None:
                for i, check in enumerate(checks):
                    count = int(results.get(f"check{i}") or 0)
                    if count:
                        raise check.error(count, _example(rows, check) if check.with_example else None)
            written = _written_files(store, self.directory, self.file_kind, ctx.table_configuration, describe)
            if results is None and written:
                raise SparkJobError(f"{self.job}: Spark reported no counts of the written rows for the checks they must pass"
                                    f", although it wrote {len(written)} file(s); nothing is committed")
            return written
        except BaseException:
            _delete_directory(store, self.directory)
            raise


def _utc_wall_clock(timestamp: Column) -> Column:
    """``timestamp`` as a ``timestamp_ntz`` holding its UTC wall clock, in any session time zone:
    its microseconds since the epoch added to the epoch's wall clock, which no zone rule touches.
    Spark writes its directory text as it writes any ``timestamp_ntz``."""
    return F.timestamp_add("MICROSECOND", F.unix_micros(timestamp), F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'"))


def _binary_text(value: Column) -> Column:
    """A binary partition value's bytes as text (Delta's form when they are UTF-8, which a check
    counts), with :data:`_NUL_ESCAPE` escaping NUL; Spark writes it as the directory name."""
    text = F.replace(value.cast("string"), F.lit(_NUL_ESCAPE), F.lit(_NUL_ESCAPE * 2))
    return F.replace(text, F.char(F.lit(0)), F.lit(_NUL_ESCAPE + "0"))


def _binary_directory(text: str) -> str:
    """The escaped directory text of a binary partition (:func:`_binary_text`) with NUL as
    Spark's escaping would give it."""
    return _NUL_ESCAPED.sub(lambda m: _NUL_ESCAPE if m.group(1) == _NUL_ESCAPE else "%00", text)


def _observed(observation: Observation | None) -> dict[str, Any] | None:
    """The observation's counts (empty without one); None when Spark has none, as for a plan
    it optimized to no rows at all (``df.limit(0)``), where nothing was counted."""
    if observation is None:
        return {}
    try:
        return dict(observation.get)
    except SPARK_FAILURES:
        return None


def _table_name(spec: Any, name: str) -> str:
    (found,) = spec.supplied([name])
    if found is None:
        raise SchemaError(f"partition column '{name}' is not a column of table {spec.table_uri}", field=name)
    return str(found.name)


def _numbered(df: DataFrame, ctx: WriteContext) -> tuple[DataFrame, dict[str, Column], dict[str, TxnLogError]]:
    """Identity values as Spark expressions, numbered as the Python tasks number them: the task
    with partition index ``p`` takes the indexes ``region + p * TASK_SPAN + k`` of a region
    reserved on the driver (:meth:`IdentityAllocator.for_tasks`), ``k`` counting its rows, so no
    two tasks overlap. ``df`` comes back with each row's task and position (computed once: they
    are nondeterministic); then each identity column's value, and the error Spark's failure
    text names when a value would pass a long or a task its span."""
    region = (ctx.identity or IdentityAllocator()).for_tasks().task_region
    assert region is not None
    df = df.select("*", F.spark_partition_id().cast("long").alias(_TASK), F.monotonically_increasing_id().alias(_POSITION))
    task = column(_TASK)
    row = column(_POSITION) - F.shiftleft(task, 33)  # Spark's id is the partition index << 33 plus the row's position
    index = F.lit(region) + task * F.lit(TASK_SPAN) + row
    values: dict[str, Column] = {}
    errors: dict[str, TxnLogError] = {}
    for spec in ctx.conform_spec.columns:
        identity = spec.identity
        if identity is None:
            continue
        mark = f"[txnlog identity overflow {len(errors)}]"
        errors[mark] = identity_overflow(spec.name, ctx.table_uri, identity)
        past = (row >= TASK_SPAN) | (task >= MAX_TASKS) | (index > F.lit(last_identity_index(identity)))
        value = F.lit(identity.next_value) + F.lit(identity.step) * index
        values[spec.name] = F.when(past, F.raise_error(F.lit(mark))).otherwise(value)
    return df, values, errors


@dataclass(frozen=True)
class _Check:
    """A rule every written row must keep: ``failing`` is true on the rows breaking it (over the
    logical columns), and ``error(count, example)`` is what the Python tasks raise for them;
    ``shown``, when set, is a value the example row also carries (under :data:`_SHOWN`)."""

    failing: Column
    error: Callable[[int, object | None], TxnLogError]
    with_example: bool = True
    shown: Column | None = None
    #: How many values of a failing row break the rule (one when unset), for the error's count.
    weight: Column | None = None

    @property
    def count(self) -> Column:
        return F.count_if(self.failing) if self.weight is None else F.sum(self.weight)


def _nulls(name: str, count: int, _example: object | None) -> TxnLogError:
    return null_values(name, count)


def _non_utf8(name: str, _count: int, example: object | None) -> TxnLogError:
    shown = example.get(_SHOWN) if isinstance(example, dict) else None
    return non_utf8_partition_value(bytes(shown) if shown is not None else None, name)


def _checks(ctx: WriteContext, logical: Mapping[str, Any], require: str | None) -> list[_Check]:
    """What the written rows are counted for: nulls in NOT NULL columns, rows failing a CHECK
    constraint or invariant, rows outside a replaceWhere; each refused with the core's error
    for it. A constraint's SQL is parsed by txnlog first (its errors, before any row) and
    evaluated by Spark, which also decides delta-spark's own writes; a NULL result fails it.
    NaN needs no count: parquet-java's footers show it (:func:`txnlog.write.parquet_file_stats`)."""
    out: list[_Check] = []
    for name, field in logical.items():  # as the Python tasks check a column: inside it first
        for nulls, error in _nested_nulls(name, field.dataType):
            weight = nulls(column(name))
            out.append(_Check(weight > 0, error, with_example=False, weight=weight))
        if not field.nullable:
            out.append(_Check(column(name).isNull(), functools.partial(_nulls, name), with_example=False))
    partitions = {c.lower() for c in ctx.partition_columns}
    for name, field in logical.items():
        if name.lower() in partitions and isinstance(field.dataType, T.BinaryType):
            valid = F.is_valid_utf8(column(name).cast("string"))
            out.append(_Check(column(name).isNotNull() & ~valid, functools.partial(_non_utf8, name), shown=column(name)))
    for name, predicate in ctx.constraints():
        out.append(_Check(~F.coalesce(F.expr(predicate.sql), F.lit(False)), functools.partial(constraint_violation, name, predicate.sql)))
    if require is not None:
        FilePredicate(require, ctx.schema, ctx.partition_columns, ctx.table_configuration.physical_names)  # txnlog's errors first
        out.append(_Check(~F.coalesce(F.expr(require), F.lit(False)), functools.partial(replace_where_violation, require, ctx.table_uri)))
    return out


#: A NOT NULL inside a column: how many forbidden nulls a value of the column holds, and the
#: Python tasks' error for them (naming the path).
_NestedNulls = tuple[Callable[["Column"], "Column"], Callable[[int, object | None], TxnLogError]]


def _nested_nulls(path: str, kind: Any) -> list[_NestedNulls]:
    """Each NOT NULL rule inside a value of ``kind`` at ``path``, in the order the Python tasks
    check them (a field's insides before the field): a struct field may be null only where its
    struct is; list elements and map values marked non-nullable never. Counted by native
    expressions over the value (a sum over list elements and map entries, zero for a null)."""
    out: list[_NestedNulls] = []

    def inside(counts: Callable[[Column], Column]) -> Callable[[Column], Column]:
        return lambda items: F.coalesce(F.aggregate(items, F.lit(0), lambda total, item: total + counts(item)), F.lit(0))

    def is_null(value: Column) -> Column:
        return F.when(value.isNull(), 1).otherwise(0)

    if isinstance(kind, T.StructType):
        for f in kind.fields:
            child = f"{path}.{f.name}"
            for counts, error in _nested_nulls(child, f.dataType):
                out.append((functools.partial(_of_field, f.name, counts), error))
            if not f.nullable:
                out.append((functools.partial(_null_field, f.name), functools.partial(_nulls, child)))
    elif isinstance(kind, T.ArrayType):
        out += [(inside(counts), error) for counts, error in _nested_nulls(f"{path}.element", kind.elementType)]
        if not kind.containsNull:
            out.append((inside(is_null), lambda _count, _example: null_elements(path)))
    elif isinstance(kind, T.MapType):
        out += [(functools.partial(_in_map, F.map_keys, inside(counts)), error) for counts, error in _nested_nulls(f"{path}.key", kind.keyType)]
        out += [(functools.partial(_in_map, F.map_values, inside(counts)), error)
                for counts, error in _nested_nulls(f"{path}.value", kind.valueType)]
        if not kind.valueContainsNull:
            out.append((functools.partial(_in_map, F.map_values, inside(is_null)), lambda _count, _example: null_map_values(path)))
    return out


def _in_map(part: Callable[[Column], Column], counts: Callable[[Column], Column], value: Column) -> Column:
    return counts(part(value))


def _of_field(name: str, counts: Callable[[Column], Column], struct: Column) -> Column:
    return F.coalesce(counts(struct.getField(name)), F.lit(0))


def _null_field(name: str, struct: Column) -> Column:
    return F.when(struct.isNotNull() & struct.getField(name).isNull(), 1).otherwise(0)


def _generated(rows: DataFrame, ctx: WriteContext, logical: Mapping[str, Any]) -> tuple[DataFrame, list[_Check]]:
    """``rows`` with each generated column computed where it is NULL (missing), by Spark from
    its generation expression over the row's other columns, and a check per generated column
    that a given value is what the expression gives (``<=>``), flagged beside the rows. The
    expressions are evaluated in UTC, as txnlog's own writer evaluates them (and prunes files
    by them): a classic session's expressions take the session's zone when they are made, so
    they are made with the zone set to UTC (:func:`unsupported` leaves Connect sessions in
    another zone to the Python tasks)."""
    with in_utc(rows.sparkSession):
        computed: dict[str, tuple[str, Column]] = {}
        for spec in ctx.conform_spec.columns:
            if spec.fill is Fill.GENERATED:
                expression = spec.expression or ""
                try:
                    computed[spec.name] = expression, F.expr(expression).cast(logical[spec.name].dataType)
                except SPARK_FAILURES as e:
                    raise _unusable_expression(spec.name, expression, ctx.table_uri, e) from None
        select = [F.coalesce(column(name), computed[name][1]).alias(name) if name in computed else column(name) for name in rows.columns]
        for name, (expression, value) in computed.items():
            try:
                _ = rows.select(value).schema  # analyzed now (Connect analyzes lazily): an unknown name is the expression's error
            except SPARK_FAILURES as e:
                raise _unusable_expression(name, expression, ctx.table_uri, e) from None
        flags = {f"{_GENERATED}{i}": (name, expression, value) for i, (name, (expression, value)) in enumerate(computed.items())}
        rows = rows.select(*select).select(
            "*", *[item for flag, (name, _, value) in flags.items()
                   for item in ((~column(name).eqNullSafe(value)).alias(flag), value.alias(f"{flag}_shown"))])
    checks = [_Check(column(flag), functools.partial(_mismatch, name, ctx.table_uri, expression), shown=column(f"{flag}_shown"))
              for flag, (name, expression, _) in flags.items()]
    return rows, checks


def _unusable_expression(name: str, expression: str, table_uri: str, error: BaseException) -> SchemaError:
    return SchemaError(f"the generation expression {expression!r} of column '{name}' of table {table_uri} cannot be evaluated by Spark: "
                       f"{str(error).splitlines()[0] if str(error) else type(error).__name__}", field=name)


def _mismatch(name: str, table_uri: str, expression: str, _count: int, example: object | None) -> TxnLogError:
    row = example if isinstance(example, dict) else {}
    return generated_mismatch(name, table_uri, expression, row.get(name), row.get(_SHOWN))


def _example(rows: DataFrame, check: _Check) -> object | None:
    """One row of ``rows`` that ``check`` fails on, with its shown value (the error path runs
    the rows again), or None when none comes back."""
    try:
        with in_utc(rows.sparkSession):
            failing = rows.where(check.failing)
            if check.shown is not None:
                failing = failing.select("*", check.shown.alias(_SHOWN))
        found = failing.limit(1).collect()
    except SPARK_FAILURES:
        return None
    return found[0].asDict(recursive=True) if found else None


def _written_files(store: LogStore, directory: str, file_kind: str, config: TableConfiguration, describe: _Describe[W]) -> list[W]:
    """``describe`` of each Parquet file (a ``file_kind``) the job left in ``directory`` (its
    partition values, from the directories below it, and its footer); files without rows are
    deleted (a task without rows still wrote one)."""
    depth = len(directory.split("/"))
    binary = {key for key, field in config.partition_keys() if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)}

    def partition_directories(path: str) -> list[str]:
        parts = path.split("/")[depth:-1]
        if not binary:
            return parts
        return [f"{key}={_binary_directory(text)}" if unescape_path_name(key) in binary else f"{key}={text}"
                for key, _, text in (part.partition("=") for part in parts)]

    listed = [info for info in store.walk_files(directory)
              if info.name.endswith(".parquet") and not any(p.startswith(("_", ".")) for p in info.path.split("/")[depth:])]

    def described(info: FileInfo) -> W | None:
        where = f"{file_kind} {store.uri_of(info.path)}"
        with store.open_input(info.path) as stream:
            try:
                parquet = pq.ParquetFile(stream)
                if parquet.metadata.num_rows == 0:
                    return None
                return describe(info, written_partition_values(partition_directories(info.path), config, where), parquet)
            except TxnLogError:
                raise
            except Exception as e:  # pyarrow's errors for a file it cannot read
                raise SchemaError(f"{where} written by Spark cannot be read back: {e}") from e

    with ThreadPoolExecutor(max_workers=_FOOTER_THREADS) as pool:
        found = list(pool.map(described, listed))
    for info, action in zip(listed, found):
        if action is None:
            store.delete(info.path)
    return [action for action in found if action is not None]


def _delete_directory(store: LogStore, directory: str) -> None:
    """Best effort: what vacuum would remove later, removed now."""
    try:
        for info in list(store.walk_files(directory)):
            store.delete(info.path)
    except TxnLogError as e:
        logger.warning("could not delete the files of a failed write in %s: %s", store.uri_of(directory), e)


__all__ = ["NATIVE_WRITE_CONF", "unsupported", "write_native", "write_native_changes"]
