"""Compaction: OPTIMIZE a txnlog table's small files, limited to (old) partitions.

    python -m spark_jobs.compact --table data/events --where "day < '2024-06-01'"

Committed with dataChange=false, so it never fails a concurrent append; if a concurrent
delete or update rewrote a file being compacted, it re-plans from the new table by itself
(--max-attempts). Keep --where on partitions a stream no longer writes. Exit codes: 0 done (or
nothing to do), 1 failed, 2 bad arguments, 3 every attempt lost to a conflict.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs._common import CONFLICT, FAILED, OK, local_session, setup_logging
from txnlog.errors import CommitConflictError, TxnLogError
from txnlog.spark.optimize import OptimizeResult, optimize

log = logging.getLogger("spark_jobs.compact")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compact", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="table path or URI")
    parser.add_argument("--where", help="partition predicate, e.g. \"day < '2024-06-01'\" (default: every partition)")
    parser.add_argument("--target-file-size", type=int, help="bytes (default: the table's delta.targetFileSize)")
    parser.add_argument("--max-attempts", type=int, default=5, help="plans to make before giving up on conflicts")
    parser.add_argument(
        "--max-deleted-rows-ratio",
        type=float,
        help="rewrite any file whose deletion vector deletes more than this fraction of its rows "
        "(default: the table's txnlog.optimize.maxDeletedRowsRatio, 0.05)",
    )
    parser.add_argument(
        "--purge-deletion-vectors",
        action="store_true",
        help="rewrite every file that has a deletion vector, and only those (REORG TABLE ... APPLY (PURGE))",
    )
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def run(spark: Any, args: argparse.Namespace) -> OptimizeResult:
    result = optimize(
        spark,
        args.table,
        predicate=args.where,
        target_file_size=args.target_file_size,
        max_attempts=args.max_attempts,
        max_deleted_rows_ratio=args.max_deleted_rows_ratio,
        purge_deletion_vectors=args.purge_deletion_vectors,
    )
    if result.version is None:
        print(f"compact {args.table}: nothing to compact" + (f" where {args.where}" if args.where else ""))
    else:
        print(
            f"compact {args.table}: version {int(result.version)}, {result.files_removed} files -> {result.files_added} "
            f"in {result.partitions_optimized} partition(s), {result.attempts} plan(s)"
        )
    for conflict in result.conflicts:
        print(f"  re-planned after: {conflict}")
    return result


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    own = spark is None
    spark = spark if spark is not None else local_session("txnlog-compact")
    try:
        run(spark, args)
        return OK
    except CommitConflictError as e:
        log.error("compaction of %s gave up after %d attempts: %s", args.table, args.max_attempts, e)
        return CONFLICT
    except TxnLogError as e:
        log.error("%s", e)
        return FAILED
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
