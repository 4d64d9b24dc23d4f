"""UPDATE or DELETE rows of a txnlog table by predicate, copy-on-write, in one transaction.

    python -m spark_jobs.update --table data/events --where "amount < 1" --delete
    python -m spark_jobs.update --table data/events --where "flag IS NULL AND amount >= 50" --set "flag='big'"

Only files holding a matching row are rewritten. A conflict with a compaction is always
retried (compaction changed no row, so the statement means what it meant). Any other
conflict is retried only with --retry-conflicts N, which you may pass when re-running the
statement on the newer table is what you want (an idempotent SET, a DELETE by a condition on
the row itself); otherwise it exits with code 3 (see the seeds' employee example in
docs/spark.md for a statement where a retry would change its meaning). Exit codes: 0 done,
1 failed, 2 bad arguments, 3 conflict.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs._common import CONFLICT, FAILED, OK, USAGE, local_session, setup_logging
from txnlog.errors import CommitConflictError, TxnLogError
from txnlog.spark.sink import is_compaction_conflict
from txnlog.spark.transaction import transaction
from txnlog.txn import RebaseStep

log = logging.getLogger("spark_jobs.update")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="update", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="table path or URI")
    parser.add_argument("--where", required=True, help="SQL predicate of the rows to change")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--set", action="append", metavar="COL=EXPR", help="an assignment (repeatable), a Spark SQL expression")
    action.add_argument("--delete", action="store_true", help="delete the matching rows")
    parser.add_argument("--isolation", choices=["Serializable", "WriteSerializable", "SnapshotIsolation"])
    parser.add_argument("--retry-conflicts", type=int, default=0, help="also retry other conflicts this many times")
    parser.add_argument("--compaction-retries", type=int, default=5)
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def assignments(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        column, sep, expression = item.partition("=")
        if not sep or not column.strip() or not expression.strip():
            raise ValueError(f"--set {item!r}: expected COLUMN=EXPRESSION")
        out[column.strip()] = expression.strip()
    return out


class Outcome:
    """What one run did: the committed version (None if no row matched), files rewritten,
    conflicts met and retries made."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.files = 0
        self.conflicts: list[CommitConflictError] = []
        self.retries = 0
        #: the concurrent commits it was rebased over at row level instead of being re-run
        self.rebased: tuple[RebaseStep, ...] = ()


def run(spark: Any, args: argparse.Namespace) -> Outcome:
    outcome = Outcome()
    changes = assignments(args.set) if args.set else None
    other_retries = args.retry_conflicts
    compaction_retries = args.compaction_retries
    operation = "DELETE" if args.delete else "UPDATE"
    while True:
        try:
            with transaction(spark, args.table, operation=operation, isolation=args.isolation) as tx:
                outcome.files = tx.delete(args.where) if changes is None else tx.update(args.where, set=changes)
                if outcome.files == 0:
                    tx.txn.abort()  # no row matched: nothing to commit
            outcome.version = int(tx.txn.result) if tx.txn.result is not None else None
            outcome.rebased = tx.txn.result.rebased if tx.txn.result is not None else ()
            return outcome
        except CommitConflictError as conflict:
            outcome.conflicts.append(conflict)
            if is_compaction_conflict(conflict) and compaction_retries > 0:
                compaction_retries -= 1
            elif not is_compaction_conflict(conflict) and other_retries > 0:
                other_retries -= 1
            else:
                raise
            outcome.retries += 1
            log.warning("%s on %s lost to %s; retrying on the new snapshot", operation, args.table, conflict)
            time.sleep(0.05 * outcome.retries)


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    try:
        if args.set:
            assignments(args.set)
    except ValueError as e:
        print(f"update: {e}", file=sys.stderr)
        return USAGE
    own = spark is None
    spark = spark if spark is not None else local_session("txnlog-update")
    try:
        outcome = run(spark, args)
        what = "no row matched" if outcome.version is None else f"version {outcome.version}, {outcome.files} file(s) rewritten"
        print(f"{'delete' if args.delete else 'update'} {args.table} where {args.where}: {what}, {outcome.retries} retr(ies)")
        return OK
    except CommitConflictError as e:
        log.error("conflict, not retried: %s", e)
        return CONFLICT
    except TxnLogError as e:
        log.error("%s", e)
        return FAILED
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
