"""Fixtures for transaction tests: a partitioned table whose files carry real stats JSON.

The conflict rules only look at the log, so these tests stage AddFile records directly; the
tests that need real rows (the seeds' employee scenario, interop) write Parquet.
"""

from __future__ import annotations

import itertools
import time

import orjson
import pyarrow as pa
import pytest

from txnlog import AddFile, Table

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])
_counter = itertools.count()


def make_file(region: str, lo: int, hi: int, *, data_change: bool = True) -> AddFile:
    stats = {
        "numRecords": hi - lo + 1,
        "minValues": {"id": lo, "amount": 0.0},
        "maxValues": {"id": hi, "amount": 100.0},
        "nullCount": {"id": 0, "amount": 0},
    }
    return AddFile(
        path=f"region={region}/part-{next(_counter):05d}.parquet",
        partition_values={"region": region},
        size=1000,
        modification_time=int(time.time() * 1000),
        data_change=data_change,
        stats=orjson.dumps(stats).decode(),
    )


@pytest.fixture
def table(tmp_path) -> Table:
    """Version 1 holds two files: EU ids 1..10 and US ids 11..20."""
    t = Table.create(tmp_path / "t", SCHEMA, partition_by=["region"])
    with t.transaction() as txn:
        txn.add_files([make_file("EU", 1, 10), make_file("US", 11, 20)])
    return t
