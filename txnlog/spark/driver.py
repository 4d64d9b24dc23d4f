"""Small row-level statements on the driver: finding the rows a DELETE, UPDATE or MERGE
changes with txnlog's own Python reader instead of a Spark job.

A DELETE or UPDATE with deletion vectors needs, of each candidate file, only the positions of
the rows its predicate selects; a MERGE needs only the target rows whose keys some source row
holds. When the columns that takes are small, reading them on the driver with
:class:`txnlog.read.ReadContext` (the code ``txnlog.dml`` uses: partition values, column
mapping and deletion vectors applied, each row's physical position) costs a fraction of
planning and running Spark jobs, whose fixed cost dominates such statements. The rows are found
by the Python executor's own code (``txnlog.dml.find_rows``, ``txnlog.dml.KeyMatcher``), and
only for plans the core calls portable (their conditions compute as Spark computes them), so
both ways select the same rows; the transaction records the same read predicates and files
either way, so conflicts are the same.

The bound is the number of values read: the candidate files' rows (by their stats) times the
columns read, at most :data:`DEFAULT_DRIVER_SCAN_CELLS` unless the Spark conf
:data:`DRIVER_SCAN_CELLS_CONF` says otherwise (``0`` always uses Spark). Above it, or when a
file has no ``numRecords``, Spark reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from txnlog.dml import SOURCE_ROW, KeyMatcher
from txnlog.errors import InvalidArgumentError
from txnlog.file_facts import decode_stats, num_records
from txnlog.read import READ_THREADS, ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import SPARK_FAILURES, job_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from txnlog import Snapshot

#: The Spark conf giving how many values (rows times columns) a statement may read on the driver.
DRIVER_SCAN_CELLS_CONF = "spark.txnlog.dml.driverScanCells"
#: 32M values: a few hundred milliseconds of Parquet decoding on one core, well under the
#: fixed cost of the Spark jobs it replaces; the columns are read a file at a time per thread.
DEFAULT_DRIVER_SCAN_CELLS = 32_000_000
#: The stored (compressed) bytes of the candidate files a statement may read on the driver, in
#: proportion to the columns read: the bound of values alone would let a few rows of a wide
#: text column fill the driver's memory.
MAX_DRIVER_SCAN_BYTES = 256 * 1024 * 1024
#: How many source rows a MERGE collects to the driver (its key columns only) to prune the
#: target's files key by key and to find the matching rows there.
MAX_SOURCE_KEYS = 2_000_000


def driver_scan_cells(spark: SparkSession) -> int:
    """The session's bound on values read on the driver (:data:`DRIVER_SCAN_CELLS_CONF`)."""
    value = spark.conf.get(DRIVER_SCAN_CELLS_CONF, None)
    if value is None:
        return DEFAULT_DRIVER_SCAN_CELLS
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"Spark conf {DRIVER_SCAN_CELLS_CONF} must be a whole number of values (0: always use Spark), not {value!r}") from None


def fits_driver(spark: SparkSession, files: pa.Table, columns: int, *, of: int) -> bool:
    """Whether reading ``columns`` of the table's ``of`` columns of ``files`` stays within the
    session's bound of values (every file must give its ``numRecords``) and within
    :data:`MAX_DRIVER_SCAN_BYTES` of the files' stored bytes, counted in proportion to the
    columns read (a wide text column makes few values large)."""
    limit = driver_scan_cells(spark)
    if limit <= 0 or files.num_rows == 0:
        return limit > 0
    stats = files.column("stats")
    if stats.null_count:
        return False
    if files.num_rows <= 64 and any(not isinstance((decode_stats(t) or {}).get("numRecords"), int) for t in stats.to_pylist()):
        return False
    stored = int(pc.sum(files.column("size")).as_py() or 0)
    if stored * min(columns, of) > MAX_DRIVER_SCAN_BYTES * max(of, 1):
        return False
    return num_records(files) * max(columns, 1) <= limit


def collect_keys(source: Any, key_columns: Sequence[str], extra: Sequence[str], limit: int, what: str) -> pa.Table | None:
    """The ``key_columns`` and ``extra`` columns of every row of ``source`` (a DataFrame), or
    None when it has more than ``limit`` rows. One Spark job (two when the first partition
    alone does not reach the limit)."""
    names = list(dict.fromkeys([*key_columns, *extra]))
    try:
        rows = source.select(*[F.col(f"`{n.replace('`', '``')}`") for n in names]).limit(limit + 1).toArrow()
    except SPARK_FAILURES as e:
        raise job_error(e, what) from e
    if rows.num_rows > limit:
        return None
    return rows.rename_columns(names)


def matching_target_rows(
    snapshot: Snapshot,
    files: pa.Table,
    columns: Sequence[str],
    matcher: KeyMatcher,
    *,
    file_column: str,
    row_index_column: str,
    with_row_ids: bool,
    pairs: bool,
    refuse_duplicates: bool,
) -> pa.Table:
    """The live rows of ``files`` whose keys some source row holds (found by the core's key
    matcher), with ``columns``, the file's ``add.path`` in ``file_column``, the row's physical
    position in ``row_index_column`` and, ``with_row_ids``, ``row_id``/``row_commit_version``.
    With ``pairs`` (an ON condition of key equalities alone), one row per matched (target row,
    source row) pair, the source row's number in :data:`txnlog.dml.SOURCE_ROW`; and with
    ``refuse_duplicates``, a target row two source rows match raises DuplicateMatchError."""
    ctx = snapshot.read_context()
    read_columns = list(dict.fromkeys([*columns, *(t for t, _ in matcher.pairs)]))
    parts: list[pa.Table] = []
    paths = files.column("path")
    for i, rows in ctx.read_each(files, parallel=READ_THREADS, columns=read_columns, row_index=row_index_column,
                                  row_id=ROW_ID if with_row_ids else None, row_commit_version=ROW_COMMIT_VERSION if with_row_ids else None):
        path = paths[i].as_py()
        if pairs:
            found = matcher.match(rows, path, refuse_duplicates=refuse_duplicates, row_index=row_index_column)
            if found is None:
                continue
            at = np.searchsorted(rows.column(row_index_column).to_numpy(), found.column(row_index_column).to_numpy())
            rows = rows.take(pa.array(at)).append_column(SOURCE_ROW, found.column(SOURCE_ROW))
        else:
            rows = matcher.with_a_match(rows)
        if rows.num_rows:
            parts.append(rows.append_column(file_column, pa.array([path] * rows.num_rows, pa.string())))
    schema = ctx.output_schema(read_columns)
    extra = [pa.field(row_index_column, pa.int64())]
    if with_row_ids:
        extra += [pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())]
    if pairs:
        extra.append(pa.field(SOURCE_ROW, pa.int64()))
    out_schema = pa.schema([*schema, *extra, pa.field(file_column, pa.string())])
    if not parts:
        return out_schema.empty_table()
    return pa.concat_tables([p.select(out_schema.names).cast(out_schema) for p in parts])


__all__ = [
    "DEFAULT_DRIVER_SCAN_CELLS",
    "DRIVER_SCAN_CELLS_CONF",
    "MAX_DRIVER_SCAN_BYTES",
    "MAX_SOURCE_KEYS",
    "collect_keys",
    "driver_scan_cells",
    "fits_driver",
    "matching_target_rows",
]
