"""A table of millions of live files (10M by default) with a V2 checkpoint and sidecars: open,
list with a predicate, commit one append, write a checkpoint, each in a fresh process with its
peak memory (VmHWM from /proc/self/status). A soak-size benchmark, not part of ``run_all.py``.

    .venv/bin/python benchmarks/bench_scale_10m.py                    # 10M files
    .venv/bin/python benchmarks/bench_scale_10m.py --files 200000     # a smaller check

Built by writing commits of 10,000 adds directly (no data files; numRecords stats, 50
partitions, the ``v2Checkpoint`` feature) and checkpointing every ``--checkpoint-every``
commits with ``checkpoint_from_log``, each checkpoint streamed from the one before: building
never holds the file list. Commits do not checkpoint by themselves (a huge checkpointInterval),
so the measured checkpoint is the one after the append. The table is kept under benchmarks/_work/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from _common import WORK_DIR, is_built, log, machine_line, mark_built, markdown_table, setup_logging

PER_COMMIT = 10_000


def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def build(path: str, files: int, checkpoint_every: int) -> None:
    from bench_checkpoint import SCHEMA

    from txnlog.log import codec
    from txnlog.log.actions import AddFile, CommitInfo, Metadata, Protocol
    from txnlog.log.checkpoint_writer import checkpoint_from_log
    from txnlog.log.filenames import commit_path
    from txnlog.storage import open_store

    store = open_store(path)
    now = int(time.time() * 1000)
    commits = max(files // PER_COMMIT, 1)
    for version in range(commits):
        actions: list[Any] = [CommitInfo(timestamp=now, operation="WRITE")]
        if version == 0:
            actions += [
                Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",)),
                Metadata(id=str(uuid.UUID(int=7)), schema_string=json.dumps(SCHEMA), partition_columns=("part",), configuration={"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "1000000"}, created_time=now),
            ]
        for i in range(PER_COMMIT):
            n = version * PER_COMMIT + i
            part = f"p{n % 50:03d}"
            actions.append(AddFile(path=f"part={part}/f-{version:06d}-{i:05d}.parquet", partition_values={"part": part}, size=100_000 + n % 1000, modification_time=now, stats='{"numRecords":1000}'))
        store.put_if_absent(commit_path(version), codec.encode_commit(actions))
        if (version + 1) % checkpoint_every == 0 or version == commits - 1:
            checkpoint_from_log(store, version)
            log.info("built %d files, checkpointed at %d", (version + 1) * PER_COMMIT, version)


def measure(op: str, path: str) -> dict[str, Any]:
    import txnlog

    started = time.perf_counter()
    out: dict[str, Any] = {}
    if op == "open":
        out["files"] = txnlog.Table(path).snapshot().num_files
    elif op == "list":
        out["files"] = txnlog.Table(path).snapshot().files("part = 'p007'").num_rows
    elif op == "append":
        import datetime as dt

        import pyarrow as pa

        row = pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "value": pa.array([0.5]),
                "name": pa.array(["x"]),
                "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC")),
                "part": pa.array(["p007"]),
            }
        )
        result = txnlog.Table(path).append(row)
        out["version"] = result.version if result is not None else None
    elif op == "checkpoint":
        from txnlog.log.checkpoint_writer import checkpoint_from_log
        from txnlog.storage import open_store

        out["files"] = checkpoint_from_log(open_store(path)).num_add_files
    else:
        raise SystemExit(f"unknown operation {op}")
    return {**out, "seconds": time.perf_counter() - started, "peak_mib": _peak_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000_000)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--op", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.op:
        print(json.dumps(measure(args.op, args.path)))
        return
    setup_logging()
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    path = WORK_DIR / f"scale-v2-{args.files}"
    params = {"files": args.files, "every": args.checkpoint_every, "v": 2}
    if not is_built(path, params):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        started = time.perf_counter()
        build(str(path), args.files, args.checkpoint_every)
        mark_built(path, params)
        log.info("built in %.0fs", time.perf_counter() - started)
    rows = []
    for op, what in (
        ("open", "open (Table(path).snapshot())"),
        ("list", "list with a predicate (part = 'p007')"),
        ("append", "commit one append (a 1-row Parquet file)"),
        ("checkpoint", "write a checkpoint (checkpoint_from_log, V2 with sidecars)"),
    ):
        os.sync()
        proc = subprocess.run([sys.executable, __file__, "--op", op, "--path", str(path)], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{op} failed:\n{proc.stderr[-3000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        log.info("%s: %.2fs, peak %.0f MiB", op, r["seconds"], r["peak_mib"])
        detail = f"{r['files']:,} files" if "files" in r else f"version {r.get('version')}"
        rows.append([what, f"{r['seconds']:.2f} s", f"{r['peak_mib']:.0f} MiB", detail])
    print(f"### {args.files:,} live files, V2 checkpoint with sidecars ({machine_line()})\n")
    print(markdown_table(["operation (fresh process)", "time", "peak memory", "result"], rows))


if __name__ == "__main__":
    main()
