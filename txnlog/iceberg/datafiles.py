"""Delta add actions as Iceberg data files: partition tuple, record count, column statistics.

Bounds are only ever widened, never tightened: Iceberg readers skip a file when a predicate
cannot match its bounds, so a bound tighter than the data drops rows. Hence:

- a timestamp maximum that may be millisecond-truncated (Delta writes stats at millisecond
  precision; delta#7444) is rounded up to the last microsecond of its millisecond;
- a string maximum that may be a truncated prefix (32 characters or more, or holding the
  U+FFFD tie-breaker) is dropped, as are float bounds that are NaN;
- null counts only for top-level columns (a nested leaf's count is ambiguous when its parent
  struct is null); no stats at all inside lists and maps (Delta keeps none).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from txnlog.errors import TxnLogError
from txnlog.file_facts import (
    decode_stats,
    is_column_mapped,
    parse_partition_values,
    parse_stats,
    parse_timestamps,
    physical_name,
    stats_leaf,
    table_stats_type,
)
from txnlog.iceberg.errors import IcebergExportError
from txnlog.log import Metadata
from txnlog.storage import LogStore, locate

#: delta-spark's string stats prefix; a maximum this long may have been cut.
STRING_PREFIX_LENGTH = 32
_TIE_BREAKER = "\ufffd"
_EPOCH_DAY = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class _StatsColumn:
    physical: tuple[str, ...]
    field: NestedField
    arrow_type: pa.DataType
    top_level: bool


def _stats_columns(schema: pa.Schema, iceberg: Schema, mapped: bool) -> list[_StatsColumn]:
    out: list[_StatsColumn] = []

    def walk(arrow_fields: list[pa.Field], ice: StructType, parent: tuple[str, ...]) -> None:
        for af, nf in zip(arrow_fields, ice.fields):
            path = (*parent, physical_name(af, mapped))
            if isinstance(nf.field_type, StructType):
                walk(list(af.type), nf.field_type, path)
            elif nf.field_type.is_primitive:
                out.append(_StatsColumn(path, nf, af.type, not parent))

    walk(list(schema), iceberg.as_struct(), ())
    return out


def _internal(values: pa.Array) -> list[Any]:
    """Arrow values in pyiceberg's internal form (days, microseconds, Decimal, str, bytes)."""
    t = values.type
    if pa.types.is_timestamp(t):
        return values.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_date(t):
        return values.cast(pa.date32()).cast(pa.int32()).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_null(t):
        return [None] * len(values)
    return values.to_pylist()  # type: ignore[no-any-return]


def _safe_upper(t: IcebergType, value: Any) -> Any:
    """An upper bound no tighter than the data, or None when none can be trusted."""
    if isinstance(t, (TimestampType, TimestamptzType)):
        # A whole millisecond may be a truncation of any microsecond inside it.
        return value + 999 if value % 1000 == 0 else value
    if isinstance(t, StringType):
        return None if len(value) >= STRING_PREFIX_LENGTH or _TIE_BREAKER in value else value
    if isinstance(t, (FloatType, DoubleType)) and math.isnan(value):
        return None
    return value


def _safe_lower(t: IcebergType, value: Any) -> Any:
    if isinstance(t, (FloatType, DoubleType)) and math.isnan(value):
        return None
    return value


def _footer_rows(store: LogStore, relative: str | None, uri: str) -> int:
    """Rows of a file whose add carries no stats, from its Parquet footer."""
    if relative is None:
        return -1  # outside the root (shallow clone): Iceberg's "unknown", readers scan it
    try:
        with store.open_input(relative) as f:
            return int(pq.ParquetFile(f).metadata.num_rows)
    except TxnLogError:
        raise
    except Exception as e:
        raise IcebergExportError(f"cannot read the Parquet footer of {uri} for its row count: {e}") from e


_StatsLists = list[tuple[int, PrimitiveType, bool, list[Any], list[Any], list[Any]]]
#: Up to this many files, stats are decoded one by one (pyarrow's JSON reader costs more to start).
_FEW_FILES = 64


def _stats_from_arrow(files: pa.Table, metadata: Metadata, iceberg: Schema, mapped: bool) -> tuple[list[Any], _StatsLists]:
    """Column-wise, for many files: file_facts.parse_stats to the table's stats types."""
    schema = metadata.schema
    n = files.num_rows
    stats = parse_stats(files, table_stats_type(schema, metadata.partition_columns, metadata.configuration))
    records = _internal(stats_leaf(stats, ("numRecords",)))
    columns: _StatsLists = []
    for col in _stats_columns(schema, iceberg, mapped):
        ft = col.field.field_type
        assert isinstance(ft, PrimitiveType)
        lows = _internal(stats_leaf(stats, ("minValues", *col.physical)))
        highs = _internal(stats_leaf(stats, ("maxValues", *col.physical)))
        nulls = _internal(stats_leaf(stats, ("nullCount", *col.physical))) if col.top_level else [None] * n
        columns.append((col.field.field_id, ft, col.top_level, lows, highs, nulls))
    return records, columns


def _json_leaf(stats: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    node: Any = stats
    for name in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(name)
    return node


def _json_value(ft: PrimitiveType, at: pa.DataType, value: Any, rounding: str) -> Any:
    """One stats JSON value in pyiceberg's internal form; None when it is not of the column's type
    (an unknown bound, never a wrong one)."""
    if value is None:
        return None
    try:
        if isinstance(ft, BooleanType):
            return value if isinstance(value, bool) else None
        if isinstance(ft, (IntegerType, LongType)):
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(ft, (FloatType, DoubleType)):
            return float(value) if not isinstance(value, bool) else None
        if isinstance(ft, DecimalType):
            number = decimal.Decimal(str(value))
            return number.quantize(decimal.Decimal(1).scaleb(-ft.scale), rounding=rounding)
        if isinstance(ft, StringType):
            return value if isinstance(value, str) else None
        if isinstance(ft, DateType):
            return (dt.date.fromisoformat(value) - _EPOCH_DAY).days if isinstance(value, str) else None
        if isinstance(ft, (TimestampType, TimestamptzType)) and isinstance(value, str):
            parsed = parse_timestamps(pa.array([value], pa.string()), pa.timestamp("us", tz="UTC"))
            return parsed.cast(pa.int64())[0].as_py()
    except (ValueError, ArithmeticError, TypeError, pa.ArrowException):
        return None
    return None


def _stats_from_json(files: pa.Table, schema: pa.Schema, iceberg: Schema, mapped: bool) -> tuple[list[Any], _StatsLists]:
    """File by file, for a few files (a commit's adds): the same values as :func:`_stats_from_arrow`."""
    decoded = [decode_stats(text) for text in files.column("stats").to_pylist()]
    records = [r if isinstance(r := _json_leaf(s, ("numRecords",)), int) and not isinstance(r, bool) else None for s in decoded]
    columns: _StatsLists = []
    for col in _stats_columns(schema, iceberg, mapped):
        ft = col.field.field_type
        assert isinstance(ft, PrimitiveType)
        lows = [_json_value(ft, col.arrow_type, _json_leaf(s, ("minValues", *col.physical)), decimal.ROUND_FLOOR) for s in decoded]
        highs = [_json_value(ft, col.arrow_type, _json_leaf(s, ("maxValues", *col.physical)), decimal.ROUND_CEILING) for s in decoded]
        nulls = [_json_leaf(s, ("nullCount", *col.physical)) if col.top_level else None for s in decoded]
        nulls = [v if isinstance(v, int) and not isinstance(v, bool) else None for v in nulls]
        columns.append((col.field.field_id, ft, col.top_level, lows, highs, nulls))
    return records, columns


def data_files(
    files: pa.Table,
    metadata: Metadata,
    iceberg: Schema,
    spec: PartitionSpec,
    store: LogStore,
    *,
    allow_absolute_paths: bool = False,
    version: int | None = None,
) -> list[DataFile]:
    """One Iceberg DataFile per row of a Delta file list (``Snapshot.files()`` columns). A file's
    deletion vector is not its concern: deletes.py writes it as a position delete file. The
    record count and stats describe the physical file (Delta's numRecords counts deleted rows too,
    and its bounds, tight or wide, hold every live row: what a reader skipping files needs)."""
    n = files.num_rows
    if n == 0:
        return []
    schema = metadata.schema
    conf: Mapping[str, str] = metadata.configuration
    mapped = is_column_mapped(conf)
    locations = [locate(store.root_uri, p, allow_absolute=allow_absolute_paths, version=version) for p in files.column("path").to_pylist()]
    sizes = files.column("size").to_pylist()

    parts = parse_partition_values(files, schema, metadata.partition_columns, conf)
    part_values = [_internal(parts.column(i).combine_chunks()) for i in range(parts.num_columns)]

    if n <= _FEW_FILES:
        records, columns = _stats_from_json(files, schema, iceberg, mapped)
    else:
        records, columns = _stats_from_arrow(files, metadata, iceberg, mapped)

    out = []
    for i in range(n):
        found = records[i]
        count = int(found) if found is not None else _footer_rows(store, locations[i].relative, locations[i].uri)
        value_counts: dict[int, int] = {}
        null_counts: dict[int, int] = {}
        lower: dict[int, bytes] = {}
        upper: dict[int, bytes] = {}
        has_stats = found is not None
        for field_id, ft, top_level, lows, highs, nulls in columns:
            if not has_stats:
                continue
            null_count = nulls[i]
            if top_level and null_count is not None:
                value_counts[field_id] = count
                null_counts[field_id] = int(null_count)
            lo, hi = lows[i], highs[i]
            if lo is not None and (lo := _safe_lower(ft, lo)) is not None:
                lower[field_id] = to_bytes(ft, lo)
            if hi is not None and (hi := _safe_upper(ft, hi)) is not None:
                upper[field_id] = to_bytes(ft, hi)
        df = DataFile.from_args(
            _table_format_version=2,
            content=DataFileContent.DATA,
            file_path=locations[i].uri,
            file_format=FileFormat.PARQUET,
            partition=Record(*[values[i] for values in part_values]),
            record_count=count,
            file_size_in_bytes=sizes[i],
            column_sizes=None,
            value_counts=value_counts or None,
            null_value_counts=null_counts or None,
            nan_value_counts=None,
            lower_bounds=lower or None,
            upper_bounds=upper or None,
            key_metadata=None,
            split_offsets=None,
            equality_ids=None,
            sort_order_id=None,
        )
        df.spec_id = spec.spec_id
        out.append(df)
    return out
