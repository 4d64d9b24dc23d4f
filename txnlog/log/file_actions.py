"""Columnar file actions: the Arrow layouts of add and remove, and conversions into them.

A file list is an Arrow table, never a Python object per file on the hot path. The log layout
(camelCase structs, as in checkpoints) is converted once, here, into the snake_case columns of
``Snapshot.files()`` and ``Snapshot.tombstones()``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from txnlog.file_facts import encode_stats, file_keys  # noqa: F401  (file_keys: re-exported for engines)

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


_zeros = pa.py_buffer(b"")


def null_column(n: int, t: pa.DataType) -> pa.Array:
    """``n`` nulls of type ``t`` over one zeroed buffer shared by every such column (a file list
    has half a dozen fields no file uses; ``pa.nulls`` allocates zeros for each, per chunk)."""
    global _zeros
    width = 8 * (n + 1)
    zeros = _zeros  # read once: parse threads call this concurrently and may swap it
    if zeros.size < width:
        zeros = _zeros = pa.py_buffer(bytearray(max(width, 2 * zeros.size)))
    if pa.types.is_struct(t):
        children = [null_column(n, f.type) for f in t]
        return pa.Array.from_buffers(t, n, [zeros], null_count=n, children=children)
    if pa.types.is_map(t) or pa.types.is_list(t):
        return pa.Array.from_buffers(t, n, [zeros, zeros], null_count=n, children=[null_column(0, t.value_type if pa.types.is_list(t) else pa.struct([t.key_field, t.item_field]))])
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return pa.Array.from_buffers(t, n, [zeros, zeros, zeros], null_count=n)
    if isinstance(t, pa.FixedSizeBinaryType) or pa.types.is_primitive(t):
        return pa.Array.from_buffers(t, n, [zeros, zeros], null_count=n)
    return pa.nulls(n, t)


def _dv_column(child: pa.Array) -> pa.Array:
    """A checkpoint's deletionVector struct (any subset of fields) in the snake_case layout."""
    if child.null_count == len(child):
        return null_column(len(child), DV_TYPE)
    names = [f.name for f in child.type]
    arrays = []
    for log_name, log_type in ((f.name, f.type) for f in DV_LOG_TYPE):
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


def _stats_from_parsed(stats: pa.Array, parsed: pa.Array) -> pa.Array:
    """Fill null ``stats`` strings from ``stats_parsed`` (checkpoints written with
    writeStatsAsJson=false), in the JSON form Delta writes (:func:`encode_stats`)."""
    missing = pc.and_(pc.is_null(stats), pc.is_valid(parsed))
    if not pc.any(missing).as_py():
        return stats
    # Only the rows that need it become Python objects.
    rows = pc.indices_nonzero(missing)
    parsed = parsed.take(rows).cast(_utc_timestamps(parsed.type), safe=False)
    filled = [encode_stats(row or {}) for row in parsed.to_pylist()]
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
            columns.append(null_column(n, t))
            continue
        child = struct.field(log_name)
        if child.null_count == n:
            # A field no row has (usually most of them).
            columns.append(null_column(n, t))
        elif log_name == "deletionVector":
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
        return empty_table(FILES_SCHEMA if kind == "add" else TOMBSTONES_SCHEMA)
    return struct_to_table(pa.array(bodies, type=log_type), kind)


_EMPTY = {id(FILES_SCHEMA): FILES_SCHEMA.empty_table(), id(TOMBSTONES_SCHEMA): TOMBSTONES_SCHEMA.empty_table()}


def empty_table(schema: pa.Schema) -> pa.Table:
    """An empty table of ``schema`` (the file layouts' are made once: tables are immutable)."""
    found = _EMPTY.get(id(schema))
    return found if found is not None else schema.empty_table()


def concat(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return empty_table(schema)
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


# --- large commits, parsed by pyarrow's JSON reader ------------------------------------------

_ADD_PREFIX = b'{"add":'
_REMOVE_PREFIX = b'{"remove":'


def _json_schema(partition_keys: list[str], kinds: tuple[str, ...] = ("add", "remove")) -> pa.Schema:
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

    # Only the kinds the commit holds: a column of nulls for the other costs a third of the parse.
    fields = {"add": _ADD_FIELDS, "remove": _REMOVE_FIELDS}
    return pa.schema([(kind, struct(fields[kind])) for kind in kinds])


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


_FILE_LINE_START = re.compile(rb'^\{"(?:add|remove)":', re.MULTILINE)
_ADD_LINE = re.compile(rb'^\{"add":[^\n]*$', re.MULTILINE)


def _first_add(data: bytes, start: int) -> bytes:
    """The first add line from ``start`` on (else the line at ``start``): it names the partition keys."""
    match = _ADD_LINE.search(data, start)
    if match:
        return match.group(0)
    end = data.find(b"\n", start)
    return data[start : end if end >= 0 else len(data)]


def _split_head(data: bytes) -> tuple[bytes, int] | None:
    """(the lines before the first file action, the offset where the file action lines begin)
    when the commit has the usual layout: commitInfo, protocol, metaData first, then file
    actions. None when there is no file action or a carriage return. Whether every later line
    really is an add or remove is left to the JSON reader, whose explicit schema refuses any
    other action; JSON escapes newlines inside strings, so a raw newline always ends a line."""
    if b"\r" in data:
        return None
    first = _FILE_LINE_START.search(data)
    if first is None:
        return None
    return data[: first.start()], first.start()


@dataclass
class _FileLines:
    """The add/remove lines of a commit to parse column-wise, and what the row-wise parser gets."""

    body: bytes | memoryview
    line_numbers: pa.Array
    other: list[bytes]
    first_add: bytes
    kinds: tuple[str, ...]


def _slice_of(data: bytes) -> _FileLines | None:
    """The usual layout: the file lines are one zero-copy slice of the commit, not thousands of
    split and re-joined lines."""
    fast = _split_head(data)
    if fast is None:
        return None
    head, start = fast
    first = head.count(b"\n")
    n = data.count(b"\n", start) + (0 if data.endswith(b"\n") else 1)
    end = data.find(b"\n", start)
    first_line = data[start : end if end >= 0 else len(data)]
    return _FileLines(
        body=memoryview(data)[start:],
        line_numbers=pc.add(_arange(n), first),
        other=[line for line in head.splitlines() if line.strip()],
        first_add=first_line if first_line.startswith(_ADD_PREFIX) else _first_add(data, start),
        kinds=tuple(k for k, prefix in (("add", _ADD_PREFIX), ("remove", _REMOVE_PREFIX)) if data.find(prefix, start) >= 0),
    )


def _split_of(data: bytes) -> _FileLines | None:
    """Any layout: the file lines picked out one by one."""
    lines = data.splitlines()
    file_lines: list[int] = []
    other = []
    for i, line in enumerate(lines):
        if line.startswith(_ADD_PREFIX) or line.startswith(_REMOVE_PREFIX):
            file_lines.append(i)
        elif line.strip():
            other.append(line)
    if not file_lines:
        return None
    # The partition keys of the first add (removes may omit partitionValues).
    first_add = next((lines[i] for i in file_lines if lines[i].startswith(_ADD_PREFIX)), lines[file_lines[0]])
    return _FileLines(b"\n".join(lines[i] for i in file_lines), pa.array(file_lines, pa.int64()), other, first_add, ("add", "remove"))


def parse_file_actions(data: bytes, *, path: str, version: int) -> tuple[bytes, ColumnarFileActions] | None:
    """Split a large commit: its add/remove lines parsed column-wise, the rest returned as bytes
    for the row-wise parser. None when the commit needs the row-wise path (tags, odd layout)."""
    for split in (_slice_of, _split_of):
        lines = split(data)
        parsed = _read_file_lines(lines) if lines is not None else None
        if lines is not None and parsed is not None:
            return b"\n".join(lines.other), _columnar(parsed, lines.line_numbers)
    return None  # the row-wise parser reports exactly what is wrong, and where


def _read_file_lines(lines: _FileLines) -> pa.Table | None:
    """The lines parsed with an explicit schema, which refuses any other action; None when they
    do not parse so (or the reader's row count says the lines were miscounted)."""
    try:
        partition_keys = list((next(iter(orjson.loads(lines.first_add).values())).get("partitionValues") or {}).keys())
        parsed = pj.read_json(
            pa.BufferReader(pa.py_buffer(lines.body)),
            # One block, one thread: commits are parsed in parallel instead (read_commits), and
            # one chunk needs no merging copy.
            read_options=pj.ReadOptions(block_size=max(len(lines.body) + 1, 1 << 20), use_threads=False),
            parse_options=pj.ParseOptions(explicit_schema=_json_schema(partition_keys, lines.kinds), unexpected_field_behavior="error"),
        )
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, AttributeError, StopIteration):
        return None
    return parsed if parsed.num_rows == len(lines.line_numbers) else None


def _columnar(parsed: pa.Table, line_numbers: pa.Array) -> ColumnarFileActions:
    tables = {}
    for kind in ("add", "remove"):
        if kind not in parsed.column_names:
            tables[kind] = (empty_table(FILES_SCHEMA if kind == "add" else TOMBSTONES_SCHEMA), pa.array([], pa.int64()))
            continue
        column = parsed.column(kind)
        struct = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        valid = struct.is_valid()
        children = {f.name: struct.field(f.name) for f in struct.type}
        if "partitionValues" in children:
            children["partitionValues"] = _struct_to_string_map(children["partitionValues"])
        rebuilt = pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=pc.invert(valid))
        tables[kind] = (struct_to_table(rebuilt, kind), line_numbers.filter(valid))
    return ColumnarFileActions(tables["add"][0], tables["add"][1], tables["remove"][0], tables["remove"][1])


# --- encoding rows back to the log ------------------------------------------------------------

_ENCODE_CHUNK_ROWS = 65_536
# Up to this many rows, encoding row by row is quicker than a dozen string kernels.
_FEW_ROWS = 64
_DV_LOG_NAMES = dict(zip(DV_TYPE.names, DV_LOG_TYPE.names))
# Descriptor fields that are not the protocol's and never reach the log: delta-spark keeps
# maxRowIndex in memory only, and refuses to re-serialize an add that has one (RESTORE,
# CLONE and row-tracking backfill of a file txnlog wrote failed an assertion).
_DV_IN_MEMORY_ONLY = frozenset({"max_row_index"})


ADD_LOG_COLUMNS = tuple((log_name, col) for log_name, col, _ in _ADD_FIELDS)
REMOVE_LOG_COLUMNS = tuple((log_name, col) for log_name, col, _ in _REMOVE_FIELDS)


def log_body(values: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """An add or remove body for the log from (log field name, value) pairs, as every writer of
    txnlog encodes it: absent (None) fields and empty tags left out, the deletion vector's
    fields in camelCase."""
    body: dict[str, Any] = {}
    for log_name, value in values:
        if value is None or (log_name == "tags" and not value):
            continue
        if log_name == "deletionVector":
            value = {_DV_LOG_NAMES[k]: v for k, v in value.items() if v is not None and k not in _DV_IN_MEMORY_ONLY}
        elif isinstance(value, Mapping):
            value = dict(value)
        body[log_name] = value
    return body


def _python_lines(table: pa.Table, kind: str) -> list[bytes]:
    """Rows encoded one by one through :func:`log_body` (the reference encoding)."""
    columns = ADD_LOG_COLUMNS if kind == "add" else REMOVE_LOG_COLUMNS
    available = set(table.column_names)
    present = [(log_name, col) for log_name, col in columns if col in available]
    names = [log_name for log_name, _ in present]
    wrap_open = b'{"' + kind.encode() + b'":'
    out: list[bytes] = []
    for start in range(0, table.num_rows, _ENCODE_CHUNK_ROWS):
        chunk = table.slice(start, _ENCODE_CHUNK_ROWS)
        values = [chunk.column(col).to_pylist(maps_as_pydicts="strict") for _, col in present]
        out += [wrap_open + orjson.dumps(log_body(zip(names, row))) + b"}" for row in zip(*values)]
    return out


_NEEDS_ESCAPE = r"[\x00-\x1f]"


def _json_strings(values: pa.Array) -> pa.Array:
    """Each string as a JSON string literal (quotes and backslashes escaped); None where
    null. Control characters need JSON's \\u escapes: the caller takes the slow path then."""
    escaped = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
    return pc.binary_join_element_wise('"', escaped, '"', "")


def _json_string_map(values: pa.Array) -> pa.Array:
    """A map<string, string> column as JSON objects (null values as ``null``); None where null."""
    entries = values.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))
    flat = pc.list_flatten(entries)
    encoded_values = pc.fill_null(_json_strings(flat.field("value")), "null")
    pairs = pc.binary_join_element_wise(_json_strings(flat.field("key")), encoded_values, ":")
    offsets = entries.offsets
    start = offsets[0].as_py()
    rebased = pc.subtract(offsets, start) if start else offsets
    joined = pc.binary_join(pa.ListArray.from_arrays(rebased, pairs, mask=entries.is_null()), ",")
    return pc.binary_join_element_wise("{", joined, "}", "")


def _has_control_characters(column: pa.Array) -> bool:
    if pa.types.is_map(column.type):
        flat = pc.list_flatten(column.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))))
        return _has_control_characters(flat.field("key")) or _has_control_characters(flat.field("value"))
    return bool(pc.any(pc.match_substring_regex(column, _NEEDS_ESCAPE)).as_py())


def _columnar_lines(table: pa.Table, kind: str) -> pa.Array | None:
    """Every row as one JSON line, built with Arrow string kernels; None when a row needs what
    only the reference encoder does (deletion vectors, control characters in strings)."""
    columns = ADD_LOG_COLUMNS if kind == "add" else REMOVE_LOG_COLUMNS
    n = table.num_rows
    pieces: list[pa.Array] = []
    for log_name, col in columns:
        if col not in table.column_names:
            continue
        column = table.column(col).combine_chunks()
        if column.null_count == n:
            continue
        t = column.type
        if log_name == "deletionVector":
            return None
        if pa.types.is_string(t):
            if _has_control_characters(column):
                return None
            encoded = _json_strings(column)
        elif pa.types.is_map(t):
            if _has_control_characters(column):
                return None
            encoded = _json_string_map(column)
            if log_name == "tags":  # empty tags are left out, as log_body does
                encoded = pc.if_else(pc.equal(pc.list_value_length(column.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))), 0), pa.scalar(None, pa.string()), encoded)
        elif pa.types.is_boolean(t):
            encoded = pc.if_else(column, "true", "false")
        elif pa.types.is_integer(t):
            encoded = pc.cast(column, pa.string())
        else:
            return None
        field = pc.binary_join_element_wise(f',"{log_name}":', encoded, "")
        pieces.append(pc.fill_null(field, ""))
    if not pieces:
        return None
    body = pc.binary_join_element_wise(*pieces, "")
    # The first piece is the path, always present: drop its leading comma.
    return pc.binary_join_element_wise('{"' + kind + '":{', pc.utf8_slice_codeunits(body, 1), "}}", "")


def file_action_lines(table: pa.Table, kind: str) -> list[bytes]:
    """Each row of a snake_case add or remove table as one JSON line of the log (``{"add":
    {...}}``), as :func:`log_body` encodes it. Large lists are encoded column-wise with Arrow
    string kernels; rows become Python values only for what those cannot do."""
    if not table.num_rows:
        return []
    if table.num_rows <= _FEW_ROWS:
        return _python_lines(table, kind)
    out: list[bytes] = []
    for start in range(0, table.num_rows, _ENCODE_CHUNK_ROWS):
        chunk = table.slice(start, _ENCODE_CHUNK_ROWS)
        lines = _columnar_lines(chunk, kind)
        if lines is None:
            out += _python_lines(chunk, kind)
            continue
        large = pa.large_string()
        suffixed = pc.binary_join_element_wise(pc.cast(lines, large), pa.scalar("\n", large), pa.scalar("", large))
        # The array's data buffer is the lines, one after the other: take it without a copy.
        offsets = pa.Array.from_buffers(pa.int64(), len(suffixed) + 1, [None, suffixed.buffers()[1]], offset=suffixed.offset)
        blob = suffixed.buffers()[2][offsets[0].as_py() : offsets[-1].as_py()].to_pybytes()
        out.append(blob[:-1])  # one element holding the chunk's lines, joined as the caller joins
    return out
