"""The main job: a two-hop streaming pipeline, with compaction and DML running concurrently on
the first table.

On the embedded default (local Spark, tables under ./data), one SparkSession runs:

- **hop 1, ingest** (spark_jobs.ingest_stream): a file stream of sales events, one source file
  per micro-batch, into the table ``events`` through ``writeStream.format("txnlog")``, exactly
  once by the query's id (kept in its checkpoint) and batch id. ``events`` has the change data
  feed, deletion vectors and row tracking on;
- **compact** (spark_jobs.compact): OPTIMIZE of the days older than the newest, in a loop
  (dataChange=false, so appends never fail it; it re-plans by itself when a DML commit touched
  a file it was compacting), then, once ingest is over, a final pass over every day, retried
  until it commits or finds nothing to compact;
- **update** (spark_jobs.update): a DELETE of tiny orders and an UPDATE flagging big ones, in a
  loop, merge-on-read (deletion vectors); both statements are idempotent, so re-running them
  after a conflict is safe, and the job does;
- **delta-spark**, in the same session: another team's job in Delta SQL, ``UPDATE ... SET flag =
  'mid'`` on mid-sized orders, in a loop, racing the txnlog writers above: a conflict
  delta-spark detects with one of their commits is printed and the statement re-run (it is
  idempotent), and a txnlog statement that meets one of its commits resolves it as it would a
  txnlog commit;
- **hop 2, totals**: ``readStream.format("txnlog").option("readChangeFeed", "true")`` on
  ``events`` -> per-user aggregates (events, amount, big events) MERGEd into ``user_totals`` by
  a foreachBatch sink keyed by (app id, batch id): inserts and update postimages add, deletes
  and update preimages subtract, so the totals always equal an aggregate over ``events``.

Executors write every data file; the driver only commits. At the end the job prints what
happened on each hop (commits, conflicts and how each was resolved, retries, the statements
re-run because of compaction), counts ``events``' commits per engine with delta-spark's
DESCRIBE HISTORY, and verifies both tables with two independent readers (DuckDB's delta_scan
and delta-spark, both of which read deletion vectors) against references computed from the
source files.
Run again on the same tables, both streams resume from their checkpoints with the next batches.

Run with ``make run``. Exit codes: 0 verified, 1 failed or verification mismatch, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
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

# delta-spark's Python package: importing its exceptions makes PySpark raise its conflicts as
# these classes instead of Py4JJavaError. They are siblings, not subclasses of
# DeltaConcurrentModificationException (unlike delta-spark's Scala classes), so all are listed.
from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)

from spark_jobs import compact, ingest_stream, update
from spark_jobs._common import FAILED, OK, duckdb_delta, has_delta, local_session, setup_logging
from txnlog import Table
from txnlog.errors import CommitConflictError
from txnlog.spark import register
from txnlog.spark.sink import ForeachBatchSink, is_compaction_conflict

log = logging.getLogger("spark_jobs.pipeline")

#: The name of hop 1's query (its app id in the log is the query's id, from its checkpoint).
INGEST_QUERY = "spark_jobs_pipeline_ingest"
#: Hop 2's app id: its MERGE commits record (this id, batch id).
TOTALS_APP_ID = "spark_jobs.pipeline.user_totals"
TOTALS_QUERY = "spark_jobs_pipeline_user_totals"
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
    # Hop 2 reads the change feed; the DML is merge-on-read and keeps stable row ids.
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
    "delta.enableRowTracking": "true",
}
#: Per user: live events, their amount, how many are flagged big. Amounts are multiples of
#: 1/256 (see source_batch), so adding and subtracting them in float64 is exact.
TOTALS_SCHEMA = pa.schema([("user_id", pa.int64()), ("events", pa.int64()), ("amount", pa.float64()), ("big_events", pa.int64())])
TOTALS_PROPERTIES = {"delta.checkpointInterval": "5"}
DELETE_WHERE = "amount < 1"
FLAG_WHERE = "flag IS NULL AND amount >= 90"
FLAG_SET = "flag='big'"
# delta-spark's statement (its job, in Delta SQL): disjoint from the rows the two above change.
MID_WHERE = "flag IS NULL AND amount >= 50 AND amount < 90"
MID_SET = "flag = 'mid'"
# How often the delta-spark statement may lose to a txnlog commit in a row before the job gives up.
DELTA_SPARK_RERUNS = 20
DELTA_SPARK_CONFLICTS = (
    DeltaConcurrentModificationException, ConcurrentWriteException, MetadataChangedException, ProtocolChangedException,
    ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException, ConcurrentTransactionException,
)
FIRST_DAY = dt.date(2024, 1, 1)
# The final compaction pass gives up (and the job fails) after this many rounds lost to commits.
FINAL_COMPACTION_ROUNDS = 50


# -- the source and what the tables must hold --------------------------------------------------


def source_batch(k: int, rows: int) -> pa.Table:
    """Source file ``k``: events k*rows .. (k+1)*rows-1 of day FIRST_DAY + k//2; amounts are
    (n mod 1024) / 10.24, multiples of 1/256."""
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
    """The reference of ``events``: every source row once, the DELETE and both UPDATEs applied."""
    rows = pa.concat_tables(pq.read_table(p, schema=SCHEMA) for p in sorted(folder.glob("batch-*.parquet")))
    rows = rows.filter(pc.greater_equal(rows["amount"], 1.0))
    flag = pc.if_else(pc.greater_equal(rows["amount"], 90.0), pa.scalar("big"),
                      pc.if_else(pc.greater_equal(rows["amount"], 50.0), pa.scalar("mid"), rows["flag"]))
    return rows.set_column(rows.schema.get_field_index("flag"), "flag", flag)


def expected_totals(folder: Path) -> pa.Table:
    """The reference of ``user_totals``: the per-user aggregate of ``expected_rows``."""
    rows = expected_rows(folder)
    big = pc.cast(pc.fill_null(pc.equal(rows["flag"], "big"), False), pa.int64())
    grouped = rows.append_column("big", big).group_by("user_id").aggregate([("event_id", "count"), ("amount", "sum"), ("big", "sum")])
    return pa.table(
        [grouped["user_id"], grouped["event_id_count"], grouped["amount_sum"], grouped["big_sum"]], schema=TOTALS_SCHEMA
    ).sort_by("user_id")


def checksum(rows: pa.Table) -> int:
    """Order-independent: the sum over rows of a mix of every column."""
    amount = pc.cast(pc.round(pc.multiply(rows["amount"], 1000)), pa.int64())
    flag = pc.add(pc.cast(pc.fill_null(pc.equal(rows["flag"], "big"), False), pa.int64()),
                  pc.multiply(pc.cast(pc.fill_null(pc.equal(rows["flag"], "mid"), False), pa.int64()), 2))
    user = rows["user_id"]
    day = pc.cast(pc.utf8_length(rows["day"]), pa.int64())
    mixed = pc.add(pc.add(pc.multiply(rows["event_id"], 1_000_003), pc.multiply(amount, 31)), pc.add(pc.multiply(flag, 7), pc.add(user, day)))
    return int(pc.sum(mixed).as_py() or 0)


def read_with_duckdb(spark: Any, uri: str, columns: list[str]) -> pa.Table:
    """The table as DuckDB's delta_scan (delta-kernel-rs) reads it: deletion vectors applied by
    a reader that shares no code with txnlog."""
    con = duckdb_delta()
    try:
        quoted = ", ".join(f'"{c}"' for c in columns)
        path = uri.replace("'", "''")
        return con.sql(f"SELECT {quoted} FROM delta_scan('{path}')").fetch_arrow_table()
    finally:
        con.close()


def read_with_delta_spark(spark: Any, uri: str, columns: list[str]) -> pa.Table:
    """The table as delta-spark reads it, in the job's own session."""
    return spark.read.format("delta").load(uri).select(*columns).toArrow()


#: The independent readers both tables are verified with: (name, read(spark, uri, columns)).
READERS = (("DuckDB", read_with_duckdb), ("delta-spark", read_with_delta_spark))


def verify_events(folder: Path, got: pa.Table) -> tuple[bool, str]:
    """Compare ``events`` as a reader read it with the reference."""
    want = expected_rows(folder)
    ids = got["event_id"]
    duplicated = got.num_rows - len(pc.unique(ids))
    missing = len(set(want["event_id"].to_pylist()) - set(ids.to_pylist()))
    ok = got.num_rows == want.num_rows and duplicated == 0 and missing == 0 and checksum(got) == checksum(want)
    return ok, (
        f"{got.num_rows} rows (reference {want.num_rows}), {duplicated} duplicated, {missing} missing, "
        f"checksum {checksum(got)} (reference {checksum(want)})"
    )


def verify_totals(folder: Path, got: pa.Table) -> tuple[bool, str]:
    """Compare ``user_totals`` as a reader read it with the per-user aggregate of the reference."""
    got = got.cast(TOTALS_SCHEMA).sort_by("user_id")
    want = expected_totals(folder)
    got_rows = {r["user_id"]: r for r in got.to_pylist()}
    want_rows = {r["user_id"]: r for r in want.to_pylist()}
    wrong = sum(1 for user, row in want_rows.items() if got_rows.get(user) != row)
    extra = len(got_rows.keys() - want_rows.keys())
    ok = got.num_rows == want.num_rows and wrong == 0 and extra == 0
    sums = [pc.sum(got[c]).as_py() for c in ("events", "amount", "big_events")]
    return ok, (
        f"{got.num_rows} users (reference {want.num_rows}), {wrong} wrong or missing, {extra} extra; "
        f"events {sums[0]}, amount {sums[1]}, big {sums[2]} (reference {pc.sum(want['events']).as_py()}, "
        f"{pc.sum(want['amount']).as_py()}, {pc.sum(want['big_events']).as_py()})"
    )


# -- the concurrent jobs ------------------------------------------------------------------------


class Report:
    """What the jobs did, collected from their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conflicts: Counter[str] = Counter()
        self.retries = 0
        self.compactions = 0
        self.updates = 0
        self.compaction_reruns = 0  # DML statements re-run because they lost to an OPTIMIZE
        self.dml_resolved_in_commit = 0  # DML commits that went through concurrent commits without a re-run
        self.rebased: Counter[str] = Counter()  # row-level rebases of DML commits, by winning operation
        self.errors: list[BaseException] = []
        self.change_rows: Counter[str] = Counter()
        self.totals_batches = 0
        self.delta_spark_commits = 0
        self.delta_spark_reruns = 0

    def conflict(self, job: str, error: CommitConflictError, resolution: str) -> None:
        line = f"[{job}] conflict: {type(error).__name__} with version {error.winning_version} ({error.winning_operation}) -> {resolution}"
        print(line, flush=True)
        with self.lock:
            self.conflicts[type(error).__name__] += 1


def start_ingest(spark: Any, args: argparse.Namespace) -> Any:
    """Hop 1: the source files -> ``events`` by writeStream.format("txnlog"), AvailableNow.
    Started from the thread that registered the data source (Spark looks the format up in
    that thread's active session)."""
    stream_args = ingest_stream.parse_args(
        ["--table", args.table, "--source-dir", str(args.source_dir), "--checkpoint", str(args.checkpoint), "--app-id", INGEST_QUERY,
         "--sink", "format", "--available-now"]
    )
    return ingest_stream.start(spark, stream_args, None)


def await_ingest(query: Any, report: Report, done: threading.Event) -> None:
    try:
        query.awaitTermination()
    except BaseException as e:  # noqa: BLE001 - reported with the others
        report.errors.append(e)
    finally:
        done.set()


def totals_changes(batch_df: Any) -> Any:
    """A micro-batch of ``events``' change feed -> per-user deltas: +1 for an inserted row or
    an update's new image, -1 for a deleted row or an update's old image. Users whose deltas
    are all zero (an update that changed no aggregated column) are left out."""
    from pyspark.sql import functions as F

    sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), F.lit(1)).otherwise(F.lit(-1))
    big = F.when(F.col("flag") == F.lit("big"), F.lit(1)).otherwise(F.lit(0))
    deltas = batch_df.groupBy("user_id").agg(
        F.sum(sign).cast("long").alias("events"),
        F.sum(sign * F.col("amount")).cast("double").alias("amount"),
        F.sum(sign * big).cast("long").alias("big_events"),
    )
    return deltas.where("events != 0 OR amount != 0 OR big_events != 0")


class TotalsHop:
    """Hop 2's foreachBatch function: the batch's change rows, summed per user, MERGEd into
    ``user_totals`` in one commit with txn(TOTALS_APP_ID, batch id); a replayed batch is skipped."""

    def __init__(self, uri: str, report: Report) -> None:
        self.report = report
        self.sink = ForeachBatchSink(
            uri,
            TOTALS_APP_ID,
            mode="merge",
            merge_on="user_id",
            when_matched_update={"events": "t.events + s.events", "amount": "t.amount + s.amount", "big_events": "t.big_events + s.big_events"},
            when_matched_delete="t.events + s.events = 0",  # the user's last event was deleted
            when_not_matched_insert="*",
        )

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        kinds = batch_df.groupBy("_change_type").agg(F.count("*").alias("n"), F.min("_commit_version").alias("lo"),
                                                    F.max("_commit_version").alias("hi")).collect()
        if not kinds:
            return
        counts = {r["_change_type"]: int(r["n"]) for r in kinds}
        low, high = min(int(r["lo"]) for r in kinds), max(int(r["hi"]) for r in kinds)
        before = self.sink.stats.versions[-1] if self.sink.stats.versions else None
        skipped = self.sink.stats.skipped
        self.sink(totals_changes(batch_df), batch_id)
        stats = self.sink.stats
        rows = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        if stats.skipped > skipped:
            outcome = "already committed: skipped (a replay)"
        elif stats.versions and stats.versions[-1] != before:
            outcome = f"user_totals version {stats.versions[-1]}"
        else:
            outcome = "nothing to change"
        print(f"[totals] batch {batch_id}: events versions {low}..{high} ({rows}) -> {outcome}", flush=True)
        with self.report.lock:
            self.report.change_rows.update(counts)
            self.report.totals_batches += 1


def start_totals(spark: Any, args: argparse.Namespace, hop: TotalsHop) -> Any:
    """Hop 2: ``events``' change feed -> ``user_totals``, a micro-batch every ``--pause`` seconds."""
    register(spark)
    changes = spark.readStream.format("txnlog").option("readChangeFeed", "true").load(args.table)
    return (
        changes.writeStream.foreachBatch(hop)
        .option("checkpointLocation", str(args.totals_checkpoint))
        .trigger(processingTime=f"{max(args.pause, 0.5)} seconds")
        .queryName(TOTALS_QUERY)
        .start()
    )


def _compact_once(spark: Any, args: argparse.Namespace, report: Report, where: str | None) -> tuple[bool, bool]:
    """One optimize call: (committed, lost at least one race)."""
    compact_args = compact.parse_args(["--table", args.table, *(["--where", where] if where else [])])
    try:
        result = compact.optimize(spark, args.table, predicate=compact_args.where, max_attempts=compact_args.max_attempts)
    except CommitConflictError as conflict:
        print(f"[compact] conflict: every plan lost ({conflict}) -> tried again from the new snapshot", flush=True)
        with report.lock:
            report.conflicts["optimize re-plan"] += 1
            report.retries += 1
        return False, True
    for text in result.conflicts:
        print(f"[compact] conflict: {text.split(';')[0]} -> re-planned from the new snapshot", flush=True)
        with report.lock:
            report.conflicts["optimize re-plan"] += 1
            report.retries += 1
    if result.version is not None:
        scope = f"where {where}" if where else "every day"
        carried = "".join(f"; carried the deletions of version {step.version} ({step.operation}) onto its output"
                          for step in result.version.rebased)
        print(f"[compact] version {int(result.version)}: {result.files_removed} files -> {result.files_added} ({scope}){carried}", flush=True)
        with report.lock:
            report.compactions += 1
    return result.version is not None, bool(result.conflicts)


def compact_job(spark: Any, args: argparse.Namespace, report: Report, ingest_done: threading.Event) -> None:
    """Compaction of the days before the newest while ingest runs; then a final pass over every
    day, retried until it commits or a plan made on the latest table finds nothing to compact."""
    try:
        while not ingest_done.is_set():
            newest = _newest_day(args.table)
            if newest is not None:
                _compact_once(spark, args, report, f"day < '{newest}'")
            ingest_done.wait(args.pause)
        for _ in range(FINAL_COMPACTION_ROUNDS):
            committed, lost = _compact_once(spark, args, report, None)
            if committed or not lost:
                return
        raise RuntimeError(f"the final compaction of {args.table} lost {FINAL_COMPACTION_ROUNDS} rounds in a row")
    except BaseException as e:  # noqa: BLE001
        report.errors.append(e)


def update_job(spark: Any, args: argparse.Namespace, report: Report, stop: threading.Event) -> None:
    statements = [["--where", DELETE_WHERE, "--delete"], ["--where", FLAG_WHERE, "--set", FLAG_SET]]
    try:
        while True:
            stopping = stop.is_set()
            for statement in statements:
                update_args = update.parse_args(["--table", args.table, *statement, "--retry-conflicts", "5", "--compaction-retries", "10"])
                outcome = update.run(spark, update_args)
                for conflict in outcome.conflicts:
                    report.conflict("update", conflict, "statement re-run on the new snapshot (it is idempotent)")
                with report.lock:
                    report.retries += outcome.retries
                    report.compaction_reruns += sum(1 for c in outcome.conflicts if is_compaction_conflict(c))
                    report.updates += outcome.version is not None
                if outcome.version is not None:
                    verb = "delete" if update_args.delete else "update"
                    read_version = _read_version(args.table, outcome.version)
                    over = read_version is not None and read_version < outcome.version - 1
                    resolved = ""
                    if read_version is not None and over:
                        resolved = f"; committed over versions {read_version + 1}..{outcome.version - 1}, checked against them: no conflict, nothing re-run"
                    if outcome.rebased:
                        resolved += "; rebased at row level over " + ", ".join(
                            f"version {step.version} ({step.operation}: {step.kind})" for step in outcome.rebased)
                    print(f"[update] version {outcome.version}: {verb} where {update_args.where}, "
                          f"{outcome.files} file(s) given a deletion vector{resolved}", flush=True)
                    with report.lock:
                        report.dml_resolved_in_commit += over
                        for step in outcome.rebased:
                            report.rebased[f"{step.operation} ({step.kind})"] += 1
            if stopping:  # one last pass after the stream stopped: every row is covered
                return
            stop.wait(args.pause)
    except BaseException as e:  # noqa: BLE001
        report.errors.append(e)


def delta_spark_conflict(error: BaseException) -> tuple[str, int | None, str | None] | None:
    """(exception name, winning version, its operation) of a conflict delta-spark detected;
    None for any other error. delta-spark 4.4 names the winner in the message of its file
    conflicts ("a concurrent DELETE deleted data from table ... (committed at version 7)") and
    appends the winning commitInfo to the others ("Conflicting commit: {...}")."""
    if not isinstance(error, DELTA_SPARK_CONFLICTS):
        return None
    message = str(error)
    named = re.search(r"a concurrent (.+?) (?:added|deleted) data (?:to|from) table .*?committed at version (\d+)", message, re.S)
    if named:
        return type(error).__name__, int(named.group(2)), named.group(1)
    winning = message.partition("Conflicting commit:")[2]
    version = re.search(r'"version"\s*:\s*(\d+)', winning)
    operation = re.search(r'"operation"\s*:\s*"([^"]+)"', winning)
    return type(error).__name__, int(version.group(1)) if version else None, operation.group(1) if operation else None


def delta_spark_job(spark: Any, args: argparse.Namespace, report: Report, stop: threading.Event) -> None:
    """Another team's job on ``events``, in Delta SQL in the same session: flag mid-sized orders,
    in a loop until the stream stopped (then one last pass). A conflict delta-spark detects is
    printed and the statement re-run on the new table (it is idempotent)."""
    statement = f"UPDATE delta.`{args.table}` SET {MID_SET} WHERE {MID_WHERE}"
    try:
        while True:
            stopping = stop.is_set()
            for attempt in range(DELTA_SPARK_RERUNS + 1):
                before = Table(args.table).latest_version()
                try:
                    (result,) = spark.sql(statement).collect()
                    break
                except DELTA_SPARK_CONFLICTS as error:
                    conflict = delta_spark_conflict(error)
                    if conflict is None or attempt == DELTA_SPARK_RERUNS:
                        raise
                    condition, version, operation = conflict
                    print(f"[delta-spark] conflict: {condition} with version {version} ({operation}) "
                          f"-> statement re-run on the new snapshot (it is idempotent)", flush=True)
                    with report.lock:
                        report.conflicts[f"delta-spark {condition}"] += 1
                        report.delta_spark_reruns += 1
                        report.retries += 1
            rows = int(result[0])
            if rows:
                version = _delta_spark_version(args.table, before)
                print(f"[delta-spark] version {version}: UPDATE SET {MID_SET} WHERE {MID_WHERE}, {rows} row(s)", flush=True)
                with report.lock:
                    report.delta_spark_commits += 1
            if stopping:
                return
            stop.wait(args.pause)
    except BaseException as e:  # noqa: BLE001
        report.errors.append(e)


def _delta_spark_version(uri: str, after: int) -> int | None:
    """The newest version after ``after`` that delta-spark committed (only this job does)."""
    table = Table(uri)
    for entry in table.history(limit=max(1, table.latest_version() - after)):
        info = entry.commit_info
        if entry.version > after and info is not None and "Delta-Lake" in (info.engine_info or ""):
            return entry.version
    return None


def _commits_by_engine(spark: Any, uri: str, after: int) -> Counter[str]:
    """``events``' commits after ``after`` by engine, from delta-spark's DESCRIBE HISTORY."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").where(f"version > {after}").select("engineInfo").collect()
    return Counter("delta-spark" if "Delta-Lake" in (row.engineInfo or "") else "txnlog" for row in history)


def _await_started(query: Any, timeout: float = 300) -> None:
    """Wait until ``query`` has initialized its source: each stream starts a Python worker for
    its txnlog source, which must connect back to the JVM within Spark's fixed timeout, so the
    writers start only once it has (on a busy machine they starved it)."""
    deadline = time.monotonic() + timeout
    while query.isActive and query.status["message"].startswith("Initializing") and time.monotonic() < deadline:
        time.sleep(0.2)


def _newest_day(uri: str) -> str | None:
    values = Table(uri).snapshot().files().column("partition_values").to_pylist()
    days = [dict(v).get("day") for v in values if v]
    return max((d for d in days if d), default=None)


def _read_version(uri: str, version: int) -> int | None:
    """The version the commit at ``version`` read (from its commitInfo)."""
    table = Table(uri)
    for entry in table.history(limit=table.latest_version() - version + 1):
        if entry.version == version and entry.commit_info is not None:
            return entry.commit_info.read_version
    return None


def _checkpoints(uri: str) -> int:
    log_dir = Path(uri) / "_delta_log"
    return len(list(log_dir.glob("*.checkpoint*.parquet"))) if log_dir.is_dir() else 0


def _missing_properties(table: Table) -> list[str]:
    configuration = table.snapshot().metadata.configuration
    return [k for k in ("delta.enableChangeDataFeed", "delta.enableDeletionVectors", "delta.enableRowTracking")
            if str(configuration.get(k, "false")).lower() != "true"]


def _ingest_commits(table: Table, first_version: int, last_version: int) -> tuple[int, list[tuple[int, int]]]:
    """Hop 1's commits in (first, last]: how many, and (version, read version) of those that
    committed over concurrent commits (checked against them: blind appends, no conflict)."""
    commits, rebased = 0, []
    for entry in table.history(limit=max(1, last_version - first_version)):
        info = entry.commit_info
        if entry.version <= first_version or info is None or info.operation != "STREAMING UPDATE":
            continue
        commits += 1
        if info.read_version is not None and info.read_version < entry.version - 1:
            rebased.append((entry.version, info.read_version))
    return commits, sorted(rebased)


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="data/events", help="local path of the events table (default: data/events)")
    parser.add_argument("--totals-table", type=Path, help="hop 2's table (default: beside the events table, user_totals)")
    parser.add_argument("--source-dir", type=Path, help="source files (default: beside the table, source/)")
    parser.add_argument("--checkpoint", type=Path, help="hop 1's checkpoint (default: beside the table, _checkpoints/ingest)")
    parser.add_argument("--totals-checkpoint", type=Path, help="hop 2's checkpoint (default: beside the table, _checkpoints/user_totals)")
    parser.add_argument("--batches", type=int, default=8, help="source files (micro-batches) this run adds")
    parser.add_argument("--rows", type=int, default=2000, help="rows per batch")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between compaction and update rounds (and hop 2's trigger)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    base = Path(args.table).resolve().parent
    args.table = str(Path(args.table).resolve())
    args.totals_table = str((args.totals_table or base / "user_totals").resolve())
    args.source_dir = (args.source_dir or base / "source").resolve()
    args.checkpoint = (args.checkpoint or base / "_checkpoints" / "ingest").resolve()
    args.totals_checkpoint = (args.totals_checkpoint or base / "_checkpoints" / "user_totals").resolve()
    if args.batches < 1 or args.rows < 1:
        parser.error("--batches and --rows must be positive")
    return args


def run(spark: Any, args: argparse.Namespace) -> int:
    started = time.monotonic()
    if not has_delta(spark):
        print("pipeline: delta-spark is not in this SparkSession: start it with txnlog.spark.with_delta "
              "(`make run` fetches its jars and does)", file=sys.stderr)
        return FAILED
    events = Table.create(args.table, SCHEMA, partition_by=["day"], properties=PROPERTIES, mode="ignore")
    missing = _missing_properties(events)
    if missing:
        print(f"pipeline: table {args.table} was made without {', '.join(missing)} (by an older version of this job); "
              f"remove it and its checkpoints (make clean) or pass another --table", file=sys.stderr)
        return FAILED
    totals = Table.create(args.totals_table, TOTALS_SCHEMA, properties=TOTALS_PROPERTIES, mode="ignore")
    first_version, totals_first = events.latest_version(), totals.latest_version()
    checkpoints_before = _checkpoints(args.table)
    add_source_files(args.source_dir, args.batches, args.rows)
    print(f"pipeline: events {args.table} at version {first_version}, user_totals at version {totals_first}; "
          f"{args.batches} new source batch(es) of {args.rows} rows", flush=True)

    report = Report()
    hop = TotalsHop(args.totals_table, report)
    ingest_done = threading.Event()
    totals_query = start_totals(spark, args, hop)
    _await_started(totals_query)
    ingest_query = start_ingest(spark, args)
    _await_started(ingest_query)
    threads = [
        threading.Thread(target=await_ingest, args=(ingest_query, report, ingest_done), name="ingest"),
        threading.Thread(target=compact_job, args=(spark, args, report, ingest_done), name="compact"),
        threading.Thread(target=update_job, args=(spark, args, report, ingest_done), name="update"),
        threading.Thread(target=delta_spark_job, args=(spark, args, report, ingest_done), name="delta-spark"),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if not report.errors:
            totals_query.processAllAvailable()  # hop 2 catches up with every commit of hop 1 and the jobs
    except BaseException as e:  # noqa: BLE001
        report.errors.append(hop.sink.last_error or e)
    finally:
        totals_query.stop()
    if report.errors:
        for error in report.errors:
            log.error("job failed: %r", error, exc_info=error)
            print(f"pipeline: a job failed: {error}", file=sys.stderr)
        return FAILED

    final = Table(args.table).snapshot()
    history = Table(args.table).history(limit=max(1, final.version - first_version))
    operations = Counter(h.commit_info.operation for h in history if h.commit_info is not None and h.version > first_version)
    ingest_batches = [p for p in ingest_query.recentProgress if p.numInputRows]
    ingest_commits, rebased = _ingest_commits(Table(args.table), first_version, final.version)
    totals_final = Table(args.totals_table).latest_version()
    stats = hop.sink.stats
    with report.lock:
        report.conflicts.update({"user_totals MERGE": stats.conflicts})
        report.retries += stats.retries
    engines = _commits_by_engine(spark, args.table, first_version)
    verified = [
        (reader, verify_events(args.source_dir, read(spark, args.table, SCHEMA.names)),
         verify_totals(args.source_dir, read(spark, args.totals_table, TOTALS_SCHEMA.names)))
        for reader, read in READERS
    ]

    print("\n== summary ==")
    print(f"hop 1        source -> events by writeStream.format('txnlog') (query {ingest_query.id}): "
          f"{len(ingest_batches)} batch(es), {ingest_commits} commit(s), "
          f"{len(rebased)} committed over concurrent commits (checked, no conflict: blind appends)")
    print(f"events       versions {first_version} -> {final.version}: " + ", ".join(f"{n} {op}" for op, n in sorted(operations.items())))
    print(f"compaction   {report.compactions} commit(s); DML {report.updates} commit(s) (deletion vectors), "
          f"{report.dml_resolved_in_commit} of them over concurrent commits without a re-run")
    print(f"delta-spark  {report.delta_spark_commits} UPDATE commit(s) in the same session, "
          f"{report.delta_spark_reruns} re-run after a conflict it detected with a txnlog commit")
    print(f"engines      events versions {first_version} -> {final.version} by engine (DESCRIBE HISTORY): "
          + (", ".join(f"{n} {engine}" for engine, n in sorted(engines.items())) or "none"))
    print(f"hop 2        events change feed -> user_totals by foreachBatch MERGE (app {TOTALS_APP_ID}): {report.totals_batches} batch(es), "
          f"{stats.committed} commit(s), {stats.skipped} replayed batch(es) skipped; change rows "
          + (", ".join(f"{n} {kind}" for kind, n in sorted(report.change_rows.items())) or "none"))
    print(f"user_totals  versions {totals_first} -> {totals_final}")
    print(f"conflicts    {sum(report.conflicts.values())} detected, all resolved: "
          + (", ".join(f"{k} x{v}" for k, v in sorted(report.conflicts.items()) if v) or "none"))
    print(f"retries      {report.retries}")
    print(f"statements re-run because of compaction: {report.compaction_reruns}; rebased at row level instead: "
          + (", ".join(f"{n} over {what}" for what, n in sorted(report.rebased.items())) or "none"))
    print(f"checkpoints  {_checkpoints(args.table) - checkpoints_before} written on events (every {PROPERTIES['delta.checkpointInterval']} versions)")
    print(f"files        {final.num_files} live in events")
    print(f"time         {time.monotonic() - started:.1f}s")
    for reader, (events_ok, events_detail), (totals_ok, totals_detail) in verified:
        print(f"verified     events {'OK' if events_ok else 'MISMATCH'} with {reader}: {events_detail}")
        print(f"verified     user_totals {'OK' if totals_ok else 'MISMATCH'} with {reader}: {totals_detail}")
    return OK if all(e[0] and t[0] for _, e, t in verified) else FAILED


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """Run the pipeline; ``spark``: an existing session to use (it is left running)."""
    args = parse_args(argv)
    setup_logging(args.verbose)
    own = spark is None
    spark = spark if spark is not None else local_session("txnlog-pipeline", delta=True)
    try:
        return run(spark, args)
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
