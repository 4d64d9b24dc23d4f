"""The Iceberg export ignores change data: cdc files are no table rows."""

from __future__ import annotations

import os

import pyarrow as pa

import txnlog
from txnlog.iceberg import export
from txnlog.write import WriteContext, write_change_files

from .helpers import iceberg_table, snapshots_by_delta_version


def test_change_data_files_are_not_exported(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64()), ("p", pa.string())]), partition_by=["p"],
                                properties={"delta.enableChangeDataFeed": "true"})
    table.append(pa.table({"id": [1, 2], "p": ["a", "b"]}))
    with table.transaction("UPDATE") as txn:  # rewrite p=a with its change rows
        txn.remove_files(txn.filter_files("p = 'a'"))
        txn.write(pa.table({"id": [10], "p": ["a"]}))
        rows = pa.table({"id": [1, 10], "p": ["a", "a"], "_change_type": ["update_preimage", "update_postimage"]})
        txn.add_cdc_files(write_change_files(WriteContext.for_configuration(uri, txn.table_configuration), rows))
    assert os.listdir(os.path.join(uri, "_change_data", "p=a"))
    export(uri)
    ice = iceberg_table(uri)
    snapshot_id = snapshots_by_delta_version(uri)[2]
    paths = [task.file.file_path for task in ice.scan(snapshot_id=snapshot_id).plan_files()]
    assert paths and not [p for p in paths if "/_change_data/" in p]
    assert sorted(ice.scan(snapshot_id=snapshot_id).to_arrow().column("id").to_pylist()) == [2, 10]
