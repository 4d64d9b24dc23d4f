"""The load of issue 28, part 1: per-partition statistics checked against what was acknowledged.

One table partitioned by ``part``, in real processes:

- ``appenders`` txnlog blind appenders, appender i into partition ``a<i>``, commit k adding
  ``k % 7 + 1`` rows (one file), so files of one partition differ in ``numRecords``;
- a txnlog copy-on-write updater that rewrites partition ``u`` (always 20 rows) in each commit;
- ``deltalake_appenders`` delta-rs appenders (``write_deltalake``) into partition ``d<j>``;
- ``readers`` readers alternating a cached ``Table`` (incremental update) and a fresh one, each
  summing ``numRecords`` from ``snapshot.files()``' stats per partition (every other fresh one
  a moment after opening the snapshot);
- a checkpointer calling ``txnlog.maintenance.checkpoint`` every ~10 versions, while every txnlog
  writer's own checkpoint hook runs (``delta.checkpointInterval`` 10) and delta-rs checkpoints
  each 100th version it commits.

Violations: a reader sees ``u`` with other than 20 rows, a version with two different sums, a
version going back, or (judged at the end, with the versions every writer reported) a partition
whose sum at version v is not the rows acknowledged at or below v; and in the final table, read by
txnlog and deltalake, any acknowledged row missing or doubled, rows nobody wrote, or a validate
problem. Every file event of ``_delta_log`` is logged with its time (log_events.py).
"""

from __future__ import annotations

import bisect
import collections
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from . import log_events
from .load import _CONTEXT, START_TIMEOUT_S, run_processes

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("part", pa.string())])
UPDATED_ROWS = 20


@dataclass(frozen=True)
class PartitionLoadConfig:
    uri: str
    appenders: int = 4
    updater: bool = True
    deltalake_appenders: int = 1
    #: Commits of each writer (the updater's included).
    commits: int = 100
    readers: int = 1
    #: The checkpointer checkpoints once the table is this many versions past its last one.
    checkpoint_every: int = 10
    event_log: str | None = None

    def event_log_path(self) -> str | None:
        return self.event_log if self.event_log is not None else f"{self.uri.rstrip('/')}.events.jsonl"


@dataclass
class PartitionLoadResult:
    config: PartitionLoadConfig
    seconds: float = 0.0
    #: Acknowledged commits by writer kind, and failed ones (with their errors).
    committed: collections.Counter[str] = field(default_factory=collections.Counter)
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    reader_snapshots: int = 0
    versions_checked: int = 0
    checkpoints: int = 0
    maintenance_errors: list[str] = field(default_factory=list)
    hook_failures: list[str] = field(default_factory=list)
    final_version: int = 0
    violations: list[str] = field(default_factory=list)
    timelines: list[str] = field(default_factory=list)
    activity: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_committed(self) -> int:
        return sum(self.committed.values())

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "committed": dict(self.committed),
            "failed": dict(self.failed),
            "commitsPerSecond": round(self.total_committed / self.seconds, 1) if self.seconds else 0.0,
            "p50Ms": round(self.percentile_ms(50), 1),
            "p99Ms": round(self.percentile_ms(99), 1),
            "finalVersion": self.final_version,
            "readerSnapshots": self.reader_snapshots,
            "versionsChecked": self.versions_checked,
            "checkpoints": self.checkpoints,
            "maintenanceErrors": len(self.maintenance_errors),
            "hookFailures": len(self.hook_failures),
            "violations": len(self.violations),
        }


def _rows(ids: list[int], part: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "n": pa.array([0] * len(ids), pa.int64()), "part": [part] * len(ids)}, schema=SCHEMA)


def _append_rows(writer: int, k: int, part: str) -> pa.Table:
    """Commit k of a writer: ``k % 7 + 1`` rows of ids unique to it."""
    base = (writer + 1) * 10_000_000 + k * 10
    return _rows(list(range(base, base + k % 7 + 1)), part)


# --- the processes ---------------------------------------------------------------------------


def _appender(config: PartitionLoadConfig, index: int, barrier: Any, out: Any) -> None:
    import txnlog
    from txnlog.errors import TxnLogError

    part, records = f"a{index}", []
    try:
        table = txnlog.Table(config.uri)
        table.snapshot()
        barrier.wait(START_TIMEOUT_S)
        for k in range(config.commits):
            rows = _append_rows(index, k, part)
            started, wall = time.perf_counter(), time.time()
            try:
                result = table.append(rows)
                records.append(("ok", part, rows.num_rows, int(result), time.perf_counter() - started, wall, [repr(f) for f in result.hook_failures]))
            except TxnLogError as e:
                records.append(("failed", part, rows.num_rows, None, time.perf_counter() - started, wall, [repr(e)]))
        out.put(("txnlog", index, records, None))
    except BaseException:
        out.put(("txnlog", index, records, traceback.format_exc()))


def _updater(config: PartitionLoadConfig, index: int, barrier: Any, out: Any) -> None:
    import txnlog
    from txnlog.errors import TxnLogError

    records = []
    try:
        table = txnlog.Table(config.uri)
        table.snapshot()
        barrier.wait(START_TIMEOUT_S)
        for _k in range(config.commits):
            started, wall = time.perf_counter(), time.time()
            try:
                result = table.update("part = 'u'", {"n": "n + 1"})
                assert result is not None, "the update matched no row"
                records.append(("ok", "u", 0, int(result), time.perf_counter() - started, wall, [repr(f) for f in result.hook_failures]))
            except TxnLogError as e:
                records.append(("failed", "u", 0, None, time.perf_counter() - started, wall, [repr(e)]))
        out.put(("updater", index, records, None))
    except BaseException:
        out.put(("updater", index, records, traceback.format_exc()))


def _deltalake_appender(config: PartitionLoadConfig, index: int, barrier: Any, out: Any) -> None:
    from deltalake import DeltaTable, write_deltalake

    part, records = f"d{index}", []
    try:
        barrier.wait(START_TIMEOUT_S)
        for k in range(config.commits):
            rows = _append_rows(100 + index, k, part)
            started, wall = time.perf_counter(), time.time()
            try:
                table = DeltaTable(config.uri)
                write_deltalake(table, rows, mode="append")
                records.append(("ok", part, rows.num_rows, table.version(), time.perf_counter() - started, wall, []))
            except Exception as e:  # delta-rs gives up after its own retries: counted, not fatal
                records.append(("failed", part, rows.num_rows, None, time.perf_counter() - started, wall, [repr(e)]))
        out.put(("deltalake", index, records, None))
    except BaseException:
        out.put(("deltalake", index, records, traceback.format_exc()))


def partition_sums(files: pa.Table) -> dict[str, int]:
    """``numRecords`` summed per value of the partition column ``part``."""
    sums: collections.Counter[str] = collections.Counter()
    for values, stats in zip(files.column("partition_values").to_pylist(), files.column("stats").to_pylist()):
        sums[dict(values)["part"]] += orjson.loads(stats)["numRecords"]
    return dict(sums)


def _reader(config: PartitionLoadConfig, index: int, stop: Any, out: Any) -> None:
    import txnlog

    seen: dict[int, dict[str, int]] = {}
    problems: list[str] = []
    snapshots = 0
    try:
        cached = txnlog.Table(config.uri)
        last = -1
        while not stop.wait(0.01):
            fresh = snapshots % 2 == 0
            table = txnlog.Table(config.uri) if fresh else cached
            try:
                snap = table.snapshot()
                if snapshots % 4 == 2:
                    # A query plans, then reads: the stats are read a moment after the snapshot
                    # was opened, as another writer may put its checkpoint in place (issue 28).
                    stop.wait(0.2)
                sums = partition_sums(snap.files())
            except txnlog.errors.TxnLogError as e:
                problems.append(f"reader {index}: reading a snapshot failed: {e!r}")
                continue
            snapshots += 1
            how = "fresh" if fresh else "cached"
            if snap.version < last:
                problems.append(f"reader {index}: version went back from {last} to {snap.version}")
            last = max(last, snap.version)
            if "u" in sums and sums["u"] != UPDATED_ROWS:
                problems.append(f"reader {index} ({how}): version {snap.version} shows {sums['u']} rows in partition u, not {UPDATED_ROWS}")
            before = seen.setdefault(snap.version, sums)
            if before != sums:
                problems.append(f"reader {index} ({how}): version {snap.version} showed {before} then {sums}")
        out.put(("reader", index, {"snapshots": snapshots, "seen": seen, "problems": problems}, None))
    except BaseException:
        out.put(("reader", index, {"snapshots": snapshots, "seen": seen, "problems": problems}, traceback.format_exc()))


def _checkpointer(config: PartitionLoadConfig, index: int, stop: Any, out: Any) -> None:
    import txnlog
    from txnlog.maintenance import checkpoint

    done = -1
    runs, errors, activity = 0, [], []
    try:
        table = txnlog.Table(config.uri)
        while not stop.wait(0.05):
            try:
                if table.latest_version() < done + config.checkpoint_every:
                    continue
                t0 = time.time()
                done = checkpoint(table).version
                runs += 1
                activity.append({"t0": t0, "t1": time.time(), "what": f"checkpoint {done}"})
            except txnlog.errors.TxnLogError as e:
                errors.append(f"checkpoint: {e!r}")
        out.put(("checkpoint", index, {"runs": runs, "errors": errors, "activity": activity}, None))
    except BaseException:
        out.put(("checkpoint", index, {"runs": runs, "errors": errors, "activity": activity}, traceback.format_exc()))


# --- running and judging ---------------------------------------------------------------------


def create_table(config: PartitionLoadConfig) -> None:
    import txnlog

    table = txnlog.Table.create(config.uri, SCHEMA, partition_by=["part"])
    table.append(_rows(list(range(UPDATED_ROWS)), "u"))


def run_partition_load(config: PartitionLoadConfig) -> PartitionLoadResult:
    """Create the table, run the load, and judge it. Violations are listed, not raised."""
    create_table(config)
    result = PartitionLoadResult(config)
    out, stop = _CONTEXT.Queue(), _CONTEXT.Event()
    targets: list[tuple[Any, int]] = [(_appender, i) for i in range(config.appenders)]
    targets += [(_updater, 0)] if config.updater else []
    targets += [(_deltalake_appender, j) for j in range(config.deltalake_appenders)]
    barrier = _CONTEXT.Barrier(len(targets) + 1)
    writers = [_CONTEXT.Process(target=target, args=(config, i, barrier, out)) for target, i in targets]
    others = [_CONTEXT.Process(target=_reader, args=(config, i, stop, out)) for i in range(config.readers)]
    others.append(_CONTEXT.Process(target=_checkpointer, args=(config, 0, stop, out)))
    reports, result.seconds, result.violations = run_processes(config.uri, config.event_log_path(), writers, others, barrier, stop, out)

    # rows acknowledged per partition, by version; rows that may have landed unacknowledged
    acknowledged: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    maybe: collections.Counter[str] = collections.Counter()
    readers = []
    for kind, index, payload, crash in reports:
        if crash:
            result.violations.append(f"{kind} {index} crashed: {crash}")
        if kind in ("txnlog", "updater", "deltalake"):
            for status, part, rows, version, seconds, wall, detail in payload:
                result.activity.append({"t0": wall, "t1": wall + seconds, "what": f"{kind} {index} {status} {rows} rows into {part}, version {version}"})
                if status == "ok":
                    result.committed[kind] += 1
                    acknowledged[part].append((version, rows))
                    result.hook_failures += detail
                    if kind != "deltalake":
                        result.latencies_ms.append(seconds * 1000)
                else:
                    result.failed[kind] += 1
                    result.failures += detail
                    maybe[part] += rows
        elif kind == "reader":
            readers.append(payload)
        else:
            result.checkpoints += payload["runs"]
            result.maintenance_errors += payload["errors"]
            result.activity += payload["activity"]

    for payload in readers:
        result.reader_snapshots += payload["snapshots"]
        result.violations += payload["problems"]
        result.versions_checked += len(payload["seen"])
        for version, sums in sorted(payload["seen"].items()):
            for part, commits in acknowledged.items():
                if part == "u":
                    continue
                commits.sort()
                at = sum(rows for v, rows in commits[: bisect.bisect_right(commits, (version, float("inf")))])
                got = sums.get(part, 0)
                if not at <= got <= at + maybe[part]:
                    result.violations.append(
                        f"a reader saw {got} rows in partition {part} at version {version}; {at} were acknowledged at or below it"
                        + (f" (and up to {maybe[part]} more may have landed)" if maybe[part] else "")
                    )
    _judge_final(config, result, acknowledged, maybe)
    return result


def _judge_final(
    config: PartitionLoadConfig, result: PartitionLoadResult, acknowledged: dict[str, list[tuple[int, int]]], maybe: collections.Counter[str]
) -> None:
    from deltalake import DeltaTable

    import txnlog
    from txnlog.maintenance import validate

    try:
        snap = txnlog.Table(config.uri).snapshot()
        ours = snap.to_arrow(["id", "part"]).sort_by([("id", "ascending")])
        theirs = DeltaTable(config.uri).to_pyarrow_table(columns=["id", "part"]).sort_by([("id", "ascending")])
    except Exception as e:  # a live file missing is a violation to report, not a crash
        result.violations.append(f"the final table cannot be read: {e!r}")
        return
    result.final_version = snap.version
    if ours.to_pylist() != theirs.to_pylist():
        result.violations.append(f"txnlog and deltalake read different rows ({ours.num_rows} vs {theirs.num_rows})")
    ids = ours.column("id").to_pylist()
    if len(ids) != len(set(ids)):
        result.violations.append(f"rows doubled in the final table: {[i for i, n in collections.Counter(ids).items() if n > 1][:5]}")
    by_part = collections.Counter(ours.column("part").to_pylist())
    stats = partition_sums(snap.files())
    for part in sorted(set(by_part) | set(acknowledged)):
        want = UPDATED_ROWS if part == "u" else sum(rows for _v, rows in acknowledged.get(part, []))
        if not want <= by_part[part] <= want + maybe[part]:
            result.violations.append(f"partition {part} holds {by_part[part]} rows at the end; {want} were acknowledged")
        if stats.get(part, 0) != by_part[part]:
            result.violations.append(f"partition {part}: the final stats say {stats.get(part, 0)} rows, the files hold {by_part[part]}")
    report = validate(txnlog.Table(config.uri))
    if not report.ok:
        result.violations.append(f"validate: {[p.to_dict() for p in report.problems][:3]}")
    events = config.event_log_path()
    if result.violations and events is not None and os.path.exists(events):
        result.timelines.append(_around_first_bad_version(log_events.read(events), result))


def _around_first_bad_version(events: list[dict[str, Any]], result: PartitionLoadResult) -> str:
    """The log's events (checkpoints, hints, deletes) in the seconds before the first violation
    that names a version, for the report."""
    import re

    versions = [int(m.group(1)) for v in result.violations if (m := re.search(r"version (\d+)", v))]
    if not versions:
        return "no violation names a version"
    first = min(versions)
    seen = [e for e in events if e.get("name", "").startswith(f"{first:020d}.json")]
    if not seen:
        return f"version {first}: its commit was never seen in _delta_log"
    t = seen[0]["t"]
    lines = [f"around version {first} (committed at {t:.3f}):"]
    for e in events:
        if t - 5 <= e["t"] <= t + 2 and (".checkpoint" in e.get("name", "") or e.get("name") == "_last_checkpoint" or e["ev"] != "create"):
            lines.append(f"  {e['t']:.3f} {e['ev']:<10} {e.get('name', '')} {e.get('hint', '')}")
    return "\n".join(lines)
