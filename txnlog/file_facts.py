"""File-level facts: what the log says about each data file, in one place.

The checkpoint reader and writer, the predicates, the Parquet writer and the engines (Spark,
Iceberg) all read and write these facts through this module:

- **physical names** under column mapping: :func:`physical_name` (the one lookup), and what
  derives from it (:func:`physical_path`, :func:`physical_names`, :func:`physical_schema`);
- **stats columns**: :func:`stats_columns`, the one rule for which leaf columns get stats
  (``delta.dataSkippingStatsColumns``, quoted names such as ```a.b```, else the first
  ``delta.dataSkippingNumIndexedCols`` leaves), and :func:`stats_type`, their typed struct;
- **stats JSON**: :func:`encode_stats` / :func:`decode_stats` for one file, and
  :func:`parse_stats` for a whole file list: a typed ``StructArray`` (numRecords, nullCount,
  minValues/maxValues typed as the table's columns);
- **partition values**: :func:`parse_partition_values` to typed Arrow (NULLs as the protocol says)
  and :func:`partition_value_texts`, its inverse for writers;
- **the file key**: :func:`file_keys`, (path, deletion vector unique id) as one string.

Every function is vectorized over a file list: no Python object per file on these paths.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from txnlog import properties as props
from txnlog.errors import SchemaError
from txnlog.schema import delta_field_metadata, map_fields

logger = logging.getLogger(__name__)

ColumnPath = tuple[str, ...]

#: Parquet's field id key, set from the column mapping id.
FIELD_ID_KEY = b"PARQUET:field_id"
#: The directory name of a NULL partition value (Hive's).
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_US_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
_US_TIMESTAMP = pa.timestamp("us")
# A time of day, then an offset: tells ISO strings with a zone from naive ones.
_ZONE_SUFFIX = r"\d{2}:\d{2}(:\d{2}(\.\d*)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)$"
# A quoted NaN or infinity as a JSON value (Spark writes them so).
_QUOTED_NON_FINITE = r':\s*"(NaN|-?Infinity)"'
_JAVA_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


# --- column mapping ---------------------------------------------------------------------------


def is_column_mapped(configuration: Mapping[str, str]) -> bool:
    return props.COLUMN_MAPPING_MODE.get(configuration) != "none"


def physical_name(field: pa.Field, mapped: bool) -> str:
    """The name of ``field`` in data files, stats and partition values.

    Under column mapping (name or id mode) that is its ``delta.columnMapping.physicalName``,
    which must be there; otherwise the logical name.
    """
    if not mapped:
        return str(field.name)
    physical = delta_field_metadata(field).get(props.PHYSICAL_NAME_KEY)
    if not physical:
        raise SchemaError(
            f"column '{field.name}' has no {props.PHYSICAL_NAME_KEY} but the table uses column mapping", field=field.name
        )
    return str(physical)


def _field_chain(schema: pa.Schema | pa.StructType, path: ColumnPath) -> list[pa.Field] | None:
    """The fields along ``path`` (exact name, else the one case-insensitive match), or None."""
    fields: Sequence[pa.Field] = list(schema)
    chain: list[pa.Field] = []
    for depth, name in enumerate(path):
        if depth:
            parent = chain[-1].type
            if not pa.types.is_struct(parent):
                return None
            fields = list(parent)
        found = next((f for f in fields if f.name == name), None)
        if found is None:
            matches = [f for f in fields if f.name.lower() == name.lower()]
            found = matches[0] if len(matches) == 1 else None
        if found is None:
            return None
        chain.append(found)
    return chain


def physical_path(schema: pa.Schema, path: ColumnPath, mapped: bool) -> ColumnPath:
    """A logical column path (``("s", "a")``) as the names data files and stats use."""
    chain = _field_chain(schema, path)
    if chain is None:
        raise SchemaError(f"column '{'.'.join(path)}' is not in the table schema", field=".".join(path))
    return tuple(physical_name(f, mapped) for f in chain)


def physical_names(schema: pa.Schema, configuration: Mapping[str, str]) -> dict[str, str] | None:
    """Logical -> physical name of each top-level column under column mapping, else None."""
    if not is_column_mapped(configuration):
        return None
    return {f.name: physical_name(f, True) for f in schema}


def physical_schema(schema: pa.Schema | Sequence[pa.Field], mapped: bool) -> pa.Schema:
    """The schema as stored in Parquet: Delta metadata dropped; under column mapping, physical
    names and the column mapping id as each field's Parquet field id, at every nesting level."""
    return pa.schema([_physical_field(f, mapped) for f in schema])


def _physical_field(field: pa.Field, mapped: bool) -> pa.Field:
    metadata = None
    if mapped:
        column_id = delta_field_metadata(field).get(props.COLUMN_MAPPING_ID_KEY)
        if column_id is not None:
            metadata = {FIELD_ID_KEY: str(int(column_id)).encode()}
    return pa.field(physical_name(field, mapped), _physical_type(field.type, mapped), field.nullable, metadata=metadata)


def _physical_type(t: pa.DataType, mapped: bool) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_physical_field(child, mapped) for child in t])
    if pa.types.is_list(t):
        item = t.value_field
        return pa.list_(pa.field(item.name, _physical_type(item.type, mapped), item.nullable))
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return pa.map_(
            pa.field(key.name, _physical_type(key.type, mapped), False),
            pa.field(item.name, _physical_type(item.type, mapped), item.nullable),
        )
    return t


def physical_schema_string(schema_string: str, partition_columns: Sequence[str], mapped: bool) -> str:
    """The data files' schema in Delta's JSON form (for engines whose types are Delta's, such as
    Spark, where Arrow has no variant type): the table's non-partition columns, physical names
    at every nesting level under column mapping, Delta field metadata dropped. The JSON twin of
    :func:`physical_schema`."""
    partitions = {c.lower() for c in partition_columns}

    def visit_field(f: dict[str, Any]) -> dict[str, Any]:
        name = f["name"]
        if mapped:
            name = (f.get("metadata") or {}).get(props.PHYSICAL_NAME_KEY)
            if not name:
                raise SchemaError(f"column '{f['name']}' has no {props.PHYSICAL_NAME_KEY} but the table uses column mapping", field=f["name"])
        return {**f, "name": name, "metadata": {}}

    fields = orjson.loads(schema_string)["fields"]
    data = {"type": "struct", "fields": [f for f in fields if f["name"].lower() not in partitions]}
    return orjson.dumps(map_fields(data, visit_field)).decode()


# --- which columns get stats ------------------------------------------------------------------


def parse_column_path(text: str) -> ColumnPath:
    """``a.b`` or ```a.b`.c`` (backticks quote a name; a doubled backtick is a literal one;
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


def is_variant(t: pa.DataType) -> bool:
    return (
        pa.types.is_struct(t)
        and sorted(f.name for f in t) == ["metadata", "value"]
        and all(pa.types.is_binary(f.type) for f in t)
    )


def leaf_paths(field: pa.Field, parent: ColumnPath = ()) -> list[ColumnPath]:
    """The stats leaves under ``field``: struct children recursively; arrays, maps and variants
    are one leaf each, as in delta-spark."""
    path = (*parent, field.name)
    if pa.types.is_struct(field.type) and not is_variant(field.type):
        return [leaf for child in field.type for leaf in leaf_paths(child, path)]
    return [path]


def stats_columns(schema: pa.Schema, configuration: Mapping[str, str], partition_columns: Sequence[str]) -> list[ColumnPath]:
    """Leaf column paths (logical names) to collect stats for, in schema order.

    Exactly the columns named by ``delta.dataSkippingStatsColumns`` (a struct name stands for
    all its leaves; names match case-insensitively) when set, else the first
    ``delta.dataSkippingNumIndexedCols`` leaves (-1: all). Partition columns never have stats.
    """
    partitions = {c.lower() for c in partition_columns}
    leaves = [p for f in schema if f.name.lower() not in partitions for p in leaf_paths(f)]
    wanted = props.DATA_SKIPPING_STATS_COLUMNS.get(configuration)
    if wanted is not None:
        prefixes = [tuple(part.lower() for part in parse_column_path(w)) for w in wanted]
        return [leaf for leaf in leaves if any(tuple(p.lower() for p in leaf)[: len(w)] == w for w in prefixes)]
    limit = props.DATA_SKIPPING_NUM_INDEXED_COLS.get(configuration)
    return leaves if limit == -1 else leaves[:limit]


def has_min_max(t: pa.DataType) -> bool:
    """Types whose min/max a stats string may carry (delta-rs includes booleans)."""
    return bool(
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
    )


def _tree_type(entries: Iterable[tuple[ColumnPath, pa.DataType]]) -> pa.StructType | None:
    root: dict[str, Any] = {}
    for path, t in entries:
        node = root
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = t

    def to_type(node: dict[str, Any]) -> pa.StructType:
        return pa.struct([(k, to_type(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return to_type(root) if root else None


def stats_type(
    schema: pa.Schema, columns: Sequence[ColumnPath], *, mapped: bool, tight_bounds: bool = False
) -> pa.StructType:
    """The typed struct of the stats of ``columns`` (logical leaf paths), keyed by physical names:
    ``numRecords``, ``minValues``/``maxValues`` (for types with bounds), ``nullCount``."""
    bounds: list[tuple[ColumnPath, pa.DataType]] = []
    counts: list[tuple[ColumnPath, pa.DataType]] = []
    for path in columns:
        chain = _field_chain(schema, path)
        if chain is None:
            continue
        for leaf in leaf_paths(chain[-1], tuple(f.name for f in chain[:-1])):
            leaf_chain = _field_chain(schema, leaf)
            assert leaf_chain is not None
            key = tuple(physical_name(f, mapped) for f in leaf_chain)
            counts.append((key, pa.int64()))
            if has_min_max(leaf_chain[-1].type):
                bounds.append((key, leaf_chain[-1].type))
    fields = [pa.field("numRecords", pa.int64())]
    bound_type = _tree_type(bounds)
    if bound_type is not None:
        fields += [pa.field("minValues", bound_type), pa.field("maxValues", bound_type)]
    count_type = _tree_type(counts)
    if count_type is not None:
        fields.append(pa.field("nullCount", count_type))
    if tight_bounds:
        fields.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(fields)


def table_stats_type(
    schema: pa.Schema, partition_columns: Sequence[str], configuration: Mapping[str, str], *, tight_bounds: bool = False
) -> pa.StructType:
    """:func:`stats_type` of the table's :func:`stats_columns`."""
    columns = stats_columns(schema, configuration, partition_columns)
    return stats_type(schema, columns, mapped=is_column_mapped(configuration), tight_bounds=tight_bounds)


# --- stats JSON -------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(format(value, "f"))  # a bare JSON number, scale digits kept
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            text = value.strftime("%Y-%m-%dT%H:%M:%S.%f")
            return text[:-3] if text.endswith("000") else text
        text = value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
        return (text[:-3] if text.endswith("000") else text) + "Z"
    if isinstance(value, _dt.date):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} in stats")


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {k: v for k, x in value.items() if (v := _drop_nulls(x)) is not None}
        return out or None
    return value


def encode_stats(stats: Mapping[str, Any]) -> str:
    """The ``add.stats`` JSON of one file: absent statistics (None) left out, decimals as JSON
    numbers with their scale, timestamps as ISO-8601 (UTC ones with ``Z``), dates as ISO dates."""
    return orjson.dumps(_drop_nulls(stats) or {}, default=_json_default, option=orjson.OPT_PASSTHROUGH_DATETIME).decode()


def with_new_stat(text: str, stats: Mapping[str, Any], key: str, value: bool | int) -> str:
    """``text`` (an ``add.stats`` JSON object, decoded as ``stats``, without ``key``) with
    ``key: value`` added first, the rest left as written: re-encoding would turn decimals into
    floats."""
    entry = f"{orjson.dumps(key).decode()}:{orjson.dumps(value).decode()}"
    return text.replace("{", "{" + entry + ",", 1) if stats else "{" + entry + "}"


def decode_stats(text: str | None) -> dict[str, Any] | None:
    """One ``add.stats`` string as a dict; None when absent or not a JSON object."""
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """What the JSON reader is asked for: temporal values as text (parsed afterwards, tolerant
    of every writer's form), decimals and floats through doubles (delta-rs writes decimals so)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_read_type(f.type)) for f in t])
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_decimal(t) or pa.types.is_floating(t):
        return pa.float64()
    return t


def _stats_lines(raw: pa.Array) -> pa.Array:
    """Stats strings as one-line JSON documents, ``{}`` where missing."""
    lines = pc.if_else(pc.fill_null(pc.equal(raw, ""), True), pa.scalar("{}"), raw)
    if pc.any(pc.match_substring_regex(lines, "[\r\n]")).as_py():
        # Raw newlines can only be JSON whitespace (inside strings they are escaped).
        lines = pc.replace_substring_regex(lines, "[\r\n]", " ")
    if pc.any(pc.match_substring_regex(lines, _QUOTED_NON_FINITE)).as_py():
        lines = pc.replace_substring_regex(lines, _QUOTED_NON_FINITE, ":\\1")
    return lines


def _try_read_json(lines: pa.Array, schema: pa.Schema) -> pa.Table | None:
    """``lines`` read in one vectorized call; None if any does not fit ``schema``."""
    sep, empty = pa.scalar("\n", pa.large_string()), pa.scalar("", pa.large_string())
    joined = pc.binary_join_element_wise(pc.cast(lines, pa.large_string()), sep, empty)
    # The joined array's data buffer is the newline-delimited text: read it without a copy.
    offsets = pa.Array.from_buffers(pa.int64(), len(joined) + 1, [None, joined.buffers()[1]], offset=joined.offset)
    data = joined.buffers()[2][offsets[0].as_py() : offsets[-1].as_py()]
    longest = pc.max(pc.binary_length(joined)).as_py()
    options = pa_json.ReadOptions(use_threads=True, block_size=max(1 << 20, 2 * longest))
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(pa.BufferReader(data), read_options=options, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    # A blank document is skipped by the reader: the row count would not line up.
    return table.select(schema.names).cast(schema) if table.num_rows == len(lines) else None


def _read_json_lines(lines: pa.Array, schema: pa.Schema) -> tuple[pa.Table, pa.Array]:
    """One row per document, and a mask of the documents that do not parse or fit (their row
    is null: unknown stats). Bad documents are isolated by bisection within a budget, past which
    whole failing slices become unknown rather than costing one read per document."""
    budget = [max(64, len(lines) // 1000)]

    def nulls(n: int) -> pa.Table:
        return pa.table({f.name: pa.nulls(n, f.type) for f in schema}, schema=schema)

    def read(part: pa.Array) -> tuple[list[pa.Table], list[pa.Array]]:
        table = _try_read_json(part, schema)
        if table is not None:
            return [table], [_falses(len(part))]
        if len(part) == 1 or budget[0] <= 0:
            budget[0] -= 1
            if budget[0] == -1:
                logger.warning("many stats strings do not parse with the expected types; they count as unknown")
            return [nulls(len(part))], [_trues(len(part))]
        mid = len(part) // 2
        left, right = read(part.slice(0, mid)), read(part.slice(mid))
        return left[0] + right[0], left[1] + right[1]

    if not len(lines):
        return schema.empty_table(), pa.array([], pa.bool_())
    tables, bad = read(lines)
    return pa.concat_tables(tables), pa.concat_arrays(bad)


def _typed(values: pa.Array, target: pa.DataType) -> pa.Array:
    """A leaf read by the JSON reader (see :func:`_json_read_type`) as ``target``; values that do
    not convert become null."""
    if values.type == target:
        return values
    if pa.types.is_struct(target):
        children = [_typed(values.field(f.name), f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=values.is_null())
    if pa.types.is_decimal(target):
        return convert_tolerant(values, lambda a: pc.cast(pc.round(a, ndigits=target.scale), target, safe=False), target)[0]
    if pa.types.is_floating(target):
        return pc.cast(values, target, safe=False)
    return convert_tolerant(values, string_converter(target), target)[0]


def parse_stats(files: pa.Table | pa.Array | pa.ChunkedArray, target: pa.StructType) -> pa.StructArray:
    """The ``stats`` column of a file list (or the column itself) parsed to ``target``, e.g.
    :func:`table_stats_type`. Missing stats give a null row; a value that does not parse as its
    column's type gives a null leaf (unknown), never an error."""
    raw = files.column("stats") if isinstance(files, pa.Table) else files
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks() if raw.num_chunks != 1 else raw.chunk(0)
    n = len(raw)
    read_schema = pa.schema([pa.field(f.name, _json_read_type(f.type)) for f in target])
    if n == 0 or raw.null_count == n:
        return pa.nulls(n, target)
    table, bad = _read_json_lines(_stats_lines(raw.cast(pa.string())), read_schema)
    children = [_typed(table.column(f.name).combine_chunks(), f.type) for f in target]
    missing = pc.or_(pc.fill_null(pc.or_(pc.is_null(raw), pc.equal(raw, "")), True), bad)
    return pa.StructArray.from_arrays(children, fields=list(target), mask=missing)


def num_records(files: pa.Table) -> int:
    """The rows of a file list, by its stats' ``numRecords`` (files without stats count 0)."""
    if files.num_rows <= 16:  # a few files: decoding them is quicker than a regex kernel
        counts = ((decode_stats(text) or {}).get("numRecords") for text in files.column("stats").to_pylist())
        return sum(n for n in counts if isinstance(n, int) and not isinstance(n, bool))
    found = pc.extract_regex(files.column("stats"), r'"numRecords"\s*:\s*(?P<n>\d+)')
    return int(pc.sum(pc.cast(pc.struct_field(found, "n"), pa.int64())).as_py() or 0)


def stats_leaf(stats: pa.StructArray, path: Sequence[str]) -> pa.Array:
    """One leaf of parsed stats (``("minValues", "a", "b")``), null where a parent is null or absent."""
    array: pa.Array = stats
    for name in path:
        if not pa.types.is_struct(array.type) or array.type.get_field_index(name) < 0:
            return pa.nulls(len(stats), pa.int64() if path[0] in ("nullCount", "numRecords") else pa.null())
        array = pc.struct_field(array, name)
    return array


# --- value conversions ------------------------------------------------------------------------


def _falses(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(False), n)


def _trues(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(True), n)


def parse_timestamps(strings: pa.Array, target: pa.DataType) -> pa.Array:
    """ISO-8601 or Delta's ``YYYY-MM-DD HH:MM:SS[.ffffff]`` text as ``target``; text without a
    zone is UTC (what the protocol recommends writers use)."""
    strings = pc.utf8_trim_whitespace(strings)
    zoned = pc.fill_null(pc.match_substring_regex(strings, _ZONE_SUFFIX), False)
    null_str = pa.scalar(None, pa.string())
    aware = pc.cast(pc.if_else(zoned, strings, null_str), _US_TIMESTAMP_UTC)
    naive = pc.cast(pc.cast(pc.if_else(zoned, null_str, strings), _US_TIMESTAMP), _US_TIMESTAMP_UTC)
    return pc.cast(pc.if_else(zoned, aware, naive), target)


def convert_tolerant(
    values: pa.Array, convert: Callable[[pa.Array], pa.Array], target: pa.DataType
) -> tuple[pa.Array, pa.Array]:
    """``convert(values)``, with the values it cannot convert null and flagged in a mask.

    One vectorized call in the common case; on failure the input is bisected, so k bad values
    cost O(k log n) calls rather than a Python loop over every value.
    """
    try:
        return convert(values), _falses(len(values))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
        if len(values) <= 1:
            return pa.nulls(len(values), target), _trues(len(values))
    mid = len(values) // 2
    left, left_bad = convert_tolerant(values.slice(0, mid), convert, target)
    right, right_bad = convert_tolerant(values.slice(mid), convert, target)
    return pa.concat_arrays([left, right]), pa.concat_arrays([left_bad, right_bad])


def string_converter(target: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    """How text (a stats bound, a partition value, a literal) becomes a value of ``target``."""
    if pa.types.is_timestamp(target):
        return lambda a: parse_timestamps(a, target)
    if pa.types.is_binary(target) or pa.types.is_large_binary(target):
        return lambda a: pc.cast(a, target)  # the text's UTF-8 bytes, as delta-spark and delta-rs read it
    return lambda a: pc.cast(pc.utf8_trim_whitespace(a), target)


# --- partition values -------------------------------------------------------------------------


def parse_partition_column(strings: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Serialized partition values as ``target``, and a mask of the ones that do not parse.

    An empty string is NULL for every type (the protocol's rule, Spark's behaviour for strings).
    """
    strings = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return pc.cast(strings, target), _falses(len(strings))
    return convert_tolerant(strings, string_converter(target), target)


def partition_value_keys(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """Every key of a ``partition_values`` map column, flattened, and how many each row has
    (0 for a null map)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    as_list = values.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))
    return pc.list_flatten(as_list).field("key"), pc.fill_null(pc.list_value_length(as_list), 0)


def partition_fields(schema: pa.Schema, partition_columns: Sequence[str], mapped: bool) -> list[tuple[str, pa.Field]]:
    """(key in ``partitionValues``, logical field) for each partition column."""
    out = []
    for name in partition_columns:
        chain = _field_chain(schema, (name,))
        if chain is None:
            raise SchemaError(f"partition column '{name}' is not in the table schema", field=name)
        out.append((physical_name(chain[0], mapped), chain[0]))
    return out


def parse_partition_values(
    files: pa.Table | pa.Array | pa.ChunkedArray,
    schema: pa.Schema,
    partition_columns: Sequence[str],
    configuration: Mapping[str, str] | None = None,
    *,
    physical: bool = False,
) -> pa.Table:
    """The ``partition_values`` of a file list as one typed column per partition column
    (logical names, or physical ones with ``physical=True``). A value that does not parse as its
    column's type is null and logged."""
    values = files.column("partition_values") if isinstance(files, pa.Table) else files
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    mapped = is_column_mapped(configuration or {})
    columns: dict[str, pa.Array] = {}
    fields = []
    for key, field in partition_fields(schema, partition_columns, mapped):
        raw = pc.map_lookup(values, pa.scalar(key), "first") if len(values) else pa.array([], pa.string())
        typed, bad = parse_partition_column(raw, field.type)
        if pc.any(bad).as_py():
            logger.warning("%d partition values of %s do not parse as %s; read as null", pc.sum(bad).as_py(), key, field.type)
        name = key if physical else field.name
        columns[name] = typed
        fields.append(pa.field(name, field.type))
    return pa.table(columns, schema=pa.schema(fields)) if fields else pa.table({}).take(pa.array([], pa.int64()))


def partition_value_texts(values: pa.Array, column: str = "") -> list[tuple[str | None, str]]:
    """For each value of partition column ``column``: its ``partitionValues`` string (None for
    null) and its directory text.

    Serialized as PROTOCOL.md "Partition Value Serialization" says: numbers as decimal text,
    dates ``YYYY-MM-DD``, booleans ``true``/``false``, binary as the text its bytes are in UTF-8
    (delta-spark and delta-rs read the text's UTF-8 bytes; other bytes are refused: SchemaError).
    ``timestamp`` values are written as ISO-8601 UTC (``1970-01-01T00:00:00.000000Z``, the form
    the protocol recommends and delta-spark writes by default); ``timestamp_ntz`` as
    ``1970-01-01 00:00:00.000000``. An empty string is null, as the protocol says.
    """
    t = values.type
    if pa.types.is_dictionary(t):
        values, t = values.dictionary_decode(), t.value_type
    if pa.types.is_timestamp(t):
        micros = values.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).to_pylist()
        out: list[tuple[str | None, str]] = []
        for us in micros:
            if us is None:
                out.append((None, HIVE_DEFAULT_PARTITION))
                continue
            try:
                moment = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=us)
            except OverflowError:
                raise SchemaError(f"partition value {us} µs since the epoch is outside years 1 to 9999") from None
            wall = moment.isoformat(sep=" ", timespec="microseconds")
            out.append((wall.replace(" ", "T") + "Z" if t.tz is not None else wall, wall))
        return out
    texts: list[str | None]
    if pa.types.is_date(t):
        texts = [d.isoformat() if d is not None else None for d in values.cast(pa.date32()).to_pylist()]
    elif pa.types.is_boolean(t):
        texts = [None if v is None else ("true" if v else "false") for v in values.to_pylist()]
    elif pa.types.is_floating(t):
        # Arrow prints the shortest text that round-trips the value at its own width.
        raw = values.cast(pa.string()).to_pylist()
        texts = [_JAVA_SPECIAL.get(v, v) if v is not None else None for v in raw]
    elif pa.types.is_decimal(t):
        texts = [format(v, "f") if isinstance(v, decimal.Decimal) else None for v in values.to_pylist()]
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        texts = [_utf8_text(v, column) if v is not None else None for v in values.to_pylist()]
    else:
        texts = [None if v is None else str(v) for v in values.to_pylist()]
    return [(None, HIVE_DEFAULT_PARTITION) if not text else (text, text) for text in texts]


def _utf8_text(value: bytes, column: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise non_utf8_partition_value(value, column) from None


def non_utf8_partition_value(value: bytes | None, column: str) -> SchemaError:
    """The error for a binary partition value ``value`` (None: not known) of ``column`` that is
    no UTF-8 text (every writer's)."""
    shown = "" if value is None else f" {value!r}"
    return SchemaError(f"binary partition value{shown} of column '{column}' is not UTF-8 text: Delta engines read a binary "
                       "partition value as the UTF-8 bytes of its text, so these bytes cannot be kept", field=column)


# --- the file key -----------------------------------------------------------------------------


def file_keys(files: pa.Table) -> pa.Array:
    """The logical-file key of each row of a file list (``path``, ``deletion_vector`` columns):
    the path, plus ``NUL`` and the deletion vector's unique id when it has one."""
    column = files.column("path")
    paths = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if paths.type != pa.string():
        paths = paths.cast(pa.string())
    if "deletion_vector" not in files.column_names or files.column("deletion_vector").null_count == files.num_rows:
        return paths
    dv = files.column("deletion_vector").combine_chunks()
    dv_id = pc.binary_join_element_wise(dv.field("storage_type"), dv.field("path_or_inline_dv"), "")
    with_offset = pc.binary_join_element_wise(dv_id, pc.cast(dv.field("offset"), pa.string()), "@")
    dv_id = pc.if_else(pc.is_null(dv.field("offset")), dv_id, with_offset)
    keyed = pc.binary_join_element_wise(paths, dv_id, "\x00")
    return pc.if_else(pc.is_null(dv), paths, keyed)


__all__ = [
    "ColumnPath",
    "HIVE_DEFAULT_PARTITION",
    "decode_stats",
    "with_new_stat",
    "encode_stats",
    "file_keys",
    "has_min_max",
    "is_column_mapped",
    "is_variant",
    "leaf_paths",
    "non_utf8_partition_value",
    "parse_column_path",
    "parse_partition_column",
    "parse_partition_values",
    "num_records",
    "parse_stats",
    "parse_timestamps",
    "partition_fields",
    "partition_value_keys",
    "partition_value_texts",
    "physical_name",
    "physical_names",
    "physical_path",
    "physical_schema",
    "physical_schema_string",
    "stats_columns",
    "stats_leaf",
    "stats_type",
    "table_stats_type",
]
