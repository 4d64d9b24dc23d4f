"""Small row-level statements on the driver: finding the rows a DELETE, UPDATE or MERGE
changes with txnlog's own Python reader instead of a Spark job.

A DELETE or UPDATE with deletion vectors needs, of each candidate file, only the positions of
the rows its predicate selects; a MERGE needs only the target rows whose keys some source row
holds. When the columns that takes are small, reading them on the driver with
:class:`txnlog.read.ReadContext` (the code ``txnlog.dml`` uses: partition values, column
mapping and deletion vectors applied, each row's physical position) costs a fraction of
planning and running Spark jobs, whose fixed cost dominates such statements. The predicate is
evaluated by the same txnlog expression code that already decides which files are candidates
(and refuses what it cannot compute), so both ways select the same rows; the transaction
records the same read predicates and files either way, so conflicts are the same.

The bound is the number of values read: the candidate files' rows (by their stats) times the
columns read, at most :data:`DEFAULT_DRIVER_SCAN_CELLS` unless the Spark conf
:data:`DRIVER_SCAN_CELLS_CONF` says otherwise (``0`` always uses Spark). Above it, or when a
file has no ``numRecords``, Spark reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from txnlog.errors import InvalidArgumentError, TxnLogError
from txnlog.expressions import parse_value, target_columns_read
from txnlog.file_facts import decode_stats, num_records, parse_stats, stats_leaf
from txnlog.read import ROW_COMMIT_VERSION, ROW_ID
from txnlog.spark.common import SPARK_FAILURES, job_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from txnlog import Snapshot

#: The Spark conf giving how many values (rows times columns) a statement may read on the driver.
DRIVER_SCAN_CELLS_CONF = "spark.txnlog.dml.driverScanCells"
#: 32M values: a few hundred milliseconds of Parquet decoding on one core, well under the
#: fixed cost of the Spark jobs it replaces; the columns are read a file at a time per thread.
DEFAULT_DRIVER_SCAN_CELLS = 32_000_000
#: How many source rows a MERGE collects to the driver (its key columns only) to prune the
#: target's files key by key and to find the matching rows there.
MAX_SOURCE_KEYS = 2_000_000
_THREADS = max(2, min(8, os.cpu_count() or 2))
_POSITION = "__txnlog_driver_position"
# Key types whose order numpy and the stats agree on, so a file's [min, max] can prune it.
_ORDERED = (pa.types.is_integer, pa.types.is_date)


def driver_scan_cells(spark: SparkSession) -> int:
    """The session's bound on values read on the driver (:data:`DRIVER_SCAN_CELLS_CONF`)."""
    value = spark.conf.get(DRIVER_SCAN_CELLS_CONF, None)
    if value is None:
        return DEFAULT_DRIVER_SCAN_CELLS
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"Spark conf {DRIVER_SCAN_CELLS_CONF} must be a whole number of values (0: always use Spark), not {value!r}") from None


def fits_driver(spark: SparkSession, files: pa.Table, columns: int) -> bool:
    """Whether reading ``columns`` columns of ``files`` stays within the session's bound (every
    file must give its ``numRecords``)."""
    limit = driver_scan_cells(spark)
    if limit <= 0 or files.num_rows == 0:
        return limit > 0
    stats = files.column("stats")
    if stats.null_count:
        return False
    if files.num_rows <= 64 and any(not isinstance((decode_stats(t) or {}).get("numRecords"), int) for t in stats.to_pylist()):
        return False
    return num_records(files) * max(columns, 1) <= limit


def evaluates_alike(spark: SparkSession, types: Iterable[pa.DataType]) -> bool:
    """Whether txnlog's evaluator and Spark SQL agree on conditions over columns of ``types``:
    not on floating point ones (Spark orders NaN above every number and makes it equal to
    itself), nor on timestamps unless the session's time zone is UTC (txnlog reads a timestamp
    literal as UTC, Spark in the session's zone)."""
    utc = None
    for t in types:
        if pa.types.is_floating(t) or (pa.types.is_nested(t)):
            return False
        if pa.types.is_timestamp(t):
            if utc is None:
                utc = (spark.conf.get("spark.sql.session.timeZone", None) or "").upper() in ("UTC", "ETC/UTC", "GMT", "Z", "+00:00")
            if not utc:
                return False
    return True


def matching_positions(snapshot: Snapshot, candidates: pa.Table, predicate: str) -> tuple[pa.Table, list[pa.Array]]:
    """Of ``candidates``, the files holding a live row on which ``predicate`` is TRUE, and each
    one's physical positions of those rows (int64): only the predicate's columns are read."""
    condition = snapshot.predicate(predicate)
    ctx = snapshot.read_context()
    hit: list[int] = []
    positions: list[pa.Array] = []
    found = ctx.read_each(candidates, parallel=_THREADS, columns=[], row_filter=condition.rows(), filter_columns=condition.columns, row_index=_POSITION)
    for i, rows in found:
        if rows.num_rows:
            hit.append(i)
            positions.append(rows.column(_POSITION).combine_chunks())
    return candidates.take(pa.array(hit, pa.int64())), positions


def referenced_columns(texts: Iterable[str], columns: Sequence[str]) -> list[str]:
    """The target ``columns`` a MERGE's SQL ``texts`` (its ON condition and clauses, ``t.x`` the
    target's, ``s.x`` the source's) may read, by txnlog's parser; every column when a text uses
    SQL that parser does not know (Spark evaluates it, and it may read anything)."""
    try:
        nodes = [parse_value(text) for text in texts]
    except TxnLogError:
        return list(columns)
    return target_columns_read(nodes, columns)


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


def prune_by_keys(files: pa.Table, stats_type: pa.StructType, pairs: Sequence[tuple[str, pa.Array]], physical: dict[str, str] | None) -> pa.Table:
    """``files`` less those whose min/max stats of a key column hold none of the source's
    values of it. ``pairs``: (target column, the source's non-null values cast to its type).
    Only integer and date keys prune (their order is the stats' order); a file without bounds
    for a key stays."""
    if files.num_rows == 0:
        return files
    stats = parse_stats(files, stats_type)
    keep = np.ones(files.num_rows, dtype=bool)
    for column, values in pairs:
        if not any(test(values.type) for test in _ORDERED) or len(values) == 0:
            continue
        name = physical.get(column, column) if physical else column
        low = stats_leaf(stats, ("minValues", name))
        high = stats_leaf(stats, ("maxValues", name))
        if low.type != values.type or high.type != values.type:
            continue
        known = pc.and_(pc.is_valid(low), pc.is_valid(high)).to_numpy(zero_copy_only=False)
        as_int = pa.int64() if not pa.types.is_date(values.type) else pa.int32()
        keys = np.sort(values.cast(as_int).to_numpy(zero_copy_only=False))
        lows = pc.fill_null(low, values[0]).cast(as_int).to_numpy(zero_copy_only=False)
        highs = pc.fill_null(high, values[0]).cast(as_int).to_numpy(zero_copy_only=False)
        # Some key in [low, high]: the first key >= low comes before the first key > high.
        holds = np.searchsorted(keys, lows, side="left") < np.searchsorted(keys, highs, side="right")
        keep &= holds | ~known
    return files.filter(pa.array(keep)) if not keep.all() else files


def matching_target_rows(
    snapshot: Snapshot,
    files: pa.Table,
    columns: Sequence[str],
    keys: pa.Table,
    key_pairs: Sequence[tuple[str, str]],
    *,
    file_column: str,
    row_index_column: str,
    with_row_ids: bool,
) -> pa.Table:
    """The live rows of ``files`` whose key columns equal those of some row of ``keys`` (the
    source's distinct non-null keys, named by the source columns of ``key_pairs``), with
    ``columns``, the file's ``add.path`` in ``file_column``, the row's physical position in
    ``row_index_column`` and, ``with_row_ids``, ``row_id``/``row_commit_version``."""
    ctx = snapshot.read_context()
    read_columns = list(dict.fromkeys([*columns, *(t for t, _ in key_pairs)]))
    single = len(key_pairs) == 1
    key_set = keys.column(key_pairs[0][1]).combine_chunks() if single else None
    parts: list[pa.Table] = []
    paths = files.column("path")
    for i, rows in ctx.read_each(files, parallel=_THREADS, columns=read_columns, row_index=row_index_column,
                                  row_id=ROW_ID if with_row_ids else None, row_commit_version=ROW_COMMIT_VERSION if with_row_ids else None):
        if single:
            assert key_set is not None
            rows = rows.filter(pc.is_in(rows.column(key_pairs[0][0]), value_set=key_set))
        else:
            rows = rows.join(keys, keys=[t for t, _ in key_pairs], right_keys=[s for _, s in key_pairs], join_type="left semi", use_threads=False)
        if rows.num_rows:
            path = paths[i].as_py()
            parts.append(rows.append_column(file_column, pa.array([path] * rows.num_rows, pa.string())))
    schema = ctx.output_schema(read_columns)
    extra = [pa.field(file_column, pa.string()), pa.field(row_index_column, pa.int64())]
    if with_row_ids:
        extra += [pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())]
    out_schema = pa.schema([*schema, *extra])
    if not parts:
        return out_schema.empty_table()
    return pa.concat_tables([p.select(out_schema.names).cast(out_schema) for p in parts])


__all__ = [
    "DEFAULT_DRIVER_SCAN_CELLS",
    "DRIVER_SCAN_CELLS_CONF",
    "MAX_SOURCE_KEYS",
    "collect_keys",
    "driver_scan_cells",
    "evaluates_alike",
    "fits_driver",
    "matching_positions",
    "matching_target_rows",
    "prune_by_keys",
    "referenced_columns",
]
