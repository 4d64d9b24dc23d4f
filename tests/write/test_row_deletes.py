"""delete_rows: rows of data files marked deleted through deletion vectors, as file actions."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txnlog
from txnlog.errors import UnsupportedFeatureError
from txnlog.write.deletion_vectors import delete_rows

pytest.importorskip("pyroaring")

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _table(path: Path, dv: bool = True) -> txnlog.Table:
    props = {"delta.enableDeletionVectors": "true"} if dv else None
    table = txnlog.Table.create(str(path), SCHEMA, partition_by=["p"], properties=props)
    table.append(pa.table({"id": list(range(100)), "p": ["a" if i % 2 else "b" for i in range(100)]}))
    return table


def _delete(table: txnlog.Table, keep: callable) -> txnlog.write.deletion_vectors.RowDeletes:  # type: ignore[valid-type]
    snapshot = table.snapshot()
    files, ctx = snapshot.files(), snapshot.read_context()
    positions = []
    for i in range(files.num_rows):
        rows = ctx.read(files.slice(i, 1), columns=["id"], row_index="__pos")
        gone = pa.array([not keep(v) for v in rows["id"].to_pylist()], pa.bool_())
        positions.append(rows.filter(gone)["__pos"].combine_chunks())
    deletes = delete_rows(table.store, files, positions, ctx.deleted_rows(files))
    with table.transaction("DELETE") as txn:
        txn.remove_files(deletes.removed)
        txn.add_files(deletes.added)
    return deletes


def test_row_index_counts_physical_positions_past_deleted_rows(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    _delete(table, lambda v: v % 5 != 0)
    snapshot = table.snapshot()
    files = snapshot.files()
    for i in range(files.num_rows):
        rows = snapshot.read_context().read(files.slice(i, 1), columns=["id"], row_index="__pos")
        positions = rows["__pos"].to_pylist()
        # Rows are written in id order per partition, so position = id // 2 and deleted ones are skipped.
        assert positions == [v // 2 for v in rows["id"].to_pylist()]
        assert all(v % 5 for v in rows["id"].to_pylist())


def test_successive_deletes_union_and_keep_exact_record_counts(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    first = _delete(table, lambda v: v % 5 != 0)
    second = _delete(table, lambda v: v % 3 != 0)
    assert first.deleted_rows == 20 and first.vectors_added == 2 and first.vectors_updated == 0
    # Rows deleted by the first vector and matched again are not counted twice.
    assert second.deleted_rows == len([v for v in range(100) if v % 3 == 0 and v % 5 != 0])
    assert second.vectors_updated == 2 and second.vectors_added == 0
    files = table.snapshot().files()
    for row in files.to_pylist():
        parsed = orjson.loads(row["stats"])
        assert parsed["numRecords"] == 50 and parsed["tightBounds"] is False
        parity = 1 if row["partition_values"] == [("p", "a")] else 0
        gone = [v for v in range(100) if v % 2 == parity and (v % 5 == 0 or v % 3 == 0)]
        assert row["deletion_vector"]["cardinality"] == len(gone)
    ids = sorted(table.snapshot().to_arrow()["id"].to_pylist())
    assert ids == [v for v in range(100) if v % 5 and v % 3]


def test_a_file_with_every_row_deleted_is_removed_without_a_vector(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    deletes = _delete(table, lambda v: v % 2 == 0)  # every row of partition a (odd ids)
    assert deletes.added.num_rows == 0 and deletes.removed.num_rows == 1
    files = table.snapshot().files()
    assert files.num_rows == 1 and files.column("deletion_vector").null_count == 1
    assert sorted(table.snapshot().to_arrow()["id"].to_pylist()) == list(range(0, 100, 2))


def test_nothing_new_to_delete_stages_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    _delete(table, lambda v: v % 5 != 0)
    again = _delete(table, lambda v: v % 5 != 0)
    assert again.removed.num_rows == 0 and again.added.num_rows == 0 and again.deleted_rows == 0


def test_tight_bounds_set_without_reencoding_other_values(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = {r["path"]: r["stats"] for r in table.snapshot().files().select(["path", "stats"]).to_pylist()}
    _delete(table, lambda v: v != 7)
    after = table.snapshot().files()
    changed = after.filter(after.column("deletion_vector").is_valid()).to_pylist()
    assert len(changed) == 1
    old = before[changed[0]["path"]]
    assert changed[0]["stats"] == old.replace("{", '{"tightBounds":false,', 1)


def test_an_add_with_a_vector_is_refused_on_a_table_without_the_feature(tmp_path: Path) -> None:
    dv_table = _table(tmp_path / "dv")
    _delete(dv_table, lambda v: v != 3)
    with_dv = dv_table.snapshot().files()
    with_dv = with_dv.filter(with_dv.column("deletion_vector").is_valid())
    plain = _table(tmp_path / "plain", dv=False)
    version = plain.latest_version()
    with pytest.raises(UnsupportedFeatureError, match="does not support deletion vectors") as info:
        with plain.transaction() as txn:
            txn.add_files(with_dv)
    assert "delta.enableDeletionVectors" in str(info.value)
    assert plain.latest_version() == version
    assert pc.sum(plain.snapshot().files()["size"]).as_py() > 0


def test_reading_no_columns_counts_live_rows(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    _delete(table, lambda v: v % 4 != 0)
    snapshot = table.snapshot()
    assert snapshot.read_context().read(snapshot.files(), columns=[]).num_rows == 75
