"""Columnar file actions: the Arrow layouts of add and remove, and conversions into them.

A file list is an Arrow table, never a Python object per file on the hot path. The log layout
(camelCase structs, as in checkpoints) is converted once, here, into the snake_case columns of
``Snapshot.files()`` and ``Snapshot.tombstones()``.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

STRING_MAP = pa.map_(pa.string(), pa.string())

DV_LOG_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
DV_TYPE = pa.struct(
    [
        ("storage_type", pa.string()),
        ("path_or_inline_dv", pa.string()),
        ("offset", pa.int32()),
        ("size_in_bytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("max_row_index", pa.int64()),
    ]
)

# (log name, column name, type) for every add field a snapshot keeps.
_ADD_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("path", "path", pa.string()),
    ("partitionValues", "partition_values", STRING_MAP),
    ("size", "size", pa.int64()),
    ("modificationTime", "modification_time", pa.int64()),
    ("dataChange", "data_change", pa.bool_()),
    ("stats", "stats", pa.string()),
    ("tags", "tags", STRING_MAP),
    ("deletionVector", "deletion_vector", DV_TYPE),
    ("baseRowId", "base_row_id", pa.int64()),
    ("defaultRowCommitVersion", "default_row_commit_version", pa.int64()),
    ("clusteringProvider", "clustering_provider", pa.string()),
]
_REMOVE_FIELDS: list[tuple[str, str, pa.DataType]] = [
    ("path", "path", pa.string()),
    ("deletionTimestamp", "deletion_timestamp", pa.int64()),
    ("dataChange", "data_change", pa.bool_()),
    ("extendedFileMetadata", "extended_file_metadata", pa.bool_()),
    ("partitionValues", "partition_values", STRING_MAP),
    ("size", "size", pa.int64()),
    ("stats", "stats", pa.string()),
    ("tags", "tags", STRING_MAP),
    ("deletionVector", "deletion_vector", DV_TYPE),
    ("baseRowId", "base_row_id", pa.int64()),
    ("defaultRowCommitVersion", "default_row_commit_version", pa.int64()),
]

FILES_SCHEMA = pa.schema([pa.field(col, t) for _, col, t in _ADD_FIELDS])
TOMBSTONES_SCHEMA = pa.schema([pa.field(col, t) for _, col, t in _REMOVE_FIELDS])

# The same fields in the log's naming, for checkpoint writing and for parsing JSON dicts.
ADD_LOG_TYPE = pa.struct([(name, DV_LOG_TYPE if name == "deletionVector" else t) for name, _, t in _ADD_FIELDS])
REMOVE_LOG_TYPE = pa.struct([(name, DV_LOG_TYPE if name == "deletionVector" else t) for name, _, t in _REMOVE_FIELDS])

ADD_LOG_FIELD_NAMES = tuple(name for name, _, _ in _ADD_FIELDS)
REMOVE_LOG_FIELD_NAMES = tuple(name for name, _, _ in _REMOVE_FIELDS)


def _dv_column(child: pa.Array) -> pa.Array:
    """A checkpoint's deletionVector struct (any subset of fields) in the snake_case layout."""
    if child.null_count == len(child):
        return pa.nulls(len(child), DV_TYPE)
    names = [f.name for f in child.type]
    arrays = []
    for (log_name, log_type), snake in zip([(f.name, f.type) for f in DV_LOG_TYPE], DV_TYPE.names):
        arrays.append(child.field(log_name).cast(log_type) if log_name in names else pa.nulls(len(child), log_type))
    return pa.StructArray.from_arrays(arrays, names=DV_TYPE.names, mask=child.is_null())


def _utc_timestamps(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp as UTC microseconds. A naive one here is either timestampNtz
    (rendered as UTC wall time, which keeps its value) or legacy INT96, which Spark writes in UTC."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_utc_timestamps(f.type)) for f in t])
    return t


_DECIMAL_MARK = "\x00decimal:"
_DECIMAL_QUOTED = re.compile(r'"\\u0000decimal:([-+0-9.Ee]+)"')


def _json_value(v: Any) -> Any:
    """A stats_parsed value as Delta writes it in JSON stats; None means "no statistic"."""
    if isinstance(v, dict):
        out = {k: j for k, x in v.items() if (j := _json_value(x)) is not None}
        return out or None
    if isinstance(v, decimal.Decimal):
        return f"{_DECIMAL_MARK}{v}"  # made a bare JSON number below; orjson has no Decimal
    if isinstance(v, _dt.datetime):
        text = v.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
        return (text[:-3] if text.endswith("000") else text) + "Z"
    return v


def _stats_from_parsed(stats: pa.Array, parsed: pa.Array) -> pa.Array:
    """Fill null ``stats`` strings from ``stats_parsed`` (checkpoints written with
    writeStatsAsJson=false), in the JSON form Delta writes: absent statistics left out, decimals
    as numbers, timestamps as ISO-8601 UTC."""
    missing = pc.and_(pc.is_null(stats), pc.is_valid(parsed))
    if not pc.any(missing).as_py():
        return stats
    # Only the rows that need it become Python objects.
    rows = pc.indices_nonzero(missing)
    parsed = parsed.take(rows).cast(_utc_timestamps(parsed.type), safe=False)
    filled = [_DECIMAL_QUOTED.sub(r"\1", orjson.dumps(_json_value(row) or {}).decode()) for row in parsed.to_pylist()]
    return pc.replace_with_mask(stats.cast(pa.string()), missing, pa.array(filled, pa.string()))


def struct_to_table(struct: pa.Array | pa.ChunkedArray, kind: str) -> pa.Table:
    """Rows of a log-layout ``add`` or ``remove`` struct column (nulls dropped) as a snake_case table."""
    fields = _ADD_FIELDS if kind == "add" else _REMOVE_FIELDS
    if isinstance(struct, pa.ChunkedArray):
        if struct.num_chunks != 1:
            # Convert chunk by chunk (one per row group): merging them first would copy the list.
            schema = FILES_SCHEMA if kind == "add" else TOMBSTONES_SCHEMA
            return concat((struct_to_table(chunk, kind) for chunk in struct.chunks), schema)
        struct = struct.chunk(0)
    runs = None
    if struct.null_count:
        # Checkpoints hold the other actions' rows too. Keep the add rows as zero-copy slices
        # when they come in a few runs (the usual layout); copy them out otherwise.
        runs = _valid_runs(struct.is_valid())
        if runs is None:
            struct = struct.filter(struct.is_valid())
    present = {f.name for f in struct.type}
    n = len(struct)
    columns = []
    for log_name, _col, t in fields:
        if log_name not in present:
            columns.append(pa.nulls(n, t))
            continue
        child = struct.field(log_name)
        if log_name == "deletionVector":
            columns.append(_dv_column(child))
        elif child.type != t:
            columns.append(child.cast(t))
        else:
            columns.append(child)
    schema = FILES_SCHEMA if kind == "add" else TOMBSTONES_SCHEMA
    table = pa.Table.from_arrays(columns, schema=schema)
    if kind == "add" and "stats_parsed" in present:
        idx = schema.get_field_index("stats")
        table = table.set_column(idx, "stats", _stats_from_parsed(table.column("stats").combine_chunks(), struct.field("stats_parsed")))
    if runs is not None:
        table = concat((table.slice(start, length) for start, length in runs), schema)
    return table


_MAX_RUNS = 64


def _valid_runs(valid: pa.BooleanArray) -> list[tuple[int, int]] | None:
    """(start, length) of each run of true values, or None when there are too many runs."""
    idx = pc.indices_nonzero(valid)
    if len(idx) == 0:
        return []
    gaps = pc.indices_nonzero(pc.not_equal(pc.subtract(idx[1:], idx[:-1]), 1)) if len(idx) > 1 else pa.array([], pa.uint64())
    if len(gaps) >= _MAX_RUNS:
        return None
    starts = [idx[0].as_py()] + [idx[g.as_py() + 1].as_py() for g in gaps]
    ends = [idx[g.as_py()].as_py() + 1 for g in gaps] + [idx[-1].as_py() + 1]
    return [(a, b - a) for a, b in zip(starts, ends)]


def table_from_log_dicts(bodies: Sequence[Mapping[str, Any]], kind: str) -> pa.Table:
    """Add or remove action bodies, as parsed from JSON, as a snake_case table."""
    log_type = ADD_LOG_TYPE if kind == "add" else REMOVE_LOG_TYPE
    if not bodies:
        return (FILES_SCHEMA if kind == "add" else TOMBSTONES_SCHEMA).empty_table()
    return struct_to_table(pa.array(bodies, type=log_type), kind)


def file_keys(table: pa.Table) -> pa.Array:
    """The logical-file key of each row: the path, plus the deletion vector's unique id if any."""
    paths = table.column("path").combine_chunks()
    dv = table.column("deletion_vector").combine_chunks()
    if dv.null_count == len(dv):
        return paths
    dv_id = pc.binary_join_element_wise(dv.field("storage_type"), dv.field("path_or_inline_dv"), "")
    with_offset = pc.binary_join_element_wise(dv_id, pc.cast(dv.field("offset"), pa.string()), "@")
    dv_id = pc.if_else(pc.is_null(dv.field("offset")), dv_id, with_offset)
    keyed = pc.binary_join_element_wise(paths, dv_id, "\x00")
    return pc.if_else(pc.is_null(dv), paths, keyed)


def key_of(body: Mapping[str, Any]) -> str:
    """The same key as :func:`file_keys`, for one action body in log layout."""
    dv = body.get("deletionVector")
    if not dv:
        return body["path"]
    dv_id = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    if dv.get("offset") is not None:
        dv_id = f"{dv_id}@{dv['offset']}"
    return f"{body['path']}\x00{dv_id}"


def concat(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


# --- large commits, parsed by pyarrow's JSON reader ------------------------------------------

_ADD_PREFIX = b'{"add":'
_REMOVE_PREFIX = b'{"remove":'


def _json_schema(partition_keys: list[str]) -> pa.Schema:
    """The explicit schema for add/remove lines. Anything outside it (tags, other partition
    keys, fields of later protocol versions) makes the reader fail, and the commit then takes
    the row-wise path: JSON inference would turn strings like '2023-12-22' into timestamps."""
    partition_values = pa.struct([(k, pa.string()) for k in partition_keys])

    def struct(fields: list[tuple[str, str, pa.DataType]]) -> pa.StructType:
        out = []
        for name, _, t in fields:
            if name == "tags":
                continue
            out.append((name, partition_values if name == "partitionValues" else DV_LOG_TYPE if name == "deletionVector" else t))
        return pa.struct(out)

    return pa.schema([("add", struct(_ADD_FIELDS)), ("remove", struct(_REMOVE_FIELDS))])


@dataclass(frozen=True)
class ColumnarFileActions:
    """The add and remove actions of one commit as Arrow tables, with their line numbers."""

    adds: pa.Table
    add_lines: pa.Array
    removes: pa.Table
    remove_lines: pa.Array


def _struct_to_string_map(values: pa.Array) -> pa.Array:
    """A struct of nullable string fields (as JSON inference makes them) as map<string, string>."""
    n = len(values)
    if not isinstance(values.type, pa.StructType):  # all-null inference: no keys at all
        return pa.array([{}] * n, STRING_MAP)
    names = [f.name for f in values.type]
    k = len(names)
    if k == 0:
        return pa.MapArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), pa.array([], pa.string()), pa.array([], pa.string()))
    children = [values.field(i).cast(pa.string()) for i in range(k)]
    # Row r's entries are children[0][r], children[1][r], ...: interleave with one take.
    stacked = pa.concat_arrays(children)
    position = _arange(n * k)
    row = pc.divide(position, k)  # integer division
    col = pc.subtract(position, pc.multiply(row, k))
    items = stacked.take(pc.add(pc.multiply(col, n), row))
    keys = pa.array(names, pa.string()).take(col)
    offsets = pc.multiply(_arange(n + 1), k).cast(pa.int32())
    return pa.MapArray.from_arrays(offsets, keys, items, mask=values.is_null())


def _arange(n: int) -> pa.Array:
    ones = pc.fill_null(pa.nulls(n, pa.int64()), 1)
    return pc.subtract(pc.cumulative_sum(ones), 1) if n else pa.array([], pa.int64())


def parse_file_actions(data: bytes, *, path: str, version: int) -> tuple[bytes, ColumnarFileActions] | None:
    """Split a large commit: its add/remove lines parsed column-wise, the rest returned as bytes
    for the row-wise parser. None when the commit needs the row-wise path (tags, odd layout)."""
    import io

    import pyarrow.json as pj

    lines = data.splitlines()
    file_lines: list[int] = []
    other: list[bytes] = []
    for i, line in enumerate(lines):
        if line.startswith(_ADD_PREFIX) or line.startswith(_REMOVE_PREFIX):
            file_lines.append(i)
        elif line.strip():
            other.append(line)
    if not file_lines:
        return None
    body = b"\n".join(lines[i] for i in file_lines)
    try:
        # The partition keys of the first add (removes may omit partitionValues).
        first_add = next((lines[i] for i in file_lines if lines[i].startswith(_ADD_PREFIX)), lines[file_lines[0]])
        partition_keys = list((next(iter(orjson.loads(first_add).values())).get("partitionValues") or {}).keys())
        schema = _json_schema(partition_keys)
        parsed = pj.read_json(
            io.BytesIO(body),
            read_options=pj.ReadOptions(block_size=1 << 20),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, AttributeError, StopIteration):
        return None  # the row-wise parser reports exactly what is wrong, and where
    line_numbers = pa.array(file_lines, pa.int64())
    tables = {}
    for kind in ("add", "remove"):
        struct = parsed.column(kind).combine_chunks() if kind in parsed.column_names else pa.nulls(len(line_numbers), schema.field(kind).type)
        valid = struct.is_valid()
        children = {f.name: struct.field(f.name) for f in struct.type}
        if "partitionValues" in children:
            children["partitionValues"] = _struct_to_string_map(children["partitionValues"])
        rebuilt = pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=pc.invert(valid))
        tables[kind] = (struct_to_table(rebuilt, kind), line_numbers.filter(valid))
    return b"\n".join(other), ColumnarFileActions(tables["add"][0], tables["add"][1], tables["remove"][0], tables["remove"][1])
