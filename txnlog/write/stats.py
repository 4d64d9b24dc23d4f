"""Per-file statistics: the ``add.stats`` JSON, computed from the Arrow rows of one data file.

Nothing here knows how or where the file was written, so the driver-side writer and an
executor-side Spark writer share it. Each column is aggregated with Arrow compute
(``min_max``, ``null_count``); Python only touches the few resulting scalars.

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
import math
from decimal import Decimal
from typing import Any, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidTablePropertyError
from txnlog.properties import DATA_SKIPPING_NUM_INDEXED_COLS, DATA_SKIPPING_STATS_COLUMNS
from txnlog.schema import delta_field_metadata

#: Characters of a string min/max kept (delta-spark's ``stats.skipping.string.prefixLength``).
STRING_PREFIX_LENGTH = 32
#: Appended to a cut string max; delta-spark's choice.
MAX_TIE_BREAKER = "\ufffd"
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"

ColumnPath = tuple[str, ...]

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1)
# Timestamp ticks per millisecond, by unit (seconds are handled as a multiplication).
_TICKS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}


# --- which columns -------------------------------------------------------------------------


def stats_columns(
    schema: pa.Schema, configuration: Mapping[str, str], partition_columns: Sequence[str]
) -> list[ColumnPath]:
    """Leaf column paths to collect stats for, in schema order.

    Exactly the columns named by ``delta.dataSkippingStatsColumns`` (a struct name stands for all
    its leaves; names match case-insensitively) when set, else the first
    ``delta.dataSkippingNumIndexedCols`` leaves (-1: all). Partition columns never have stats;
    arrays and maps count as one leaf each, as in delta-spark.
    """
    partitions = {c.lower() for c in partition_columns}
    leaves = [p for f in schema if f.name.lower() not in partitions for p in _leaf_paths(f, ())]
    wanted = DATA_SKIPPING_STATS_COLUMNS.get(configuration)
    if wanted is not None:
        prefixes = [tuple(part.lower() for part in parse_column_path(w)) for w in wanted]
        return [leaf for leaf in leaves if any(_lowered(leaf)[: len(p)] == p for p in prefixes)]
    limit = DATA_SKIPPING_NUM_INDEXED_COLS.get(configuration)
    if limit < -1:
        raise InvalidTablePropertyError(
            f"table property {DATA_SKIPPING_NUM_INDEXED_COLS.key}={limit} is invalid: expected -1 or more",
            key=DATA_SKIPPING_NUM_INDEXED_COLS.key,
        )
    return leaves if limit == -1 else leaves[:limit]


def _lowered(path: ColumnPath) -> ColumnPath:
    return tuple(p.lower() for p in path)


def _leaf_paths(field: pa.Field, parent: ColumnPath) -> list[ColumnPath]:
    path = (*parent, field.name)
    if pa.types.is_struct(field.type):
        return [leaf for child in field.type for leaf in _leaf_paths(child, path)]
    return [path]


def parse_column_path(text: str) -> ColumnPath:
    """``a.b`` or ``` `a.b`.c ``` (backticks quote a name; a doubled backtick is a literal one;
    whitespace around a name is ignored)."""
    parts: list[str] = []
    buf: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "`" and text[i + 1 : i + 2] == "`":
                buf.append("`")
                i += 1
            elif ch == "`":
                quoted = False
            else:
                buf.append(ch)
        elif ch == "`":
            quoted = True
        elif ch == ".":
            parts.append("".join(buf))
            buf = []
        elif not ch.isspace():
            buf.append(ch)
        i += 1
    parts.append("".join(buf))
    return tuple(parts)


def physical_name_map(schema: pa.Schema) -> dict[str, str]:
    """Logical column path (names joined by ``.``) to physical name, for every struct field that
    carries ``delta.columnMapping.physicalName`` in its Delta metadata: the ``physical_names``
    argument of :func:`file_stats` for a column-mapped table."""
    out: dict[str, str] = {}

    def walk(field: pa.Field, parent: str) -> None:
        path = f"{parent}.{field.name}" if parent else field.name
        physical = delta_field_metadata(field).get(PHYSICAL_NAME_KEY)
        if physical:
            out[path] = str(physical)
        if pa.types.is_struct(field.type):
            for child in field.type:
                walk(child, path)

    for f in schema:
        walk(f, "")
    return out


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

    __slots__ = ("path", "keys", "type", "kind", "null_count", "low", "high", "has_nan", "missing")

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

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        self.null_count += values.null_count
        if self.kind is None or self.has_nan or values.null_count == len(values):
            return
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
        low, high = result["min"].as_py(), result["max"].as_py()
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    # -- rendering --

    def bounds(self, num_records: int) -> tuple[Any, Any]:
        """(min, max) as JSON values; None where no valid bound can be written."""
        if self.kind is None or self.has_nan or self.low is None or self.null_count >= num_records:
            return None, None
        if self.kind == "int":
            return self.low, self.high
        if self.kind == "float":
            return (self.low if math.isfinite(self.low) else None, self.high if math.isfinite(self.high) else None)
        if self.kind == "decimal":
            return _decimal_json(self.low), _decimal_json(self.high)
        if self.kind == "date":
            return _date_text(self.low), _date_text(self.high)
        if self.kind == "timestamp":
            assert isinstance(self.type, pa.TimestampType)
            unit, utc = self.type.unit, self.type.tz is not None
            return _timestamp_text(_to_ms(self.low, unit, up=False), utc), _timestamp_text(_to_ms(self.high, unit, up=True), utc)
        return truncate_min_string(self.low), truncate_max_string(self.high)


def _decimal_json(value: Decimal) -> orjson.Fragment:
    # Plain notation, scale digits kept ("-5.670"), as a JSON number: no float rounding.
    return orjson.Fragment(format(value, "f"))


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

    ``schema`` is the schema of the batches passed to :meth:`update`; ``columns`` are logical
    column paths (from :func:`stats_columns`); a path naming a struct stands for its leaves.
    ``physical_names`` maps logical paths joined by ``.`` to the physical name written in the
    JSON (see :func:`physical_name_map`).
    """

    def __init__(
        self,
        schema: pa.Schema,
        columns: Sequence[ColumnPath],
        *,
        physical_names: Mapping[str, str] | None = None,
    ) -> None:
        self.num_records = 0
        self._leaves: list[_Leaf] = []
        self._indices: list[list[int] | None] = []
        names = physical_names or {}
        for path in columns:
            resolved = _resolve(schema, tuple(path))
            if resolved is not None and pa.types.is_struct(resolved[1]):
                expanded = _leaf_paths(pa.field(path[-1], resolved[1]), tuple(path[:-1]))
            else:
                expanded = [tuple(path)]
            for leaf_path in expanded:
                found = _resolve(schema, leaf_path)
                keys = tuple(names.get(".".join(leaf_path[: i + 1]), leaf_path[i]) for i in range(len(leaf_path)))
                self._leaves.append(_Leaf(leaf_path, keys, found[1] if found else None))
                self._indices.append(found[0] if found else None)

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
        """The stats as a JSON-ready dict (decimals as ``orjson.Fragment`` numbers)."""
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
        return orjson.dumps(self.to_dict()).decode()


def _put(tree: dict[str, Any], keys: ColumnPath, value: Any) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def file_stats(
    data: pa.Table | pa.RecordBatch,
    columns: list[ColumnPath],
    *,
    physical_names: Mapping[str, str] | None = None,
) -> str:
    """The Delta stats JSON string of a data file holding exactly the rows of ``data``."""
    collector = StatsCollector(data.schema, columns, physical_names=physical_names)
    collector.update(data)
    return collector.to_json()
