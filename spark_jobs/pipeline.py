"""The main job: streaming ingest, compaction and updates running concurrently on one table.

On the embedded default (local Spark, a table under ./data), three jobs share one SparkSession:

- **ingest** (spark_jobs.ingest_stream): a file stream of sales events, one source file per
  micro-batch, written by the exactly-once foreachBatch sink (txn(appId, batchId));
- **compact** (spark_jobs.compact): OPTIMIZE of the partitions older than the newest day, in a
  loop: dataChange=false, so appends never fail it; it re-plans by itself when an update
  rewrote a file it was compacting;
- **update** (spark_jobs.update): copy-on-write DELETE of tiny orders and an UPDATE flagging
  big ones, in a loop; both statements are idempotent, so re-running them after a conflict is
  safe, and the job does (a conflict with compaction is always safe).

Executors write every data file; the driver only commits. At the end the job prints what
happened (versions, conflicts detected and how each was resolved, retries, checkpoints
written, time) and verifies the table with an independent reader (delta-rs): every source row
exactly once, with the updates and deletes applied (count and checksum against a reference
computed from the source files). Run again on the same table, it ingests the next batches.

Run with ``make run``. Exit codes: 0 verified, 1 failed or verification mismatch, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs import compact, ingest_stream, update
from spark_jobs._common import FAILED, OK, local_session, setup_logging
from txnlog import Table
from txnlog.errors import CommitConflictError

log = logging.getLogger("spark_jobs.pipeline")

APP_ID = "spark_jobs.pipeline.ingest"
SCHEMA = pa.schema(
    [
        ("event_id", pa.int64()),
        ("user_id", pa.int64()),
        ("day", pa.string()),
        ("amount", pa.float64()),
        ("flag", pa.string()),
    ]
)
PROPERTIES = {
    # Delta's default for writers: blind appends (the stream) do not fail updates.
    "delta.isolationLevel": "WriteSerializable",
    "delta.checkpointInterval": "5",
}
DELETE_WHERE = "amount < 1"
FLAG_WHERE = "flag IS NULL AND amount >= 90"
FLAG_SET = "flag='big'"
FIRST_DAY = dt.date(2024, 1, 1)


# -- the source and what the table must hold --------------------------------------------------


def source_batch(k: int, rows: int) -> pa.Table:
    """Source file ``k``: events k*rows .. (k+1)*rows-1 of day FIRST_DAY + k//2."""
    ids = pa.array(range(k * rows, (k + 1) * rows), pa.int64())
    day = (FIRST_DAY + dt.timedelta(days=k // 2)).isoformat()
    return pa.table(
        {
            "event_id": ids,
            "user_id": pc.divide(ids, 7),
            "day": pa.array([day] * rows, pa.string()),
            "amount": pc.divide(pc.cast(pc.bit_wise_and(pc.multiply(ids, 7919), 1023), pa.float64()), 10.24),
            "flag": pa.nulls(rows, pa.string()),
        },
        schema=SCHEMA,
    )


def add_source_files(folder: Path, batches: int, rows: int) -> list[Path]:
    """This run's source files, numbered after those of earlier runs (renamed into place, so
    the stream never sees half a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    start = len(list(folder.glob("batch-*.parquet")))
    made = []
    for k in range(start, start + batches):
        final = folder / f"batch-{k:05d}.parquet"
        temp = folder / f".batch-{k:05d}.parquet.tmp"
        pq.write_table(source_batch(k, rows), temp)
        os.replace(temp, final)
        made.append(final)
    return made


def expected_rows(folder: Path) -> pa.Table:
    """The reference: every source row once, the DELETE and the UPDATE applied."""
    rows = pa.concat_tables(pq.read_table(p, schema=SCHEMA) for p in sorted(folder.glob("batch-*.parquet")))
    rows = rows.filter(pc.greater_equal(rows["amount"], 1.0))
    flag = pc.if_else(pc.greater_equal(rows["amount"], 90.0), pa.scalar("big"), rows["flag"])
    return rows.set_column(rows.schema.get_field_index("flag"), "flag", flag)


def checksum(rows: pa.Table) -> int:
    """Order-independent: the sum over rows of a mix of every column."""
    amount = pc.cast(pc.round(pc.multiply(rows["amount"], 1000)), pa.int64())
    flag = pc.cast(pc.fill_null(pc.equal(rows["flag"], "big"), False), pa.int64())
    user = rows["user_id"]
    day = pc.cast(pc.utf8_length(rows["day"]), pa.int64())
    mixed = pc.add(pc.add(pc.multiply(rows["event_id"], 1_000_003), pc.multiply(amount, 31)), pc.add(pc.multiply(flag, 7), pc.add(user, day)))
    return int(pc.sum(mixed).as_py() or 0)


def verify(uri: str, folder: Path) -> tuple[bool, str]:
    """Compare the table as delta-rs reads it with the reference."""
    import deltalake

    got = deltalake.DeltaTable(uri).to_pyarrow_table(columns=SCHEMA.names)
    want = expected_rows(folder)
    ids = got["event_id"]
    duplicated = got.num_rows - len(pc.unique(ids))
    missing = len(set(want["event_id"].to_pylist()) - set(ids.to_pylist()))
    ok = got.num_rows == want.num_rows and duplicated == 0 and missing == 0 and checksum(got) == checksum(want)
    return ok, (
        f"{got.num_rows} rows (reference {want.num_rows}), {duplicated} duplicated, {missing} missing, "
        f"checksum {checksum(got)} (reference {checksum(want)})"
    )


# -- the concurrent jobs ------------------------------------------------------------------------


class Report:
    """What the jobs did, collected from their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conflicts: Counter[str] = Counter()
        self.resolutions: list[str] = []
        self.retries = 0
        self.compactions = 0
        self.updates = 0
        self.errors: list[BaseException] = []

    def conflict(self, job: str, error: CommitConflictError, resolution: str) -> None:
        line = f"[{job}] conflict: {type(error).__name__} with version {error.winning_version} ({error.winning_operation}) -> {resolution}"
        print(line, flush=True)
        with self.lock:
            self.conflicts[type(error).__name__] += 1
            self.resolutions.append(line)


def ingest_job(spark: Any, args: argparse.Namespace, report: Report, done: threading.Event) -> Any:
    stream_args = ingest_stream.parse_args(
        ["--table", args.table, "--source-dir", str(args.source_dir), "--checkpoint", str(args.checkpoint), "--app-id", APP_ID,
         "--partition-by", "day", "--available-now"]
    )
    sink = ingest_stream.make_sink(stream_args)
    try:
        ingest_stream.start(spark, stream_args, sink).awaitTermination()
    except BaseException as e:  # noqa: BLE001 - reported with the others
        report.errors.append(sink.last_error or e)
    finally:
        done.set()
    return sink


def compact_job(spark: Any, args: argparse.Namespace, report: Report, stop: threading.Event) -> None:
    try:
        while True:
            stopping = stop.is_set()
            newest = _newest_day(args.table)
            if newest is not None:
                compact_args = compact.parse_args(["--table", args.table, "--where", f"day < '{newest}'"])
                result = compact.optimize(spark, args.table, predicate=compact_args.where, max_attempts=compact_args.max_attempts)
                for text in result.conflicts:
                    print(f"[compact] conflict: {text.split(';')[0]} -> re-planned from the new snapshot", flush=True)
                    with report.lock:
                        report.conflicts["optimize re-plan"] += 1
                        report.retries += 1
                if result.version is not None:
                    print(f"[compact] version {int(result.version)}: {result.files_removed} files -> {result.files_added} (where day < '{newest}')", flush=True)
                    with report.lock:
                        report.compactions += 1
            if stopping:
                return
            stop.wait(args.pause)
    except BaseException as e:  # noqa: BLE001
        report.errors.append(e)


def update_job(spark: Any, args: argparse.Namespace, report: Report, stop: threading.Event) -> None:
    statements = [["--where", DELETE_WHERE, "--delete"], ["--where", FLAG_WHERE, "--set", FLAG_SET]]
    try:
        while True:
            stopping = stop.is_set()
            for statement in statements:
                if not Table(args.table).exists():
                    continue
                update_args = update.parse_args(["--table", args.table, *statement, "--retry-conflicts", "5", "--compaction-retries", "10"])
                outcome = update.run(spark, update_args)
                for conflict in outcome.conflicts:
                    report.conflict("update", conflict, "retried on the new snapshot (the statement is idempotent)")
                with report.lock:
                    report.retries += outcome.retries
                    report.updates += outcome.version is not None
                if outcome.version is not None:
                    verb = "delete" if update_args.delete else "update"
                    print(f"[update] version {outcome.version}: {verb} where {update_args.where}, {outcome.files} file(s) rewritten", flush=True)
            if stopping:  # one last pass after the stream stopped: every row is covered
                return
            stop.wait(args.pause)
    except BaseException as e:  # noqa: BLE001
        report.errors.append(e)


def _newest_day(uri: str) -> str | None:
    table = Table(uri)
    if not table.exists():
        return None
    values = table.snapshot().files().column("partition_values").to_pylist()
    days = [dict(v).get("day") for v in values if v]
    return max((d for d in days if d), default=None)


def _checkpoints(uri: str) -> int:
    log_dir = Path(uri) / "_delta_log"
    return len(list(log_dir.glob("*.checkpoint*.parquet"))) if log_dir.is_dir() else 0


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="data/events", help="local table path (default: data/events)")
    parser.add_argument("--source-dir", type=Path, help="source files (default: beside the table, source/)")
    parser.add_argument("--checkpoint", type=Path, help="the stream's checkpoint (default: beside the table, _checkpoints/ingest)")
    parser.add_argument("--batches", type=int, default=8, help="source files (micro-batches) this run adds")
    parser.add_argument("--rows", type=int, default=2000, help="rows per batch")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between compaction and update rounds")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    base = Path(args.table).resolve().parent
    args.table = str(Path(args.table).resolve())
    args.source_dir = (args.source_dir or base / "source").resolve()
    args.checkpoint = (args.checkpoint or base / "_checkpoints" / "ingest").resolve()
    if args.batches < 1 or args.rows < 1:
        parser.error("--batches and --rows must be positive")
    return args


def run(spark: Any, args: argparse.Namespace) -> int:
    started = time.monotonic()
    table = Table.create(args.table, SCHEMA, partition_by=["day"], properties=PROPERTIES, mode="ignore")
    first_version = table.latest_version()
    checkpoints_before = _checkpoints(args.table)
    add_source_files(args.source_dir, args.batches, args.rows)
    print(f"pipeline: table {args.table} at version {first_version}; {args.batches} new source batch(es) of {args.rows} rows", flush=True)

    report = Report()
    ingest_done = threading.Event()
    holder: dict[str, Any] = {}
    threads = [
        threading.Thread(target=lambda: holder.setdefault("sink", ingest_job(spark, args, report, ingest_done)), name="ingest"),
        threading.Thread(target=compact_job, args=(spark, args, report, ingest_done), name="compact"),
        threading.Thread(target=update_job, args=(spark, args, report, ingest_done), name="update"),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink = holder.get("sink")
    if report.errors:
        for error in report.errors:
            log.error("job failed: %r", error)
            print(f"pipeline: a job failed: {error}", file=sys.stderr)
        return FAILED

    final = Table(args.table).snapshot()
    history = Table(args.table).history(limit=max(1, final.version - first_version))
    operations = Counter(h.commit_info.operation for h in history if h.commit_info is not None and h.version > first_version)
    ok, detail = verify(args.table, args.source_dir)
    stats = sink.stats if sink is not None else None
    print("\n== summary ==")
    print(f"versions     {first_version} -> {final.version}: " + ", ".join(f"{n} {op}" for op, n in sorted(operations.items())))
    if stats is not None:
        print(f"ingest       {stats.committed} batch(es) committed, {stats.skipped} replayed batch(es) skipped, {stats.retries} redone after compaction")
        with report.lock:
            report.conflicts.update({"ingest vs compaction": stats.conflicts})
            report.retries += stats.retries
    print(f"compaction   {report.compactions} commit(s); updates {report.updates} commit(s)")
    print(f"conflicts    {sum(report.conflicts.values())} detected, all resolved: " + (", ".join(f"{k} x{v}" for k, v in sorted(report.conflicts.items()) if v) or "none"))
    print(f"retries      {report.retries}")
    print(f"checkpoints  {_checkpoints(args.table) - checkpoints_before} written (every {PROPERTIES['delta.checkpointInterval']} versions)")
    print(f"files        {final.num_files} live")
    print(f"time         {time.monotonic() - started:.1f}s")
    print(f"verified     {'OK' if ok else 'MISMATCH'} with delta-rs: {detail}")
    return OK if ok else FAILED


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """Run the pipeline; ``spark``: an existing session to use (it is left running)."""
    args = parse_args(argv)
    setup_logging(args.verbose)
    own = spark is None
    spark = spark if spark is not None else local_session("txnlog-pipeline")
    try:
        return run(spark, args)
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
