"""Writing data files: Arrow rows in, Parquet files in the table's layout out, one AddFile each.

For every input batch, streaming (a RecordBatchReader is never concatenated):

1. **Conform** it to the table schema: columns matched by name (case-insensitively), types cast
   safely to the table's Arrow types, missing nullable columns filled with nulls. Anything else
   is a :class:`~txnlog.errors.SchemaError` naming the field.
2. **Split** it by partition values: one sort, then zero-copy slices of equal-key runs.
3. **Append** each run to the open file of its partition. A file is closed once its estimated
   size reaches the target; the estimate is the bytes already on disk plus the Arrow size of
   the buffered rows scaled by the Parquet/Arrow size ratio seen so far in this write.
4. **Close**: size from the output stream, stats collected batch by batch (:mod:`.stats`).

Layout (Delta convention): partition columns are not stored in the files; files live in
Hive-style directories ``col=value/`` escaped as Spark's ``escapePathName`` does, and
``add.path`` is that relative path URI-encoded once more (a directory ``x=A%2FA`` is logged as
``x=A%252FA``). Under column mapping, files carry physical column names and Parquet field ids,
partition values and stats are keyed by physical names, and files go to random two-character
directories as delta-spark does, so that no logical name is baked into a path.

If writing fails, every file this call wrote is deleted before the error propagates.
"""

from __future__ import annotations

import logging
import os
import random
import re
import string
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from txnlog.errors import InvalidArgumentTypeError, SchemaError, StorageError, TxnLogError
from txnlog.file_facts import (
    HIVE_DEFAULT_PARTITION,
    parse_partition_column,
    partition_fields,
    partition_value_texts,
    physical_schema,
)
from txnlog.log.actions import AddFile
from txnlog.storage.base import LogStore
from txnlog.table_configuration import TableConfiguration
from txnlog.write.stats import StatsCollector

logger = logging.getLogger(__name__)


# What a data file's stream raises when its store fails: the OS's errors and, for object stores
# written through fsspec, their SDKs' own (botocore's are not OSErrors). Told apart by module so
# that the SDKs are not imported for it.
_SDK_MODULES = ("botocore.", "aiobotocore.", "azure.", "google.", "aiohttp.")


def _is_store_failure(error: BaseException) -> bool:
    return isinstance(error, OSError) or any(c.__module__.startswith(_SDK_MODULES) for c in type(error).__mro__)


# Rows of one file buffered before they become a row group (Arrow bytes).
_ROW_GROUP_BYTES = 64 * 1024 * 1024
# Buffered rows over all open files before the largest buffers are flushed early.
_MAX_BUFFERED_BYTES = 256 * 1024 * 1024
# Open files (one per partition being written) before the least recently used is closed.
_MAX_OPEN_FILES = 512
# Buffered slices smaller than this on average are concatenated before encoding.
_SMALL_CHUNK_ROWS = 16 * 1024

# Spark's ExternalCatalogUtils.charToEscape (non-Windows), plus NUL which no filesystem allows.
_HIVE_ESCAPE = frozenset([chr(c) for c in range(0x00, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))
# Characters java.net.URI leaves as they are in a path (Hadoop's Path.toUri); the rest is
# percent-encoded, non-ASCII as UTF-8 bytes.
_URI_SAFE = "/-_.~!$&'()*+,;=:@"


def write_data_files(
    store: LogStore,
    data: pa.Table | pa.RecordBatchReader,
    *,
    table_configuration: TableConfiguration,
    table_schema: pa.Schema | None = None,
    target_file_size: int | None = None,
    data_change: bool = True,
    file_prefix: str = "part",
    compression: str = "snappy",
    hidden_columns: Mapping[str, str] | None = None,
    directory: str = "",
) -> list[AddFile]:
    """Write ``data`` as Parquet data files under ``store``'s root (in ``directory`` below it,
    when given); one AddFile per file.

    The files are not part of the table until a commit adds them. The table's layout (partition
    columns, column mapping, which columns get stats) comes from ``table_configuration``;
    ``table_schema`` is the schema the files are written in, the table's by default (change data
    files add ``_change_type`` to it). ``target_file_size`` defaults to the table's
    ``delta.targetFileSize``. ``hidden_columns`` maps data columns to
    int64 file columns outside the table schema (row tracking's materialized columns): every
    file gets them, null where the data has no such column; they have no stats.
    """
    reader = as_reader(data)
    hidden = dict(hidden_columns or {})
    visible = [i for i, f in enumerate(reader.schema) if f.name not in hidden]
    table_schema = table_schema if table_schema is not None else table_configuration.schema
    target, layout, plan = _prepare(
        pa.schema([reader.schema.field(i) for i in visible]), table_schema, table_configuration, target_file_size,
        hidden=list(hidden.values()),
    )
    files = _FileSet(store, layout, target, data_change, file_prefix, compression, directory)
    try:
        for batch in reader:
            if not batch.num_rows:
                continue
            conformed = _conform_batch(batch.select(visible) if hidden else batch, plan, table_schema)
            for source, column in hidden.items():
                conformed = conformed.append_column(column, _hidden_values(batch, source, column))
            for key, values, rows in _partition_runs(conformed, layout):
                files.write(key, values, rows)
        return files.finish()
    except BaseException:
        files.abort()
        raise


def _hidden_values(batch: pa.RecordBatch, source: str, column: str) -> pa.Array:
    index = batch.schema.get_field_index(source)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.int64())
    try:
        return batch.column(index).cast(pa.int64())
    except (pa.ArrowException, ValueError) as e:
        raise SchemaError(f"column '{source}' (written as {column!r}) must hold integers, got {batch.column(index).type}: {e}", field=source) from e


def check_write_schema(data_schema: pa.Schema, *, table_configuration: TableConfiguration, target_file_size: int | None = None) -> None:
    """Raise what :func:`write_data_files` would raise for data of ``data_schema`` before its
    first row (the table's layout, the data's columns and types), writing nothing."""
    _prepare(data_schema, table_configuration.schema, table_configuration, target_file_size)


def _prepare(
    data_schema: pa.Schema,
    table_schema: pa.Schema,
    config: TableConfiguration,
    target_file_size: int | None,
    *,
    hidden: Sequence[str] = (),
) -> tuple[int, _Layout, list[int | None]]:
    """(target file size, layout, source column of each table column): every check a write
    makes before its first row, in the order it makes them."""
    target = target_file_size if target_file_size is not None else config.target_file_size
    if target <= 0:
        raise TxnLogError(f"target_file_size must be positive, got {target}")
    layout = _Layout(table_schema, config, hidden)
    return target, layout, _plan(data_schema, table_schema)


#: What a write, a MERGE source or a new table's schema may be given as: any Arrow-compatible
#: data (a pyarrow Table, RecordBatch, RecordBatchReader or ``pyarrow.dataset.Dataset``, a
#: pandas or polars DataFrame, any object exporting ``__arrow_c_stream__``, or an iterable of
#: RecordBatches).
ArrowData = Any


def as_reader(data: ArrowData, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """``data`` (see :data:`ArrowData`) as a RecordBatchReader, read as it is consumed where the
    input streams (a reader, a dataset, a C stream are never read whole here); anything else is
    refused with InvalidArgumentTypeError. An empty iterable reads as no rows of ``schema``.
    The one place a write's input is normalised: writes, MERGE sources and ``Table.create``."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if isinstance(data, pads.Dataset):
        return data.scanner().to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        try:
            return _without_views(pa.RecordBatchReader.from_stream(data))
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise InvalidArgumentTypeError(f"data of type {type(data).__name__} exports an Arrow stream that cannot be read: {e}") from None
    if type(data).__module__.split(".")[0] == "pandas" and type(data).__name__ == "DataFrame":  # pandas before 2.2: no C stream
        try:
            table = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise InvalidArgumentTypeError(f"the pandas DataFrame cannot be converted to Arrow: {e}") from None
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    if not isinstance(data, (str, bytes, dict)) and hasattr(data, "__iter__"):
        batches = iter(data)
        first = next(batches, None)
        if first is None:
            return pa.RecordBatchReader.from_batches(schema if schema is not None else pa.schema([]), [])
        if isinstance(first, pa.RecordBatch):

            def all_batches() -> Iterator[pa.RecordBatch]:
                yield first
                for batch in batches:
                    if not isinstance(batch, pa.RecordBatch):
                        raise InvalidArgumentTypeError(f"expected pyarrow RecordBatches, got a {type(batch).__name__}")
                    yield batch

            return pa.RecordBatchReader.from_batches(first.schema, all_batches())
    raise InvalidArgumentTypeError(
        "data must be Arrow-compatible: a pyarrow Table, RecordBatch, RecordBatchReader or Dataset, a pandas or polars "
        f"DataFrame, an object exporting __arrow_c_stream__, or an iterable of RecordBatches; got {type(data).__name__}"
    )


def _plain(kind: pa.DataType) -> pa.DataType:
    """``kind`` with string and binary views (Polars' export) as large strings and binaries,
    which every compute kernel takes."""
    if kind == pa.string_view():
        return pa.large_string()
    if kind == pa.binary_view():
        return pa.large_binary()
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_plain(f.type)) for f in kind])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = kind.value_field
        return (pa.list_ if pa.types.is_list(kind) else pa.large_list)(item.with_type(_plain(item.type)))
    return kind


def _without_views(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """``reader`` cast, batch by batch as read, to types without views."""
    plain = pa.schema([f.with_type(_plain(f.type)) for f in reader.schema], metadata=reader.schema.metadata)
    return reader if plain.equals(reader.schema) else reader.cast(plain)


def arrow_schema_of(value: Any) -> pa.Schema | None:
    """The Arrow schema of ``value`` when it is one (a pyarrow Schema or an object exporting
    ``__arrow_c_schema__``, such as a polars Schema) or Arrow-compatible data (its columns'
    schema, read without reading its rows where it streams); None otherwise."""
    if isinstance(value, pa.Schema):
        return value
    if isinstance(value, (str, bytes, dict)):
        return None
    if isinstance(value, (pa.Table, pa.RecordBatch, pa.RecordBatchReader, pads.Dataset)):
        return value.schema
    if hasattr(value, "__arrow_c_schema__") and not hasattr(value, "__arrow_c_stream__"):
        try:
            return pa.schema(value)
        except (pa.ArrowException, TypeError, ValueError):
            return None
    try:
        return as_reader(value).schema
    except InvalidArgumentTypeError:
        return None


# --- 1. conform to the table schema -------------------------------------------------------------


def _find(fields: Sequence[pa.Field], name: str) -> int | None:
    """Index of the field called ``name``: exact match first, else the one case-insensitive match."""
    for i, f in enumerate(fields):
        if f.name == name:
            return i
    matches = [i for i, f in enumerate(fields) if f.name.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def _check_names(source: Sequence[pa.Field], target: Sequence[pa.Field], where: str) -> list[int | None]:
    """For each target field, the index of the source field feeding it (None: absent)."""
    seen: dict[str, str] = {}
    for f in source:
        if f.name.lower() in seen:
            path = f"{where}.{f.name}" if where else f.name
            raise SchemaError(f"data has two columns '{seen[f.name.lower()]}' and '{f.name}' that differ only in case", field=path)
        seen[f.name.lower()] = f.name
    target_names = {f.name.lower() for f in target}
    for f in source:
        if f.name.lower() not in target_names:
            path = f"{where}.{f.name}" if where else f.name
            raise SchemaError(f"column '{path}' of the data is not in the table schema", field=path)
    out: list[int | None] = []
    for f in target:
        index = _find(source, f.name)
        path = f"{where}.{f.name}" if where else f.name
        if index is None and not f.nullable:
            raise SchemaError(f"non-nullable column '{path}' is missing from the data", field=path)
        out.append(index)
    return out


def _plan(data_schema: pa.Schema, table_schema: pa.Schema) -> list[int | None]:
    """Check the data's schema against the table's once, before any row is written."""
    sources = _check_names(list(data_schema), list(table_schema), "")
    for target, index in zip(table_schema, sources):
        if index is not None:
            _check_type(data_schema.field(index).type, target.type, target.name)
    return sources


def _check_type(src: pa.DataType, dst: pa.DataType, path: str) -> None:
    """Raise SchemaError unless values of ``src`` can be cast safely to ``dst``."""
    if pa.types.is_dictionary(src):
        src = src.value_type
    if src == dst or pa.types.is_null(src):
        return
    t = pa.types
    ok = False
    if t.is_integer(dst):
        ok = t.is_integer(src)
    elif t.is_floating(dst):
        ok = t.is_integer(src) or t.is_floating(src)
    elif t.is_decimal(dst):
        ok = t.is_decimal(src) or t.is_integer(src)
    elif t.is_string(dst):
        ok = t.is_string(src) or t.is_large_string(src) or t.is_string_view(src)
    elif t.is_binary(dst):
        ok = t.is_binary(src) or t.is_large_binary(src) or t.is_binary_view(src) or t.is_fixed_size_binary(src)
    elif t.is_date(dst):
        ok = t.is_date(src)
    elif t.is_timestamp(dst):
        if t.is_timestamp(src) and (src.tz is None) != (dst.tz is None):
            kind = "timestamp (UTC-adjusted)" if dst.tz is not None else "timestamp_ntz (no time zone)"
            have = f"time zone '{src.tz}'" if src.tz is not None else "no time zone"
            raise SchemaError(f"column '{path}' is {kind} but the data has {have}", field=path)
        ok = t.is_timestamp(src)
    elif t.is_struct(dst):
        if t.is_struct(src):
            sources = _check_names(list(src), list(dst), path)
            for child, index in zip(dst, sources):
                if index is not None:
                    _check_type(src.field(index).type, child.type, f"{path}.{child.name}")
            return
    elif t.is_map(dst):
        if t.is_map(src):
            _check_type(src.key_type, dst.key_type, f"{path}.key")
            _check_type(src.item_type, dst.item_type, f"{path}.value")
            return
    elif t.is_list(dst):
        if t.is_list(src) or t.is_large_list(src) or t.is_fixed_size_list(src):
            _check_type(src.value_type, dst.value_type, f"{path}.element")
            return
    else:
        ok = t.is_boolean(dst) and t.is_boolean(src)
    if not ok:
        raise SchemaError(f"column '{path}' has type {dst} in the table; data of type {src} cannot be written to it", field=path)


def _conform_batch(batch: pa.RecordBatch, sources: list[int | None], table_schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for target, index in zip(table_schema, sources):
        if index is None:
            arrays.append(_null_array(batch.num_rows, target.type))
            continue
        array = _conform(batch.column(index), target.type, target.name)
        if not target.nullable and array.null_count:
            raise null_values(target.name, array.null_count)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=table_schema)


def _conform(array: pa.Array, dst: pa.DataType, path: str) -> pa.Array:
    """``array`` as the type ``dst`` (already checked by :func:`_check_type`). Nested values are
    rebuilt from their (zero-copy) children, which checks their nullability on the way."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_null(array.type):
        return _null_array(len(array), dst)
    if pa.types.is_struct(dst):
        return _conform_struct(array, dst, path)
    if pa.types.is_map(dst):
        offsets, entries = _list_parts(array)
        keys = _conform(entries.field(0), dst.key_type, f"{path}.key")
        items = _conform(entries.field(1), dst.item_type, f"{path}.value")
        if not dst.item_field.nullable and items.null_count:
            raise null_map_values(path)
        return pa.MapArray.from_arrays(offsets, keys, items, type=dst, mask=_mask(array))
    if pa.types.is_list(dst):
        if pa.types.is_fixed_size_list(array.type):
            array = array.cast(pa.list_(array.type.value_field))
        offsets, values = _list_parts(array)
        values = _conform(values, dst.value_type, f"{path}.element")
        if not dst.value_field.nullable and values.null_count:
            raise null_elements(path)
        return pa.ListArray.from_arrays(offsets, values, type=dst, mask=_mask(array))
    if array.type == dst:
        return array
    try:
        return array.cast(dst, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise unsafe_cast(path, array.type, dst, str(e)) from None


def _mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def _list_parts(array: pa.Array) -> tuple[pa.Array, pa.Array]:
    """int32 offsets starting at 0 and the values they index, for a (possibly sliced) list or map."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    values = array.values.slice(start, end - start)
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
    if rebased.type != pa.int32():
        try:
            rebased = rebased.cast(pa.int32())
        except pa.ArrowInvalid:
            raise SchemaError("a list column holds more than 2^31 values in one batch; write smaller batches") from None
    return rebased, values


def _conform_struct(array: pa.Array, dst: pa.StructType, path: str) -> pa.Array:
    src: pa.StructType = array.type
    parent_valid = pc.is_valid(array)
    children = []
    for child in dst:
        index = _find(list(src), child.name)
        child_path = f"{path}.{child.name}"
        if index is None:
            values = _null_array(len(array), child.type)
        else:
            # The child's own values (sliced like the parent); the parent's nulls come back below.
            values = _conform(array.field(index), child.type, child_path)
        if not child.nullable and values.null_count:
            _require_no_nulls(values, parent_valid, child_path)
            # Null only under null parents, which Parquet's writer still refuses: fill those slots.
            values = pc.if_else(pc.is_valid(values), values, _placeholder(len(values), child.type))
        children.append(values)
    return pa.StructArray.from_arrays(children, fields=list(dst), mask=_mask(array))


@dataclass(frozen=True)
class CastCheck:
    """What the safe cast every txnlog writer applies (Arrow's) asks of each value cast to a
    table column's type, described for engines that cast with their own functions
    (:func:`cast_check`): the value lies in ``[low, high]`` when those are set, and with
    ``round_trip`` it comes back unchanged from the target type (neither rounded nor out of a
    decimal's precision). Nothing set: the cast changes no value."""

    low: int | None = None
    high: int | None = None
    round_trip: bool = False

    @property
    def needed(self) -> bool:
        return self.low is not None or self.round_trip


def _integer_range(kind: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(kind.to_pandas_dtype())
    return int(info.min), int(info.max)


def cast_check(source: pa.DataType, target: pa.DataType) -> CastCheck | None:
    """How values of ``source`` written to a column of ``target`` are checked, as the safe Arrow
    cast checks them: no check where the cast changes no value (a widening, a double to a float,
    which rounds, an integer to a decimal with room for every value of its type); a range for a
    narrower integer, or for an integer to a float past the float's exact integers (Arrow's
    range, ±2^24 and ±2^53); a round trip for a decimal to a decimal. None for any other cast,
    which an engine leaves to Arrow's cast (an integer to a decimal without that room, for one,
    is refused whatever the values)."""
    t = pa.types
    if source == target:
        return CastCheck()
    if t.is_integer(source) and t.is_integer(target):
        (low, high), (source_low, source_high) = _integer_range(target), _integer_range(source)
        return CastCheck() if low <= source_low and source_high <= high else CastCheck(low, high)
    if t.is_integer(source) and (t.is_float32(target) or t.is_float64(target)):
        limit = 1 << (24 if t.is_float32(target) else 53)
        source_low, source_high = _integer_range(source)
        return CastCheck() if -limit <= source_low and source_high <= limit else CastCheck(-limit, limit)
    if (t.is_float32(source) or t.is_float64(source)) and (t.is_float32(target) or t.is_float64(target)):
        return CastCheck()
    if t.is_integer(source) and t.is_decimal(target):
        source_low, source_high = _integer_range(source)
        digits = len(str(max(-source_low, source_high)))
        return CastCheck() if target.precision - target.scale >= digits else None
    if t.is_decimal(source) and t.is_decimal(target):
        return CastCheck(round_trip=True)
    return None


def unsafe_cast(path: str, source: object, target: object, reason: str) -> SchemaError:
    """The error for values of column ``path`` that the cast from ``source`` to ``target`` (the
    table's type) would change: out of range, rounded, or past a float's exact integers (every
    writer's)."""
    return SchemaError(f"values of column '{path}' cannot be cast safely from {source} to {target}: {reason}", field=path)


def null_values(column: str, count: int) -> SchemaError:
    """The error for ``count`` nulls written to non-nullable ``column`` (every writer's)."""
    return SchemaError(f"non-nullable column '{column}' has {count} null values", field=column)


def null_elements(path: str) -> SchemaError:
    """The error for nulls written as elements of list column ``path``, whose elements are not
    nullable (every writer's)."""
    return SchemaError(f"elements of '{path}' are non-nullable but the data has nulls", field=f"{path}.element")


def null_map_values(path: str) -> SchemaError:
    """The error for nulls written as values of map column ``path``, whose values are not
    nullable (every writer's)."""
    return SchemaError(f"map values of '{path}' are non-nullable but the data has nulls", field=f"{path}.value")


def _require_no_nulls(values: pa.Array, parent_valid: pa.Array, path: str) -> None:
    """A non-nullable struct field may be null only where its parent struct is null."""
    bad = pc.sum(pc.and_(pc.is_null(values), parent_valid)).as_py() or 0
    if bad:
        raise null_values(path, bad)


def _null_array(n: int, t: pa.DataType) -> pa.Array:
    """``n`` nulls of type ``t``; a struct's non-nullable fields get placeholders, not nulls."""
    if not pa.types.is_struct(t) or not n:
        return pa.nulls(n, t)
    children = [_null_array(n, f.type) if f.nullable else _placeholder(n, f.type) for f in t]
    return pa.StructArray.from_arrays(children, fields=list(t), mask=pa.repeat(pa.scalar(True), n))


def _placeholder(n: int, t: pa.DataType) -> pa.Array:
    """``n`` non-null values of type ``t`` (zero, empty) for slots hidden by a null parent."""
    if pa.types.is_struct(t):
        children = [_placeholder(n, f.type) if not f.nullable else _null_array(n, f.type) for f in t]
        return pa.StructArray.from_arrays(children, fields=list(t))
    if pa.types.is_list(t) or pa.types.is_map(t):
        offsets = pa.repeat(pa.scalar(0, pa.int32()), n + 1)
        if pa.types.is_map(t):
            return pa.MapArray.from_arrays(offsets, pa.array([], t.key_type), pa.array([], t.item_type), type=t)
        return pa.ListArray.from_arrays(offsets, pa.array([], t.value_type), type=t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        zero = pa.scalar("", t)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        zero = pa.scalar(b"", t)
    elif pa.types.is_decimal(t):
        zero = pa.scalar(Decimal(0), t)
    elif pa.types.is_date(t):
        zero = pa.scalar(0, pa.int32()).cast(pa.date32()).cast(t)
    elif pa.types.is_boolean(t):
        zero = pa.scalar(False)
    else:  # numbers and timestamps
        zero = pa.scalar(0, pa.int64()).cast(t)
    return pa.repeat(zero, n)


# --- table layout --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PartitionColumn:
    name: str  # logical name, as in the table schema
    key: str  # name in partitionValues: the physical name under column mapping


class _Layout:
    """What a write needs to know about the table, derived once from its metadata."""

    def __init__(self, table_schema: pa.Schema, config: TableConfiguration, hidden: Sequence[str] = ()) -> None:
        self.mapped = config.is_column_mapped
        self.partitions: list[_PartitionColumn] = []
        for key, field in partition_fields(table_schema, config.partition_columns, self.mapped):
            if pa.types.is_nested(field.type):
                raise SchemaError(f"partition column '{field.name}' has nested type {field.type}", field=field.name)
            self.partitions.append(_PartitionColumn(field.name, key))
        partition_names = {p.name for p in self.partitions}
        data_fields = [f for f in table_schema if f.name not in partition_names]
        if not data_fields:
            raise SchemaError("every column of the table is a partition column; data files need at least one other", field=None)
        self.data_names = [f.name for f in data_fields] + list(hidden)
        self.file_schema = physical_schema(data_fields, self.mapped)
        for name in hidden:
            self.file_schema = self.file_schema.append(pa.field(name, pa.int64()))
        self.stats_columns = config.stats_columns_of(table_schema)
        self.table_schema = table_schema

    def file_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The columns stored in the data file: partition columns dropped, names made physical."""
        arrays = []
        for name, field in zip(self.data_names, self.file_schema):
            array = batch.column(name)
            arrays.append(array if array.type == field.type else array.view(field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.file_schema)


# --- 2. split by partition values ----------------------------------------------------------------


def _partition_runs(
    batch: pa.RecordBatch, layout: _Layout
) -> Iterator[tuple[tuple[str | None, ...], tuple[tuple[str | None, str], ...], pa.RecordBatch]]:
    """(key, per-column (partitionValues text, directory text), rows) for each partition in ``batch``."""
    if not layout.partitions:
        yield (), (), batch
        return
    names = [p.name for p in layout.partitions]
    # Any order with equal keys adjacent will do; the sort is stable, so rows keep input order.
    order = pc.sort_indices(batch.select(names), sort_keys=[(n, "ascending") for n in names])
    rows = batch.take(order)
    n = rows.num_rows
    changed: pa.Array | None = None
    for name in names:
        column = rows.column(name)
        later, earlier = column.slice(1), column.slice(0, n - 1)
        differs = pc.or_(
            pc.fill_null(pc.not_equal(later, earlier), False),
            pc.not_equal(pc.is_null(later), pc.is_null(earlier)),
        )
        if pa.types.is_floating(column.type):  # NaN != NaN, yet all NaN rows share a partition
            both_nan = pc.fill_null(pc.and_(pc.is_nan(later), pc.is_nan(earlier)), False)
            differs = pc.and_(differs, pc.invert(both_nan))
        changed = differs if changed is None else pc.or_(changed, differs)
    assert changed is not None
    starts = [0] + [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
    ends = starts[1:] + [n]
    first_rows = pa.array(starts, pa.int64())
    texts = [partition_value_texts(rows.column(p.name).take(first_rows), p.name) for p in layout.partitions]
    for run, (start, end) in enumerate(zip(starts, ends)):
        values = tuple(column[run] for column in texts)
        yield tuple(v[0] for v in values), values, rows.slice(start, end - start)


def escape_path_name(text: str) -> str:
    """Hive/Spark escaping of a partition directory name component."""
    if not any(ch in _HIVE_ESCAPE for ch in text):
        return text
    return "".join(f"%{ord(ch):02X}" if ch in _HIVE_ESCAPE else ch for ch in text)


def unescape_path_name(text: str) -> str:
    """The text :func:`escape_path_name` escaped (Spark's ``unescapePathName``)."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text) if "%" in text else text


_ESCAPED = re.compile(r"%([0-9A-Fa-f]{2})")

#: The directory (below the table root, or below ``_change_data/`` for change data files) one job
#: of an engine's own Parquet writer writes its files into: ``job-`` and 32 hex digits. The files stay there once committed; while the job
#: runs, its output committer stages them in ``_temporary/`` below it, which vacuum therefore
#: treats as an interrupted write's files, not as a hidden directory.
OUTPUT_DIRECTORY = re.compile(r"^job-[0-9a-f]{32}$")


def output_directory() -> str:
    """A new :data:`OUTPUT_DIRECTORY` name."""
    return f"job-{uuid.uuid4().hex}"


def written_partition_values(directories: Sequence[str], table_configuration: TableConfiguration, where: str) -> dict[str, str | None]:
    """The ``partitionValues`` of a file another writer placed in Hive-style directories
    (``key=text``, escaped as :func:`escape_path_name` does, ``key`` the partitionValues key),
    as txnlog serializes them: each text parsed as its column's type and written again.
    SchemaError naming ``where`` for a directory that is no partition column's or whose value
    does not parse."""
    fields = dict(table_configuration.partition_keys())
    out: dict[str, str | None] = {}
    for directory in directories:
        key, sep, text = directory.partition("=")
        key, text = unescape_path_name(key), unescape_path_name(text)
        field = fields.get(key)
        if not sep or field is None:
            raise SchemaError(f"{where}: directory {directory!r} names no partition column of the table", field=key)
        if text == HIVE_DEFAULT_PARTITION:
            out[key] = None
            continue
        values, bad = parse_partition_column(pa.array([text], pa.string()), field.type)
        if bad[0].as_py():
            raise SchemaError(f"{where}: partition value {text!r} of column '{field.name}' is not a {field.type}", field=field.name)
        out[key] = partition_value_texts(values, field.name)[0][0]
    missing = set(fields) - set(out)
    if missing:
        raise SchemaError(f"{where}: no directory gives partition column(s) {sorted(missing)}", field=sorted(missing)[0])
    return out


def encode_log_path(path: str) -> str:
    """A relative storage path as ``add.path``: URI-encoded (``%`` becomes ``%25``)."""
    return quote(path, safe=_URI_SAFE)


# --- 3. files --------------------------------------------------------------------------------------


#: Rows sampled to choose a column's encoding (in slices spread over the rows), the share of
#: distinct values at or below which a dictionary is used, and the dictionary page Parquet
#: writers keep before falling back to plain encoding (Arrow's default).
_DICTIONARY_SAMPLE_ROWS = 8192
_DICTIONARY_SAMPLE_SLICES = 8
_DICTIONARY_MAX_DISTINCT = 0.5
_DICTIONARY_PAGE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ColumnEncodings:
    """How a data file's columns are encoded: which get a dictionary (all of them when True,
    Parquet's default), and which integer columns are delta-encoded (``DELTA_BINARY_PACKED``)."""

    dictionary: bool | list[str]
    delta: list[str]

    def writer_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"use_dictionary": self.dictionary}
        if self.delta:
            options["column_encoding"] = dict.fromkeys(self.delta, "DELTA_BINARY_PACKED")
        return options


def column_encodings(rows: pa.Table) -> ColumnEncodings:
    """The encodings of a file's columns, judged on rows sampled over the first rows of a file.

    A dictionary for the columns whose values repeat in the sample, or whose distinct values,
    estimated from how often the sample repeats itself, fit one dictionary page. Parquet writers
    try a dictionary on every column and give it up only after a dictionary page's worth of
    distinct values, which on a unique key column took most of the time a file took to write
    (and the fallback page is no smaller than plain encoding); a column with a few thousand
    distinct values spread over the file, all distinct in any short run of rows, is a third the
    size and faster to encode with one.

    Delta encoding for an integer column without a dictionary whose neighbouring values differ
    by far less than the values span (ids, counters, sorted keys): the differences' range needs
    at most half the type's bits. A sequential int64 key is then 700x smaller, written a sixth
    faster and read 9x faster than plain values through snappy. The encoding is in the Parquet
    format since 2.0 (2013); delta-spark (Spark's vectorized reader since 3.3), DuckDB, delta-rs,
    Polars and pyarrow read it.

    Nested columns: every column keeps the default."""
    if any(pa.types.is_nested(f.type) for f in rows.schema):
        return ColumnEncodings(True, [])
    size = max(1, _DICTIONARY_SAMPLE_ROWS // _DICTIONARY_SAMPLE_SLICES)
    starts = sorted({i * max(0, rows.num_rows - size) // max(1, _DICTIONARY_SAMPLE_SLICES - 1) for i in range(_DICTIONARY_SAMPLE_SLICES)})
    slices = [rows.slice(start, size) for start in starts] if rows.num_rows > _DICTIONARY_SAMPLE_ROWS else [rows]
    sample = pa.concat_tables(slices)
    chosen, delta = [], []
    for f in rows.schema:
        column = sample.column(f.name)
        valid = len(column) - column.null_count
        if pa.types.is_boolean(f.type) or pa.types.is_dictionary(f.type) or valid == 0:
            chosen.append(f.name)
            continue
        try:
            distinct = pc.count_distinct(column).as_py()
        except pa.ArrowNotImplementedError:  # a type without a hash kernel: the default
            chosen.append(f.name)
            continue
        repeats = valid - distinct
        # A sample of n values from d equally likely ones repeats about n²/2d times.
        estimated = valid * valid / (2 * repeats) if repeats else float("inf")
        if distinct <= _DICTIONARY_MAX_DISTINCT * valid or estimated * column.nbytes / len(column) <= _DICTIONARY_PAGE_BYTES:
            chosen.append(f.name)
        elif pa.types.is_integer(f.type) and _small_steps([part.column(f.name) for part in slices], f.type.bit_width):
            delta.append(f.name)
    return ColumnEncodings(chosen, delta)


def _small_steps(runs: list[pa.ChunkedArray], bit_width: int) -> bool:
    """Whether the differences between neighbouring values of each run (nulls left out) lie in
    a range of at most half of ``bit_width`` bits. The encoding stores each difference less the
    block's smallest one, so a constant step of any size packs to nothing."""
    low, high = np.inf, -np.inf
    for run in runs:
        # As floats: only the steps' size matters, and no step of int64's extremes overflows.
        values = run.drop_null().to_numpy().astype(np.float64)
        if len(values) < 2:
            continue
        steps = np.diff(values)
        low, high = min(low, steps.min()), max(high, steps.max())
    return bool(high < low or high - low < 2.0 ** (bit_width // 2))  # no step at all: either encoding


_stats_workers: tuple[int, ThreadPoolExecutor] | None = None
_stats_workers_lock = threading.Lock()


def _stats_worker() -> ThreadPoolExecutor:
    """The threads computing file stats while Parquet encodes, made once per process (a thread
    per flush cost as much as the stats on a busy machine: starting one waits for it to be
    scheduled). A forked child makes its own: the parent's threads are not in it."""
    global _stats_workers
    with _stats_workers_lock:
        if _stats_workers is None or _stats_workers[0] != os.getpid():
            _stats_workers = (os.getpid(), ThreadPoolExecutor(2, thread_name_prefix="txnlog-file-stats"))
        return _stats_workers[1]


class _OpenFile:
    """One data file being written: its Parquet writer, buffered rows and running stats."""

    def __init__(
        self, store: LogStore, layout: _Layout, path: str, partition_values: dict[str, str | None], compression: str
    ) -> None:
        self.path = path
        self.partition_values = partition_values
        self.layout = layout
        self.stats = StatsCollector(layout.table_schema, layout.stats_columns, mapped=layout.mapped)
        self.stats.bounds_from_parquet(layout.file_schema, layout.data_names)
        self.footers: list[pq.FileMetaData] = []  # the written file's, once closed
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.compression = compression
        self.unstated: list[pa.RecordBatch] = []  # rows appended whose stats are not yet counted
        self.writer: pq.ParquetWriter | None = None  # made with the first rows, which choose its encodings
        self.counted_disk = 0  # bytes of this file already in the write's size ratio
        fs, _ = store.arrow_filesystem()
        target = store.arrow_path(path)
        try:
            try:
                self.sink = fs.open_output_stream(target)
            except FileNotFoundError:
                fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                self.sink = fs.open_output_stream(target)
        except Exception as e:
            if not _is_store_failure(e):
                raise
            raise StorageError(f"cannot create data file {store.uri_of(path)}: {e}", path=path) from e

    def append(self, rows: pa.RecordBatch) -> None:
        self.unstated.append(rows)
        file_rows = self.layout.file_batch(rows)
        self.pending.append(file_rows)
        self.pending_bytes += file_rows.nbytes

    def disk_bytes(self) -> int:
        return int(self.sink.tell())

    def flush(self) -> None:
        if not self.pending:
            return
        try:
            table = pa.Table.from_batches(self.pending, schema=self.layout.file_schema)
            if table.num_rows < _SMALL_CHUNK_ROWS * len(self.pending):
                # Many small slices (one partition's share of each input batch) encode much
                # faster once made contiguous.
                table = table.combine_chunks()
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.sink, self.layout.file_schema, compression=self.compression,
                                               metadata_collector=self.footers, **column_encodings(table).writer_options())
            # The stats are computed while Parquet encodes the rows: both release the GIL.
            counting = _stats_worker().submit(self._count_stats)
            try:
                self.writer.write_table(table)
            finally:
                counting.result()
        except Exception as e:
            if not _is_store_failure(e):
                raise
            raise StorageError(f"cannot write data file {self.path}: {e}", path=self.path) from e
        self.pending, self.pending_bytes = [], 0

    def _count_stats(self) -> None:
        rows, self.unstated = self.unstated, []
        for batch in rows:
            self.stats.update(batch)

    def close(self, data_change: bool) -> AddFile:
        self.flush()
        self._count_stats()
        try:
            if self.writer is None:  # no row: a valid empty file all the same
                self.writer = pq.ParquetWriter(self.sink, self.layout.file_schema, compression=self.compression)
            self.writer.close()
            for footer in self.footers:
                self.stats.add_parquet_footer(footer)
            size = self.disk_bytes()
            self.sink.close()
        except Exception as e:
            if not _is_store_failure(e):
                raise
            raise StorageError(f"cannot finish data file {self.path}: {e}", path=self.path) from e
        return AddFile(
            path=encode_log_path(self.path),
            partition_values=self.partition_values,
            size=size,
            modification_time=int(time.time() * 1000),
            data_change=data_change,
            stats=self.stats.to_json(),
        )

    def discard(self) -> None:
        for closer in ([self.writer.close] if self.writer is not None else []) + [self.sink.close]:
            try:
                closer()
            except Exception:  # already failing; the file is deleted next
                pass


class _FileSet:
    """The files of one write call, at most one open per partition."""

    def __init__(
        self, store: LogStore, layout: _Layout, target: int, data_change: bool, prefix: str, compression: str, directory: str = ""
    ) -> None:
        self.store = store
        self.directory = directory.strip("/")
        self.compression = compression
        self.layout = layout
        self.target = target
        self.data_change = data_change
        self.prefix = prefix
        self.open: OrderedDict[tuple[str | None, ...], _OpenFile] = OrderedDict()
        self.done: list[AddFile] = []
        self.written: list[str] = []  # storage paths, for clean-up on failure
        self.counter = 0
        self.disk_total = 0
        self.arrow_total = 0
        self.buffered = 0

    @property
    def ratio(self) -> float:
        """Parquet bytes per Arrow byte seen so far in this write (1.0 before any)."""
        return self.disk_total / self.arrow_total if self.arrow_total else 1.0

    def _estimate(self, f: _OpenFile) -> float:
        return f.disk_bytes() + f.pending_bytes * self.ratio

    def _new_path(self, values: tuple[tuple[str | None, str], ...]) -> str:
        path = self._path_in_table(values)
        return f"{self.directory}/{path}" if self.directory else path

    def _path_in_table(self, values: tuple[tuple[str | None, str], ...]) -> str:
        suffix = "" if self.compression == "none" else f".{self.compression}"
        name = f"{self.prefix}-{self.counter:05d}-{uuid.uuid4()}-c000{suffix}.parquet"
        self.counter += 1
        if not self.layout.partitions:
            return name
        if self.layout.mapped:
            directory = "".join(random.choices(string.ascii_letters + string.digits, k=2))
        else:
            directory = "/".join(
                f"{escape_path_name(p.name)}={escape_path_name(text)}" for p, (_, text) in zip(self.layout.partitions, values)
            )
        return f"{directory}/{name}"

    def write(self, key: tuple[str | None, ...], values: tuple[tuple[str | None, str], ...], rows: pa.RecordBatch) -> None:
        while rows.num_rows:
            f = self.open.get(key)
            if f is None:
                path = self._new_path(values)
                self.written.append(path)
                partition_values = {p.key: value for p, (value, _) in zip(self.layout.partitions, values)}
                f = self.open[key] = _OpenFile(self.store, self.layout, path, partition_values, self.compression)
            self.open.move_to_end(key)
            room = self.target - self._estimate(f)
            estimate = rows.nbytes * self.ratio
            take = rows.num_rows if estimate <= room else max(1, int(rows.num_rows * room / estimate))
            f.append(rows.slice(0, take) if take < rows.num_rows else rows)
            rows = rows.slice(take)
            if f.pending_bytes >= _ROW_GROUP_BYTES:
                self._flush(f)
            if self._estimate(f) >= self.target:
                self._close(key)
        self.buffered = sum(f.pending_bytes for f in self.open.values())
        while self.buffered > _MAX_BUFFERED_BYTES:
            biggest = max(self.open.values(), key=lambda f: f.pending_bytes)
            self.buffered -= biggest.pending_bytes
            self._flush(biggest)
        while len(self.open) > _MAX_OPEN_FILES:
            self._close(next(iter(self.open)))

    def _flush(self, f: _OpenFile) -> None:
        arrow = f.pending_bytes
        f.flush()
        self._count(f, arrow)

    def _count(self, f: _OpenFile, arrow: int, size: int | None = None) -> None:
        """Add what ``f`` wrote since last counted to the ratio's totals."""
        disk = f.disk_bytes() if size is None else size
        self.disk_total += disk - f.counted_disk
        f.counted_disk = disk
        self.arrow_total += arrow

    def _close(self, key: tuple[str | None, ...]) -> None:
        f = self.open.pop(key)
        arrow = f.pending_bytes
        add = f.close(self.data_change)
        # The whole file counts, footer included, so later files land near the target.
        self._count(f, arrow, add.size)
        self.done.append(add)
        logger.debug("wrote data file %s (%d bytes)", add.path, add.size)

    def finish(self) -> list[AddFile]:
        while self.open:
            self._close(next(iter(self.open)))
        return self.done

    def abort(self) -> None:
        for f in self.open.values():
            f.discard()
        self.open.clear()
        for path in self.written:
            try:
                self.store.delete(path)
            except TxnLogError as e:
                logger.warning("could not delete data file %s of a failed write: %s", path, e)
