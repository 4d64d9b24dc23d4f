"""A mixed load on one table, in real processes: writers appending (txnlog, optionally delta-rs),
readers opening snapshots, and a checkpointer, an expirer and a vacuum running throughout.

Every append writes the same id into two partitions, so two files whose min/max stats name the
id: a reader that sees one of the pair saw a torn commit, three or more a doubled one. Readers
also check that versions never go back and that a version always shows the same files.
Afterwards the final table is read by txnlog and deltalake: every reported success is there
exactly once, nothing that was never written is there, and validate finds no problem.

Used by tests/reliability/test_load.py (short and soak variants) and benchmarks/load.py (which
prints the figures for docs/reliability.md).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import queue
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from . import log_events

_CONTEXT = multiprocessing.get_context("spawn")
SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string()), ("part", pa.string())])
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class LoadConfig:
    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)
    txnlog_writers: int = 8
    deltalake_writers: int = 0
    commits: int = 500
    readers: int = 2
    checkpointer: bool = True
    expirer: bool = True
    vacuum: bool = True
    #: Seconds between two runs of each maintenance process.
    maintenance_every_s: float = 0.5
    #: Versions the expirer keeps (older ones are expired once older than ``expire_older_than``).
    retain_versions: int = 60
    #: The expirer's time retention. 0 expires at once, whatever their age: safe with txnlog's
    #: writers only, which refuse to commit over a version expired under them. Another engine's
    #: writer can re-create an expired commit file in the moment between its last look at the
    #: log and its write, and lose that commit (delta-rs 1.6.6 does, issue 28): with one on the
    #: table, keep commits longer than its slowest commit.
    expire_older_than: str | int = 0
    #: The vacuum's retention: longer than the slowest commit (data file written to commit).
    vacuum_retention: str = "1h"
    #: Where the timeline of the log's files goes (see log_events.py); local tables only.
    #: Default: ``<table>.events.jsonl`` next to a local table.
    event_log: str | None = None

    def event_log_path(self) -> str | None:
        if self.event_log is not None:
            return self.event_log
        return None if "://" in self.uri else f"{self.uri.rstrip('/')}.events.jsonl"


@dataclass
class LoadResult:
    config: LoadConfig
    seconds: float = 0.0
    committed: int = 0
    failed: int = 0
    conflicts: int = 0
    retries: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    deltalake_committed: int = 0
    reader_snapshots: int = 0
    maintenance_runs: dict[str, int] = field(default_factory=dict)
    maintenance_errors: list[str] = field(default_factory=list)
    final_rows: int = 0
    #: Post-commit hooks (the writers' checkpoints) that failed; they never fail a commit.
    hook_failures: list[str] = field(default_factory=list)
    #: The errors of failed or conflicting commits (not violations: reported, not acknowledged).
    failures: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    #: For each acknowledged id not in the final table: its story from the event log.
    timelines: list[str] = field(default_factory=list)
    #: What each process did when: {"t0", "t1", "what"} (writer calls, maintenance runs).
    activity: list[dict[str, Any]] = field(default_factory=list)

    @property
    def commits_per_s(self) -> float:
        return (self.committed + self.deltalake_committed) / self.seconds if self.seconds else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        return {
            "writers": f"{self.config.txnlog_writers} txnlog + {self.config.deltalake_writers} deltalake",
            "commitsPerWriter": self.config.commits,
            "seconds": round(self.seconds, 1),
            "committed": self.committed,
            "deltalakeCommitted": self.deltalake_committed,
            "failed": self.failed,
            "commitsPerSecond": round(self.commits_per_s, 1),
            "p50Ms": round(self.percentile_ms(50), 1),
            "p99Ms": round(self.percentile_ms(99), 1),
            "maxMs": round(max(self.latencies_ms, default=0.0), 1),
            "conflicts": self.conflicts,
            "retries": self.retries,
            "readerSnapshots": self.reader_snapshots,
            "maintenanceRuns": self.maintenance_runs,
            "maintenanceErrors": len(self.maintenance_errors),
            "hookFailures": len(self.hook_failures),
            "finalRows": self.final_rows,
            "violations": len(self.violations),
        }


def rows_for(ident: int, writer: str) -> pa.Table:
    """Two rows of one id, in partitions a and b: two data files per commit."""
    return pa.table({"id": pa.array([ident, ident], pa.int64()), "writer": [writer] * 2, "part": ["a", "b"]}, schema=SCHEMA)


# --- the processes ---------------------------------------------------------------------------


def _txnlog_writer(config: LoadConfig, index: int, barrier: Any, out: Any) -> None:
    import txnlog
    from txnlog.errors import CommitConflictError, TxnLogError

    records: list[tuple[Any, ...]] = []
    try:
        table = txnlog.Table(config.uri, config.storage_options)
        table.snapshot()
        barrier.wait(START_TIMEOUT_S)
        for k in range(config.commits):
            ident = (index + 1) * 1_000_000 + k
            started, wall = time.perf_counter(), time.time()
            try:
                result = table.append(rows_for(ident, f"txnlog-{index}"))
                elapsed = time.perf_counter() - started
                records.append(("ok", ident, int(result), result.attempts, elapsed, wall, *map(repr, result.hook_failures)))
            except CommitConflictError as e:
                records.append(("conflict", ident, None, e.attempts, time.perf_counter() - started, wall, repr(e)))
            except TxnLogError as e:
                records.append(("failed", ident, None, getattr(e, "attempts", 0), time.perf_counter() - started, wall, repr(e)))
        out.put(("txnlog", index, records, None))
    except BaseException:
        out.put(("txnlog", index, records, traceback.format_exc()))


def _deltalake_writer(config: LoadConfig, index: int, barrier: Any, out: Any) -> None:
    from deltalake import write_deltalake

    records: list[tuple[Any, ...]] = []
    try:
        barrier.wait(START_TIMEOUT_S)
        for k in range(config.commits):
            ident = (100 + index) * 1_000_000 + k
            started, wall = time.perf_counter(), time.time()
            try:
                write_deltalake(config.uri, rows_for(ident, f"deltalake-{index}"), mode="append",
                                storage_options=config.storage_options or None)
                records.append(("ok", ident, None, 1, time.perf_counter() - started, wall))
            except Exception as e:  # delta-rs gives up after its own retries: counted, not fatal
                records.append(("failed", ident, None, 0, time.perf_counter() - started, wall, repr(e)))
        out.put(("deltalake", index, records, None))
    except BaseException:
        out.put(("deltalake", index, records, traceback.format_exc()))


def snapshot_pairs(files: pa.Table) -> collections.Counter[int]:
    """How many files of each id a snapshot lists (from the files' min stats)."""
    counts: collections.Counter[int] = collections.Counter()
    for stats in files.column("stats").to_pylist():
        counts[orjson.loads(stats)["minValues"]["id"]] += 1
    return counts


def _reader(config: LoadConfig, index: int, stop: Any, out: Any) -> None:
    """Alternates a cached Table (incremental update) and a fresh one (checkpoint + commits)."""
    import txnlog

    seen: dict[int, int] = {}  # version -> number of files
    problems: list[str] = []
    snapshots = 0
    try:
        cached = txnlog.Table(config.uri, config.storage_options)
        last = -1
        while not stop.wait(0.01):  # a short pause: readers must not starve writers of the 2 cores
            table = cached if snapshots % 2 else txnlog.Table(config.uri, config.storage_options)
            try:
                snap = table.snapshot()
            except txnlog.errors.TxnLogError as e:
                problems.append(f"reader {index}: opening a snapshot failed: {e!r}")
                continue
            snapshots += 1
            if snap.version < last:
                problems.append(f"reader {index}: version went back from {last} to {snap.version}")
            last = max(last, snap.version)
            pairs = snapshot_pairs(snap.files())
            bad = {i: n for i, n in pairs.items() if n != 2}
            if bad:
                problems.append(f"reader {index}: version {snap.version} shows ids with {sorted(set(bad.values()))} files: {list(bad)[:5]}")
            count = snap.num_files
            if seen.setdefault(snap.version, count) != count:
                problems.append(f"reader {index}: version {snap.version} showed {seen[snap.version]} then {count} files")
        out.put(("reader", index, {"snapshots": snapshots, "seen": seen, "problems": problems}, None))
    except BaseException:
        out.put(("reader", index, {"snapshots": snapshots, "seen": seen, "problems": problems}, traceback.format_exc()))


def _maintainer(config: LoadConfig, kind: str, stop: Any, out: Any) -> None:
    import txnlog
    from txnlog.maintenance import checkpoint, expire, vacuum

    runs = 0
    errors: list[str] = []
    activity: list[dict[str, Any]] = []
    try:
        while not stop.wait(config.maintenance_every_s):
            table = txnlog.Table(config.uri, config.storage_options)
            t0 = time.time()
            try:
                if kind == "checkpoint":
                    done = f"checkpoint {checkpoint(table).version}"
                elif kind == "expire":
                    expired = expire(table, retain_min=config.retain_versions, older_than=config.expire_older_than, limit=1000)
                    done = f"expire {expired.earliest_before}->{expired.earliest_after} (checkpoint written: {expired.checkpoint_written})"
                else:
                    # Below the 7-day default (hence force), but longer than any commit of a run:
                    # a retention shorter than a transaction deletes its data files before it
                    # commits them (the hazard RetentionCheckError guards against). A 120 s
                    # retention did exactly that in an S3 run on an overloaded machine.
                    done = f"vacuum {len(vacuum(table, retention=config.vacuum_retention, force=True).files)} files"
                runs += 1
            except txnlog.errors.CommitConflictError as e:
                done = f"{kind}: conflict {e!r}"
                errors.append(done)  # vacuum's commits may lose a race: fine
            except txnlog.errors.TxnLogError as e:
                done = f"{kind}: {e!r}"
                errors.append(done)
            activity.append({"t0": t0, "t1": time.time(), "what": done})
        out.put((kind, 0, {"runs": runs, "errors": errors, "activity": activity}, None))
    except BaseException:
        out.put((kind, 0, {"runs": runs, "errors": errors, "activity": activity}, traceback.format_exc()))


# --- running and judging ---------------------------------------------------------------------


def create_table(config: LoadConfig) -> None:
    import txnlog

    txnlog.Table.create(config.uri, SCHEMA, partition_by=["part"], storage_options=config.storage_options or None)


def _final_ids(config: LoadConfig) -> tuple[list[int], list[int]]:
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    import txnlog

    snap = txnlog.Table(config.uri, config.storage_options).snapshot()
    fs, root = snap.store.arrow_filesystem()
    paths = [f"{root}/{snap.locate(p).relative}" for p in snap.files().column("path").to_pylist()]
    ours = ds.dataset(paths, filesystem=fs, format="parquet").to_table(columns=["id"]).column("id").to_pylist()
    theirs = DeltaTable(config.uri, storage_options=config.storage_options or None).to_pyarrow_table(columns=["id"])
    return sorted(ours), sorted(theirs.column("id").to_pylist())


def run_processes(
    uri: str, event_log: str | None, writers: list[Any], others: list[Any], barrier: Any, stop: Any, out: Any
) -> tuple[list[tuple[Any, ...]], float, list[str]]:
    """Start ``others`` (readers, maintenance), the writers (which wait at ``barrier`` with
    this process) and, with ``event_log``, the watcher of ``_delta_log``; wait for every writer's
    report, stop the others and collect theirs. Returns the reports, the writers' seconds (from
    the barrier) and the processes that had to be killed."""
    watcher = None
    if event_log is not None:
        watcher = _CONTEXT.Process(target=log_events.watch, args=(os.path.join(uri, "_delta_log"), event_log, stop))
        watcher.start()
    for p in others + writers:
        p.start()
    reports: list[tuple[Any, ...]] = []
    problems: list[str] = []
    seconds = 0.0
    try:
        barrier.wait(START_TIMEOUT_S)
        started = time.perf_counter()
        deadline = time.monotonic() + 3600
        while len(reports) < len(writers) and time.monotonic() < deadline:
            try:
                reports.append(out.get(timeout=5))
            except queue.Empty:
                if not any(p.is_alive() for p in writers):
                    break
        seconds = time.perf_counter() - started
        stop.set()
        while len(reports) < len(writers) + len(others):
            try:
                reports.append(out.get(timeout=120))
            except queue.Empty:
                break
    finally:
        stop.set()
        for p in others + writers + ([watcher] if watcher is not None else []):
            p.join(60)
            if p.is_alive():
                p.kill()
                problems.append(f"process {p.name} did not finish")
    return reports, seconds, problems


def run_load(config: LoadConfig) -> LoadResult:
    """Create the table, run the load, and judge it. Violations are listed, not raised."""
    import txnlog
    from txnlog.maintenance import validate

    create_table(config)
    result = LoadResult(config)
    out = _CONTEXT.Queue()
    stop = _CONTEXT.Event()
    writers = config.txnlog_writers + config.deltalake_writers
    barrier = _CONTEXT.Barrier(writers + 1)
    others = [
        _CONTEXT.Process(target=_reader, args=(config, i, stop, out)) for i in range(config.readers)
    ] + [
        _CONTEXT.Process(target=_maintainer, args=(config, kind, stop, out))
        for kind, on in (("checkpoint", config.checkpointer), ("expire", config.expirer), ("vacuum", config.vacuum))
        if on
    ]
    writer_procs = [_CONTEXT.Process(target=_txnlog_writer, args=(config, i, barrier, out)) for i in range(config.txnlog_writers)]
    writer_procs += [_CONTEXT.Process(target=_deltalake_writer, args=(config, i, barrier, out)) for i in range(config.deltalake_writers)]
    reports, result.seconds, problems = run_processes(config.uri, config.event_log_path(), writer_procs, others, barrier, stop, out)
    result.violations += problems

    acknowledged: collections.Counter[int] = collections.Counter()
    attempted: set[int] = set()
    versions: dict[int, int] = {}
    for kind, index, payload, crash in reports:
        if crash:
            result.violations.append(f"{kind} {index} crashed: {crash}")
        if kind in ("txnlog", "deltalake"):
            for status, ident, version, attempts, seconds, wall, *detail in payload:
                attempted.add(ident)
                result.activity.append({"t0": wall, "t1": wall + seconds, "what": f"{kind} {index} {status} id {ident} version {version}"})
                if status == "ok":
                    acknowledged[ident] += 1
                    result.hook_failures += detail
                    if kind == "txnlog":
                        result.committed += 1
                        result.retries += attempts - 1
                        result.latencies_ms.append(seconds * 1000)
                        versions[ident] = version
                    else:
                        result.deltalake_committed += 1
                elif status == "conflict":
                    result.conflicts += 1
                    result.failures += detail
                else:
                    result.failed += 1
                    result.failures += detail
        elif kind == "reader":
            result.reader_snapshots += payload["snapshots"]
            result.violations += payload["problems"]
            _check_reader_counts(payload["seen"], versions, result)
        else:
            result.maintenance_runs[kind] = payload["runs"]
            result.maintenance_errors += payload["errors"]
            result.activity += payload["activity"]
    twice = sorted(v for v, n in collections.Counter(versions.values()).items() if n > 1)
    if twice:  # put-if-absent broken (the store, or an emulator of it): the readers' counts then mislead
        result.violations.append(f"versions acknowledged to two txnlog commits: {twice[:5]}")
    # Reader checks needing the writers' versions ran above before every writer was read: redo.
    for kind, _index, payload, _crash in reports:
        if kind == "reader":
            _check_reader_counts(payload["seen"], versions, result, final=True)

    try:
        ours, theirs = _final_ids(config)
    except Exception as e:  # a live file missing is a violation to report, not a crash
        result.violations.append(f"the final table cannot be read: {e!r}")
        return result
    result.final_rows = len(ours)
    if ours != theirs:
        result.violations.append(f"txnlog and deltalake read different rows ({len(ours)} vs {len(theirs)})")
    counts = collections.Counter(ours)
    lost = [i for i in acknowledged if counts[i] != 2]
    if lost:
        result.violations.append(f"{len(lost)} acknowledged commits are not there exactly once: {lost[:5]}")
        events = config.event_log_path()
        if events is not None and os.path.exists(events):
            timeline = log_events.read(events)
            result.timelines += [log_events.explain(timeline, i, result.activity) for i in lost[:5]]
    stray = set(counts) - attempted
    if stray:
        result.violations.append(f"rows nobody wrote: {sorted(stray)[:5]}")
    odd = [i for i, n in counts.items() if n != 2]
    if odd:
        result.violations.append(f"commits torn or doubled in the final table: {odd[:5]}")
    report = validate(txnlog.Table(config.uri, config.storage_options))
    if not report.ok:
        result.violations.append(f"validate: {[p.to_dict() for p in report.problems][:3]}")
    return result


def _check_reader_counts(seen: dict[int, int], versions: dict[int, int], result: LoadResult, final: bool = False) -> None:
    """With only txnlog writers and no failed commit, version v shows exactly two files per
    acknowledged commit at or below v: nothing missing, nothing extra."""
    if not final or result.config.deltalake_writers or result.failed or result.conflicts:
        return
    ordered = sorted(versions.values())
    import bisect

    for version, count in seen.items():
        expected = 2 * bisect.bisect_right(ordered, version)
        if count != expected:
            result.violations.append(f"a reader saw {count} files at version {version}; {expected} were committed")
            return


def moto_server() -> tuple[Any, dict[str, str]]:
    """A moto S3 server on 127.0.0.1 and the storage options txnlog and deltalake take; the
    fake credentials go to the environment too, for the processes this starts."""
    import socket

    from moto.server import ThreadedMotoServer

    from tests.moto_atomic import make_conditional_writes_atomic

    make_conditional_writes_atomic()  # S3 decides put-if-absent atomically; moto 5 alone does not

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1"}
    os.environ.update(env)
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    return server, options


def new_bucket(options: dict[str, str], name: str) -> str:
    import boto3

    client: Any = boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                               aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket=name)
    return f"s3://{name}"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
