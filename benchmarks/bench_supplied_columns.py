"""Append cost with identity and generated columns against a plain append (issue 25).

    .venv/bin/python benchmarks/bench_supplied_columns.py            # 1M rows per append, 7 rounds
    .venv/bin/python benchmarks/bench_supplied_columns.py --quick    # 100k rows, 3 rounds

Three tables of the same columns (``id long, ts timestamp, day date, v long``),
each appended the same rows per round, in rotating order (``Table.append`` of one Arrow table):

- plain: a table without supplied columns, every column given by the data (built once,
  not timed);
- identity + generated: ``id`` GENERATED ALWAYS AS IDENTITY, ``day`` generated as
  ``CAST(ts AS DATE)``: the data gives ``ts`` and ``v`` only; txnlog numbers and computes the
  others, and the commit moves the high-water mark;
- generated, given: the same table kind, the data giving ``day`` too, which txnlog checks.

Goal (issue 25): identity + generated at most 1.1x the plain append.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil

import pyarrow as pa
import pyarrow.compute as pc
from _common import WORK_DIR, interleaved, log, machine_line, markdown_table, median, ms, paired_ratio, setup_logging, verdict

from txnlog import Table
from txnlog.schema import generated_column, identity_column

UTC = pa.timestamp("us", tz="UTC")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    setup_logging()
    rows, rounds = (100_000, 3) if args.quick else (1_000_000, 7)
    base = WORK_DIR / "supplied_columns"
    shutil.rmtree(base, ignore_errors=True)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    ts = pc.cast(pa.array([int(start.timestamp() * 1e6) + i * 60_000_000 for i in range(rows)], pa.int64()), UTC)
    v = pa.array(range(rows), pa.int64())
    plain_schema = pa.schema([("id", pa.int64()), ("ts", UTC), ("day", pa.date32()), ("v", pa.int64())])
    supplied_schema = pa.schema([identity_column("id"), pa.field("ts", UTC), generated_column("day", pa.date32(), "CAST(ts AS DATE)"),
                                 pa.field("v", pa.int64())])
    plain = Table.create(str(base / "plain"), schema=plain_schema)
    supplied = Table.create(str(base / "supplied"), schema=supplied_schema)
    given = Table.create(str(base / "given"), schema=supplied_schema)
    day = pc.cast(ts, pa.date32())
    # The plain table's rows are built once, outside the timing (its ids need not be unique).
    plain_rows = pa.table({"id": pa.array(range(rows), pa.int64()), "ts": ts, "day": day, "v": v})

    runners = {
        "plain": lambda: plain.append(plain_rows),
        "identity + generated": lambda: supplied.append(pa.table({"ts": ts, "v": v})),
        "generated, given": lambda: given.append(pa.table({"ts": ts, "day": day, "v": v})),
    }
    log.info("appending %d rows per append, %d rounds", rows, rounds)
    times, _ = interleaved(runners, rounds)
    print(machine_line())
    print()
    ratio = paired_ratio(times["identity + generated"], times["plain"])
    print(markdown_table(
        [f"append of {rows} rows", "median", "vs plain (paired)"],
        [[name, ms(median(t)), f"{paired_ratio(t, times['plain']):.2f}x"] for name, t in times.items()],
    ))
    print()
    print(f"identity + generated vs plain: {ratio:.2f}x (goal <= 1.1x: {verdict(ratio, 1.1)})")
    ids = supplied.snapshot().to_arrow(columns=["id"]).column("id")
    assert ids.null_count == 0 and pc.count_distinct(ids).as_py() == len(ids)  # what was measured is right


if __name__ == "__main__":
    main()
