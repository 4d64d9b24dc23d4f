"""Checkpoint of a table with many live files: txnlog's write_checkpoint against delta-rs's
``DeltaTable.create_checkpoint`` on an identical copy of the same log.

    .venv/bin/python benchmarks/bench_checkpoint.py                # 100 commits x 10k adds
    .venv/bin/python benchmarks/bench_checkpoint.py --commits 10   # a quicker 100k-file run
    .venv/bin/python benchmarks/bench_checkpoint.py --stats-as-struct  # also stats_parsed

The table is built by writing commit files directly (txnlog.log.codec + put_if_absent): no data
files exist, neither checkpoint writer reads any. Each side runs in a fresh subprocess that
opens the table, then checkpoints it; the time of the checkpoint call alone is reported, with
the process's resident memory before it and its peak during it (sampled every 5 ms).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

import orjson

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _iso(ts: dt.datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _stats(rng: random.Random, first_id: int, rows: int) -> str:
    """Stats as Spark and delta-rs write them: min/max/nullCount for each data column."""
    last_id = first_id + rows - 1
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=first_id)
    t1 = t0 + dt.timedelta(seconds=rows)
    return orjson.dumps(
        {
            "numRecords": rows,
            "minValues": {"id": first_id, "value": rng.random(), "name": f"name-{first_id:09d}", "ts": _iso(t0)},
            "maxValues": {"id": last_id, "value": 1 + rng.random(), "name": f"name-{last_id:09d}", "ts": _iso(t1)},
            "nullCount": {"id": 0, "value": rng.randrange(3), "name": 0, "ts": 0},
        }
    ).decode()


def build_table(path: str, commits: int, files_per_commit: int, partitions: int, stats_as_struct: bool = False) -> None:
    from txnlog.log import codec
    from txnlog.log.actions import AddFile, CommitInfo, Metadata, Protocol
    from txnlog.log.filenames import commit_path
    from txnlog.storage import open_store

    store = open_store(path)
    rng = random.Random(42)
    now = int(time.time() * 1000)
    rows_per_file = 1000
    for version in range(commits):
        read_version = version - 1 if version else None
        actions: list[Any] = [CommitInfo(timestamp=now, operation="WRITE", read_version=read_version)]
        if version == 0:
            actions += [
                Protocol(1, 2),
                Metadata(
                    id=str(uuid.UUID(int=1)),
                    schema_string=json.dumps(SCHEMA),
                    partition_columns=("part",),
                    configuration={"delta.checkpoint.writeStatsAsStruct": "true"} if stats_as_struct else {},
                    created_time=now,
                ),
            ]
        for i in range(files_per_commit):
            n = version * files_per_commit + i
            part = f"p{n % partitions:03d}"
            actions.append(
                AddFile(
                    path=f"part={part}/part-{version:05d}-{uuid.UUID(int=rng.getrandbits(128))}.c000.snappy.parquet",
                    partition_values={"part": part},
                    size=100_000 + rng.randrange(900_000),
                    modification_time=now,
                    data_change=True,
                    stats=_stats(rng, n * rows_per_file, rows_per_file),
                )
            )
        store.put_if_absent(commit_path(version), codec.encode_commit(actions))


# --- one side, in its own process --------------------------------------------------------------


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _measure(call: Callable[[], Any]) -> tuple[float, float]:
    """Seconds taken by ``call`` and the peak RSS (MiB) seen while it ran."""
    peak = [_rss_mib()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], _rss_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    call()
    elapsed = time.perf_counter() - started
    done.set()
    sampler.join()
    return elapsed, max(peak[0], _rss_mib())


def run_side(side: str, path: str) -> dict[str, float]:
    import resource

    started = time.perf_counter()
    if side == "txnlog":
        import txnlog
        from txnlog.log.checkpoint_writer import write_checkpoint

        snapshot = txnlog.Table(path).snapshot()
        open_s = time.perf_counter() - started
        before = _rss_mib()
        checkpoint_s, peak = _measure(lambda: write_checkpoint(snapshot))
    else:
        from deltalake import DeltaTable

        table = DeltaTable(path)
        open_s = time.perf_counter() - started
        before = _rss_mib()
        checkpoint_s, peak = _measure(table.create_checkpoint)
    return {
        "open_s": open_s,
        "checkpoint_s": checkpoint_s,
        "rss_before_mib": before,
        "rss_peak_during_mib": peak,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _checkpoint_size(path: str) -> int:
    log = os.path.join(path, "_delta_log")
    total = 0
    for root, _dirs, names in os.walk(log):
        for name in names:
            if ".checkpoint." in name or root.endswith("_sidecars"):
                total += os.path.getsize(os.path.join(root, name))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--files-per-commit", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--stats-as-struct", action="store_true", help="set delta.checkpoint.writeStatsAsStruct=true")
    parser.add_argument("--workdir", default=None, help="where to build the tables (default: a temp dir)")
    parser.add_argument("--side", choices=["txnlog", "deltalake"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side:  # child process: one side, answer on stdout
        print(json.dumps(run_side(args.side, args.path)))
        return

    workdir = tempfile.mkdtemp(prefix="bench-checkpoint-", dir=args.workdir)
    try:
        ours, theirs = os.path.join(workdir, "txnlog"), os.path.join(workdir, "deltalake")
        started = time.perf_counter()
        build_table(ours, args.commits, args.files_per_commit, args.partitions, args.stats_as_struct)
        shutil.copytree(ours, theirs)
        files = args.commits * args.files_per_commit
        took = time.perf_counter() - started
        print(f"built {files:,} live files in {args.commits} commits, {args.partitions} partitions ({took:.1f}s)")
        results = {}
        for side, path in (("txnlog", ours), ("deltalake", theirs)):
            out = subprocess.run(
                [sys.executable, __file__, "--side", side, "--path", path], check=True, capture_output=True, text=True
            ).stdout
            results[side] = json.loads(out.strip().splitlines()[-1])
            results[side]["checkpoint_mib"] = _checkpoint_size(path) / 2**20
        header = ("open s", "checkpoint s", "RSS before", "RSS peak", "max RSS", "file MiB")
        print(f"{'':10} {header[0]:>8} {header[1]:>13} {header[2]:>11} {header[3]:>9} {header[4]:>8} {header[5]:>9}")
        for side, r in results.items():
            print(
                f"{side:10} {r['open_s']:8.2f} {r['checkpoint_s']:13.2f} {r['rss_before_mib']:11.0f} "
                f"{r['rss_peak_during_mib']:9.0f} {r['max_rss_mib']:8.0f} {r['checkpoint_mib']:9.1f}"
            )
        ratio = results["deltalake"]["checkpoint_s"] / results["txnlog"]["checkpoint_s"]
        extra_ours = results["txnlog"]["rss_peak_during_mib"] - results["txnlog"]["rss_before_mib"]
        extra_theirs = results["deltalake"]["rss_peak_during_mib"] - results["deltalake"]["rss_before_mib"]
        print(f"checkpoint time: delta-rs / txnlog = {ratio:.2f}x")
        print(f"memory added by the checkpoint call: txnlog {extra_ours:.0f} MiB, delta-rs {extra_theirs:.0f} MiB")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
