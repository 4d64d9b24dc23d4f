"""A table with many live files (default 1M): opening it from JSON only, writing its checkpoint,
and opening it with that checkpoint. txnlog against delta-rs on identical copies of one log, with
pyarrow floors.

    .venv/bin/python benchmarks/bench_checkpoint.py                    # 100 commits x 10k adds, 5 rounds
    .venv/bin/python benchmarks/bench_checkpoint.py --quick            # 5 commits x 2k adds, 1 round
    .venv/bin/python benchmarks/bench_checkpoint.py --stats numrecords # lean stats, as in the design brief
    .venv/bin/python benchmarks/bench_checkpoint.py --stats-as-struct  # also stats_parsed

The table (50 partitions; min/max stats for 4 columns, or numRecords only) is built by writing
commit files directly (txnlog.log.codec + put_if_absent), then copied. No data files exist and
nothing here reads one.
Every measurement runs in a fresh subprocess (interpreter start and imports are not timed), and
each round runs the contenders in rotating order:

1. open from JSON only: ``txnlog.Table(path).snapshot().files()`` against
   ``pa.table(DeltaTable(path).get_add_actions())``; floor: ``pyarrow.json.read_json`` of every
   commit file;
2. checkpoint: txnlog's ``write_checkpoint(snapshot)`` on one copy, ``DeltaTable.create_checkpoint()``
   on the other, each after an untimed open; the checkpoint is deleted before every round;
3. open with a checkpoint: both readers on both writers' checkpoints; floor:
   ``pq.ParquetFile(checkpoint).read(columns=[the add fields txnlog reads])``, and the same read
   one row group at a time.

Memory is the process's peak resident set (VmHWM) during the timed call: it is reset through
``/proc/self/clear_refs`` just before the call, so it is exact (not sampled) and includes what was
resident before (reported for checkpoints as "RSS before").

Targets (design brief, section 8): open of 1M files in about 1 s and under 300 MiB; checkpoint of
1M files in under about 2.5 s, in bounded memory.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from _common import WORK_DIR, interleaved, log, machine_line, markdown_table, median, paired_ratio, ratio, setup_logging, verdict

OPEN_TARGET_S = 1.0
OPEN_TARGET_MIB = 300
CHECKPOINT_TARGET_S = 2.5

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


def build_table(
    path: str, commits: int, files_per_commit: int, partitions: int, stats_as_struct: bool = False, stats: str = "minmax"
) -> None:
    """Commits of adds with ``stats``: "minmax" (min/max/nullCount of 4 columns) or "numrecords"."""
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
                    stats=_stats(rng, n * rows_per_file, rows_per_file) if stats == "minmax" else f'{{"numRecords":{rows_per_file}}}',
                )
            )
        store.put_if_absent(commit_path(version), codec.encode_commit(actions))


# --- one measurement, in its own process ------------------------------------------------------


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _timed(call: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """``call``'s result, its seconds, and the process's peak resident memory while it ran.

    Writing 5 to clear_refs resets the peak (VmHWM) to the current resident size, so the peak
    read afterwards is exact for this call alone (no sampling), and includes what was resident
    before it (reported separately as ``rss_before_mib``).
    """
    gc.collect()
    pa.default_memory_pool().release_unused()  # freed pages the pool still holds are not "before"
    before = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    started = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - started
    return out, {"seconds": seconds, "rss_before_mib": before, "peak_mib": _status_mib("VmHWM")}


def _paths_digest(paths: pa.Array) -> str:
    """The same for two file lists exactly when they hold the same paths."""
    return hashlib.sha256("\n".join(sorted(paths.to_pylist())).encode()).hexdigest()[:16]


def _commit_files(path: str) -> list[str]:
    log_dir = os.path.join(path, "_delta_log")
    return [os.path.join(log_dir, n) for n in sorted(os.listdir(log_dir)) if n.endswith(".json") and n[:-5].isdigit()]


def _checkpoint_add_columns(checkpoint: str) -> list[str]:
    """The add fields present in ``checkpoint`` that a snapshot keeps (what txnlog reads)."""
    from txnlog.log.file_actions import ADD_LOG_FIELD_NAMES

    add = pq.ParquetFile(checkpoint).schema_arrow.field("add").type
    present = {f.name for f in add}
    return [f"add.{name}" for name in ADD_LOG_FIELD_NAMES if name in present]


def _parquet_file(path: str) -> pq.ParquetFile:
    # Opened as txnlog's LocalLogStore opens it; given a str path, pyarrow took another (and here
    # often slower) route to the same bytes, which would flatter txnlog.
    return pq.ParquetFile(pafs.LocalFileSystem().open_input_file(path))


def measure(op: str, path: str, columns: list[str]) -> dict[str, Any]:
    """One operation, timed. Only its own library is imported, before the clock starts; for
    checkpoints, the open before the call is timed apart."""
    if op == "open-txnlog":
        import txnlog

        files, result = _timed(lambda: txnlog.Table(path).snapshot().files())
    elif op == "open-deltalake":
        from deltalake import DeltaTable

        files, result = _timed(lambda: pa.table(DeltaTable(path).get_add_actions()))
    elif op == "floor-json":
        import pyarrow.json as pj

        commits = _commit_files(path)
        rows, result = _timed(lambda: sum(pj.read_json(name).num_rows for name in commits))
        return {**result, "rows": rows}
    elif op == "floor-checkpoint":
        checkpoint = _checkpoint_file(path)
        add, result = _timed(lambda: _parquet_file(checkpoint).read(columns=columns).column("add"))
        return {**result, "files": len(add) - add.null_count}
    elif op == "floor-checkpoint-row-groups":
        checkpoint = _checkpoint_file(path)

        def by_row_group() -> pa.Array:
            pf = _parquet_file(checkpoint)
            return pa.concat_tables([pf.read_row_group(i, columns=columns) for i in range(pf.num_row_groups)]).column("add")

        add, result = _timed(by_row_group)
        return {**result, "files": len(add) - add.null_count}
    elif op == "checkpoint-txnlog":
        import txnlog
        from txnlog.log.checkpoint_writer import write_checkpoint

        started = time.perf_counter()
        snapshot = txnlog.Table(path).snapshot()
        open_s = time.perf_counter() - started
        _, result = _timed(lambda: write_checkpoint(snapshot))
        return {**result, "open_s": open_s, "file_list_mib": snapshot.files().nbytes / 2**20}
    elif op == "checkpoint-deltalake":
        from deltalake import DeltaTable

        started = time.perf_counter()
        table = DeltaTable(path)
        open_s = time.perf_counter() - started
        _, result = _timed(table.create_checkpoint)
        return {**result, "open_s": open_s}
    else:
        raise SystemExit(f"unknown operation {op!r}")
    return {**result, "files": files.num_rows, "digest": _paths_digest(files.column("path"))}


# --- the parent: build, run each measurement in a fresh process, report -----------------------


def _run(op: str, path: str, columns: list[str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--op", op, "--path", path] + (["--columns", ",".join(columns)] if columns else [])
    os.sync()  # no write-back of the previous run's files (a checkpoint, say) during this one
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{op} on {path} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    log.info("%s %s: %.2fs, peak %.0f MiB", op, os.path.basename(path), result["seconds"], result["peak_mib"])
    return result


def _drop_checkpoints(path: str) -> None:
    log_dir = os.path.join(path, "_delta_log")
    for name in os.listdir(log_dir):
        if ".checkpoint." in name or name == "_last_checkpoint":
            os.unlink(os.path.join(log_dir, name))
    shutil.rmtree(os.path.join(log_dir, "_sidecars"), ignore_errors=True)


def _checkpoint_file(path: str) -> str:
    log_dir = os.path.join(path, "_delta_log")
    names = [n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet")]
    if len(names) != 1:
        raise SystemExit(f"{log_dir}: expected one classic checkpoint, found {names}")
    return os.path.join(log_dir, names[0])


def _describe_checkpoint(checkpoint: str) -> str:
    meta = pq.ParquetFile(checkpoint).metadata
    codec = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "-"
    groups = f"{meta.num_row_groups} row group{'s' if meta.num_row_groups != 1 else ''}"
    size = os.path.getsize(checkpoint) / 2**20
    return f"{size:.0f} MiB, {groups}, {codec}" if size >= 10 else f"{size:.1f} MiB, {groups}, {codec}"


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _cell(results: list[dict[str, Any]]) -> str:
    """Median time and the largest peak over the rounds."""
    return f"{_seconds(median([r['seconds'] for r in results]))}, {max(r['peak_mib'] for r in results):.0f} MiB"


def _time_ratio(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    return ratio(paired_ratio([r["seconds"] for r in a], [r["seconds"] for r in b]))


def _open_verdict(results: list[dict[str, Any]]) -> str:
    seconds = median([r["seconds"] for r in results])
    peak = max(r["peak_mib"] for r in results)
    return "met" if seconds <= OPEN_TARGET_S and peak < OPEN_TARGET_MIB else f"not met ({_seconds(seconds)}, {peak:.0f} MiB)"


def _check_files(label: str, results: list[dict[str, Any]], expected: int, digest: list[str]) -> None:
    """Every reader must list the same ``expected`` files before its speed means anything."""
    for r in results:
        if r["files"] != expected:
            raise SystemExit(f"{label}: listed {r['files']} files, expected {expected}")
        if "digest" in r:
            digest.append(r["digest"])
            if r["digest"] != digest[0]:
                raise SystemExit(f"{label}: lists different paths from the other readers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 commits x 2,000 adds, one round (a smoke run)")
    parser.add_argument("--commits", type=int, default=None, help="commits of adds (default 100)")
    parser.add_argument("--files-per-commit", type=int, default=None, help="adds per commit (default 10,000)")
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every measurement (default 5)")
    parser.add_argument(
        "--stats",
        choices=["minmax", "numrecords"],
        default="minmax",
        help="per-file stats: min/max/nullCount of 4 columns (default), or numRecords only (the design brief's table)",
    )
    parser.add_argument("--stats-as-struct", action="store_true", help="set delta.checkpoint.writeStatsAsStruct=true")
    parser.add_argument("--workdir", default=None, help=f"where to build the tables (default: a temp dir in {WORK_DIR})")
    parser.add_argument("--op", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--columns", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.op:  # child process: one measurement, answered on stdout
        print(json.dumps(measure(args.op, args.path, [c for c in args.columns.split(",") if c])))
        return
    setup_logging()
    commits = args.commits or (5 if args.quick else 100)
    per_commit = args.files_per_commit or (2_000 if args.quick else 10_000)
    rounds = args.rounds or (1 if args.quick else 5)
    expected = commits * per_commit

    WORK_DIR.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="checkpoint-", dir=args.workdir or WORK_DIR)
    try:
        ours, theirs = os.path.join(workdir, "txnlog"), os.path.join(workdir, "deltalake")
        started = time.perf_counter()
        build_table(ours, commits, per_commit, args.partitions, args.stats_as_struct, args.stats)
        shutil.copytree(ours, theirs)
        json_mib = sum(os.path.getsize(f) for f in _commit_files(ours)) / 2**20
        log.info("built %d live files in %d commits (%.0f MiB) in %.1fs", expected, commits, json_mib, time.perf_counter() - started)
        digest: list[str] = []

        # 1. Open from JSON only: every reader on the same copy.
        _, json_open = interleaved(
            {
                "txnlog": lambda: _run("open-txnlog", ours),
                "delta-rs": lambda: _run("open-deltalake", ours),
                "floor": lambda: _run("floor-json", ours),
            },
            rounds,
            warmup=0,
        )
        _check_files("open from JSON", json_open["txnlog"] + json_open["delta-rs"], expected, digest)

        # 2. Checkpoint: each writer on its own copy, from scratch every round.
        def checkpoint(op: str, path: str) -> Callable[[], dict[str, Any]]:
            def run() -> dict[str, Any]:
                _drop_checkpoints(path)
                return _run(op, path)

            return run

        _, written = interleaved(
            {"txnlog": checkpoint("checkpoint-txnlog", ours), "delta-rs": checkpoint("checkpoint-deltalake", theirs)},
            rounds,
            warmup=0,
        )
        cp_ours, cp_theirs = _checkpoint_file(ours), _checkpoint_file(theirs)
        columns = {path: _checkpoint_add_columns(_checkpoint_file(path)) for path in (ours, theirs)}

        # 3. Open with a checkpoint: both readers on both writers' checkpoints.
        _, cp_open = interleaved(
            {
                "txnlog / ours": lambda: _run("open-txnlog", ours),
                "delta-rs / ours": lambda: _run("open-deltalake", ours),
                "floor / ours": lambda: _run("floor-checkpoint", ours, columns[ours]),
                "floor by row group / ours": lambda: _run("floor-checkpoint-row-groups", ours, columns[ours]),
                "txnlog / theirs": lambda: _run("open-txnlog", theirs),
                "delta-rs / theirs": lambda: _run("open-deltalake", theirs),
                "floor / theirs": lambda: _run("floor-checkpoint", theirs, columns[theirs]),
            },
            rounds,
            warmup=0,
        )
        _check_files("open with a checkpoint", [r for rs in cp_open.values() for r in rs], expected, digest)
        described = {"ours": _describe_checkpoint(cp_ours), "theirs": _describe_checkpoint(cp_theirs)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def floor_name(path: str) -> str:
        return f"`ParquetFile.read` of {len(columns[path])} add fields"

    cases = [
        (f"from JSON only ({commits} commits, {json_mib:.0f} MiB)", "txnlog", "delta-rs", "floor", "`pyarrow.json.read_json` of every commit"),
        (f"txnlog's checkpoint ({described['ours']})", "txnlog / ours", "delta-rs / ours", "floor / ours", floor_name(ours)),
        (f"delta-rs's checkpoint ({described['theirs']})", "txnlog / theirs", "delta-rs / theirs", "floor / theirs", floor_name(theirs)),
    ]
    results = {**json_open, **cp_open}

    stats = "min/max/nullCount stats for 4 columns" if args.stats == "minmax" else "numRecords-only stats"
    print(f"### {expected:,} live files: {commits} commits x {per_commit:,} adds, {args.partitions} partitions, {stats} ({rounds} round{'s' if rounds != 1 else ''}; {machine_line()})\n")
    print("Open and list files: median time, largest peak resident memory of the process (a fresh one per run).\n")
    print(
        markdown_table(
            ["table", "txnlog", "delta-rs", "floor", "txnlog / delta-rs", "txnlog / floor", f"target (about {OPEN_TARGET_S:.0f} s, < {OPEN_TARGET_MIB} MiB)"],
            [
                [label, _cell(results[t]), _cell(results[d]), f"{_cell(results[f])} ({what})"]
                + [_time_ratio(results[t], results[d]), _time_ratio(results[t], results[f]), _open_verdict(results[t])]
                for label, t, d, f, what in cases
            ],
        )
    )
    by_group = cp_open["floor by row group / ours"]
    print(
        f"\nThe same columns of txnlog's checkpoint read one row group at a time (`read_row_group`, then concatenated): "
        f"{_cell(by_group)}; txnlog / that {_time_ratio(cp_open['txnlog / ours'], by_group)}."
    )
    resident = {name: median([r["rss_before_mib"] for r in json_open[name]]) for name in ("txnlog", "delta-rs", "floor")}
    print(
        f"\nResident before the call (interpreter and the library imported): txnlog {resident['txnlog']:.0f} MiB, "
        f"delta-rs {resident['delta-rs']:.0f} MiB, pyarrow alone {resident['floor']:.0f} MiB."
    )
    rows = []
    for name, rs, path_key in (("txnlog", written["txnlog"], "ours"), ("delta-rs", written["delta-rs"], "theirs")):
        seconds = median([r["seconds"] for r in rs])
        before = median([r["rss_before_mib"] for r in rs])
        peak = max(r["peak_mib"] for r in rs)
        target = f"{verdict(seconds, CHECKPOINT_TARGET_S)}" if name == "txnlog" else "–"
        rows.append(
            [
                name,
                _seconds(seconds),
                _seconds(median([r["open_s"] for r in rs])),
                f"{before:.0f} MiB",
                f"{peak:.0f} MiB",
                f"{max(r['peak_mib'] - r['rss_before_mib'] for r in rs):.0f} MiB",
                described[path_key],
                _time_ratio(rs, written["delta-rs"]) if name == "txnlog" else "1x",
                target,
            ]
        )
    file_list_mib = median([r["file_list_mib"] for r in written["txnlog"]])
    print(f"\nWrite a checkpoint (after an untimed open from JSON; the file list is {file_list_mib:.0f} MiB of Arrow in txnlog).\n")
    print(
        markdown_table(
            ["writer", "checkpoint (median)", "open before it", "RSS before", "peak during", "added by the call (max)", "file", "/ delta-rs", f"target (< {CHECKPOINT_TARGET_S} s)"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
