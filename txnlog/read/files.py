"""Reading a table's data files as Arrow: the one place rows are decoded.

A data file holds only part of what a row is. This module adds the rest, for every reader
(``Snapshot.to_arrow``, the Python DML, the Spark data source's executors):

- logical column names and types under column mapping (files hold physical names, at every
  nesting level): the file's columns are viewed as the logical types, zero-copy;
- columns a file predates (schema evolution) as nulls;
- partition columns, from the file's ``partitionValues`` typed by the table schema;
- deletion vectors: rows whose position is in the file's vector are dropped;
- a row filter (an Arrow expression or a :class:`~txnlog.expressions.RowFilter`, over logical
  names), after all of the above.

:class:`ReadContext` is picklable, like ``WriteContext``: a process holding only the context
opens the table's store itself and reads the files it is handed.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from txnlog.errors import InvalidArgumentError, LogCorruptError, SchemaError, StorageError, TxnLogError
from txnlog.expressions.rows import RowFilter, evaluate
from txnlog.file_facts import parse_partition_values, physical_schema
from txnlog.log.actions import DeletionVectorDescriptor
from txnlog.log.deletion_vectors import DeletionVectorError, read_deletion_vector
from txnlog.storage import LogStore, normalize_uri, open_store
from txnlog.storage.paths import locate
from txnlog.table_configuration import TableConfiguration

T = TypeVar("T")

#: Rows per batch read from a data file.
BATCH_ROWS = 65_536
#: Files a reader of many decodes at once (``read_each(parallel=)``): Arrow's Parquet reader
#: releases the GIL.
READ_THREADS = max(2, min(8, os.cpu_count() or 2))
#: The names ``Snapshot.to_arrow(with_row_ids=True)`` gives a row's stable id and commit version;
#: a write with ``preserve_row_ids`` takes columns of these names as the values to keep.
ROW_ID = "row_id"
ROW_COMMIT_VERSION = "row_commit_version"


@dataclass(frozen=True)
class ReadContext:
    """How to read the data files of one table at one version. Picklable (the table's
    configuration is plain records; the store is opened on first use, in whichever process
    uses it)."""

    table_uri: str
    table_configuration: TableConfiguration
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    version: int | None = None
    allow_absolute_paths: bool = False

    @classmethod
    def for_configuration(
        cls,
        table_uri: str,
        table_configuration: TableConfiguration,
        *,
        storage_options: Mapping[str, Any] | None = None,
        version: int | None = None,
        allow_absolute_paths: bool = False,
    ) -> ReadContext:
        return cls(normalize_uri(table_uri), table_configuration, dict(storage_options or {}), version, allow_absolute_paths)

    # -- the table's shape ------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The table schema, logical names (Delta field metadata kept)."""
        return self.table_configuration.schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.table_configuration.partition_columns

    def output_schema(self, columns: Sequence[str] | None = None) -> pa.Schema:
        """The schema of what :meth:`batches` yields for ``columns``: logical names, no Delta
        field metadata, in the order asked for (the table's order when None). One name as a
        string is that one column."""
        fields = [pa.field(f.name, f.type, f.nullable) for f in self.schema]
        if columns is None:
            return pa.schema(fields)
        if isinstance(columns, str):  # a str is a Sequence[str] too: "id" would be columns i, d
            columns = [columns]
        by_lower = {f.name.lower(): f for f in fields}
        out = []
        for name in columns:
            found = by_lower.get(name.lower()) if isinstance(name, str) else None
            if found is None:
                raise InvalidArgumentError(
                    f"table {self.table_uri} has no column {name!r} (columns: {', '.join(f.name for f in fields)})"
                )
            out.append(found)
        return pa.schema(out)

    def open_store(self) -> LogStore:
        return open_store(self.table_uri, self.storage_options)

    # -- deletion vectors -------------------------------------------------------------------

    def deleted_rows(self, files: pa.Table, store: LogStore | None = None) -> list[pa.Array | None]:
        """Per row of ``files`` (rows of ``Snapshot.files()``): the deleted row positions
        (uint64, ascending) of its deletion vector, or None when it has none."""
        dvs = files.column("deletion_vector").combine_chunks()
        out: list[pa.Array | None] = [None] * files.num_rows
        if dvs.null_count == len(dvs):
            return out
        store = store if store is not None else self.open_store()
        paths = files.column("path")
        for i in pc.indices_nonzero(dvs.is_valid()).to_pylist():
            out[i] = self._vector(store, dvs[i].as_py(), paths[i].as_py())
        return out

    def _vector(self, store: LogStore, raw: Mapping[str, Any], path: str) -> pa.Array:
        try:
            descriptor = DeletionVectorDescriptor(
                raw["storage_type"], raw["path_or_inline_dv"], raw["size_in_bytes"], raw["cardinality"],
                offset=raw["offset"], max_row_index=raw["max_row_index"],
            )
            return read_deletion_vector(store, descriptor, table_uri=self.table_uri, data_file=path,
                                        allow_absolute_paths=self.allow_absolute_paths, version=self.version)
        except DeletionVectorError:
            raise
        except (TxnLogError, KeyError, TypeError) as e:
            raise DeletionVectorError(f"cannot read the deletion vector of data file {path} of table {self.table_uri}: {e}", path=path) from e

    # -- rows ---------------------------------------------------------------------------------

    def batches(
        self,
        files: pa.Table,
        *,
        columns: Sequence[str] | None = None,
        row_filter: pc.Expression | RowFilter | None = None,
        filter_columns: Iterable[str] = (),
        store: LogStore | None = None,
        batch_rows: int = BATCH_ROWS,
        row_index: str | None = None,
        row_id: str | None = None,
        row_commit_version: str | None = None,
        file_columns: Sequence[pa.Field] = (),
        parallel: int = 1,
        rows_at: np.ndarray | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The live rows of ``files`` (rows of ``Snapshot.files()``), file by file, as batches of
        :meth:`output_schema` ``(columns)``. ``row_filter`` (over logical names, reading
        ``filter_columns`` besides ``columns``) keeps only the rows where it is true.

        Extra columns, after the table's, each when asked for: ``file_columns``, read as they
        are named in each file (a change data file's ``_change_type``; nulls where a file lacks
        one); then int64 ones: ``row_index``, each row's physical position in its file, the
        position a deletion vector names (what DML marks as deleted); ``row_id`` and
        ``row_commit_version``, on a table with row tracking enabled, each row's stable row id
        (its materialized row id, else the file's ``baseRowId`` + its position) and row commit
        version (its materialized one, else the file's ``defaultRowCommitVersion``).
        ``parallel`` files are read at once (their batches still come in file order).

        ``rows_at``, with one file: only its live rows at these physical positions (ascending,
        as ``row_index`` numbers them). Only the row groups holding them are read, and a string
        column stored with a dictionary is decoded for those rows alone: a merge-on-read reads
        a few rows of a file this way."""
        out_schema = self.output_schema(columns)
        wanted = [f.name for f in out_schema]
        extra = [f.name for f in self.output_schema(list(filter_columns)) if f.name not in wanted] if row_filter is not None else []
        read_schema = self.output_schema(wanted + extra)
        tracking = self._row_tracking(row_id, row_commit_version)
        taken = {f.name.lower() for f in self.schema}
        for f in file_columns:
            if f.name.lower() in taken:
                raise InvalidArgumentError(f"file column {f.name!r} clashes with a column of table {self.table_uri}")
            taken.add(f.name.lower())
            read_schema = read_schema.append(f)
            wanted = [*wanted, f.name]
        for option, name in (("row_index", row_index), ("row_id", row_id), ("row_commit_version", row_commit_version)):
            if name is None:
                continue
            if name.lower() in taken:
                raise InvalidArgumentError(f"{option} {name!r} is a column of table {self.table_uri} or another extra column; choose another name")
            taken.add(name.lower())
            read_schema = read_schema.append(pa.field(name, pa.int64(), nullable=False))
            wanted = [*wanted, name]
        if files.num_rows == 0:
            return
        if rows_at is not None and files.num_rows != 1:
            raise InvalidArgumentError(f"rows_at reads one data file of table {self.table_uri}, not {files.num_rows}")
        store = store if store is not None else self.open_store()
        deleted = self.deleted_rows(files, store)
        partitions = parse_partition_values(files, self.schema, self.partition_columns, self.table_configuration.properties)
        # The same for every file: each data column's physical field.
        data_fields = [f for f in self.schema if f.name in read_schema.names and f.name not in partitions.column_names]
        physical = dict(zip((f.name for f in data_fields), physical_schema(data_fields, self.table_configuration.is_column_mapped), strict=True))
        physical.update({f.name: f for f in file_columns})
        paths = files.column("path").to_pylist()
        row_ids = tracking.of_files(files, self.table_uri) if tracking is not None else None

        def file_batches(i: int) -> Iterator[pa.RecordBatch]:
            constants = {name: partitions.column(name)[i] for name in partitions.column_names}
            positions = _Positions(row_index, tracking, row_ids[i] if row_ids is not None else None)
            for batch in self._file_batches(store, paths[i], read_schema, physical, constants, deleted[i], batch_rows, positions, rows_at):
                if row_filter is not None:
                    rows = pa.Table.from_batches([batch])
                    batch = batch.filter(row_filter.mask(rows) if isinstance(row_filter, RowFilter) else evaluate(row_filter, rows))
                    if not batch.num_rows:
                        continue
                yield batch.select(wanted) if extra else batch

        if parallel <= 1:  # streamed batch by batch
            for i in range(len(paths)):
                yield from file_batches(i)
            return
        for _, batches in in_order(range(len(paths)), lambda i: list(file_batches(i)), parallel):
            yield from batches

    def read(self, files: pa.Table, **options: Any) -> pa.Table:
        """:meth:`batches` as one table."""
        schema = self.output_schema(options.get("columns"))
        for f in options.get("file_columns", ()):
            schema = schema.append(f)
        for option in ("row_index", "row_id", "row_commit_version"):
            if options.get(option) is not None:
                schema = schema.append(pa.field(options[option], pa.int64(), nullable=False))
        return pa.Table.from_batches(list(self.batches(files, **options)), schema=schema)

    def read_each(
        self, files: pa.Table, indexes: Iterable[int] | None = None, *, parallel: int = 1, **options: Any
    ) -> Iterator[tuple[int, pa.Table]]:
        """(i, :meth:`read` of ``files[i]`` with ``options``) for each of ``indexes`` (every file
        when None), in order; ``parallel`` files are read at once."""
        chosen = range(files.num_rows) if indexes is None else indexes
        if "store" not in options:
            options["store"] = self.open_store()  # one store for every file
        return in_order(chosen, lambda i: self.read(files.slice(i, 1), **options), parallel)

    def _row_tracking(self, row_id: str | None, row_commit_version: str | None) -> _RowTracking | None:
        if row_id is None and row_commit_version is None:
            return None
        columns = self.table_configuration.row_id_columns(f"table {self.table_uri}")
        return _RowTracking(row_id, row_commit_version, columns.row_id, columns.row_commit_version)

    def _file_batches(
        self,
        store: LogStore,
        path: str,
        schema: pa.Schema,
        physical: Mapping[str, pa.Field],
        constants: Mapping[str, pa.Scalar],
        deleted: pa.Array | None,
        batch_rows: int,
        positions: _Positions,
        rows_at: np.ndarray | None = None,
    ) -> Iterator[pa.RecordBatch]:
        location = locate(self.table_uri, path, allow_absolute=self.allow_absolute_paths, version=self.version)
        where = f"data file {location.uri} of table {self.table_uri}"
        try:
            source = store.open_input(location.relative) if location.relative is not None else _open_absolute(location.uri)
            with source:
                parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
                present = set(parquet.schema_arrow.names)
                read = [field.name for field in physical.values() if field.name in present]
                read += [name for name in positions.materialized() if name in present and name not in read]
                keep = _keep_mask(deleted, parquet.metadata.num_rows, where, path)
                pieces = _every_row(parquet, read, batch_rows) if rows_at is None else _rows_at(parquet, source, read, rows_at, where)
                for index, chunk in pieces:
                    n = len(index)
                    arrays = []
                    for f in schema:
                        if f.name not in physical and f.name not in constants:  # row index, row id, row commit version
                            arrays.append(positions.column(f.name, index, None if isinstance(chunk, int) else chunk, where))
                        elif f.name in constants:
                            arrays.append(pa.repeat(constants[f.name], n).cast(f.type))
                        elif isinstance(chunk, int) or physical[f.name].name not in present:
                            arrays.append(pa.nulls(n, f.type))
                        else:
                            arrays.append(_as_logical(chunk.column(physical[f.name].name), physical[f.name].type, f.type, where, f.name))
                    if arrays:
                        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
                    else:  # no columns asked for (a row count): the batch still has n rows
                        batch = pa.RecordBatch.from_struct_array(pa.array([{}] * n, pa.struct([])))
                    if keep is not None:
                        batch = batch.filter(pa.array(keep[index]))
                    if batch.num_rows:
                        yield batch
        except TxnLogError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise StorageError(f"cannot read {where}: {e}", path=path) from e


@dataclass(frozen=True)
class _RowTracking:
    """The row tracking columns a read asks for, and the hidden columns that may hold them."""

    row_id: str | None
    row_commit_version: str | None
    id_column: str | None
    version_column: str | None

    def of_files(self, files: pa.Table, table_uri: str) -> list[tuple[int, int]]:
        """(baseRowId, defaultRowCommitVersion) of each file; both must be there."""
        out = []
        columns = zip(files.column("path").to_pylist(), files.column("base_row_id").to_pylist(),
                      files.column("default_row_commit_version").to_pylist())
        for path, base, version in columns:
            if base is None or version is None:
                missing = "baseRowId" if base is None else "defaultRowCommitVersion"
                raise LogCorruptError(f"data file {path} of table {table_uri} has no {missing}, yet the table has row tracking enabled")
            out.append((int(base), int(version)))
        return out


@dataclass(frozen=True)
class _Positions:
    """The per-row columns of one file that are not stored as table columns: each row's
    physical position, stable row id and row commit version."""

    row_index: str | None
    tracking: _RowTracking | None
    defaults: tuple[int, int] | None  # the file's (baseRowId, defaultRowCommitVersion)

    def materialized(self) -> list[str]:
        """The hidden file columns to read along."""
        t = self.tracking
        if t is None:
            return []
        wanted = [(t.row_id, t.id_column), (t.row_commit_version, t.version_column)]
        return [column for asked, column in wanted if asked is not None and column]

    def column(self, name: str, index: np.ndarray, chunk: pa.RecordBatch | None, where: str) -> pa.Array:
        """Column ``name`` for the rows at physical positions ``index`` (``chunk``: their stored columns)."""
        n = len(index)
        if name == self.row_index or self.tracking is None or self.defaults is None:
            return pa.array(index)
        t = self.tracking
        base, version = self.defaults
        if name == t.row_id:
            return _materialized_or(chunk, t.id_column, pa.array(index + base), where)
        return _materialized_or(chunk, t.version_column, pa.repeat(pa.scalar(version, pa.int64()), n), where)


def _materialized_or(chunk: pa.RecordBatch | None, column: str | None, defaults: pa.Array, where: str) -> pa.Array:
    """A materialized column's values where not null, else ``defaults``."""
    if chunk is None or not column or column not in chunk.schema.names:
        return defaults
    values = chunk.column(column)
    try:
        values = values.cast(pa.int64())
    except (pa.ArrowException, ValueError) as e:
        raise SchemaError(f"hidden column {column!r} of {where} is {values.type}, not an integer: {e}", field=column) from e
    return values if not values.null_count else pc.coalesce(values, defaults)


def in_order(items: Iterable[int], work: Callable[[int], T], parallel: int) -> Iterator[tuple[int, T]]:
    """(item, ``work(item)``) for each item, in order, ``parallel`` of them worked on at once in
    threads (Arrow's Parquet reader releases the GIL); at most that many results wait in memory."""
    if parallel <= 1:
        for item in items:
            yield item, work(item)
        return
    with ThreadPoolExecutor(parallel, thread_name_prefix="txnlog-read") as pool:
        upcoming = iter(items)
        pending = deque((item, pool.submit(work, item)) for item in islice(upcoming, parallel))
        while pending:
            item, future = pending.popleft()
            following = next(upcoming, None)
            if following is not None:
                pending.append((following, pool.submit(work, following)))
            yield item, future.result()


def _open_absolute(uri: str) -> Any:
    """A file outside the table root that the table was opened to allow (shallow clones)."""
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs.open_input_file(path)


#: A chunk of a data file: its rows' physical positions, and their stored columns (or only how
#: many rows, when no stored column is read).
_Piece = tuple[np.ndarray, "pa.RecordBatch | int"]


def _every_row(parquet: pq.ParquetFile, read: list[str], batch_rows: int) -> Iterator[_Piece]:
    total = parquet.metadata.num_rows
    if not read:  # only partition columns or columns the file predates: count rows
        for start in range(0, total, batch_rows):
            yield np.arange(start, min(start + batch_rows, total), dtype=np.int64), min(batch_rows, total - start)
        return
    start = 0
    # Arrow decodes a row group's columns in parallel on its own pool, without the GIL (one
    # column gains nothing from that, and loses the hand-over: a key column read a third slower).
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=read, use_threads=len(read) > 1):
        yield np.arange(start, start + batch.num_rows, dtype=np.int64), batch
        start += batch.num_rows


def _rows_at(parquet: pq.ParquetFile, source: Any, read: list[str], rows_at: np.ndarray, where: str) -> Iterator[_Piece]:
    """The rows at physical positions ``rows_at``, read row group by row group (only the groups
    holding one). String columns stored as a dictionary in every such group are read as
    dictionaries, and cast to their type (``_as_logical``) after the rows are taken: a few rows'
    strings are built, not the whole column's."""
    meta = parquet.metadata
    rows_at = np.asarray(rows_at, dtype=np.int64)
    if len(rows_at) and (rows_at[0] < 0 or rows_at[-1] >= meta.num_rows or (np.diff(rows_at) <= 0).any()):
        raise InvalidArgumentError(f"rows of {where} must be asked for by ascending positions below its {meta.num_rows} rows")
    sizes = np.array([meta.row_group(g).num_rows for g in range(meta.num_row_groups)], dtype=np.int64)
    ends = np.cumsum(sizes)
    group_of = np.searchsorted(ends, rows_at, side="right")
    groups = np.unique(group_of).tolist()
    if not read:
        for g in groups:
            index = rows_at[group_of == g]
            yield index, len(index)
        return
    leaves = {meta.schema.column(c).path: c for c in range(meta.num_columns)}
    arrow = parquet.schema_arrow
    dictionary = [name for name in read if name in leaves and _is_stringlike(arrow.field(name).type)
                  and all(meta.row_group(g).column(leaves[name]).has_dictionary_page for g in groups)]
    reader = pq.ParquetFile(source, metadata=meta, read_dictionary=dictionary, coerce_int96_timestamp_unit="us") if dictionary else parquet
    for g in groups:
        index = rows_at[group_of == g]
        rows = reader.read_row_group(g, columns=read, use_threads=len(read) > 1).take(pa.array(index - (ends[g] - sizes[g])))
        for batch in rows.combine_chunks().to_batches():  # dictionaries are decoded as the column's type
            yield index[: batch.num_rows], batch
            index = index[batch.num_rows :]


def _is_stringlike(kind: pa.DataType) -> bool:
    t = pa.types
    return bool(t.is_string(kind) or t.is_large_string(kind) or t.is_binary(kind) or t.is_large_binary(kind))


def _keep_mask(deleted: pa.Array | None, num_rows: int, where: str, path: str) -> np.ndarray | None:
    """A boolean per physical row: False where the deletion vector deletes it."""
    if deleted is None or not len(deleted):
        return None
    positions = deleted.to_numpy(zero_copy_only=False).astype(np.int64)
    if positions[-1] >= num_rows:
        raise DeletionVectorError(f"the deletion vector of {where} deletes row {int(positions[-1])}, but the file has {num_rows} rows", path=path)
    keep = np.ones(num_rows, dtype=bool)
    keep[positions] = False
    return keep


def _as_logical(column: pa.Array, physical: pa.DataType, logical: pa.DataType, where: str, name: str) -> pa.Array:
    """A file's column under the table's logical names and type: cast to the physical type the
    table expects (older files may hold a narrower type), then viewed with the logical names."""
    try:
        if column.type != physical:
            column = column.cast(physical)
        return column if physical == logical else column.view(logical)
    except (pa.ArrowException, ValueError) as e:
        raise SchemaError(f"column {name!r} of {where} is {column.type}, which cannot be read as the table's {logical}: {e}", field=name) from e


__all__ = ["BATCH_ROWS", "ROW_COMMIT_VERSION", "ROW_ID", "ReadContext"]
