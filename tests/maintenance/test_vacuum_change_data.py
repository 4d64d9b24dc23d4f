"""VACUUM and change data files: kept while their commit is in the log or younger than the
retention, deleted like data files once neither holds (Delta vacuums ``_change_data/`` too)."""

from __future__ import annotations

import os
import time

import pyarrow as pa

import txnlog
from txnlog.log import write_checkpoint
from txnlog.maintenance import vacuum
from txnlog.write import WriteContext, write_change_files


def _age(path: str, days: float) -> None:
    stamp = time.time() - days * 86_400
    os.utime(path, (stamp, stamp))


def test_change_files_go_only_when_old_and_their_commit_is_gone(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64()), ("p", pa.string())]), partition_by=["p"],
                                properties={"delta.enableChangeDataFeed": "true"})
    table.append(pa.table({"id": [1, 2], "p": ["a", "b"]}))  # v1
    rows = pa.table({"id": [1], "p": ["a"], "_change_type": ["delete"]})
    cdc = []
    for _ in range(2):  # v2, v3: each with one change file
        with table.transaction("DELETE") as txn:
            written = write_change_files(WriteContext.for_snapshot(table.snapshot()), rows)
            txn.add_cdc_files(written)
        cdc.append(os.path.join(uri, written[0].path))
    orphan = os.path.join(uri, "_change_data", "p=a", "cdc-orphan.parquet")
    os.rename(cdc[0], orphan)  # an aborted write's change file: no commit names it
    with open(cdc[0], "wb") as f:  # the committed one stays
        f.write(open(orphan, "rb").read())
    young_orphan = os.path.join(uri, "_change_data", "p=b", "cdc-young.parquet")
    os.makedirs(os.path.dirname(young_orphan), exist_ok=True)
    open(young_orphan, "wb").write(b"x")
    for path in (*cdc, orphan):
        _age(path, 30)

    result = vacuum(table)
    assert [f for f in result.files if f.startswith("_change_data/")] == ["_change_data/p=a/cdc-orphan.parquet"]
    assert all(os.path.exists(p) for p in (*cdc, young_orphan))

    # The commits of v2 go (checkpoint at 3, JSON of 0-2 removed): v2's change file is unreferenced.
    write_checkpoint(table.store, table.snapshot(3).state)
    for v in range(3):
        os.remove(os.path.join(uri, "_delta_log", f"{v:020d}.json"))
    result = vacuum(table)
    assert [f for f in result.files if f.startswith("_change_data/")] == [os.path.relpath(cdc[0], uri)]
    assert os.path.exists(cdc[1]) and os.path.exists(young_orphan)
    assert table.changes(3).column("_change_type").to_pylist() == ["delete"]
