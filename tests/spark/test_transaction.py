"""txnlog.spark.transaction: commit on exit, abort on an exception, conflicts as txnlog errors,
copy-on-write delete and update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
import txnlog.spark as ts
from txnlog.errors import ConcurrentAppendError, FileNotLiveError, TxnLogError

# Every test in both regimes: rows found on the driver (small statements) and in Spark.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("dml_regime")]

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])


def _table(spark: Any, tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 30).selectExpr("id", "cast(id % 3 as string) as p", "id * 10 as v"), uri, partition_by=["p"])
    return uri


def test_commit_on_exit_with_delete_update_and_write_in_one_version(spark: Any, tmp_path: Path) -> None:
    uri = _table(spark, tmp_path)
    before = {f for f in txnlog.Table(uri).snapshot().files().column("path").to_pylist()}
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        assert tx.delete("id < 3") == 3  # one file per partition holds a matching row
        assert tx.update("id = 10", set={"v": "v + 1"}) == 1  # only p=1's rewritten file
        tx.write(spark.createDataFrame([(100, "9", 0)], "id long, p string, v long"))
    assert tx.result == 1
    rows = {r.id: (r.p, r.v) for r in ts.read(spark, uri).collect()}
    assert sorted(rows) == list(range(3, 30)) + [100]
    assert rows[10] == ("1", 101) and rows[11] == ("2", 110)
    after = set(txnlog.Table(uri).snapshot().files().column("path").to_pylist())
    assert not (before & after)  # every original file held a deleted row
    assert txnlog.Table(uri).history(1)[0].commit_info.operation == "UPDATE"


def test_update_rewrites_only_files_holding_a_matching_row(spark: Any, tmp_path: Path) -> None:
    uri = _table(spark, tmp_path)
    files = {m[0][1]: path for path, m in zip(*txnlog.Table(uri).snapshot().files().select(["path", "partition_values"]).to_pydict().values())}
    with ts.transaction(spark, uri) as tx:
        # Stats say every p file may hold id = 4 (ranges overlap); only p=1's really does.
        assert tx.update("id = 4", set={"v": "-1"}) == 1
    live = set(txnlog.Table(uri).snapshot().files().column("path").to_pylist())
    assert files["0"] in live and files["2"] in live and files["1"] not in live
    assert ts.read(spark, uri, predicate="id = 4").collect()[0].v == -1


def test_abort_on_exception_leaves_the_table_unchanged(spark: Any, tmp_path: Path) -> None:
    uri = _table(spark, tmp_path)
    with pytest.raises(RuntimeError, match="job failed"):
        with ts.transaction(spark, uri) as tx:
            tx.delete("p = '1'")
            tx.write(spark.createDataFrame([(100, "9", 0)], "id long, p string, v long"))
            raise RuntimeError("job failed")
    assert txnlog.Table(uri).latest_version() == 0
    assert ts.read(spark, uri).count() == 30


def test_a_concurrent_append_into_what_the_transaction_read_is_a_conflict(spark: Any, tmp_path: Path) -> None:
    uri = _table(spark, tmp_path)
    with pytest.raises(ConcurrentAppendError) as info:
        with ts.transaction(spark, uri) as tx:
            total = tx.read("p = '1'").groupBy().sum("v").collect()[0][0]
            tx.overwrite(spark.createDataFrame([(1, "1", total)], "id long, p string, v long"), predicate="p = '1'")
            txnlog.Table(uri).append(pa.table({"id": [50], "p": ["1"], "v": [5]}, schema=SCHEMA))  # another writer
    assert info.value.winning_version == 1
    assert txnlog.Table(uri).latest_version() == 1
    # An append elsewhere does not conflict.
    with ts.transaction(spark, uri) as tx:
        tx.overwrite(spark.createDataFrame([(1, "1", 0)], "id long, p string, v long"), predicate="p = '1'")
        txnlog.Table(uri).append(pa.table({"id": [51], "p": ["2"], "v": [5]}, schema=SCHEMA))
    assert tx.result == 3
    assert sorted(r.id for r in ts.read(spark, uri, predicate="p = '1'").collect()) == [1]


def test_files_add_remove_and_write_files(spark: Any, tmp_path: Path) -> None:
    uri = _table(spark, tmp_path)
    with ts.transaction(spark, uri, operation="OPTIMIZE") as tx:
        old = tx.files("p = '2'")
        assert old.num_rows == 1
        adds = ts.write_files(tx.read_files(old).coalesce(1), tx.txn.write_context(), data_change=False)
        tx.add(adds, data_change=False)
        tx.remove(old.column("path").to_pylist(), data_change=False)
        with pytest.raises(FileNotLiveError):
            tx.remove(["no-such-file.parquet"])
    assert ts.read(spark, uri).count() == 30
    assert txnlog.Table(uri).history(1)[0].commit_info.operation == "OPTIMIZE"


def test_delete_and_update_record_their_predicates_as_delta_spark_does(spark: Any, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri = _table(spark, tmp_path)
    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("id < 3")
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        tx.update("id = 10", set={"v": "v + 1"})
        tx.update("p = '2'", set={"v": "0"})
    newest, older = txnlog.Table(uri).history(2)
    # A JSON-encoded list of the conditions, each as written, in the order they ran.
    assert older.commit_info.operation_parameters == {"predicate": '["id < 3"]'}
    assert newest.commit_info.operation_parameters == {"predicate": '["id = 10","p = \'2\'"]'}
    # An independent reader sees the same text.
    assert deltalake.DeltaTable(uri).history(1)[0]["operationParameters"] == {"predicate": '["id = 10","p = \'2\'"]'}


def test_update_and_delete_on_columns_named_with_a_dot(spark: Any, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "t")
    ts.write(spark.range(0, 12).selectExpr("id", "id % 3 as `a.b`", "cast(id as string) as `c d`"), uri, partition_by=["a.b"])
    with ts.transaction(spark, uri) as tx:
        assert tx.update("`a.b` = 1 AND id > 5", set={"c d": "concat(`c d`, '!')"}) == 1
        assert tx.delete("`a.b` = 2") == 1  # a partition predicate: the file goes whole
        tx.write(spark.createDataFrame([(100, 2, "new")], "id long, `a.b` long, `c d` string"))
    seen = deltalake.DeltaTable(uri).to_pyarrow_table()
    rows = sorted(zip(*[seen.column(c).to_pylist() for c in ("id", "a.b", "c d")]))
    expected = sorted(
        [(i, i % 3, f"{i}!" if i % 3 == 1 and i > 5 else str(i)) for i in range(12) if i % 3 != 2] + [(100, 2, "new")]
    )
    assert rows == expected
    assert sorted(tuple(r) for r in ts.read(spark, uri, predicate="`a.b` = 1").collect()) == [r for r in expected if r[1] == 1]


def test_delete_and_update_take_conditions_only_rows_compute(spark: Any, tmp_path: Path) -> None:
    uri = _table(spark, tmp_path)
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        assert tx.delete("id % 1000 = 7") == 1  # skipping keeps every file; Spark finds the one holding id 7
        # The opaque condition skips nothing; p = '2' does: only that file is rewritten.
        assert tx.update("v % 20 = 0 AND NOT (upper(p) <> '2') AND p = '2'", set={"v": "-v"}) == 1
    rows = {r.id: r.v for r in ts.read(spark, uri).collect()}
    assert sorted(rows) == [i for i in range(30) if i != 7]
    assert {i for i, v in rows.items() if v < 0} == {i for i in range(30) if i % 3 == 2 and i % 2 == 0}
    version = txnlog.Table(uri).latest_version()
    # overwrite checks every written row against a condition that computes values, too.
    with pytest.raises(TxnLogError, match="do not match the replaceWhere condition"):
        with ts.transaction(spark, uri) as tx:
            tx.overwrite(spark.createDataFrame([(101, "1", 0)], "id long, p string, v long"), "id % 2 = 0")
    assert txnlog.Table(uri).latest_version() == version
    with ts.transaction(spark, uri) as tx:
        tx.overwrite(spark.createDataFrame([(100, "1", 0)], "id long, p string, v long"), "id % 2 = 0")
    rows = {r.id: r.v for r in ts.read(spark, uri).collect()}
    assert sorted(rows) == [i for i in range(30) if i % 2 and i != 7] + [100]
    assert ts.read(spark, uri, predicate="id % 10 = 3 AND p = '0'").count() == 1  # id 3 (13: p = '1', 23: p = '2')


#: The zone is read in the statement's expressions, alike with deletion vectors or copy-on-write
#: (the latter under ``soak``); the module runs each test in both DML regimes.
@pytest.mark.parametrize("deletion_vectors", ["true", pytest.param("false", marks=pytest.mark.soak)])
def test_conditions_read_timestamps_in_utc_whatever_the_session_zone(spark: Any, tmp_path: Path, deletion_vectors: str) -> None:
    """txnlog reads a timestamp in UTC, in its file skipping, its Python DML and Spark's alike: in
    a Tokyo session (UTC+9), a row at 16:00 UTC on May 1st (May 2nd in Tokyo) has May 1st for
    ``CAST(ts AS DATE)``, whether it shares a file with a later row or not, as txnlog's Python
    UPDATE and DELETE find (delta-spark would take Tokyo's date)."""
    import datetime as dt

    from tests.conftest import session_confs

    early, late = dt.datetime(2024, 5, 1, 16, tzinfo=dt.timezone.utc), dt.datetime(2024, 5, 3, tzinfo=dt.timezone.utc)
    layouts = {"one file": [[(1, early), (2, late)]], "two files": [[(1, early)], [(2, late)]]}
    later, first_day = "CAST(ts AS DATE) >= DATE'2024-05-02'", "CAST(ts AS DATE) = DATE'2024-05-01'"
    for name, files in layouts.items():
        uris = {how: str(tmp_path / f"{name}-{how}") for how in ("spark", "python")}
        for uri in uris.values():
            for rows in files:
                ts.write(spark.createDataFrame(rows, "id long, ts timestamp"), uri, properties={"delta.enableDeletionVectors": deletion_vectors})
        with session_confs(spark, {"spark.sql.session.timeZone": "Asia/Tokyo"}), ts.transaction(spark, uris["spark"], operation="UPDATE") as tx:
            tx.update(later, set={"id": "id * 10"})
            tx.delete(first_day)
        python = txnlog.Table(uris["python"])
        python.update(later, set={"id": "id * 10"})
        python.delete(first_day)
        expected = sorted(r["id"] for r in python.snapshot().to_arrow().to_pylist())
        assert expected == [20], name
        assert sorted(r.id for r in ts.read(spark, uris["spark"]).collect()) == expected, name
