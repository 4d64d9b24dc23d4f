"""Per-file statistics: the ``add.stats`` JSON, computed from the Arrow rows of one data file.

Nothing here knows how or where the file was written, so the driver-side writer and an
executor-side Spark writer share it. Each column is aggregated with Arrow compute
(``min_max``, ``null_count``); Python only touches the few resulting scalars. A writer that
encodes the rows as Parquet may instead hand over the footer's row-group statistics for the
string columns (:meth:`StatsCollector.bounds_from_parquet`): the encoder compares every string
anyway, and a second pass over them was most of the cost of a file's stats. The result is the
same: Parquet's min and max of a string column are exact, in the same byte order.

Rules (Delta PROTOCOL.md "Per-file Statistics", and what delta-spark's StatisticsCollection writes):

- ``nullCount`` for every stats leaf, including booleans, binary, arrays and maps (whose own
  nulls are counted); nested struct leaves count a null parent as null.
- ``minValues``/``maxValues`` only for numbers, decimals, dates, timestamps and strings.
- Strings keep a 32-character prefix. A cut max gets delta-spark's tie-breaker ``U+FFFD``
  appended, after first keeping any following characters that are themselves >= ``U+FFFD`` so
  the result still sorts above the original; if that would need more than 32 extra characters,
  the max is dropped.
- Timestamps are written with millisecond precision: the min rounded down, the max rounded up,
  so both stay bounds (the protocol lets writers truncate the max; readers that add a
  millisecond back still get a bound).
- A float column holding NaN gets no min/max (Spark orders NaN above every number, so no finite
  max bounds it); infinite bounds are dropped because JSON cannot carry them.
- A column whose values are all null gets ``nullCount == numRecords`` and no min/max.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txnlog.file_facts import ColumnPath, encode_stats, leaf_paths, physical_path

#: Characters of a string min/max kept (delta-spark's ``stats.skipping.string.prefixLength``).
STRING_PREFIX_LENGTH = 32
#: Appended to a cut string max; delta-spark's choice.
MAX_TIE_BREAKER = "\ufffd"

#: Parquet writers (Arrow's) leave a column chunk's min and max out when either is longer than
#: this many bytes; rows holding a longer string get their bounds from Arrow compute instead.
PARQUET_STATISTICS_LIMIT = 4096

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1)
# Timestamp ticks per millisecond, by unit (seconds are handled as a multiplication).
_TICKS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}


# --- aggregation -----------------------------------------------------------------------------


def _bound_kind(t: pa.DataType) -> str | None:
    """How min/max are taken and written for a column of type ``t``; None: nullCount only."""
    if pa.types.is_dictionary(t):
        return _bound_kind(t.value_type)
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t) and not pa.types.is_float16(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    return None


class _Leaf:
    """Running min, max and null count of one stats column."""

    __slots__ = ("path", "keys", "type", "kind", "null_count", "low", "high", "has_nan", "missing", "parquet_leaf")

    def __init__(self, path: ColumnPath, keys: ColumnPath, type_: pa.DataType | None) -> None:
        self.path = path
        self.keys = keys  # the names written in the JSON: physical names under column mapping
        self.type = type_
        self.missing = type_ is None  # not in the data: read back as all nulls
        self.kind = None if type_ is None else _bound_kind(type_)
        self.null_count = 0
        self.low: Any = None
        self.high: Any = None
        self.has_nan = False
        self.parquet_leaf: int | None = None  # where the file's footer has this column's bounds

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        self.null_count += values.null_count
        if self.kind is None or self.has_nan or values.null_count == len(values):
            return
        if self.parquet_leaf is not None and pc.max(pc.binary_length(values)).as_py() <= PARQUET_STATISTICS_LIMIT:
            return  # the footer's row-group statistics bound these rows
        t = values.type
        if pa.types.is_dictionary(t):
            values = values.cast(t.value_type)
            t = t.value_type
        if self.kind == "float":
            if pc.any(pc.is_nan(values)).as_py():
                self.has_nan = True
                return
        elif self.kind == "timestamp":
            values = values.cast(pa.int64())  # ticks in the column's unit: no datetime limits
        elif self.kind == "date":
            values = values.cast(pa.date32()).cast(pa.int32()) if pa.types.is_date64(t) else values.cast(pa.int32())
        elif pa.types.is_string_view(t):
            values = values.cast(pa.large_string())
        result = pc.min_max(values)
        self.add_bounds(result["min"].as_py(), result["max"].as_py())

    def add_bounds(self, low: Any, high: Any) -> None:
        """Widen the running bounds by (``low``, ``high``), given as :meth:`update` keeps them:
        ints, floats, ``Decimal``, days for dates, ticks of the column's unit for timestamps, str."""
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    # -- rendering --

    def bounds(self, num_records: int) -> tuple[Any, Any]:
        """(min, max) as JSON values; None where no valid bound can be written."""
        if self.kind is None or self.has_nan or self.low is None or self.null_count >= num_records:
            return None, None
        if self.kind == "int":
            return self.low, self.high
        if self.kind == "float":  # + 0.0: -0.0 and 0.0 are one bound (Parquet footers write a zero min as -0.0)
            return (self.low + 0.0 if math.isfinite(self.low) else None, self.high + 0.0 if math.isfinite(self.high) else None)
        if self.kind == "decimal":
            return self.low, self.high  # Decimals: encode_stats writes them as exact JSON numbers
        if self.kind == "date":
            return _date_text(self.low), _date_text(self.high)
        if self.kind == "timestamp":
            assert isinstance(self.type, pa.TimestampType)
            unit, utc = self.type.unit, self.type.tz is not None
            return _timestamp_text(_to_ms(self.low, unit, up=False), utc), _timestamp_text(_to_ms(self.high, unit, up=True), utc)
        return truncate_min_string(self.low), truncate_max_string(self.high)


def _date_text(days: int) -> str | None:
    try:
        return (_EPOCH_DATE + _dt.timedelta(days=days)).isoformat()
    except OverflowError:  # outside years 1..9999: no ISO text, so no bound
        return None


def _to_ms(ticks: int, unit: str, *, up: bool) -> int:
    if unit == "s":
        return ticks * 1000
    per_ms = _TICKS_PER_MS[unit]
    return -(-ticks // per_ms) if up else ticks // per_ms


def _timestamp_text(ms: int, utc: bool) -> str | None:
    try:
        text = (_EPOCH + _dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
    except OverflowError:
        return None
    return text + "Z" if utc else text


def truncate_min_string(value: str) -> str:
    """A lower bound of ``value`` at most :data:`STRING_PREFIX_LENGTH` characters long."""
    return value[:STRING_PREFIX_LENGTH]


def truncate_max_string(value: str) -> str | None:
    """An upper bound of ``value`` about :data:`STRING_PREFIX_LENGTH` characters long, or None.

    Characters are code points, compared in code point order (the UTF-8 byte order Spark and
    Arrow use). The prefix is extended over characters >= U+FFFD (appending U+FFFD after them
    would sort below them) and then U+FFFD is appended.
    """
    if len(value) <= STRING_PREFIX_LENGTH:
        return value
    end = STRING_PREFIX_LENGTH
    while end < len(value) and value[end] >= MAX_TIE_BREAKER:
        end += 1
        if end - STRING_PREFIX_LENGTH > STRING_PREFIX_LENGTH:
            return None
    if end == len(value):
        return value
    return value[:end] + MAX_TIE_BREAKER


# --- collection ------------------------------------------------------------------------------


def _resolve(schema: pa.Schema, path: ColumnPath) -> tuple[list[int], pa.DataType] | None:
    """Field indices of ``path`` in ``schema`` (exact name, else case-insensitive) and its type."""
    fields: Sequence[pa.Field] = list(schema)
    indices: list[int] = []
    current: pa.DataType | None = None
    for depth, name in enumerate(path):
        if depth:
            if current is None or not pa.types.is_struct(current):
                return None
            fields = list(current)
        index = next((i for i, f in enumerate(fields) if f.name == name), None)
        if index is None:
            index = next((i for i, f in enumerate(fields) if f.name.lower() == name.lower()), None)
        if index is None:
            return None
        indices.append(index)
        current = fields[index].type
    assert current is not None
    return indices, current


class StatsCollector:
    """Accumulates the stats of one data file over the batches written to it.

    ``schema`` is the schema of the batches passed to :meth:`update` (logical names, Delta field
    metadata kept); ``columns`` are logical column paths (from
    :func:`txnlog.file_facts.stats_columns`); a path naming a struct stands for its leaves. With
    ``mapped`` (column mapping), the JSON is keyed by physical names.
    """

    def __init__(self, schema: pa.Schema, columns: Sequence[ColumnPath], *, mapped: bool = False) -> None:
        self.num_records = 0
        self._names = schema.names
        self._leaves: list[_Leaf] = []
        self._indices: list[list[int] | None] = []
        for path in columns:
            resolved = _resolve(schema, tuple(path))
            if resolved is not None and pa.types.is_struct(resolved[1]):
                expanded = leaf_paths(pa.field(path[-1], resolved[1]), tuple(path[:-1]))
            else:
                expanded = [tuple(path)]
            for leaf_path in expanded:
                found = _resolve(schema, leaf_path)
                keys = physical_path(schema, leaf_path, mapped) if found else leaf_path
                self._leaves.append(_Leaf(leaf_path, keys, found[1] if found else None))
                self._indices.append(found[0] if found else None)

    def bounds_from_parquet(self, file_schema: pa.Schema, file_columns: Sequence[str]) -> None:
        """Take the min and max of the top-level string columns from the footer of the Parquet
        file the rows go to (:meth:`add_parquet_footer`, after it is written) instead of
        computing them. ``file_schema`` is the file's Arrow schema and ``file_columns`` the
        name, in the rows given to :meth:`update`, of each of its columns. Rows holding a
        string longer than the footer keeps (:data:`PARQUET_STATISTICS_LIMIT`) are still
        bounded here. Dictionary and view columns: Arrow compute, as before."""
        leaves = _parquet_leaves(file_schema)
        column_leaf = {name: leaves.get((field.name,)) for name, field in zip(file_columns, file_schema)}
        for entry, indices in zip(self._leaves, self._indices):
            if entry.kind != "string" or indices is None or len(indices) != 1 or entry.type is None:
                continue
            if not (pa.types.is_string(entry.type) or pa.types.is_large_string(entry.type)):
                continue
            name = self._names[indices[0]]
            if column_leaf.get(name) is not None and file_schema.field(file_columns.index(name)).type == entry.type:
                entry.parquet_leaf = column_leaf[name]

    def add_parquet_footer(self, metadata: Any) -> None:
        """Merge the bounds in ``metadata`` (the written file's ``pyarrow.parquet.FileMetaData``)
        into the columns :meth:`bounds_from_parquet` chose."""
        for entry in self._leaves:
            if entry.parquet_leaf is None:
                continue
            for group in range(metadata.num_row_groups):
                statistics = metadata.row_group(group).column(entry.parquet_leaf).statistics
                if statistics is not None and statistics.has_min_max:
                    entry.add_bounds(statistics.min, statistics.max)

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        self.num_records += data.num_rows
        if not data.num_rows:
            return
        for leaf, indices in zip(self._leaves, self._indices):
            if indices is None:
                continue
            values: Any = data.column(indices[0])
            for i in indices[1:]:
                values = pc.struct_field(values, [i])  # a null parent makes the child null
            leaf.update(values)

    def to_dict(self) -> dict[str, Any]:
        """The stats as a dict for :func:`txnlog.file_facts.encode_stats` (decimals as ``Decimal``)."""
        low_values: dict[str, Any] = {}
        high_values: dict[str, Any] = {}
        null_counts: dict[str, Any] = {}
        for leaf in self._leaves:
            _put(null_counts, leaf.keys, self.num_records if leaf.missing else leaf.null_count)
            low, high = leaf.bounds(self.num_records)
            if low is not None:
                _put(low_values, leaf.keys, low)
            if high is not None:
                _put(high_values, leaf.keys, high)
        out: dict[str, Any] = {"numRecords": self.num_records}
        if low_values:
            out["minValues"] = low_values
        if high_values:
            out["maxValues"] = high_values
        if null_counts:
            out["nullCount"] = null_counts
        return out

    def to_json(self) -> str:
        return encode_stats(self.to_dict())


def _leaf_count(t: pa.DataType) -> int:
    """How many Parquet leaf columns a column of Arrow type ``t`` is stored as."""
    if pa.types.is_struct(t):
        return sum(_leaf_count(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return _leaf_count(t.value_type)
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_dictionary(t):
        return _leaf_count(t.value_type)
    return 1


def _put(tree: dict[str, Any], keys: ColumnPath, value: Any) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def file_stats(data: pa.Table | pa.RecordBatch, columns: list[ColumnPath], *, mapped: bool = False) -> str:
    """The Delta stats JSON string of a data file holding exactly the rows of ``data``."""
    collector = StatsCollector(data.schema, columns, mapped=mapped)
    collector.update(data)
    return collector.to_json()


# --- from a Parquet footer ---------------------------------------------------------------------

# Wide enough for any decimal's unscaled digits (Delta decimals have at most 38).
_DECIMAL_CONTEXT = decimal.Context(prec=80)


# The ``created_by`` of parquet-java's files, whose float statistics order NaN above every number.
_PARQUET_JAVA = "parquet-mr "


def parquet_file_stats(file: pq.ParquetFile, schema: pa.Schema, columns: Sequence[ColumnPath], *, mapped: bool = False,
                       nan_in_max: bool = False) -> str:
    """The stats JSON of a data file another writer (Spark's) wrote in the table's layout:
    the JSON :func:`file_stats` gives for the file's rows, by the same rules.

    ``schema`` and ``columns`` are as for :class:`StatsCollector` (the table's logical schema);
    the file holds the physical names. Each leaf is taken from the footer where the footer is
    exact: null counts of columns reached through structs only, and min/max of integers, dates,
    microsecond timestamps, decimals and strings (full values, cut here as :func:`file_stats`
    cuts them). Floats take the footer's bounds only when ``nan_in_max`` and the file is
    parquet-java's (Spark's writer): it orders NaN above every number, so a chunk holding one
    has NaN for its max, and a numeric max means no NaN was written. Other writers leave NaN out
    of the bounds, so a footer of theirs cannot say whether one was written. Any other leaf, or
    one whose footer lacks a statistic (Parquet writers drop large values' bounds), is read from
    the file and aggregated as :func:`file_stats` aggregates it.
    """
    collector = StatsCollector(schema, columns, mapped=mapped)
    metadata = file.metadata
    collector.num_records = metadata.num_rows
    if not metadata.num_rows:
        return collector.to_json()
    leaves = _parquet_leaves(file.schema_arrow)
    nan_in_max = nan_in_max and (metadata.created_by or "").startswith(_PARQUET_JAVA)
    unread = [leaf for leaf, indices in zip(collector._leaves, collector._indices)
              if indices is not None and not _from_footer(leaf, metadata, leaves.get(leaf.keys), nan_in_max)]
    if unread:
        table = file.read(columns=sorted({leaf.keys[0] for leaf in unread}))
        for leaf in unread:
            values: Any = table.column(leaf.keys[0])
            for name in leaf.keys[1:]:
                values = pc.struct_field(values, [values.type.get_field_index(name)])  # a null parent makes the child null
            leaf.update(values)
    return collector.to_json()


def _parquet_leaves(schema: pa.Schema) -> dict[ColumnPath, int]:
    """Path -> Parquet column index of each leaf reached through structs only (leaves below a
    list or map are counted, not named: their footer statistics are not a stats leaf's)."""
    out: dict[ColumnPath, int] = {}
    index = 0

    def visit(field: pa.Field, path: ColumnPath) -> None:
        nonlocal index
        if pa.types.is_struct(field.type):
            for child in field.type:
                visit(child, (*path, child.name))
        elif pa.types.is_nested(field.type):
            index += _leaf_count(field.type)
        else:
            out[path] = index
            index += 1

    for field in schema:
        visit(field, (field.name,))
    return out


def _from_footer(leaf: _Leaf, metadata: pq.FileMetaData, index: int | None, nan_in_max: bool) -> bool:
    """Fill ``leaf`` from the footer's statistics of Parquet column ``index``; False (``leaf``
    untouched) where they do not give exactly what reading the rows would."""
    if index is None or (leaf.kind == "float" and not nan_in_max):
        return False
    nulls = 0
    bounds: list[tuple[Any, Any]] = []
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        stats = chunk.statistics
        if stats is None or not stats.has_null_count:
            return False
        nulls += stats.null_count
        if leaf.kind is None:
            continue
        if stats.has_min_max:
            low, high = _footer_value(leaf, stats, stats.min_raw), _footer_value(leaf, stats, stats.max_raw)
            if low is None or high is None:
                return False
            bounds.append((low, high))
        elif stats.null_count < chunk.num_values:
            return False  # values without bounds
    leaf.null_count = nulls
    for low, high in bounds:
        leaf.add_bounds(low, high)
    return True


def _footer_value(leaf: _Leaf, stats: Any, raw: Any) -> Any:
    """A footer's raw min or max as :meth:`_Leaf.update` keeps values; None when it cannot be
    taken as it is."""
    kind = leaf.kind
    if kind in ("int", "date") and isinstance(raw, int):
        return raw
    if kind == "float" and isinstance(raw, float):
        return None if math.isnan(raw) else raw
    if kind == "timestamp" and isinstance(raw, int):
        unit = getattr(leaf.type, "unit", None)
        written = "microseconds" if "MICROS" in str(stats.logical_type).upper() else None
        return raw if unit == "us" and written else None
    if kind == "decimal" and isinstance(leaf.type, pa.Decimal128Type | pa.Decimal256Type):
        unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, bytes) else raw
        return decimal.Decimal(unscaled).scaleb(-leaf.type.scale, context=_DECIMAL_CONTEXT) if isinstance(unscaled, int) else None
    if kind == "string":
        try:
            return raw.decode("utf-8") if isinstance(raw, bytes) else raw if isinstance(raw, str) else None
        except UnicodeDecodeError:
            return None
    return None
