"""Maintenance against delta-rs on one table of 1M live files in 10,000 versions (100 adds per
commit, 50 partitions, numRecords-only stats, a checkpoint at version 9,899 as a table written
with checkpoints every 100 commits would have), plus VACUUM of 100k orphan files.

    .venv/bin/python benchmarks/bench_maintenance.py            # 10,000 commits x 100 adds, 3 rounds
    .venv/bin/python benchmarks/bench_maintenance.py --quick    # 200 commits x 50 adds, 1 round

The table is built by writing commit JSON directly (no data files exist; nothing here reads one).
Every measurement runs in a fresh process; the library is imported and the table opened before
the clock starts (delta-rs's calls work on a DeltaTable already loaded, so txnlog's get a loaded
snapshot too); contenders alternate order every round.

1. checkpoint at the latest version: ``write_checkpoint(snapshot)`` (what ``txnlog checkpoint``
   runs) against ``DeltaTable.create_checkpoint()``; the new checkpoint is removed between rounds;
2. expire 10,000 versions (every commit 60 days old, a checkpoint at the latest version):
   ``maintenance.expire(table, retain_min=1, limit=10_000)`` against ``cleanup_metadata()``, each
   on a fresh copy every round;
3. vacuum of 100k orphan files (30 days old) in 50 partition directories of a small table:
   ``maintenance.vacuum(Table(path))`` against ``DeltaTable(path).vacuum(168, dry_run=False,
   full=True)``, both timed from opening the table; orphans are re-created every round.

Memory: ``peak`` is the process's VmHWM at the end (a fresh process: everything it ever held,
the open included); ``call peak`` resets VmHWM through ``/proc/self/clear_refs`` just before the
timed call, so it is that call's peak (including what was resident before it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import (
    WORK_DIR,
    interleaved,
    log,
    machine_line,
    markdown_table,
    median,
    paired_ratio,
    ratio,
    setup_logging,
)

CHECKPOINT_TARGET_RATIO = 0.3
CHECKPOINT_TARGET_MIB = 300
EXPIRE_TARGET_RATIO = 1.0


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(field)


def _timed(call: Any) -> dict[str, float]:
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "call_peak_mib": _status_mib("VmHWM")}


def measure(op: str, path: str) -> dict[str, Any]:
    started = time.perf_counter()
    if op == "checkpoint-txnlog":
        import txnlog
        from txnlog.log.checkpoint_writer import write_checkpoint

        snapshot = txnlog.Table(path).snapshot()
        opened = time.perf_counter() - started
        out = _timed(lambda: write_checkpoint(snapshot))
    elif op == "checkpoint-deltalake":
        from deltalake import DeltaTable

        table = DeltaTable(path)
        opened = time.perf_counter() - started
        out = _timed(table.create_checkpoint)
    elif op == "expire-txnlog":
        import txnlog
        from txnlog.maintenance import expire

        t = txnlog.Table(path)
        snapshot = t.snapshot()
        opened = time.perf_counter() - started
        out = _timed(lambda: expire(t, snapshot=snapshot, retain_min=1, limit=10_000_000))
    elif op == "expire-deltalake":
        from deltalake import DeltaTable

        table = DeltaTable(path)
        opened = time.perf_counter() - started
        out = _timed(table.cleanup_metadata)
    elif op == "vacuum-txnlog":
        import txnlog
        from txnlog.maintenance import vacuum

        opened = 0.0
        out = _timed(lambda: vacuum(txnlog.Table(path), retention="168h"))
    elif op == "vacuum-deltalake":
        from deltalake import DeltaTable

        opened = 0.0
        out = _timed(lambda: DeltaTable(path).vacuum(168, dry_run=False, full=True))
    else:
        raise SystemExit(f"unknown operation {op}")
    log_dir = os.path.join(path, "_delta_log")
    commits = sum(1 for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit())
    files = sum(len(fs) for _, _, fs in os.walk(path))
    return {**out, "open_s": opened, "peak_mib": _status_mib("VmHWM"), "commits_left": commits, "files_left": files}


def _run(op: str, path: str) -> dict[str, Any]:
    os.sync()
    proc = subprocess.run([sys.executable, __file__, "--op", op, "--path", path], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{op} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    log.info("%s: %.2fs (open %.2fs), peak %.0f MiB", op, result["seconds"], result["open_s"], result["peak_mib"])
    return result


def _age_commits(path: str, days: int) -> None:
    stamp = time.time() - days * 86_400
    log_dir = os.path.join(path, "_delta_log")
    for name in os.listdir(log_dir):
        os.utime(os.path.join(log_dir, name), (stamp, stamp))


def _drop_checkpoint(path: str, version: int, hint: bytes) -> None:
    """Remove the checkpoint at ``version`` and put back the hint naming the one before it
    (delta-rs refuses a table whose _last_checkpoint names a missing checkpoint)."""
    log_dir = os.path.join(path, "_delta_log")
    for name in os.listdir(log_dir):
        if name.startswith(f"{version:020d}.checkpoint"):
            os.unlink(os.path.join(log_dir, name))
    with open(os.path.join(log_dir, "_last_checkpoint"), "wb") as f:
        f.write(hint)


def _make_orphans(path: str, count: int, partitions: int) -> None:
    stamp = time.time() - 30 * 86_400
    for i in range(count):
        directory = os.path.join(path, f"part=p{i % partitions:03d}")
        os.makedirs(directory, exist_ok=True)
        name = os.path.join(directory, f"orphan-{i:07d}.parquet")
        with open(name, "wb") as f:
            f.write(b"x" * 64)
        os.utime(name, (stamp, stamp))


def _cell(rs: list[dict[str, Any]]) -> str:
    return f"{median([r['seconds'] for r in rs]):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--orphans", type=int, default=None)
    parser.add_argument("--op", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.op:
        print(json.dumps(measure(args.op, args.path)))
        return
    setup_logging()
    commits, per_commit = (200, 50) if args.quick else (10_000, 100)
    rounds = args.rounds or (1 if args.quick else 3)
    orphans = args.orphans or (2_000 if args.quick else 100_000)
    from bench_checkpoint import build_table

    import txnlog
    from txnlog.log.checkpoint_writer import write_checkpoint

    WORK_DIR.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="maintenance-", dir=WORK_DIR)
    try:
        base = os.path.join(workdir, "base")
        started = time.perf_counter()
        build_table(base, commits - 100, per_commit, 50, stats="numrecords")
        write_checkpoint(txnlog.Table(base).snapshot())  # at version commits - 101
        from txnlog.log import codec
        from txnlog.log.actions import AddFile, CommitInfo
        from txnlog.log.filenames import commit_path
        from txnlog.storage import open_store

        store = open_store(base)
        now = int(time.time() * 1000)
        for version in range(commits - 100, commits):
            adds = [
                AddFile(path=f"part=p{(version * per_commit + i) % 50:03d}/late-{version}-{i}.parquet", partition_values={"part": f"p{(version * per_commit + i) % 50:03d}"},
                        size=100_000, modification_time=now, stats='{"numRecords":1000}')
                for i in range(per_commit)
            ]
            store.put_if_absent(commit_path(version), codec.encode_commit([CommitInfo(timestamp=now, operation="WRITE"), *adds]))
        latest = commits - 1
        with open(os.path.join(base, "_delta_log", "_last_checkpoint"), "rb") as f:
            hint = f.read()
        log.info("built %d files in %d versions in %.0fs", commits * per_commit, commits, time.perf_counter() - started)

        # 1. checkpoint
        ours, theirs = os.path.join(workdir, "cp-txnlog"), os.path.join(workdir, "cp-deltalake")
        shutil.copytree(base, ours)
        shutil.copytree(base, theirs)

        def checkpoint(op: str, path: str) -> Any:
            def run() -> dict[str, Any]:
                _drop_checkpoint(path, latest, hint)
                return _run(op, path)

            return run

        _, cp = interleaved({"txnlog": checkpoint("checkpoint-txnlog", ours), "delta-rs": checkpoint("checkpoint-deltalake", theirs)}, rounds, warmup=0)

        # 2. expire: every commit old, a checkpoint at the latest version.
        expirable = os.path.join(workdir, "expirable")
        shutil.copytree(ours, expirable)  # holds txnlog's checkpoint at the latest version
        _age_commits(expirable, 60)

        def expiry(op: str) -> Any:
            def run() -> dict[str, Any]:
                copy = os.path.join(workdir, f"copy-{op}")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(expirable, copy)
                try:
                    return _run(op, copy)
                finally:
                    shutil.rmtree(copy, ignore_errors=True)

            return run

        _, ex = interleaved({"txnlog": expiry("expire-txnlog"), "delta-rs": expiry("expire-deltalake")}, rounds, warmup=0)
        for name, rs in ex.items():
            for r in rs:
                if r["commits_left"] != 1:
                    raise SystemExit(f"{name} left {r['commits_left']} commits, expected 1")

        # 3. vacuum of orphans in a small table.
        small = os.path.join(workdir, "small")
        build_table(small, 10, 100, 50, stats="numrecords")

        def vacuuming(op: str) -> Any:
            def run() -> dict[str, Any]:
                copy = os.path.join(workdir, f"vac-{op}")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(small, copy)
                _make_orphans(copy, orphans, 50)
                try:
                    return _run(op, copy)
                finally:
                    shutil.rmtree(copy, ignore_errors=True)

            return run

        _, vac = interleaved({"txnlog": vacuuming("vacuum-txnlog"), "delta-rs": vacuuming("vacuum-deltalake")}, rounds, warmup=0)
        for name, rs in vac.items():
            for r in rs:
                if r["files_left"] > 20:  # the log: 10 commits and txnlog's 2 VACUUM commits (+ checkpoint)
                    raise SystemExit(f"{name} left {r['files_left']} files after vacuum")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"### Maintenance: {commits * per_commit:,} files in {commits:,} versions; vacuum of {orphans:,} orphans ({rounds} round{'s' if rounds != 1 else ''}; {machine_line()})\n")
    rows = []
    for label, results, target in (
        (f"checkpoint ({commits * per_commit:,} files)", cp, f"≤ {CHECKPOINT_TARGET_RATIO}x, ≤ {CHECKPOINT_TARGET_MIB} MiB"),
        (f"expire {commits - 1:,} versions", ex, f"≤ {EXPIRE_TARGET_RATIO}x"),
        (f"vacuum {orphans:,} orphans", vac, "–"),
    ):
        t, d = results["txnlog"], results["delta-rs"]
        rows.append(
            [
                label,
                _cell(t),
                _cell(d),
                ratio(paired_ratio([r["seconds"] for r in t], [r["seconds"] for r in d])),
                f"{max(r['call_peak_mib'] for r in t):.0f} / {max(r['peak_mib'] for r in t):.0f} MiB",
                f"{max(r['call_peak_mib'] for r in d):.0f} / {max(r['peak_mib'] for r in d):.0f} MiB",
                f"{median([r['open_s'] for r in t]):.2f} s / {median([r['open_s'] for r in d]):.2f} s",
                target,
            ]
        )
    print(
        markdown_table(
            ["operation", "txnlog", "delta-rs", "txnlog / delta-rs", "txnlog call peak / process peak", "delta-rs call peak / process peak", "untimed open (txnlog / delta-rs)", "target"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
