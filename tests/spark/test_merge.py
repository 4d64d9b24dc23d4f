"""MERGE on local Spark: copy-on-write update/delete/insert that rewrites only the files
holding a matched row, reads only the files the source's key range can touch, refuses
ambiguous matches, and conflicts with concurrent writers like any transaction."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from txnlog import Table  # noqa: E402
from txnlog.dml import MergePlan  # noqa: E402
from txnlog.dml.clauses import MergeCondition  # noqa: E402
from txnlog.errors import ConcurrentAppendError, ConcurrentDeleteReadError, DuplicateMatchError, InvalidArgumentError  # noqa: E402
from txnlog.spark.merge import merge, merge_into  # noqa: E402

# Every test in both regimes: rows found on the driver (small statements) and in Spark.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("dml_regime")]

SCHEMA = pa.schema([("key", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])


def make_table(uri: str, ranges: list[tuple[int, int]], partition_by: tuple[str, ...] = ()) -> Table:
    """One data file per (lo, hi) range of keys; region EU for even keys, US for odd."""
    table = Table.create(uri, SCHEMA, partition_by=partition_by)
    for lo, hi in ranges:
        keys = list(range(lo, hi))
        table.append(pa.table({"key": keys, "region": ["EU" if k % 2 == 0 else "US" for k in keys], "amount": [float(k) for k in keys]}, schema=SCHEMA))
    return table


def rows(uri: str) -> dict[int, tuple[str, float]]:
    """The table as delta-rs (an independent reader) sees it, keyed by key; duplicates fail."""
    data = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    out = {r["key"]: (r["region"], r["amount"]) for r in data}
    assert len(out) == len(data), "duplicate keys in the table"
    return out


def source(spark, items: list[tuple[int, str, float]]):
    return spark.createDataFrame(items, "key long, region string, amount double")


def test_update_delete_and_insert_rewrite_only_matched_files(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = make_table(uri, [(0, 10), (10, 20), (20, 30), (30, 40)])
    before = table.snapshot()
    by_range = {tuple(sorted(r for r in range(lo, lo + 10))): p for lo, p in zip((0, 10, 20, 30), before.files().column("path").to_pylist())}
    paths = list(by_range.values())

    src = spark.createDataFrame(
        [(12, "EU", 1000.0, False), (14, "EU", 0.0, True), (25, "US", 2500.0, False), (41, "US", 41.0, False), (42, "EU", 42.0, False)],
        "key long, region string, amount double, gone boolean",
    )
    version = merge(
        spark,
        uri,
        src,
        on="key",
        when_matched_update={"amount": "s.amount + t.amount"},
        when_matched_delete="s.gone",
        when_not_matched_insert={"key": "s.key", "region": "s.region", "amount": "s.amount"},
    )
    assert version == before.version + 1

    got = rows(uri)
    expected = {k: ("EU" if k % 2 == 0 else "US", float(k)) for k in range(40)}
    expected[12] = ("EU", 1012.0)
    del expected[14]
    expected[25] = ("US", 2525.0)
    expected[41] = ("US", 41.0)
    expected[42] = ("EU", 42.0)
    assert got == expected

    after = table.snapshot()
    live = set(after.files().column("path").to_pylist())
    # Files 0-9 and 30-39 held no matched row: untouched. 10-19 and 20-29 were rewritten.
    assert paths[0] in live and paths[3] in live
    assert paths[1] not in live and paths[2] not in live
    entry = table.history(limit=1)[0]
    assert entry.commit_info.operation == "MERGE"
    metrics = entry.commit_info.operation_metrics
    # The key range 12..42 excludes the file of keys 0..9; of the three files it overlaps, the
    # one of keys 30..39 holds none of the source's keys (41 and 42 are new): two were scanned.
    assert metrics["numTargetFilesScanned"] == "2"
    assert metrics["numTargetFilesRemoved"] == "2"


def test_reads_exactly_the_files_the_key_range_can_touch(spark, tmp_path):
    """The transaction records as read exactly the files whose stats overlap the source's key
    range: a concurrent delete of another file does not conflict, a delete of a read file does."""
    uri = str(tmp_path / "t")
    table = make_table(uri, [(0, 10), (10, 20), (20, 30), (30, 40)])
    files = table.snapshot().files()
    path_of = dict(zip((0, 10, 20, 30), files.column("path").to_pylist()))

    txn = table.transaction("MERGE")
    merge_into(txn, spark, source(spark, [(15, "US", 1.0), (22, "EU", 2.0)]), "key", when_matched_update="*")
    read_paths = set(txn.read_predicates[0].filter(files).column("path").to_pylist())
    assert read_paths == {path_of[10], path_of[20]}

    # A concurrent writer removes the untouched file of keys 30..39: no conflict.
    with table.transaction("DELETE") as other:
        other.remove_files(other.filter_files("key >= 30"))
    # And appends rows outside the merge's key range: no conflict either.
    table.append(pa.table({"key": [100], "region": ["EU"], "amount": [1.0]}, schema=SCHEMA))
    txn.commit()
    got = rows(uri)
    assert got[15] == ("US", 1.0) and got[22] == ("EU", 2.0)
    assert 35 not in got and 100 in got and len(got) == 31


def test_concurrent_writer_on_a_read_file_conflicts(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = make_table(uri, [(0, 10), (10, 20)])
    txn = table.transaction("MERGE")
    merge_into(txn, spark, source(spark, [(5, "EU", 0.5)]), "key", when_matched_update="*")
    with table.transaction("DELETE") as other:
        other.remove_files(other.filter_files("key < 10"))
    with pytest.raises(ConcurrentDeleteReadError) as err:
        txn.commit()
    assert err.value.winning_operation == "DELETE"

    # A concurrent append of a row inside the key range the merge read is a conflict too.
    txn = table.transaction("MERGE")
    merge_into(txn, spark, source(spark, [(12, "EU", 0.5)]), "key", when_matched_update="*", when_not_matched_insert="*")
    with table.transaction("WRITE") as other:  # not blind: it read the table first
        other.filter_files("key = 12")
        other.write(pa.table({"key": [12], "region": ["US"], "amount": [13.5]}, schema=SCHEMA))
    with pytest.raises(ConcurrentAppendError):
        txn.commit()
    assert sorted(r["amount"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist() if r["key"] == 12) == [12.0, 13.5]


def test_source_row_matching_a_target_row_twice_is_refused(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = make_table(uri, [(0, 10)])
    before = table.latest_version()
    src = source(spark, [(3, "EU", 1.0), (3, "US", 2.0), (4, "EU", 9.0)])
    with pytest.raises(DuplicateMatchError) as err:
        merge(spark, uri, src, on="t.key = s.key", when_matched_update="*")
    assert err.value.key == {"key": 3} and err.value.source_rows == 2
    assert "deduplicate the source" in str(err.value)
    assert table.latest_version() == before
    # Insert-only merges do not need a unique match (Delta agrees).
    assert merge(spark, uri, source(spark, [(50, "EU", 1.0), (50, "EU", 1.0)]), on="key", when_not_matched_insert="*") == before + 1


def test_partitioned_target_and_composite_keys(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = make_table(uri, [(0, 6), (6, 12)], partition_by=("region",))
    assert table.snapshot().num_files == 4
    src = source(spark, [(2, "EU", -2.0), (3, "EU", -3.0)])  # key 3 is US in the table: no match
    merge(spark, uri, src, on=["key", "region"], when_matched_update="*", when_not_matched_insert="*")
    got = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert sorted((r["key"], r["region"], r["amount"]) for r in got if r["key"] in (2, 3)) == [(2, "EU", -2.0), (3, "EU", -3.0), (3, "US", 3.0)]
    assert len(got) == 13
    # Only the EU file of keys 0..5 was rewritten; the US files and the other EU file stay.
    removed = table.history(limit=1)[0].commit_info.operation_metrics["numTargetFilesRemoved"]
    assert removed == "1"


def test_bad_arguments_name_the_problem(spark, tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri, [(0, 3)])
    with pytest.raises(InvalidArgumentError, match="not a column of the target"):
        merge(spark, uri, source(spark, [(1, "EU", 1.0)]), on="key", when_matched_update={"nope": "s.amount"})
    with pytest.raises(InvalidArgumentError, match="equality between a target and a source column"):
        MergeCondition.parse("t.key > s.key")
    with pytest.raises(InvalidArgumentError, match="not a column of the source"):
        merge(spark, uri, source(spark, [(1, "EU", 1.0)]), on="id", when_matched_update="*")
    assert MergeCondition.parse("t.a = s.b AND t.c = 'x'").pairs == (("a", "b"),)


def test_history_records_the_on_condition_and_the_clauses_as_delta_spark_does(spark, tmp_path):
    uri = str(tmp_path / "t")
    table = make_table(uri, [(0, 10)])
    src = spark.createDataFrame([(1, "EU", 1.0, True), (2, "EU", 2.0, False), (50, "US", 5.0, False)], "key long, region string, amount double, gone boolean")
    merge(spark, uri, src, on="t.key = s.key", when_matched_update={"amount": "s.amount"}, when_matched_delete="s.gone",
          when_not_matched_insert="*")
    merge(spark, uri, source(spark, [(3, "US", 0.0)]), on=["key"], when_matched_delete=True)
    newest, older = table.history(limit=2)
    assert older.commit_info.operation_parameters == {
        "predicate": '["t.key = s.key"]',
        "matchedPredicates": '[{"predicate":"s.gone","actionType":"delete"},{"actionType":"update"}]',
        "notMatchedPredicates": '[{"actionType":"insert"}]',
        "notMatchedBySourcePredicates": "[]",
    }
    assert newest.commit_info.operation_parameters == {
        "predicate": '["t.`key` = s.`key`"]',
        "matchedPredicates": '[{"actionType":"delete"}]',
        "notMatchedPredicates": "[]",
        "notMatchedBySourcePredicates": "[]",
    }


def test_keys_and_columns_named_with_a_dot(spark, tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("k.id", pa.int64()), ("a b", pa.string()), ("v`x", pa.float64())])
    table = Table.create(uri, schema, partition_by=["a b"])
    table.append(pa.table({"k.id": list(range(6)), "a b": ["p", "q"] * 3, "v`x": [0.0] * 6}, schema=schema))
    src = spark.createDataFrame([(1, "q", 10.0), (2, "p", 20.0), (9, "p", 90.0)], "`k.id` long, `a b` string, `v``x` double")
    merge(spark, uri, src, on=["k.id"], when_matched_update="*", when_not_matched_insert="*")
    data = deltalake.DeltaTable(uri).to_pyarrow_table()
    got = sorted(zip(*[data.column(c).to_pylist() for c in ("k.id", "a b", "v`x")]))
    assert got == [(0, "p", 0.0), (1, "q", 10.0), (2, "p", 20.0), (3, "q", 0.0), (4, "p", 0.0), (5, "q", 0.0), (9, "p", 90.0)]


def test_driver_scan_bound_that_is_not_a_number_is_refused_naming_the_conf(spark: Any) -> None:
    from txnlog.spark.driver import DRIVER_SCAN_CELLS_CONF, driver_scan_cells

    before = spark.conf.get(DRIVER_SCAN_CELLS_CONF, None)
    spark.conf.set(DRIVER_SCAN_CELLS_CONF, "lots")
    try:
        with pytest.raises(InvalidArgumentError, match=DRIVER_SCAN_CELLS_CONF):
            driver_scan_cells(spark)
    finally:
        if before is None:
            spark.conf.unset(DRIVER_SCAN_CELLS_CONF)
        else:
            spark.conf.set(DRIVER_SCAN_CELLS_CONF, before)


def test_merge_clause_columns_are_found_by_the_parser_or_all_are_read(tmp_path) -> None:
    table = Table.create(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("name", pa.string()), ("tags", pa.list_(pa.int64()))]))

    def read(condition: str) -> list[str]:
        return MergePlan.of(table.snapshot(), ["id", "amount"], "t.id = s.id", when_matched_delete=condition, strict=False).columns_changed()

    assert read("t.amount + s.amount > 0") == ["id", "amount"]
    assert read("some_spark_function(t.name) > 0") == ["id", "name"]
    # SQL txnlog's parser refuses (a lambda) is Spark's to evaluate: every column may be read.
    assert read("exists(t.tags, x -> x = s.id)") == ["id", "amount", "name", "tags"]



def test_the_merge_builder_runs_any_clause_list_on_the_driver_and_in_spark(spark, tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri, [(0, 10)])
    expected = str(tmp_path / "python")
    make_table(expected, [(0, 10)])
    items = [(2, "US", 50.0), (3, "US", 1.0), (11, "US", 11.0), (12, "EU", 12.0)]

    def clauses(builder):
        # SQL that txnlog computes exactly as Spark does (no floating point).
        return (builder.when_matched_update({"region": "src.region"}, predicate="src.region <> tgt.region")
                .when_matched_delete()
                .when_not_matched_insert_all(predicate="src.key > 11")
                .when_not_matched_by_source_update({"region": "'OLD'"}, predicate="tgt.key < 2")
                .when_not_matched_by_source_delete(predicate="tgt.key > 8"))

    clauses(Table(expected).merge(pa.table({"key": [k for k, _, _ in items], "region": [r for _, r, _ in items],
                                            "amount": [a for _, _, a in items]}, schema=SCHEMA),
                                  "tgt.key = src.key", source_alias="src", target_alias="tgt")).execute()
    builder = clauses(merge(spark, uri, source(spark, items), "tgt.key = src.key", source_alias="src", target_alias="tgt"))
    assert builder.execute() is not None
    assert rows(uri) == rows(expected)
    assert rows(uri)[0] == ("OLD", 0.0) and rows(uri)[2] == ("US", 2.0) and 3 not in rows(uri) and 12 in rows(uri) and 9 not in rows(uri)


#: The zone is read in the statement's expressions, alike with deletion vectors or copy-on-write
#: (the latter under ``soak``); the module runs each test in both DML regimes.
@pytest.mark.parametrize("deletion_vectors", ["true", pytest.param("false", marks=pytest.mark.soak)])
def test_merge_conditions_read_timestamps_in_utc_whatever_the_session_zone(spark: Any, tmp_path, deletion_vectors: str) -> None:
    """In a Tokyo session (UTC+9), a target row at 16:00 UTC on May 1st (May 2nd in Tokyo) has
    May 1st for ``CAST(t.ts AS DATE)`` in txnlog.spark's MERGE as in txnlog's Python MERGE,
    in clause conditions and values alike (delta-spark would take Tokyo's date)."""
    import datetime as dt

    import txnlog.spark as ts
    from tests.conftest import session_confs

    early, late = dt.datetime(2024, 5, 1, 16, tzinfo=dt.timezone.utc), dt.datetime(2024, 5, 3, tzinfo=dt.timezone.utc)
    target = [(1, early, None), (2, late, None), (3, early, None)]
    source = [(1, 10), (2, 20), (3, 30), (4, 40)]

    def clauses(builder: Any) -> Any:
        return (builder.when_matched_delete(predicate="CAST(t.ts AS DATE) = DATE'2024-05-01' AND s.v > 20")
                .when_matched_update({"day": "CAST(t.ts AS DATE)"})
                .when_not_matched_insert({"id": "s.id", "ts": "TIMESTAMP'2024-05-02 00:00:00'", "day": "CAST(TIMESTAMP'2024-05-02 00:00:00' AS DATE)"})
                .execute())

    uris = {how: str(tmp_path / how) for how in ("spark", "python")}
    for uri in uris.values():
        ts.write(spark.createDataFrame(target, "id long, ts timestamp, day date"), uri, properties={"delta.enableDeletionVectors": deletion_vectors})
    source_df = spark.createDataFrame(source, "id long, v long")
    with session_confs(spark, {"spark.sql.session.timeZone": "Asia/Tokyo"}):
        clauses(merge(spark, uris["spark"], source_df, "t.id = s.id"))
    clauses(Table(uris["python"]).merge(source_df.toArrow(), "t.id = s.id"))
    expected = sorted((r["id"], r["ts"], r["day"]) for r in Table(uris["python"]).snapshot().to_arrow().to_pylist())
    assert [(i, d) for i, _, d in expected] == [(1, dt.date(2024, 5, 1)), (2, dt.date(2024, 5, 3)), (4, dt.date(2024, 5, 2))]
    got = sorted((r["id"], r["ts"], r["day"]) for r in Table(uris["spark"]).snapshot().to_arrow().to_pylist())
    assert got == expected
