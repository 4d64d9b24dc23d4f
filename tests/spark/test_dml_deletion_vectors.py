"""DELETE, UPDATE and MERGE on Spark against tables with deletion vectors: rows are marked in
vectors instead of files being rewritten, and txnlog.spark.read, Snapshot.to_arrow and DuckDB's
delta_scan (an independent reader) return the rows a plain-Python model of the operations holds.
Copy-on-write tables keep their behaviour (tests/spark/test_merge.py, test_transaction.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

import txnlog
import txnlog.spark as ts
from tests.duckdb_delta import duckdb_delta
from txnlog.errors import ConcurrentDeleteReadError, ConcurrentRowsError, DuplicateMatchError, TxnLogError
from txnlog.spark.merge import merge, merge_into

# Every test in both regimes: rows found on the driver (small statements) and in Spark.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("dml_regime")]

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.float64()), ("name", pa.string())])
COLUMNS = SCHEMA.names
DV = {"delta.enableDeletionVectors": "true"}
Row = tuple[Any, ...]


def _listed(ids: range) -> str:
    return ", ".join(str(i) for i in ids)


def _row(i: int) -> Row:
    return (i, "a" if i % 2 else "b", float(i), f"n{i}")


def _make(uri: str, *, partitioned: bool = False, mapped: bool = False, dv: bool = True, files: int = 3, per_file: int = 20) -> dict[int, Row]:
    """A table of ``files`` appends of ``per_file`` rows each; the model of its rows by id."""
    props = {**(DV if dv else {}), **({"delta.columnMapping.mode": "name"} if mapped else {})}
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"] if partitioned else [], properties=props)
    model: dict[int, Row] = {}
    for f in range(files):
        rows = [_row(i) for i in range(f * per_file, (f + 1) * per_file)]
        table.append(pa.Table.from_pylist([dict(zip(COLUMNS, r)) for r in rows], schema=SCHEMA))
        model.update((r[0], r) for r in rows)
    return model


def _same_rows(spark: Any, uri: str, model: dict[int, Row]) -> None:
    """Spark, to_arrow and DuckDB each read exactly the model's rows."""
    expected = sorted(model.values())
    through_spark = sorted(tuple(r) for r in ts.read(spark, uri).select(*COLUMNS).collect())
    assert through_spark == expected
    arrow = txnlog.Table(uri).snapshot().to_arrow(COLUMNS)
    assert sorted(tuple(r[c] for c in COLUMNS) for r in arrow.to_pylist()) == expected
    con = duckdb_delta()
    columns = ", ".join(COLUMNS)
    theirs = con.sql(f"select {columns} from delta_scan('{uri}')").fetchall()
    assert sorted(theirs) == expected


def _commit(uri: str, version: int | None = None) -> list[dict[str, Any]]:
    table = txnlog.Table(uri)
    v = table.latest_version() if version is None else version
    text = Path(uri, "_delta_log", f"{v:020d}.json").read_text()
    return [orjson.loads(line) for line in text.splitlines() if line]


def _actions(commit: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [a[kind] for a in commit if kind in a]


def _metrics(commit: list[dict[str, Any]]) -> dict[str, int]:
    info = _actions(commit, "commitInfo")[0]
    return {k: int(v) for k, v in info["operationMetrics"].items()}


def _data_files(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}


def _listing(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if "_delta_log" not in p.parts}


def _source(spark: Any, rows: list[Row], deleted: Callable[[Row], bool] = lambda r: False) -> Any:
    return spark.createDataFrame([(*r, deleted(r)) for r in rows], "id long, part string, value double, name string, gone boolean")


def test_delete_marks_rows_in_vectors_and_a_second_delete_unions_them(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = _make(uri)
    files_before = _data_files(uri)

    with ts.transaction(spark, uri, operation="DELETE") as tx:
        assert tx.delete(f"id IN ({_listed(range(0, 60, 7))})") == 3  # rows in each of the three files
    model = {k: r for k, r in model.items() if k % 7}
    commit = _commit(uri)
    adds, removes = _actions(commit, "add"), _actions(commit, "remove")
    assert _data_files(uri) == files_before  # no data file written
    assert {a["path"] for a in adds} == {r["path"] for r in removes} == {p for p in files_before}
    assert all(a["deletionVector"] and orjson.loads(a["stats"])["tightBounds"] is False for a in adds)
    assert all(orjson.loads(a["stats"])["numRecords"] == 20 for a in adds)  # every physical row counted
    first = {a["path"]: a["deletionVector"]["cardinality"] for a in adds}
    assert sorted(first.values()) == [3, 3, 3]  # 0,7,14 | 21,28,35 | 42,49,56
    metrics = _metrics(commit)
    assert metrics["numDeletedRows"] == 9 and metrics["numDeletionVectorsAdded"] == 3
    assert metrics["numRemovedFiles"] == 0 and metrics["numAddedFiles"] == 0 and metrics["numCopiedRows"] == 0
    assert orjson.loads(_actions(commit, "commitInfo")[0]["operationParameters"]["predicate"]) == [f"id IN ({_listed(range(0, 60, 7))})"]
    _same_rows(spark, uri, model)

    # The same file again: its vector becomes the union, rows deleted before stay deleted.
    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("id < 10 AND id IN (1, 3, 5, 7, 9, 11)")
    model = {k: r for k, r in model.items() if not (k < 10 and k % 2)}  # 7 was already gone
    commit = _commit(uri)
    (add,) = _actions(commit, "add")
    assert add["deletionVector"]["cardinality"] == first[add["path"]] + 4  # 1, 3, 5, 9
    metrics = _metrics(commit)
    assert metrics["numDeletedRows"] == 4 and metrics["numDeletionVectorsUpdated"] == 1 and metrics["numDeletionVectorsAdded"] == 0
    assert _data_files(uri) == files_before
    _same_rows(spark, uri, model)

    # Every remaining row of a file: the file is removed, not given a vector.
    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("id >= 40")
    model = {k: r for k, r in model.items() if k < 40}
    commit = _commit(uri)
    assert not _actions(commit, "add") and len(_actions(commit, "remove")) == 1
    assert _metrics(commit)["numRemovedFiles"] == 1 and _metrics(commit)["numDeletionVectorsRemoved"] == 1
    _same_rows(spark, uri, model)


def test_delete_then_update_in_one_transaction_sees_the_new_vectors(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = _make(uri, files=2)
    files_before = _data_files(uri)
    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        tx.delete(f"id IN ({_listed(range(0, 40, 3))})")
        # 15 and 30 were just deleted: the update must not bring them back.
        assert tx.update(f"id IN ({_listed(range(0, 40, 5))})", set={"value": "value + 1000", "name": "upper(name)"}) == 2
        tx.delete("id = 10")  # a row the update itself wrote
    assert tx.result == 3  # create, two appends, then this one commit
    for k in list(model):
        if k % 3 == 0 or k == 10:
            del model[k]
        elif k % 5 == 0:
            i, part, value, name = model[k]
            model[k] = (i, part, value + 1000, name.upper())
    commit = _commit(uri)
    new_files = _data_files(uri) - files_before
    added = {a["path"] for a in _actions(commit, "add")}
    assert new_files <= added and len(new_files) >= 1  # only the updated rows' new versions were written
    for a in _actions(commit, "add"):
        if a["path"] in files_before:
            assert a["deletionVector"] is not None
    assert sum(orjson.loads(a["stats"])["numRecords"] for a in _actions(commit, "add") if a["path"] in new_files) == 5  # 5, 20, 25, 35, 10
    metrics = _metrics(commit)
    assert metrics["numUpdatedRows"] == 5 and metrics["numDeletedRows"] == 14 + 1
    # Data files, as delta-spark counts them: the files that only got a vector are neither.
    assert metrics["numAddedFiles"] == len(new_files) and metrics["numRemovedFiles"] == 0
    info = _actions(commit, "commitInfo")[0]
    assert orjson.loads(info["operationParameters"]["predicate"]) == [f"id IN ({_listed(range(0, 40, 3))})", f"id IN ({_listed(range(0, 40, 5))})", "id = 10"]
    _same_rows(spark, uri, model)


# Not both at once: DuckDB's delta_scan reads a column-mapped partition column as NULL.
@pytest.mark.parametrize("partitioned, mapped", [(True, False), (False, True)], ids=["partitioned", "column-mapped"])
def test_update_and_merge_write_only_the_new_row_versions(spark: Any, tmp_path: Path, partitioned: bool, mapped: bool) -> None:
    uri = str(tmp_path / "t")
    model = _make(uri, partitioned=partitioned, mapped=mapped)
    version = txnlog.Table(uri).latest_version()

    with ts.transaction(spark, uri, operation="UPDATE") as tx:
        tx.update("id BETWEEN 18 AND 23", set={"value": "-value"})
    for k in range(18, 24):
        i, part, value, name = model[k]
        model[k] = (i, part, -value, name)
    commit = _commit(uri)
    new = [a for a in _actions(commit, "add") if not a.get("deletionVector")]
    assert sum(orjson.loads(a["stats"])["numRecords"] for a in new) == 6
    assert _metrics(commit)["numUpdatedRows"] == 6 and _metrics(commit)["numCopiedRows"] == 0
    _same_rows(spark, uri, model)

    # MERGE: delete 22 (an updated row, now in a file the UPDATE wrote) and 7; update the other
    # matched rows 5, 41, 30; insert 100, 101.
    updates = [(5, "a", 500.0, "five"), (41, "a", 4100.0, "forty-one"), (22, "b", 0.0, "x"), (7, "a", 0.0, "x"), (30, "b", 0.0, "x"),
               (100, "b", 1.0, "new"), (101, "a", 2.0, "new")]
    source = _source(spark, updates, deleted=lambda r: r[0] in (22, 7))
    result = merge(spark, uri, source, on="id", when_matched_update={"value": "s.value", "name": "s.name"},
                   when_matched_delete="s.gone", when_not_matched_insert="*")
    assert result == version + 2
    commit = _commit(uri)
    for key, part, value, name in updates:
        if key in (22, 7):
            del model[key]
        elif key in model:
            model[key] = (key, model[key][1], value, name)
        else:
            model[key] = (key, part, value, name)
    metrics = _metrics(commit)
    assert metrics["numTargetRowsUpdated"] == 3 and metrics["numTargetRowsDeleted"] == 2 and metrics["numTargetRowsInserted"] == 2
    assert metrics["numTargetRowsCopied"] == 0 and metrics["numSourceRows"] == 7
    assert metrics["numTargetDeletionVectorsAdded"] + metrics["numTargetDeletionVectorsUpdated"] >= 3
    new = [a for a in _actions(commit, "add") if not a.get("deletionVector")]
    assert sum(orjson.loads(a["stats"])["numRecords"] for a in new) == 5  # 3 updated + 2 inserted, nothing copied
    info = _actions(commit, "commitInfo")[0]
    assert info["operation"] == "MERGE" and "matchedPredicates" in info["operationParameters"]
    _same_rows(spark, uri, model)


def test_dml_on_a_table_whose_vectors_delta_spark_wrote(spark: Any, tmp_path: Path, conformance_dir: Path) -> None:
    uri = str(tmp_path / "dv-small")
    shutil.copytree(conformance_dir / "tables" / "table-with-dv-small", uri)
    con = duckdb_delta()
    # delta-spark deleted 0 and 9 of 0..9.
    assert sorted(r[0] for r in con.sql(f"select value from delta_scan('{uri}')").fetchall()) == list(range(1, 9))

    def values() -> list[int]:
        spark_rows = sorted(r[0] for r in ts.read(spark, uri).collect())
        assert spark_rows == sorted(txnlog.Table(uri).snapshot().to_arrow()["value"].to_pylist())
        assert spark_rows == sorted(r[0] for r in con.sql(f"select value from delta_scan('{uri}')").fetchall())
        return spark_rows

    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("value = 5")
        tx.update("value = 3", set={"value": "30"})
    (add,) = [a for a in _actions(_commit(uri), "add") if a.get("deletionVector")]
    assert add["deletionVector"]["cardinality"] == 4  # 0 and 9 still, with 3 and 5
    assert values() == [1, 2, 4, 6, 7, 8, 30]
    # 0 was deleted by delta-spark: a MERGE does not match it, it inserts a new 0.
    source = spark.createDataFrame([(0,), (1,)], "value int")
    merge(spark, uri, source, on="value", when_matched_delete=True, when_not_matched_insert="*")
    assert values() == [0, 2, 4, 6, 7, 8, 30]


@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "copy-on-write"])
def test_a_source_row_matching_twice_writes_nothing(spark: Any, tmp_path: Path, dv: bool) -> None:
    uri = str(tmp_path / "t")
    _make(uri, dv=dv, files=2, per_file=10)
    before = _listing(uri)
    version = txnlog.Table(uri).latest_version()
    source = _source(spark, [(3, "a", 1.0, "x"), (3, "a", 2.0, "y"), (50, "b", 0.0, "new")])
    with pytest.raises(DuplicateMatchError) as info:
        merge(spark, uri, source, on="id", when_matched_update="*", when_not_matched_insert="*")
    assert info.value.key == {"id": 3} and info.value.source_rows == 2
    assert _listing(uri) == before  # no data file, no vector file
    assert txnlog.Table(uri).latest_version() == version


def test_concurrent_commits_on_the_marked_files_conflict(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _make(uri, files=2, per_file=10)
    table = txnlog.Table(uri)

    # Another writer removes a file this DELETE marked rows of.
    with pytest.raises(ConcurrentDeleteReadError):
        with ts.transaction(spark, uri, operation="DELETE") as tx:
            tx.delete("id = 3")
            with table.transaction("DELETE") as other:
                other.remove_files(other.filter_files("id < 10"))

    # Two statements marking the same row of a file: the second to commit loses, naming it.
    txn = table.transaction("MERGE")
    merge_into(txn, spark, _source(spark, [(12, "b", 0.0, "x")]), "id", when_matched_delete=True)
    with pytest.raises(ConcurrentRowsError, match="row positions 2"):
        with ts.transaction(spark, uri, operation="DELETE") as tx:
            tx.delete("id = 12")
            txn.commit()  # the MERGE wins
    assert sorted(r.id for r in ts.read(spark, uri).collect()) == [i for i in range(10, 20) if i != 12]

    # Other rows of the same file: the loser's vector is unioned with the winner's; both commit.
    txn = table.transaction("MERGE")
    merge_into(txn, spark, _source(spark, [(14, "b", 0.0, "x")]), "id", when_matched_delete=True)
    with ts.transaction(spark, uri, operation="DELETE") as tx:
        tx.delete("id = 13")
        won = txn.commit()
    assert [(s.version, s.kind) for s in tx.txn.result.rebased] == [(won.version, "deletion vector")]
    assert sorted(r.id for r in ts.read(spark, uri).collect()) == [i for i in range(10, 20) if i not in (12, 13, 14)]


def _spark_jobs(spark: Any, work: Callable[[], object]) -> int:
    """How many Spark jobs ``work`` ran."""
    context = spark.sparkContext
    group = f"txnlog-test-{id(work)}"
    context.setJobGroup(group, group)
    try:
        work()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return len(context.statusTracker().getJobIdsForGroup(group))


def test_small_statements_find_their_rows_on_the_driver(spark: Any, tmp_path: Path, dml_regime: str) -> None:
    """Under the bound, a DELETE runs no Spark job and a MERGE only the one reading its
    source (txnlog.dml merges on the driver); with the bound at 0 Spark finds the rows. The
    rows are the same either way (the model)."""
    uri = str(tmp_path / "t")
    model = _make(uri)

    def delete() -> None:
        with ts.transaction(spark, uri, operation="DELETE") as tx:
            tx.delete("id % 7 = 3")

    jobs = _spark_jobs(spark, delete)
    assert (jobs == 0) if dml_regime == "driver" else (jobs >= 1)
    model = {k: r for k, r in model.items() if k % 7 != 3}
    _same_rows(spark, uri, model)

    updates = [(i, "c", -float(i), f"m{i}") for i in (1, 2, 44, 70)]  # 70 is new
    source = _source(spark, updates).drop("gone").cache()
    source.count()
    jobs = _spark_jobs(spark, lambda: merge(spark, uri, source, on="id", when_matched_update="*", when_not_matched_insert="*"))
    source.unpersist()
    model.update((r[0], r) for r in updates)
    _same_rows(spark, uri, model)
    if dml_regime == "driver":
        assert jobs <= 2  # the source's rows (one or two jobs)
    commit = _commit(uri)
    metrics = _metrics(commit)
    assert metrics["numTargetRowsUpdated"] == 3 and metrics["numTargetRowsInserted"] == 1
    assert metrics["numTargetFilesScanned"] == 2  # of the three files, only two hold a source key


def test_a_merge_on_the_driver_gives_spark_s_answer_where_arrow_alone_would_differ(spark: Any, tmp_path: Path, dml_regime: str) -> None:
    """Source types that differ from the target's (an int key, a double for a long column)
    leave the MERGE to Spark in both regimes, with Spark's widening and casting."""
    uri = str(tmp_path / "t")
    data = pa.table({"key": pa.array([1, 2, 3], pa.int64()), "amount": pa.array([10, 20, 30], pa.int64())})
    txnlog.Table.create(uri, data.schema, properties={"delta.enableDeletionVectors": "true"}).append(data)
    source = spark.createDataFrame([(2, 2.7), (4, 4.2)], "key int, amount double")
    merge(spark, uri, source, on="key", when_matched_update="*", when_not_matched_insert="*")
    rows = sorted(txnlog.Table(uri).snapshot().to_arrow().to_pylist(), key=lambda r: r["key"])
    # ANSI Spark casts a double to a long by truncating it.
    assert rows == [{"key": 1, "amount": 10}, {"key": 2, "amount": 2}, {"key": 3, "amount": 30}, {"key": 4, "amount": 4}]


def test_the_driver_bound_counts_stored_bytes_in_proportion_to_the_columns_read(spark: Any, tmp_path: Path, dml_regime: str) -> None:
    from txnlog.spark.driver import MAX_DRIVER_SCAN_BYTES, fits_driver

    data = pa.table({"key": pa.array(range(10), pa.int64()), "a": ["x"] * 10, "b": ["y"] * 10})
    table = txnlog.Table.create(str(tmp_path / "t"), data.schema)
    table.append(data)
    files = table.snapshot().files()
    assert fits_driver(spark, files, 3, of=3) is (dml_regime == "driver")  # a bound of 0: always Spark
    if dml_regime == "spark":
        return
    # Ten values but, as stored, 1.2 times the bound: a third of it is read for one column.
    wide = files.set_column(files.schema.get_field_index("size"), "size", pa.array([MAX_DRIVER_SCAN_BYTES * 6 // 5], pa.int64()))
    assert fits_driver(spark, wide, 1, of=3)
    assert not fits_driver(spark, wide, 3, of=3)


def test_overflowing_delete_fails_as_spark_does_in_both_regimes(spark: Any, tmp_path: Any) -> None:
    """The conftest runs this with rows found on the driver and in Spark: both refuse the
    statement, as Spark SQL in ANSI mode does, and the table is unchanged."""
    uri = str(tmp_path / "t")
    data = pa.table({"key": pa.array([1, 2], pa.int64()), "small": pa.array([2**31 - 1, 0], pa.int32())})
    txnlog.Table.create(uri, data.schema, properties={"delta.enableDeletionVectors": "true"}).append(data)
    with pytest.raises(TxnLogError):
        with ts.transaction(spark, uri) as tx:
            tx.delete("small + 1 < 0")
    assert txnlog.Table(uri).snapshot().version == 1
