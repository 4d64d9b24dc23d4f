"""Scale: tables of millions of files, each measurement in a fresh process, side by side with
delta-rs (the ``deltalake`` package) and the pyarrow floor.

    .venv/bin/python benchmarks/bench_scale.py            # 1M-file tables, 3 rounds
    .venv/bin/python benchmarks/bench_scale.py --quick    # 50k files, 1 round (a smoke run)
    .venv/bin/python benchmarks/bench_scale.py --only checkpoint,open-own

Tables (built once under ``benchmarks/_work/scale-*``, kept between runs; commit JSON written
directly, no data files):

- ``versions``: 1M live files in 10,000 versions (100 adds per commit, 50 partitions,
  numRecords stats), a checkpoint at version 9,899 and 100 commits after it: the checkpoint
  target's table (issue 6);
- ``minmax``: 1M live files in 100 commits of 10,000 adds, 50 partitions, min/max/nullCount
  stats for 4 columns: opened from txnlog's checkpoint and from delta-rs's;
- ``numrecords``: the same with numRecords-only stats (230 MB of JSON): opened from JSON only.

Measurements:

1. ``checkpoint``: txnlog's :func:`~txnlog.log.checkpoint_writer.checkpoint_from_log` (reads
   the previous checkpoint row group by row group and the commits after it; no snapshot is
   opened) against ``DeltaTable(path).create_checkpoint()``, both timed from nothing loaded;
2. ``open-json``, ``open-own``, ``open-foreign``: ``Table(path).snapshot().files()`` against
   ``pyarrow.table(DeltaTable(path).get_add_actions())`` and the floor (``pyarrow.json.read_json``
   of every commit; ``ParquetFile.read`` of the add fields txnlog reads).

Peak memory is ``VmHWM`` from ``/proc/self/status`` of the fresh process at the end: everything
it ever held, interpreter and imports included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from _common import (
    WORK_DIR,
    interleaved,
    is_built,
    log,
    machine_line,
    mark_built,
    markdown_table,
    median,
    paired_ratio,
    ratio,
    setup_logging,
)

CHECKPOINT_RATIO, CHECKPOINT_MIB = 0.3, 300
OPEN_RATIO, OPEN_MIB = 0.5, 300
JSON_RATIO, JSON_MIB = 0.5, 400


def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


# --- building ----------------------------------------------------------------------------------


def build_versions(path: str, commits: int, per_commit: int) -> None:
    """``commits`` versions of ``per_commit`` adds, a txnlog checkpoint 100 versions before the end."""
    from bench_checkpoint import build_table

    import txnlog
    from txnlog.log import codec
    from txnlog.log.actions import AddFile, CommitInfo
    from txnlog.log.checkpoint_writer import write_checkpoint
    from txnlog.log.filenames import commit_path
    from txnlog.storage import open_store

    tail = min(100, commits // 2)
    build_table(path, commits - tail, per_commit, 50, stats="numrecords")
    write_checkpoint(txnlog.Table(path).snapshot())
    store = open_store(path)
    now = int(time.time() * 1000)
    for version in range(commits - tail, commits):
        adds = [
            AddFile(
                path=f"part=p{(version * per_commit + i) % 50:03d}/late-{version}-{i}.parquet",
                partition_values={"part": f"p{(version * per_commit + i) % 50:03d}"},
                size=100_000,
                modification_time=now,
                stats='{"numRecords":1000}',
            )
            for i in range(per_commit)
        ]
        store.put_if_absent(commit_path(version), codec.encode_commit([CommitInfo(timestamp=now, operation="WRITE"), *adds]))


def build_minmax(path: str, commits: int, per_commit: int) -> None:
    """JSON-only table plus two copies: one checkpointed by txnlog, one by delta-rs."""
    from bench_checkpoint import build_table

    json_only = os.path.join(path, "json")
    build_table(json_only, commits, per_commit, 50, stats="minmax")
    for name in ("own", "foreign"):
        shutil.copytree(json_only, os.path.join(path, name))
    _child("make-checkpoint-txnlog", os.path.join(path, "own"))
    _child("make-checkpoint-deltalake", os.path.join(path, "foreign"))


def ensure(name: str, params: dict[str, Any], build: Callable[[str], None]) -> str:
    path = str(WORK_DIR / f"scale-{name}")
    if is_built(path_obj := WORK_DIR / f"scale-{name}", params):
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    started = time.perf_counter()
    build(path)
    mark_built(path_obj, params)
    log.info("built %s in %.0fs", path, time.perf_counter() - started)
    return path


# --- one measurement, in a fresh process ---------------------------------------------------------


def _checkpoint_parquet(path: str) -> str:
    log_dir = os.path.join(path, "_delta_log")
    names = sorted(n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet"))
    return os.path.join(log_dir, names[-1])


def _add_columns(checkpoint: str, *, stats: bool = False) -> list[str]:
    """The add fields txnlog reads to open a snapshot (stats stay in the checkpoint), or with them."""
    from txnlog.log.file_actions import ADD_LOG_FIELD_NAMES

    present = {f.name for f in pq.ParquetFile(checkpoint).schema_arrow.field("add").type}
    return [f"add.{n}" for n in ADD_LOG_FIELD_NAMES if n in present and (stats or n != "stats")]


def measure(op: str, path: str) -> dict[str, Any]:
    started = time.perf_counter()
    out: dict[str, Any] = {}
    if op == "checkpoint-txnlog":
        from txnlog.log.checkpoint_writer import checkpoint_from_log
        from txnlog.storage import open_store

        result = checkpoint_from_log(open_store(path))
        out["files"] = result.num_add_files
    elif op == "checkpoint-deltalake":
        from deltalake import DeltaTable

        DeltaTable(path).create_checkpoint()
    elif op == "make-checkpoint-txnlog":
        import txnlog

        txnlog.Table(path).snapshot().checkpoint()
    elif op == "make-checkpoint-deltalake":
        from deltalake import DeltaTable

        DeltaTable(path).create_checkpoint()
    elif op == "open-txnlog":
        import txnlog

        # The file list; a snapshot opened from a checkpoint leaves the stats there.
        out["files"] = txnlog.Table(path).snapshot().files(stats=False).num_rows
    elif op == "open-txnlog-stats":
        import txnlog

        out["files"] = txnlog.Table(path).snapshot().files().num_rows
    elif op == "open-deltalake":
        from deltalake import DeltaTable

        out["files"] = pa.table(DeltaTable(path).get_add_actions()).num_rows
    elif op == "floor-json":
        import pyarrow.json as pj

        log_dir = os.path.join(path, "_delta_log")
        names = sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit())
        rows = 0
        for name in names:
            rows += pj.read_json(os.path.join(log_dir, name)).num_rows
        out["rows"] = rows
    elif op in ("floor-checkpoint", "floor-checkpoint-stats"):
        checkpoint = _checkpoint_parquet(path)
        columns = _add_columns(checkpoint, stats=op == "floor-checkpoint-stats")
        add = pq.ParquetFile(pafs.LocalFileSystem().open_input_file(checkpoint)).read(columns=columns).column("add")
        out["files"] = len(add) - add.null_count
    else:
        raise SystemExit(f"unknown operation {op}")
    return {**out, "seconds": time.perf_counter() - started, "peak_mib": _peak_mib()}


def _child(op: str, path: str) -> dict[str, Any]:
    os.sync()
    proc = subprocess.run([sys.executable, __file__, "--op", op, "--path", path], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{op} on {path} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    log.info("%s %s: %.2fs, peak %.0f MiB", op, os.path.basename(path), result["seconds"], result["peak_mib"])
    return result


def _drop_checkpoint_at(path: str, version: int, hint: bytes) -> None:
    log_dir = os.path.join(path, "_delta_log")
    prefix = f"{version:020d}.checkpoint"
    for name in os.listdir(log_dir):
        if name.startswith(prefix):
            os.unlink(os.path.join(log_dir, name))
    with open(os.path.join(log_dir, "_last_checkpoint"), "wb") as f:
        f.write(hint)


def _cell(rs: list[dict[str, Any]]) -> str:
    return f"{median([r['seconds'] for r in rs]):.2f} s, {max(r['peak_mib'] for r in rs):.0f} MiB"


def _ratio(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float:
    return paired_ratio([r["seconds"] for r in a], [r["seconds"] for r in b])


def _verdict(rs: list[dict[str, Any]], peer: list[dict[str, Any]], max_ratio: float, max_mib: float) -> str:
    r, peak = _ratio(rs, peer), max(x["peak_mib"] for x in rs)
    parts = [f"time {'met' if r <= max_ratio else 'not met'}", f"memory {'met' if peak <= max_mib else 'not met'}"]
    return ", ".join(parts)


def _check(label: str, results: dict[str, list[dict[str, Any]]], expected: int) -> None:
    for name, rs in results.items():
        for r in rs:
            if "files" in r and r["files"] != expected:
                raise SystemExit(f"{label}: {name} listed {r['files']} files, expected {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--only", default="checkpoint,open-json,open-own,open-foreign")
    parser.add_argument("--op", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.op:
        print(json.dumps(measure(args.op, args.path)))
        return
    setup_logging()
    rounds = args.rounds or (1 if args.quick else 3)
    only = set(args.only.split(","))
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    v_commits, v_per = (500, 100) if args.quick else (10_000, 100)
    m_commits, m_per = (5, 10_000) if args.quick else (100, 10_000)
    print(f"### Scale ({rounds} round{'s' if rounds != 1 else ''}; {machine_line()})\n")
    rows = []

    if "checkpoint" in only:
        path = ensure(f"versions-{v_commits}x{v_per}", {"commits": v_commits, "per": v_per, "v": 1}, lambda p: build_versions(p, v_commits, v_per))
        with open(os.path.join(path, "_delta_log", "_last_checkpoint"), "rb") as f:
            hint = f.read()
        latest = v_commits - 1

        def checkpoint(op: str) -> Callable[[], dict[str, Any]]:
            def run() -> dict[str, Any]:
                _drop_checkpoint_at(path, latest, hint)
                return _child(op, path)

            return run

        _, cp = interleaved({"txnlog": checkpoint("checkpoint-txnlog"), "delta-rs": checkpoint("checkpoint-deltalake")}, rounds, warmup=0)
        _drop_checkpoint_at(path, latest, hint)
        _check("checkpoint", cp, v_commits * v_per)
        rows.append(
            [
                f"checkpoint of {v_commits * v_per:,} files in {v_commits:,} versions (from nothing loaded)",
                _cell(cp["txnlog"]),
                _cell(cp["delta-rs"]),
                "–",
                ratio(_ratio(cp["txnlog"], cp["delta-rs"])),
                f"≤ {CHECKPOINT_RATIO}x, ≤ {CHECKPOINT_MIB} MiB: {_verdict(cp['txnlog'], cp['delta-rs'], CHECKPOINT_RATIO, CHECKPOINT_MIB)}",
            ]
        )

    opens = [o for o in ("open-json", "open-own", "open-foreign") if o in only]
    if opens:
        from bench_checkpoint import build_table

        path = ensure(f"minmax-{m_commits}x{m_per}", {"commits": m_commits, "per": m_per, "v": 1}, lambda p: build_minmax(p, m_commits, m_per))
        # The JSON target's table (230 MB of commits): numRecords-only stats.
        lean = ensure(f"numrecords-{m_commits}x{m_per}", {"commits": m_commits, "per": m_per, "v": 1}, lambda p: build_table(p + "/json", m_commits, m_per, 50, stats="numrecords"))
        for which in opens:
            table = os.path.join(lean if which == "open-json" else path, {"open-json": "json", "open-own": "own", "open-foreign": "foreign"}[which])
            floor = "floor-json" if which == "open-json" else "floor-checkpoint"
            contenders = {"txnlog": lambda t=table: _child("open-txnlog", t), "delta-rs": lambda t=table: _child("open-deltalake", t), "floor": lambda t=table, f=floor: _child(f, t)}
            if which != "open-json":  # the list with every file's stats read too, and its floor
                contenders["txnlog+stats"] = lambda t=table: _child("open-txnlog-stats", t)
                contenders["floor+stats"] = lambda t=table: _child("floor-checkpoint-stats", t)
            _, res = interleaved(contenders, rounds, warmup=0)
            _check(which, res, m_commits * m_per)
            label = {
                "open-json": f"open from JSON only ({m_commits} commits)",
                "open-own": "open from txnlog's checkpoint",
                "open-foreign": "open from delta-rs's checkpoint",
            }[which]
            target = (
                f"≤ {JSON_RATIO}x, ≤ {JSON_MIB} MiB: {_verdict(res['txnlog'], res['delta-rs'], JSON_RATIO, JSON_MIB)}"
                if which == "open-json"
                else f"≤ {OPEN_RATIO}x, ≤ {OPEN_MIB} MiB: {_verdict(res['txnlog'], res['delta-rs'], OPEN_RATIO, OPEN_MIB)}"
                if which == "open-own"
                else f"≤ floor: {ratio(_ratio(res['txnlog'], res['floor']))} of the floor's time"
            )
            stats = "numRecords stats" if which == "open-json" else "min/max stats"
            list_kind = "" if which == "open-json" else " (file list, stats left in the checkpoint)"
            rows.append([f"{label}{list_kind}, {m_commits * m_per:,} files, {stats}", _cell(res["txnlog"]), _cell(res["delta-rs"]), _cell(res["floor"]), ratio(_ratio(res["txnlog"], res["delta-rs"])), target])
            if which != "open-json":
                rows.append([f"{label} (file list with every stat read), {m_commits * m_per:,} files", _cell(res["txnlog+stats"]), _cell(res["delta-rs"]), _cell(res["floor+stats"]), ratio(_ratio(res["txnlog+stats"], res["delta-rs"])), "–"])

    print(markdown_table(["measurement", "txnlog", "delta-rs", "floor", "txnlog / delta-rs", "target"], rows))


if __name__ == "__main__":
    main()
