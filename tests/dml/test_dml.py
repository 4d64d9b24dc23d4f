"""Table.delete/update/merge and txnlog.dml: deletion vectors delta-spark wrote are unioned, an
ambiguous MERGE writes nothing, commitInfo carries the predicate and delta-spark's metrics,
concurrent commits conflict as the Spark versions do, and errors name what is wrong."""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import txnlog
from tests.dml.conftest import duckdb_rows, sorted_rows, table_rows
from txnlog import dml
from txnlog.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteReadError,
    DuplicateMatchError,
    InvalidArgumentError,
    InvalidPredicateError,
    TxnLogError,
)

pytest.importorskip("pyroaring")

SCHEMA = pa.schema([("part", pa.string()), ("id", pa.int64()), ("v", pa.int32()), ("name", pa.string())])


def _rows(ids: range | list[int], part: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"part": [part] * len(ids), "id": ids, "v": [i * 10 for i in ids], "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def _table(tmp_path: Path, *, dv: bool, partition_by: tuple[str, ...] = ()) -> txnlog.Table:
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA, partition_by=partition_by,
                                properties={"delta.enableDeletionVectors": "true" if dv else "false"})
    table.append(_rows(range(0, 10)))
    table.append(_rows(range(10, 20), "b"))
    return table


def _ids(table: txnlog.Table) -> list[int]:
    return sorted(table.snapshot().to_arrow(["id"]).column("id").to_pylist())


def _metrics(table: txnlog.Table) -> dict[str, int]:
    return {k: int(v) for k, v in table.history(1)[0].commit_info.operation_metrics.items()}


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- corpus tables with deletion vectors written by delta-spark --------------------------------


def _corpus_copy(conformance_dir: Path, name: str, tmp_path: Path) -> txnlog.Table:
    target = tmp_path / name
    shutil.copytree(conformance_dir / "tables" / name, target)
    return txnlog.Table(str(target))


def test_dml_on_a_delta_spark_table_unions_its_deletion_vectors(conformance_dir: Path, tmp_path: Path) -> None:
    table = _corpus_copy(conformance_dir, "table-with-dv-small", tmp_path)
    before = sorted(table.snapshot().to_arrow().column("value").to_pylist())
    assert before == [1, 2, 3, 4, 5, 6, 7, 8]  # delta-spark's vector hides 0 and 9

    assert table.delete("value = 5") is not None
    files = table.snapshot().files()
    assert files.num_rows == 1 and files.column("deletion_vector")[0]["cardinality"].as_py() == 3  # {0, 9} + the new row
    assert _metrics(table)["numDeletionVectorsUpdated"] == 1 and _metrics(table)["numDeletedRows"] == 1

    table.update("value > 6", {"value": "value * 100"})
    table.merge(pa.table({"value": pa.array([1, 42], pa.int32())}), "value", when_matched_delete=True, when_not_matched_insert="*")
    expected = [2, 3, 4, 6, 42, 700, 800]
    assert sorted(table.snapshot().to_arrow().column("value").to_pylist()) == expected  # 0 and 9 stay deleted
    assert sorted(r[0] for r in duckdb_rows(table.uri, ["value"])) == expected


def test_delete_on_the_corpus_deletion_log_table_keeps_its_deleted_rows(conformance_dir: Path, tmp_path: Path) -> None:
    table = _corpus_copy(conformance_dir, "table_with_deletion_logs", tmp_path)
    snapshot = table.snapshot()
    old_deleted = snapshot.read_context().deleted_rows(snapshot.files())[0]
    assert old_deleted is not None
    rows = snapshot.to_arrow()
    victims = sorted(rows.column("id").to_pylist())[:3]
    table.delete(f"id IN ({', '.join(map(str, victims))})")
    after = table.snapshot()
    new_deleted = set(after.read_context().deleted_rows(after.files())[0].to_pylist())
    assert set(old_deleted.to_pylist()) < new_deleted and len(new_deleted) == len(old_deleted) + 3
    expected = table_rows(rows.filter(pa.compute.invert(pa.compute.is_in(rows.column("id"), pa.array(victims)))), ["id", "name"])
    assert table_rows(after.to_arrow(), ["id", "name"]) == expected
    assert sorted_rows(duckdb_rows(table.uri, ["id", "name"])) == expected


# --- MERGE: ambiguity, semantics ---------------------------------------------------------------


@pytest.mark.parametrize("dv", [False, True], ids=["cow", "dv"])
def test_a_target_row_matched_twice_is_refused_before_anything_is_written(tmp_path: Path, dv: bool) -> None:
    table = _table(tmp_path, dv=dv)
    root = tmp_path / "t"
    before, version = _listing(root), table.latest_version()
    source = pa.table({"id": [3, 3, 15], "v": [1, 2, 3]})
    with pytest.raises(DuplicateMatchError) as err:
        table.merge(source, "id", when_matched_update={"v": "s.v"}, when_not_matched_insert="*")
    assert err.value.key == {"id": 3} and err.value.source_rows == 2 and str(root) in err.value.uri
    assert _listing(root) == before and table.latest_version() == version  # no data file, no vector file
    # Inserts alone may take several source rows with one key: nothing is matched.
    assert table.merge(source.filter(pa.compute.equal(source.column("id"), 3)), "id", when_not_matched_insert="*") is None


@pytest.mark.parametrize("dv", [False, True], ids=["cow", "dv"])
def test_merge_conditions_and_null_semantics(tmp_path: Path, dv: bool) -> None:
    table = _table(tmp_path, dv=dv)
    source = pa.table({"id": [1, 2, 3, None, 50], "v": [5, None, 7, 8, 9], "op": ["U", "D", None, "U", "U"]})
    table.merge(
        source, on="t.id = s.id AND s.op IS NOT NULL",
        when_matched_update={"v": "t.v + coalesce(s.v, 0)", "name": "upper(t.name) || '-' || CAST(s.v AS STRING)"},
        when_matched_delete="s.op = 'D'",
        when_not_matched_insert={"id": "coalesce(s.id, -1)", "v": "s.v", "part": "'new'"},
    )
    rows = table.snapshot().to_arrow().to_pylist()
    got = {r["id"]: r for r in rows if r["part"] != "new"}
    assert got[1]["v"] == 15 and got[1]["name"] == "N1-5"  # updated
    assert 2 not in got  # deleted
    assert got[3]["v"] == 30 and got[3]["name"] == "n3"  # the NULL op does not match: left alone...
    # ... and its source row is inserted, as are the NULL key and the new key.
    inserted = sorted((r["id"], r["v"], r["name"]) for r in rows if r["part"] == "new")
    assert inserted == [(-1, 8, None), (3, 7, None), (50, 9, None)]
    metrics = _metrics(table)
    assert metrics["numSourceRows"] == 5 and metrics["numTargetRowsUpdated"] == 1 and metrics["numTargetRowsDeleted"] == 1
    assert metrics["numTargetRowsInserted"] == 3
    params = table.history(1)[0].commit_info.operation_parameters
    assert json.loads(params["predicate"]) == ["t.id = s.id AND s.op IS NOT NULL"]
    assert json.loads(params["matchedPredicates"]) == [{"predicate": "s.op = 'D'", "actionType": "delete"}, {"actionType": "update"}]
    if dv:
        assert metrics["numTargetDeletionVectorsAdded"] == 1 and metrics["numTargetRowsCopied"] == 0 and metrics["numTargetFilesRemoved"] == 0
    else:
        assert metrics["numTargetFilesRemoved"] == 1 and metrics["numTargetRowsCopied"] == 8


def test_merge_prunes_target_files_by_the_source_key_range(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=True)
    with table.transaction("MERGE") as txn:
        metrics = dml.merge(txn, pa.table({"id": [12, 14], "v": [1, 2]}), "id", when_matched_update={"v": "s.v"})
        assert [str(p) for p in txn.read_predicates] == ["FilePredicate('`id` >= 12 AND `id` <= 14')"]
    assert _ids(table) == list(range(20))
    assert metrics.files.vectors.added == 1  # the file of ids 10..19 only


@pytest.mark.parametrize("dv", [True, False], ids=["dv", "cow"])
def test_merge_reads_no_file_whose_bounds_hold_none_of_the_keys(tmp_path: Path, dv: bool) -> None:
    table = _table(tmp_path, dv=dv)
    table.append(_rows(range(20, 30), "c"))
    # Keys 3 and 25: the range [3, 25] covers the file of ids 10..19, whose bounds hold neither.
    middle = [f["path"] for f in table.snapshot().files().to_pylist() if json.loads(f["stats"])["minValues"]["id"] == 10]
    os.remove(tmp_path / "t" / middle[0])  # read, it would fail the MERGE
    table.merge(pa.table({"id": [3, 25], "v": [7, 8]}), "id", when_matched_update={"v": "s.v"})
    version = table.snapshot()
    assert middle[0] in version.files().column("path").to_pylist()
    readable = version.files().filter(pa.compute.not_equal(version.files().column("path"), middle[0]))
    rows = version.read_context().read(readable, columns=["id", "v"]).to_pylist()
    assert {r["id"]: r["v"] for r in rows} == {i: {3: 7, 25: 8}.get(i, i * 10) for i in [*range(10), *range(20, 30)]}


@pytest.mark.parametrize("key_type", [pa.int16(), pa.int64(), pa.date32(), pa.string()], ids=str)
@pytest.mark.parametrize("dv", [True, False], ids=["dv", "cow"])
def test_merge_looks_keys_up_in_each_file_whatever_their_order_and_nulls(tmp_path: Path, key_type: pa.DataType, dv: bool) -> None:
    def key(i: int) -> object:
        return datetime.date(2000, 1, 1) + datetime.timedelta(days=i) if pa.types.is_date(key_type) else (f"k{i:03}" if pa.types.is_string(key_type) else i)

    properties = {"delta.enableDeletionVectors": "true"} if dv else {}
    table = txnlog.Table.create(str(tmp_path / "t"), pa.schema({"k": key_type, "v": pa.int64()}), properties=properties)
    table.append(pa.table({"k": pa.array([key(i) for i in (-5, 3, 9)] + [None], key_type), "v": [1, 2, 3, 4]}))
    table.append(pa.table({"k": pa.array([key(i) for i in (40, 20, 30)], key_type), "v": [5, 6, 7]}))
    # Unsorted source keys: some in each file's range, some between, before and after them all.
    source_keys = [30, -9, 9, 25, 3, 100, -5]
    table.merge(pa.table({"k": pa.array([key(i) for i in source_keys], key_type), "v": [10 * i for i in source_keys]}), "k",
                when_matched_update="*", when_not_matched_insert="*")
    got = sorted(((r["k"] is None, r["k"]), r["v"]) for r in table.snapshot().to_arrow().to_pylist())
    old = {key(i): v for i, v in ((-5, 1), (3, 2), (9, 3), (40, 5), (20, 6), (30, 7))}
    expected = {**old, **{key(i): 10 * i for i in source_keys}}
    assert got == sorted([((False, k), v) for k, v in expected.items()] + [((True, None), 4)])


def test_copy_on_write_merge_replaces_each_matched_file_by_one_and_leaves_no_file_when_it_fails(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=False)
    table.append(_rows(range(20, 30), "c"))
    root = tmp_path / "t"
    before, version = _listing(root), table.latest_version()
    # The files of ids 0..9 and 20..29 are rewritten at once; the second cannot take its value.
    with pytest.raises(InvalidArgumentError, match="cannot be cast"):
        table.merge(pa.table({"id": [3, 25], "v": ["7", "x"]}), "id", when_matched_update={"v": "s.v"})
    assert _listing(root) == before and table.latest_version() == version
    untouched = [f["path"] for f in table.snapshot().files().to_pylist() if json.loads(f["stats"])["minValues"]["id"] == 10]
    table.merge(pa.table({"id": [3, 25], "v": [7, 8]}), "id", when_matched_update={"v": "s.v"})
    metrics = _metrics(table)
    assert (metrics["numTargetFilesRemoved"], metrics["numTargetFilesAdded"], metrics["numTargetRowsCopied"]) == (2, 2, 18)
    files = table.snapshot().files()
    assert len(untouched) == 1 and untouched[0] in files.column("path").to_pylist() and files.num_rows == 3
    assert sorted(json.loads(s)["numRecords"] for s in files.column("stats").to_pylist()) == [10, 10, 10]
    got = {r["id"]: r["v"] for r in table.snapshot().to_arrow(["id", "v"]).to_pylist()}
    assert got == {i: {3: 7, 25: 8}.get(i, i * 10) for i in range(30)}


# --- DELETE and UPDATE ---------------------------------------------------------------------------


@pytest.mark.parametrize("dv", [False, True], ids=["cow", "dv"])
def test_delete_records_its_predicate_and_delta_spark_metrics(tmp_path: Path, dv: bool) -> None:
    table = _table(tmp_path, dv=dv)
    assert table.delete("id = 3 OR id = 4") is not None
    assert _ids(table) == [i for i in range(20) if i not in (3, 4)]
    entry = table.history(1)[0].commit_info
    assert entry.operation == "DELETE" and json.loads(entry.operation_parameters["predicate"]) == ["id = 3 OR id = 4"]
    metrics = _metrics(table)
    assert metrics["numDeletedRows"] == 2 and metrics["numAddedChangeFiles"] == 0
    if dv:  # as delta-spark counts: the file stays, only its vector is new
        assert (metrics["numDeletionVectorsAdded"], metrics["numRemovedFiles"], metrics["numAddedFiles"], metrics["numCopiedRows"]) == (1, 0, 0, 0)
    else:
        assert (metrics["numDeletionVectorsAdded"], metrics["numRemovedFiles"], metrics["numAddedFiles"], metrics["numCopiedRows"]) == (0, 1, 1, 8)
        assert metrics["numRemovedBytes"] > 0 and metrics["numAddedBytes"] > 0


def test_a_partition_delete_removes_whole_files_unread(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=True, partition_by=("part",))
    table.delete("id = 12")  # a vector on the b file
    table.delete("part = 'b'")
    assert _ids(table) == list(range(10))
    metrics = _metrics(table)
    assert (metrics["numRemovedFiles"], metrics["numDeletedRows"], metrics["numDeletionVectorsRemoved"]) == (1, 9, 1)


def test_update_casts_to_the_column_type_and_a_no_op_commits_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=True)
    version = table.latest_version()
    assert table.delete("id > 100") is None and table.update("id > 100", {"v": "0"}) is None
    assert table.latest_version() == version
    table.update("id < 2", {"v": "v / 4", "name": "concat(name, '!')"})  # double -> int: the fraction goes
    got = {r["id"]: (r["v"], r["name"]) for r in table.snapshot().to_arrow().to_pylist()}
    assert got[0] == (0, "n0!") and got[1] == (2, "n1!") and got[2] == (20, "n2")
    assert _metrics(table)["numUpdatedRows"] == 2
    assert json.loads(table.history(1)[0].commit_info.operation_parameters["predicate"]) == ["id < 2"]


@pytest.mark.parametrize("dv", [False, True], ids=["cow", "dv"])
def test_delete_and_update_take_conditions_only_rows_can_compute(tmp_path: Path, dv: bool) -> None:
    table = _table(tmp_path, dv=dv, partition_by=("part",))
    table.append(pa.table({"part": ["b"], "id": [20], "v": [None], "name": [None]}, schema=SCHEMA))
    assert table.delete("id % 10 = 3") is not None
    assert _ids(table) == [i for i in range(21) if i % 10 != 3]
    assert json.loads(table.history(1)[0].commit_info.operation_parameters["predicate"]) == ["id % 10 = 3"]
    # NOT of NULL is NULL: the row whose v is NULL is neither updated nor deleted by NOT (...).
    table.update("id % 2 = 0 AND upper(part) = 'A'", {"name": "upper(name)"})
    table.delete("NOT (v % 20 = 0) AND part = 'b'")  # odd ids of b go; id 20 (v NULL) stays
    got = {r["id"]: r["name"] for r in table.snapshot().to_arrow().to_pylist()}
    expected = {i: (f"N{i}" if i % 2 == 0 else f"n{i}") for i in range(10) if i != 3}
    expected.update({i: f"n{i}" for i in (10, 12, 14, 16, 18)})
    expected[20] = None
    assert got == expected
    assert sorted(r[0] for r in duckdb_rows(table.uri, ["id"])) == sorted(expected)
    metrics = _metrics(table)
    assert metrics["numDeletedRows"] == 4  # 11, 15, 17, 19 (13 was gone)
    assert metrics["numRemovedFiles"] + metrics["numDeletionVectorsAdded"] + metrics["numDeletionVectorsUpdated"] >= 1


def test_to_arrow_filters_rows_by_any_boolean_sql(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=True)
    table.update("id < 3", {"name": "CASE WHEN id = 1 THEN 'A' ELSE NULL END"})
    snapshot = table.snapshot()
    assert snapshot.to_arrow(["id"], predicate="upper(name) = 'A'").column("id").to_pylist() == [1]
    assert sorted(snapshot.to_arrow(["id"], predicate="NOT (upper(name) = 'A') AND id < 5").column("id").to_pylist()) == [3, 4]
    # Skipping still uses the comparison beside the opaque condition: the b file (ids 10..19) is not read.
    assert snapshot.files("id >= 10 AND upper(name) = 'A'").num_rows == 1


# --- errors --------------------------------------------------------------------------------------


def test_errors_name_the_expression_column_and_table(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=False)
    version = table.latest_version()
    with pytest.raises(InvalidPredicateError, match="cannot parse"):
        table.delete("id = = 3")
    with pytest.raises(InvalidPredicateError, match=r"delete on table file://.*unknown column 'nope'"):
        table.delete("nope = 3")
    with pytest.raises(InvalidPredicateError, match=r"delete on table file://.*unknown column 'nope'"):
        table.delete("nope % 10 = 3")
    with pytest.raises(InvalidPredicateError, match=r"update on table file://.*calls function soundex\(\)"):
        table.update("soundex(name) = 'A'", {"v": "1"})
    with pytest.raises(InvalidPredicateError, match=r"'id % 10' where a condition is expected"):
        table.delete("id % 10")
    with pytest.raises(InvalidArgumentError, match=r"'nope'.*does not have"):
        table.update("id = 1", {"nope": "1"})
    with pytest.raises(InvalidPredicateError, match=r"'missing'.*table file://.*does not have"):
        table.update("id = 1", {"v": "missing + 1"})
    with pytest.raises(InvalidArgumentError, match=r"column 'v' of table .* to \"'abc'\", whose value cannot be cast to int32"):
        table.update("id = 1", {"v": "'abc'"})
    with pytest.raises(InvalidArgumentError, match=r"column 'v' of table .*cannot be cast to int32"):
        table.update("id = 1", {"v": "v + 3000000000"})
    with pytest.raises(InvalidPredicateError, match=r"'s.nope'.*the merge source does not have"):
        table.merge(pa.table({"id": [1]}), "id", when_matched_update={"v": "s.nope"})
    with pytest.raises(InvalidArgumentError, match="merge key 'key' is not a column of table"):
        table.merge(pa.table({"key": [1]}), "key", when_matched_delete=True)
    with pytest.raises(InvalidPredicateError, match=r"calls function frobnicate\(\)"):
        table.merge(pa.table({"id": [1]}), "id", when_matched_update={"v": "frobnicate(s.id)"})
    assert table.latest_version() == version
    for error in (InvalidPredicateError, InvalidArgumentError):
        assert issubclass(error, TxnLogError)


# --- conflicts, as the Spark versions have them ---------------------------------------------------


@pytest.mark.parametrize("dv", [False, True], ids=["cow", "dv"])
def test_a_concurrent_remove_of_a_file_the_delete_read_conflicts(tmp_path: Path, dv: bool) -> None:
    table = _table(tmp_path, dv=dv)
    txn = table.transaction("DELETE")
    dml.delete(txn, "id = 3")
    with table.transaction("DELETE") as other:
        other.remove_files(other.filter_files("id < 10"))
    with pytest.raises(ConcurrentDeleteReadError):
        txn.commit()


@pytest.mark.parametrize("isolation", ["WriteSerializable", "Serializable"])
def test_a_concurrent_blind_append_of_a_matching_row(tmp_path: Path, isolation: str) -> None:
    table = _table(tmp_path, dv=True)
    txn = table.transaction("DELETE", isolation)
    dml.delete(txn, "id >= 5")
    table.append(_rows([7]))  # blind: it read nothing
    if isolation == "Serializable":
        with pytest.raises(ConcurrentAppendError):
            txn.commit()
        return
    txn.commit()  # WriteSerializable orders the blind append after the delete
    assert _ids(table) == [0, 1, 2, 3, 4, 7]


def test_a_concurrent_append_outside_the_merge_key_range_does_not_conflict(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=True)
    txn = table.transaction("MERGE", "Serializable")
    dml.merge(txn, pa.table({"id": [3, 4], "v": [0, 0]}), "id", when_matched_update={"v": "s.v"})
    table.append(_rows([100]))
    txn.commit()
    assert _ids(table) == [*range(20), 100]


# --- enabling deletion vectors on an existing table ---------------------------------------------


def test_enabling_deletion_vectors_later_upgrades_the_protocol_and_dml_uses_them(tmp_path: Path) -> None:
    table = _table(tmp_path, dv=False)
    assert table.snapshot().protocol.min_writer_version < 7
    with table.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**table.snapshot().configuration, "delta.enableDeletionVectors": "true"})
    version = table.latest_version()
    commit = [json.loads(line) for line in (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]
    protocol = next(a["protocol"] for a in commit if "protocol" in a)
    assert (protocol["minReaderVersion"], protocol["minWriterVersion"]) == (3, 7)
    assert "deletionVectors" in protocol["readerFeatures"] and "deletionVectors" in protocol["writerFeatures"]
    assert any("metaData" in a for a in commit)  # in the same commit as the property

    table.delete("id = 1")
    assert _metrics(table)["numDeletionVectorsAdded"] == 1 and _metrics(table)["numRemovedFiles"] == 0
    assert _ids(table) == [i for i in range(20) if i != 1]
    assert sorted(r[0] for r in duckdb_rows(table.uri, ["id"])) == _ids(table)
    assert os.listdir(tmp_path / "t")  # the vector sits under the table root
