"""Iceberg export cost: incremental export per commit vs a full rebuild vs the Delta commit itself.

Tables of N live files (10,000 and 100, to show the per-commit cost does not grow with N) are
built from add actions with stats (the export reads only the log and its own metadata, never
the data files). Then, interleaved, per round:

- ``commit``: a one-file append on a table without the hook;
- ``commit+hook``: the same append on a table with ``txnlog.iceberg.export.enabled=true``;
- ``commit+async``: the same with ``txnlog.iceberg.export.async=true`` too (the export runs in a
  background thread; the round waits for it, untimed, so it never overlaps the next step);
- ``export``: an incremental export of one new commit (appended without the hook);
- ``rebuild``: ``export(full=True)`` of the whole table.

Usage: python benchmarks/bench_iceberg.py [--files 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import orjson
import pyarrow as pa

import txnlog
from txnlog.iceberg import export, wait_for_exports
from txnlog.log.actions import AddFile

WORK = Path(__file__).resolve().parent / "_work" / "iceberg"
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _adds(n: int) -> list[AddFile]:
    out = []
    for i in range(n):
        stats = {"numRecords": 10, "minValues": {"id": i * 10}, "maxValues": {"id": i * 10 + 9}, "nullCount": {"id": 0}}
        out.append(AddFile(path=f"part={i % 50}/f-{i:06d}.parquet", partition_values={"part": str(i % 50)}, size=1000, modification_time=0, stats=orjson.dumps(stats).decode()))
    return out


def _table(name: str, files: int, hook: bool, background: bool = False) -> txnlog.Table:
    uri = WORK / name
    shutil.rmtree(uri, ignore_errors=True)
    props = {"txnlog.iceberg.export.enabled": "true"} if hook else {}
    if background:
        props["txnlog.iceberg.export.async"] = "true"
    table = txnlog.Table.create(str(uri), SCHEMA, partition_by=["part"], properties=props)
    with table.transaction("WRITE") as txn:
        txn.add_files(_adds(files))
    export(table)  # the first export (a rebuild) is not what is measured
    return table


def snapshots(table: txnlog.Table) -> list[int]:
    from pyiceberg.table import StaticTable

    meta = StaticTable.from_metadata(table.uri).metadata
    return [int(s.summary.additional_properties["txnlog.delta.version"]) for s in meta.snapshots if s.summary is not None]


def _append(table: txnlog.Table, i: int) -> None:
    table.append(pa.table({"id": [i], "part": ["0"]}, schema=SCHEMA))


def run(files: int, rounds: int) -> dict[str, float]:
    plain = _table(f"plain-{files}", files, hook=False)
    hooked = _table(f"hooked-{files}", files, hook=True)
    background = _table(f"async-{files}", files, hook=True, background=True)
    exported = _table(f"exported-{files}", files, hook=False)
    times: dict[str, list[float]] = {"commit": [], "commit+hook": [], "commit+async": [], "export": [], "rebuild": []}
    for r in range(rounds + 1):
        _append(exported, r)  # untimed: gives the export one new commit
        steps = [
            ("commit", lambda r=r: _append(plain, r)),
            ("commit+hook", lambda r=r: _append(hooked, r)),
            ("commit+async", lambda r=r: _append(background, r)),
            ("export", lambda: export(exported)),
            ("rebuild", lambda: export(plain, full=True)),
        ]
        steps = steps[r % len(steps) :] + steps[: r % len(steps)]  # rotate: machine drift hits every step alike
        for name, fn in steps:
            t0 = time.perf_counter()
            fn()
            if r:  # round 0 warms caches
                times[name].append(time.perf_counter() - t0)
            wait_for_exports(background)  # untimed
    assert sorted(snapshots(background)) == list(range(background.latest_version() + 1)), "async export missed a commit"
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print("| live files | commit | commit+hook | hook / commit | commit+async hook | async / commit | incremental export | full rebuild | rebuild / incremental |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in (100, args.files):
        m = run(n, args.rounds)
        print(
            f"| {n:,} | {m['commit'] * 1000:.1f} ms | {m['commit+hook'] * 1000:.1f} ms | {m['commit+hook'] / m['commit']:.2f}x "
            f"| {m['commit+async'] * 1000:.1f} ms | {m['commit+async'] / m['commit']:.2f}x "
            f"| {m['export'] * 1000:.0f} ms | {m['rebuild'] * 1000:.0f} ms | {m['rebuild'] / m['export']:.1f}x |"
        )


if __name__ == "__main__":
    main()
