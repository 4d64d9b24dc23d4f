"""Scanning a table's live files with pyarrow's dataset machinery, and :class:`TableDataset`, the
lazy ``pyarrow.dataset.Dataset`` that DuckDB, Polars and pyarrow push projections and filters
into.

A data file without a deletion vector, in a table without column mapping, is a plain Parquet
file whose partition values the log knows: pyarrow reads it as a dataset fragment (its
partition values as the fragment's guarantee), with everything pyarrow pushes into Parquet
(columns decoded, row groups skipped by their statistics, threads, read-ahead). Every other file
(a deletion vector to apply, physical column names to map, a path outside the table root) is
read by :class:`~txnlog.read.files.ReadContext`, the one reader that decodes those, and pyarrow
filters and projects its rows. Files are skipped beforehand, by the caller, with txnlog's own
expression tree on partition values and stats.

pyarrow has no dataset a Python object can implement, so :class:`TableDataset` is a
``UnionDataset`` whose Python scan methods (``scanner``, ``to_table``, ``to_batches``, ``head``,
``take``, ``count_rows``, ``filter``: what DuckDB, Polars and pyarrow's own calls go through) run
the scan above. Its C++ object, which C++ consumers take instead (``pyarrow.dataset.dataset([...])``,
Acero's scan node, ``Scanner.from_dataset``, ``write_dataset``), refuses to be read, saying so.

No Python runs on pyarrow's threads: pyarrow pulls a scanner's source there, and a Python source
still being pulled when the interpreter exits hangs or aborts the process. Plain files get
pyarrow's own scanner; files the reader decodes are read on the consuming thread
(:class:`TableScanner`, :func:`scan_batches`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, StorageError, TxnLogError
from txnlog.expressions import FilePredicate, approximate_arrow, arrow_columns
from txnlog.file_facts import parse_partition_values, parse_stats
from txnlog.read.files import READ_THREADS, ReadContext
from txnlog.storage import LogStore, locate

T = TypeVar("T")

#: pyarrow's default rows per scanned batch.
SCAN_BATCH_ROWS = 131_072

#: A file list for a predicate (None: every live file), with or without the stats column.
FileLister = Callable[[FilePredicate | None, bool], pa.Table]

_PARQUET = ds.ParquetFileFormat(
    read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"),  # as ReadContext reads them
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True),
)


def scan(
    context: ReadContext,
    files: pa.Table,
    *,
    columns: Sequence[str] | Mapping[str, pc.Expression] | None = None,
    filter: pc.Expression | None = None,  # noqa: A002 - pyarrow's name for it
    store: LogStore | None = None,
    batch_size: int = SCAN_BATCH_ROWS,
    **options: Any,
) -> ds.Scanner | TableScanner:
    """A scanner of the live rows of ``files`` (rows of ``Snapshot.files()``), in their order:
    ``columns`` (names, or names to expressions, as pyarrow's scanner takes them; every column
    when None) of the rows ``filter`` is true on. ``options`` are pyarrow's scanner options
    (``batch_readahead``, ``use_threads``...). Files are read as the scanner is consumed.

    When every file is plain Parquet this is pyarrow's own Scanner, which runs no Python (its
    errors are pyarrow's). Otherwise it is a :class:`TableScanner`, which reads on the consuming
    thread: pyarrow would pull Python batches on its own threads, and a scan left unfinished at
    interpreter exit (DuckDB keeps a LIMIT query's stream open) would then hang or abort it."""
    if all(plain for plain, _ in _runs(context, files)):
        schema = context.output_schema()
        dataset = _file_dataset(context, files, store if store is not None else context.open_store(), schema)
        try:
            return dataset.scanner(columns=columns, filter=filter, batch_size=batch_size, **options)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise _scan_error(context, columns, filter, e) from None
    projected, _ = scan_batches(context, files, columns=columns, filter=filter, store=store, batch_size=batch_size, **options)
    return TableScanner(
        context.output_schema(), projected,
        lambda: scan_batches(context, files, columns=columns, filter=filter, store=store, batch_size=batch_size, **options)[1],
    )


class TableScanner:
    """What :func:`scan` gives for files txnlog's reader must decode (deletion vectors, column
    mapping): pyarrow's ``Scanner`` reading methods, each a new scan on the calling thread.
    DuckDB reads it through :meth:`to_reader`. Not a ``pyarrow.dataset.Scanner``: to write it
    with ``pyarrow.dataset.write_dataset``, pass ``scanner.to_reader()``."""

    def __init__(self, dataset_schema: pa.Schema, projected_schema: pa.Schema, batches: Callable[[], Iterator[pa.RecordBatch]]) -> None:
        self.dataset_schema = dataset_schema
        self.projected_schema = projected_schema
        self._batches = batches

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        return self._batches()

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self._batches())

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self._batches()), schema=self.projected_schema)

    def head(self, num_rows: int) -> pa.Table:
        taken, rows = [], 0
        for batch in self._batches():
            if rows >= num_rows:
                break
            taken.append(batch.slice(0, num_rows - rows))
            rows += taken[-1].num_rows
        return pa.Table.from_batches(taken, schema=self.projected_schema)

    def take(self, indices: Any) -> pa.Table:
        return self.to_table().take(indices)

    def count_rows(self) -> int:
        return sum(batch.num_rows for batch in self._batches())


def scan_batches(
    context: ReadContext,
    files: pa.Table,
    *,
    columns: Sequence[str] | Mapping[str, pc.Expression] | None = None,
    filter: pc.Expression | None = None,  # noqa: A002 - pyarrow's name for it
    store: LogStore | None = None,
    batch_size: int = SCAN_BATCH_ROWS,
    parallel: int = READ_THREADS,
    **options: Any,
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """What :func:`scan` reads, as (schema, batches) computed on the consuming thread: plain
    files through pyarrow's scanner, the others through ReadContext (``parallel`` files decoded
    at once), filtered and projected by Acero on that thread. An unreadable file is a StorageError."""
    schema = context.output_schema()
    try:
        projected = ds.Scanner.from_batches(iter(()), schema=schema, columns=columns, filter=filter).projected_schema
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise _scan_error(context, columns, filter, e) from None
    store = store if store is not None else context.open_store()
    runs = _runs(context, files)

    def batches() -> Iterator[pa.RecordBatch]:
        for plain, part in runs:
            try:
                if plain:
                    yield from _file_dataset(context, part, store, schema).scanner(
                        columns=columns, filter=filter, batch_size=batch_size, **options
                    ).to_batches()
                    continue
                needed = _read_columns(schema, columns, filter)
                for batch in context.batches(part, columns=needed, store=store, batch_rows=batch_size, parallel=parallel):
                    # Acero's projection forgets NOT NULL: the batches take the projected schema back.
                    yield from (pa.RecordBatch.from_arrays(b.columns, schema=projected) for b in _filtered(batch, columns, filter).to_batches())
            except TxnLogError:
                raise
            except (OSError, pa.ArrowException) as e:
                raise _read_error(context, part, store, e) from e

    return projected, batches()


def _filtered(batch: pa.RecordBatch, columns: Sequence[str] | Mapping[str, pc.Expression] | None, filter: pc.Expression | None) -> pa.Table:  # noqa: A002
    """``batch`` filtered and projected as a pyarrow scanner would, on this thread."""
    import pyarrow.acero as acero  # deferred: Acero's engine (7 MiB resident), for these files only

    steps = [acero.Declaration("table_source", acero.TableSourceNodeOptions(pa.Table.from_batches([batch])))]
    if filter is not None:
        steps.append(acero.Declaration("filter", acero.FilterNodeOptions(filter)))
    if columns is not None:
        names = list(columns)
        expressions = list(columns.values()) if isinstance(columns, Mapping) else [pc.field(n) for n in names]
        steps.append(acero.Declaration("project", acero.ProjectNodeOptions(expressions, names)))
    return acero.Declaration.from_sequence(steps).to_table(use_threads=False)


def _scan_error(context: ReadContext, columns: Any, filter: pc.Expression | None, error: Exception) -> InvalidArgumentError:  # noqa: A002
    return InvalidArgumentError(f"cannot scan table {context.table_uri} for columns {columns!r} where {filter}: {error}")


def _runs(context: ReadContext, files: pa.Table) -> list[tuple[bool, pa.Table]]:
    """``files`` cut into runs, in order: (True, plain Parquet files) and (False, files the
    reader must decode)."""
    if not files.num_rows:
        return []
    if context.table_configuration.is_column_mapped:
        return [(False, files)]
    vectors = files.column("deletion_vector").is_valid().to_pylist()
    plain = [
        not vector and locate(context.table_uri, path, allow_absolute=context.allow_absolute_paths, version=context.version).relative is not None
        for vector, path in zip(vectors, files.column("path").to_pylist())
    ]
    runs, start = [], 0
    for kind, group in itertools.groupby(plain):
        n = len(list(group))
        runs.append((kind, files.slice(start, n)))
        start += n
    return runs


def _file_dataset(context: ReadContext, files: pa.Table, store: LogStore, schema: pa.Schema) -> ds.FileSystemDataset:
    """Plain Parquet files as a pyarrow dataset, each fragment guaranteeing its partition values."""
    filesystem, _ = store.arrow_filesystem()
    config = context.table_configuration
    partitions = parse_partition_values(files, config.schema, config.partition_columns, config.properties)
    values = {name: partitions.column(name).to_pylist() for name in partitions.column_names}
    types = {name: partitions.schema.field(name).type for name in partitions.column_names}
    fragments = []
    for i, (path, size) in enumerate(zip(files.column("path").to_pylist(), files.column("size").to_pylist())):
        guarantee = pc.scalar(True)
        for name in partitions.column_names:
            value = values[name][i]
            field = pc.field(name)
            guarantee = guarantee & (field.is_null() if value is None else field == pa.scalar(value, types[name]))
        relative = locate(context.table_uri, path, allow_absolute=context.allow_absolute_paths, version=context.version).relative
        assert relative is not None
        fragments.append(_PARQUET.make_fragment(store.arrow_path(relative), filesystem=filesystem, partition_expression=guarantee, file_size=size))
    return ds.FileSystemDataset(fragments, schema, _PARQUET, filesystem)


def _read_columns(schema: pa.Schema, columns: Sequence[str] | Mapping[str, pc.Expression] | None, filter: pc.Expression | None) -> list[str]:  # noqa: A002
    """The table's columns a projection and a filter read."""
    if columns is None:
        wanted = list(schema.names)
    elif isinstance(columns, Mapping):
        wanted = [name for expression in columns.values() for name in arrow_columns(expression)]
    else:
        wanted = list(columns)
    if filter is not None:
        wanted += arrow_columns(filter)
    return [name for name in dict.fromkeys(wanted) if name in schema.names]


def _read_error(context: ReadContext, files: pa.Table, store: LogStore, error: Exception) -> StorageError:
    """A StorageError for a failed read of ``files``, naming the first that is gone if one is."""
    for path in files.column("path").to_pylist():
        location = locate(context.table_uri, path, allow_absolute=context.allow_absolute_paths, version=context.version)
        if location.relative is not None and not store.exists(location.relative):
            return StorageError(f"cannot read data file {location.uri} of table {context.table_uri}: it does not exist", path=path)
    return StorageError(f"cannot read the data files of table {context.table_uri}: {error}")


# --- the dataset ------------------------------------------------------------------------------


class TableDataset(ds.UnionDataset):  # type: ignore[misc]  # pyarrow has no type information
    """The live rows of one table version as a lazy ``pyarrow.dataset.Dataset``: see the module's
    docstring for what its scans push down. Made by ``Snapshot.to_pyarrow_dataset()``."""

    def __init__(
        self,
        context: ReadContext,
        files: FileLister,
        *,
        store: LogStore | None = None,
        filter: pc.Expression | None = None,  # noqa: A002 - pyarrow's name for it
        _cache: _FileCache | None = None,
    ) -> None:
        schema = context.output_schema()
        super().__init__(schema, [_refusing_dataset(schema, context.table_uri)])
        self._context = context
        self._files = files
        self._store = store
        self._filter = filter
        self._cache = _cache if _cache is not None else _FileCache(files)  # shared with filter()'s datasets

    def __repr__(self) -> str:
        where = f" where {self._filter}" if self._filter is not None else ""
        return f"TableDataset({self._context.table_uri!r}, version={self._context.version}{where})"

    @property
    def read_context(self) -> ReadContext:
        return self._context

    def _combined(self, filter: pc.Expression | None) -> pc.Expression | None:  # noqa: A002
        if self._filter is None or filter is None:
            return self._filter if filter is None else filter
        return self._filter & filter

    def _skipping(self, filter: pc.Expression | None) -> FilePredicate | None:  # noqa: A002
        """What skips files for ``filter``: its translation, widened where txnlog cannot compute it."""
        if filter is None:
            return None
        return FilePredicate.of(approximate_arrow(filter), self._context.table_configuration)

    def scanner(self, columns: Any = None, filter: pc.Expression | None = None, **options: Any) -> ds.Scanner | TableScanner:  # noqa: A002
        """pyarrow's ``Dataset.scanner``: ``columns`` (names, or names to expressions) of the rows
        ``filter`` is true on; files are skipped first by their partition values and stats. A
        pyarrow Scanner, or a :class:`TableScanner` with its reading methods when files need
        txnlog's reader (see :func:`scan`)."""
        if filter is not None and not isinstance(filter, pc.Expression):
            raise InvalidArgumentTypeError(f"filter must be a pyarrow.compute.Expression, got {type(filter).__name__}")
        combined = self._combined(filter)
        return scan(self._context, self._files_for(combined), columns=columns, filter=combined, store=self._store, **options)

    def _files_for(self, filter: pc.Expression | None) -> pa.Table:  # noqa: A002
        """The files that may hold rows ``filter`` is true on. The file list and its stats are read
        once per dataset (a scan of DuckDB or Polars comes with a filter each time)."""
        skipping = self._skipping(filter)
        if skipping is None:
            return self._files(None, False)
        return skipping.filter(self._cache.listed(), parsed_stats=self._cache.parsed_stats)

    # pyarrow's own scanner raises pyarrow's errors: these calls say which file of which table.

    # pyarrow's versions of these build a Scanner of their own, whose threads would run Python
    # (see scan()): these go through scanner(), and say which file of which table failed.

    def to_table(self, columns: Any = None, filter: pc.Expression | None = None, **options: Any) -> pa.Table:  # noqa: A002
        return self._reading(lambda: self.scanner(columns=columns, filter=filter, **options).to_table())

    def to_batches(self, columns: Any = None, filter: pc.Expression | None = None, **options: Any) -> Iterator[pa.RecordBatch]:  # noqa: A002
        batches = iter(self.scanner(columns=columns, filter=filter, **options).to_batches())
        while True:
            batch = self._reading(lambda: next(batches, None))
            if batch is None:
                return
            yield batch

    def head(self, num_rows: int, columns: Any = None, filter: pc.Expression | None = None, **options: Any) -> pa.Table:  # noqa: A002
        return self._reading(lambda: self.scanner(columns=columns, filter=filter, **options).head(num_rows))

    def take(self, indices: Any, columns: Any = None, filter: pc.Expression | None = None, **options: Any) -> pa.Table:  # noqa: A002
        return self._reading(lambda: self.scanner(columns=columns, filter=filter, **options).take(indices))

    def _reading(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except TxnLogError:
            raise
        except (OSError, pa.ArrowException) as e:
            store = self._store if self._store is not None else self._context.open_store()
            raise _read_error(self._context, self._files(None, False), store, e) from e

    def count_rows(self, filter: pc.Expression | None = None, **options: Any) -> int:  # noqa: A002
        """The number of rows; without a filter, from the files' ``numRecords`` stats less their
        deletion vectors' cardinality, reading no data when every file has the stat."""
        if self._combined(filter) is None:
            files = self._cache.listed()
            counts = parse_stats(files, pa.struct([("numRecords", pa.int64())])).field("numRecords")
            if counts.null_count == 0:
                deleted = files.column("deletion_vector").combine_chunks().field("cardinality")
                return int(pc.sum(counts).as_py() or 0) - int(pc.sum(deleted).as_py() or 0)
        return self._reading(lambda: int(self.scanner(filter=filter, **options).count_rows()))

    def filter(self, expression: pc.Expression) -> TableDataset:
        """This dataset with only the rows ``expression`` is true on, in every scan."""
        if not isinstance(expression, pc.Expression):
            raise InvalidArgumentTypeError(f"filter takes a pyarrow.compute.Expression, got {type(expression).__name__}")
        return TableDataset(self._context, self._files, store=self._store, filter=self._combined(expression), _cache=self._cache)

    def get_fragments(self, filter: pc.Expression | None = None) -> Iterator[ds.Fragment]:  # noqa: A002
        raise InvalidArgumentTypeError(
            f"{self!r} has no fragments: files with deletion vectors or column mapping are not plain Parquet. "
            "Scan it with scanner(), to_table() or to_batches()"
        )

    def replace_schema(self, schema: pa.Schema) -> TableDataset:
        if schema.equals(self.schema):  # what pyarrow.dataset.dataset([...]) asks of each child
            return self
        raise InvalidArgumentTypeError(f"{self!r} has the table's schema; project columns in scanner(columns=...) instead")

    def sort_by(self, sorting: Any, **kwargs: Any) -> ds.InMemoryDataset:
        """As pyarrow's, on the rows read into memory."""
        return ds.dataset(self.to_table()).sort_by(sorting, **kwargs)

    def join(self, right_dataset: Any, *args: Any, **kwargs: Any) -> ds.InMemoryDataset:
        """As pyarrow's, on the rows read into memory (both sides, when both are TableDatasets)."""
        right = ds.dataset(right_dataset.to_table()) if isinstance(right_dataset, TableDataset) else right_dataset
        return ds.dataset(self.to_table()).join(right, *args, **kwargs)

    def join_asof(self, right_dataset: Any, *args: Any, **kwargs: Any) -> ds.InMemoryDataset:
        """As pyarrow's, on the rows read into memory (both sides, when both are TableDatasets)."""
        right = ds.dataset(right_dataset.to_table()) if isinstance(right_dataset, TableDataset) else right_dataset
        return ds.dataset(self.to_table()).join_asof(right, *args, **kwargs)


class _FileCache:
    """Every live file with its stats, read once a filter or a count needs them, and those stats
    parsed, by their type: DuckDB and Polars scan with a filter each time."""

    def __init__(self, files: FileLister) -> None:
        self._files = files
        self._listed: pa.Table | None = None
        self.parsed_stats: dict[str, pa.StructArray] = {}

    def listed(self) -> pa.Table:
        if self._listed is None:
            self._listed = self._files(None, True)
        return self._listed


class _RefusingHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """A filesystem whose every call raises: what a C++ consumer of a TableDataset reads."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def get_type_name(self) -> str:
        return "txnlog-table-dataset"

    def normalize_path(self, path: str) -> str:
        return path

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidArgumentTypeError(self.message)

    get_file_info = get_file_info_selector = create_dir = delete_dir = delete_dir_contents = _refuse
    delete_root_dir_contents = delete_file = move = copy_file = _refuse
    open_input_stream = open_input_file = open_output_stream = open_append_stream = _refuse


def _refusing_dataset(schema: pa.Schema, table_uri: str) -> ds.FileSystemDataset:
    message = (
        f"txnlog's dataset of table {table_uri} is read through its Python methods (scanner(), to_table(), "
        "to_batches(): what DuckDB and Polars call), which apply deletion vectors and column mapping; it cannot be "
        "used as a C++ dataset (pyarrow.dataset.dataset([...]), Acero's scan node, Scanner.from_dataset, "
        "write_dataset): pass dataset.scanner().to_reader() instead"
    )
    filesystem = pafs.PyFileSystem(_RefusingHandler(message))
    return ds.FileSystemDataset([_PARQUET.make_fragment("table", filesystem=filesystem)], schema, _PARQUET, filesystem)


__all__ = ["SCAN_BATCH_ROWS", "FileLister", "TableDataset", "scan"]
