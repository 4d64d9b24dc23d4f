"""Row-level work in Python, each against its peer, the contenders taking turns.

1. ``Snapshot.to_arrow()`` against deltalake's ``DeltaTable.to_pyarrow_table()`` on the same
   table (no deletion vectors: deltalake refuses them).
2. ``Snapshot.to_arrow()`` of a table with 10% of its rows deleted through deletion vectors,
   against reading the same rows from a table that holds only them (no vectors).
3. ``Table.merge`` of 1% of the rows (updates of existing keys, 1% of them new keys) into the
   table against deltalake's ``DeltaTable.merge`` with the same clauses; both copy-on-write, and
   txnlog's merge-on-read on a table with deletion vectors enabled as a third contender.

    .venv/bin/python benchmarks/bench_row_level.py            # 1M rows in 20 files, 5 rounds
    .venv/bin/python benchmarks/bench_row_level.py --quick    # 100k rows, 2 rounds
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (  # noqa: E402
    WORK_DIR,
    interleaved,
    log,
    machine_line,
    markdown_table,
    median,
    ms,
    paired_ratio,
    ratio,
    setup_logging,
    verdict,
)
from txnlog import Table  # noqa: E402

BASE = WORK_DIR / "row_level"
DV = {"delta.enableDeletionVectors": "true"}


def events(start: int, stop: int) -> pa.Table:
    key = np.arange(start, stop, dtype=np.int64)
    return pa.table(
        {
            "key": key,
            "user_id": key % 1000,
            "amount": (key * 7 % 10_000) / 100.0,
            "note": pa.array([f"note-{k % 97}" for k in key.tolist()], pa.string()),
        }
    )


def build(uri: Path, rows: int, files: int, properties: dict[str, str] | None = None, keep: Callable[[pa.Table], pa.Table] | None = None) -> Table:
    """``rows`` rows appended in key order as ``files`` files (one append each)."""
    shutil.rmtree(uri, ignore_errors=True)
    table = Table.create(str(uri), events(0, 1).schema, properties=properties)
    step = rows // files
    for start in range(0, rows, step):
        chunk = events(start, min(rows, start + step))
        table.append(keep(chunk) if keep is not None else chunk)
    return table


def copies(source: Path | str, n: int, name: str, base: Path = BASE) -> Iterator[str]:
    """``n`` fresh copies of the table at ``source`` under ``base``, made before timing starts."""
    made = []
    for i in range(n):
        target = base / f"{name}-{i}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        made.append(str(target))
    return iter(made)


def bench_read(rows: int, files: int, rounds: int) -> list[str]:
    import deltalake

    plain = build(BASE / "plain", rows, files)
    deleted = build(BASE / "deleted", rows, files, DV)
    deleted.delete("key % 10 = 3")
    survivors = build(BASE / "survivors", rows, files, keep=lambda t: t.filter(pa.array(t["key"].to_numpy() % 10 != 3)))
    assert deleted.snapshot().to_arrow().num_rows == survivors.snapshot().to_arrow().num_rows == rows - rows // 10
    times, _ = interleaved(
        {
            "to_arrow": lambda: Table(str(BASE / "plain")).snapshot().to_arrow(),
            "deltalake": lambda: deltalake.DeltaTable(str(BASE / "plain")).to_pyarrow_table(),
            "to_arrow_dv": lambda: Table(str(BASE / "deleted")).snapshot().to_arrow(),
            "to_arrow_survivors": lambda: Table(str(BASE / "survivors")).snapshot().to_arrow(),
        },
        rounds,
    )
    vs_deltalake = paired_ratio(times["to_arrow"], times["deltalake"])
    vs_plain = paired_ratio(times["to_arrow_dv"], times["to_arrow_survivors"])
    del plain
    return [
        f"### Reading {rows:,} rows ({files} files) in Python",
        "",
        markdown_table(
            ["what", "txnlog", "peer", "ratio", "target"],
            [
                ["`Snapshot.to_arrow()` vs deltalake `to_pyarrow_table()`, no vectors", ms(median(times["to_arrow"])), ms(median(times["deltalake"])), ratio(vs_deltalake), f"≤ 1.0x: {verdict(vs_deltalake, 1.0)}"],
                ["`to_arrow()`, 10% deleted by vectors vs the same rows without vectors", ms(median(times["to_arrow_dv"])), ms(median(times["to_arrow_survivors"])), ratio(vs_plain), f"≤ 1.3x: {verdict(vs_plain, 1.3)}"],
            ],
        ),
    ]


def merge_source(rows: int) -> pa.Table:
    """1% of ``rows``, spread over every file: updates of existing keys, and 1% of them new keys."""
    n = rows // 100
    keys = np.arange(0, n, dtype=np.int64) * 100 + 37
    keys[: n // 100] = rows + np.arange(n // 100)
    source = events(0, 0).schema.empty_table()
    return pa.table({"key": keys, "user_id": keys % 1000, "amount": np.full(n, -1.0), "note": pa.array(["merged"] * n)}, schema=source.schema)


def txnlog_merge(uri: str, source: pa.Table) -> Any:
    return Table(uri).merge(source, on="key", when_matched_update="*", when_not_matched_insert="*")


def deltalake_merge(uri: str, source: pa.Table) -> Any:
    import deltalake

    return (
        deltalake.DeltaTable(uri)
        .merge(source, predicate="t.key = s.key", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def bench_merge(rows: int, files: int, rounds: int) -> list[str]:
    source = merge_source(rows)
    build(BASE / "merge-cow", rows, files)
    build(BASE / "merge-dv", rows, files, DV)
    n = rounds + 1  # the warm-up round takes a copy too
    cow_txnlog = copies(BASE / "merge-cow", n, "cow-txnlog")
    cow_deltalake = copies(BASE / "merge-cow", n, "cow-deltalake")
    dv_txnlog = copies(BASE / "merge-dv", n, "dv-txnlog")
    times, _ = interleaved(
        {
            "txnlog": lambda: txnlog_merge(next(cow_txnlog), source),
            "deltalake": lambda: deltalake_merge(next(cow_deltalake), source),
            "txnlog_dv": lambda: txnlog_merge(next(dv_txnlog), source),
        },
        rounds,
    )
    expected = rows + rows // 100 // 100
    for i in range(n):
        for name in ("cow-txnlog", "dv-txnlog"):
            got = Table(str(BASE / f"{name}-{i}")).snapshot().to_arrow(columns=["key"]).num_rows
            assert got == expected, (name, i, got, expected)
    cow = paired_ratio(times["txnlog"], times["deltalake"])
    dv = paired_ratio(times["txnlog_dv"], times["deltalake"])
    return [
        f"### `Table.merge` of 1% of {rows:,} rows ({files} files, keys in every file) vs deltalake's `merge`",
        "",
        markdown_table(
            ["txnlog", "time", "deltalake", "ratio", "target"],
            [
                ["copy-on-write", ms(median(times["txnlog"])), ms(median(times["deltalake"])), ratio(cow), f"≤ 0.5x: {verdict(cow, 0.5)}"],
                ["deletion vectors", ms(median(times["txnlog_dv"])), ms(median(times["deltalake"])), ratio(dv), f"≤ 0.5x: {verdict(dv, 0.5)}"],
            ],
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 100_000, 2
    setup_logging()
    started = time.monotonic()
    try:
        out = [machine_line(), ""]
        out += bench_read(args.rows, args.files, args.rounds)
        out += [""]
        out += bench_merge(args.rows, args.files, args.rounds)
        out += ["", f"{time.monotonic() - started:.0f} s in all"]
        print("\n".join(out))
        log.info("done")
    finally:
        shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
