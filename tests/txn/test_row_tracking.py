"""Row tracking: fresh row ids at commit, the high-water mark, backfill, stable ids on read.

The log is checked as parsed here (orjson over the commit files), not through txnlog's replay;
the ids readers compute are checked against what the log and the data files say.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.duckdb_delta import duckdb_delta
from txnlog import AddFile, Table
from txnlog.errors import InvalidArgumentError, ProtocolViolationError
from txnlog.log.filenames import LOG_DIR

from .test_concurrency_processes import commit_actions, run_together

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])
ROW_TRACKING = {"delta.enableRowTracking": "true"}
ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
CORPUS = Path(os.environ.get("TXNLOG_CONFORMANCE_DIR", "/work/shared/conformance")) / "tables"


def rows(lo: int, hi: int, region: str = "EU") -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "region": [region] * (hi - lo)})


def latest(root: Path) -> int:
    return max(int(p.name[:20]) for p in (root / LOG_DIR).glob("*.json") if p.name[:20].isdigit())


def marks(root: Path) -> list[tuple[int, int]]:
    """(version, rowIdHighWaterMark) of every commit that wrote the row tracking domain."""
    out = []
    for version in range(latest(root) + 1):
        for action in commit_actions(root, version):
            body = action.get("domainMetadata")
            if body and body["domain"] == "delta.rowTracking":
                out.append((version, orjson.loads(body["configuration"])["rowIdHighWaterMark"]))
    return out


def adds(root: Path, version: int) -> list[dict[str, Any]]:
    return [a["add"] for a in commit_actions(root, version) if "add" in a]


def assert_ids_cover(table: Table, expected_rows: int) -> None:
    """Live files' id ranges are disjoint and, with the rows read, give each row one id."""
    read = table.snapshot().to_arrow(with_row_ids=True)
    assert read.num_rows == expected_rows
    ids = read.column("row_id").to_pylist()
    assert len(set(ids)) == len(ids)


def test_create_with_row_tracking_adds_the_features_and_names(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, properties=ROW_TRACKING)
    protocol = t.snapshot().protocol
    assert {"rowTracking", "domainMetadata"} <= set(protocol.writer_features or ())
    conf = t.snapshot().metadata.configuration
    assert conf[ID_COLUMN].startswith("_row-id-col-") and conf[VERSION_COLUMN].startswith("_row-commit-version-col-")
    # The names stay for the table's life, even when a new configuration leaves them out.
    with t.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**ROW_TRACKING, "delta.appendOnly": "false"})
    after = t.snapshot().metadata.configuration
    assert (after[ID_COLUMN], after[VERSION_COLUMN]) == (conf[ID_COLUMN], conf[VERSION_COLUMN])
    with pytest.raises(Exception, match="rowTrackingSuspended"):
        Table.create(tmp_path / "u", SCHEMA, properties={**ROW_TRACKING, "delta.rowTrackingSuspended": "true"})


def test_appends_get_consecutive_ids_and_a_rising_mark(tmp_path):
    root = tmp_path / "t"
    t = Table.create(root, SCHEMA, ["region"], properties=ROW_TRACKING)
    t.append(rows(0, 3))
    t.append(pa.concat_tables([rows(3, 5, "EU"), rows(5, 9, "US")]))  # two files in one commit
    with t.transaction() as txn:
        txn.write(rows(9, 10))
        txn.write(rows(10, 12, "US"))
    ranges = []
    for version in (1, 2, 3):
        for add in adds(root, version):
            assert add["defaultRowCommitVersion"] == version
            ranges.append((add["baseRowId"], orjson.loads(add["stats"])["numRecords"]))
    ranges.sort()
    assert [base for base, _ in ranges] == [sum(n for _, n in ranges[:i]) for i in range(len(ranges))]
    assert marks(root) == [(1, 2), (2, 8), (3, 11)]
    read = t.snapshot().to_arrow(with_row_ids=True).sort_by("id")
    assert sorted(read.column("row_id").to_pylist()) == list(range(12))
    by_id = dict(zip(read.column("id").to_pylist(), read.column("row_commit_version").to_pylist()))
    assert [by_id[i] for i in (0, 4, 9, 11)] == [1, 2, 3, 3]
    # A commit that assigns no id leaves the mark alone.
    with t.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**t.snapshot().metadata.configuration, "delta.appendOnly": "false"})
    assert marks(root)[-1] == (3, 11)


def test_a_lost_race_reassigns_above_the_winners_mark(tmp_path):
    root = tmp_path / "t"
    t = Table.create(root, SCHEMA, properties=ROW_TRACKING)
    t.append(rows(0, 2))
    loser = t.transaction()
    loser.write(rows(100, 103))
    t.append(rows(2, 7))  # wins version 2 with ids 2..6
    result = loser.commit()
    assert (result.version, result.attempts) == (3, 2)
    assert [a["baseRowId"] for a in adds(root, 3)] == [7]
    assert adds(root, 3)[0]["defaultRowCommitVersion"] == 3
    assert marks(root) == [(1, 1), (2, 6), (3, 9)]
    assert_ids_cover(t, 10)


def test_deletion_vector_keeps_ids_and_versions(tmp_path):
    root = tmp_path / "t"
    t = Table.create(root, SCHEMA, properties={**ROW_TRACKING, "delta.enableDeletionVectors": "true"})
    t.append(rows(0, 4))
    t.append(rows(4, 6))
    before = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in t.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    t.delete("id = 1")
    commit = commit_actions(root, latest(root))
    (readd,) = [a["add"] for a in commit if "add" in a]
    (remove,) = [a["remove"] for a in commit if "remove" in a]
    assert readd["deletionVector"] is not None
    assert (readd["baseRowId"], readd["defaultRowCommitVersion"]) == (0, 1) == (remove["baseRowId"], remove["defaultRowCommitVersion"])
    assert marks(root)[-1] == (2, 5)  # no new id
    after = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in t.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    assert after == {k: v for k, v in before.items() if k != 1}


def test_an_add_without_num_records_is_refused(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA, properties=ROW_TRACKING)
    txn = t.transaction()
    txn.add_files([AddFile(path="part-nostats.parquet", partition_values={}, size=10, modification_time=0, data_change=True)])
    with pytest.raises(ProtocolViolationError, match="part-nostats.parquet.*numRecords") as err:
        txn.commit()
    assert err.value.rule == "rowTracking"
    assert t.latest_version() == 0


def _file_without_stats(root: Path, data: pa.Table) -> AddFile:
    name = "part-written-elsewhere.parquet"
    pq.write_table(data, root / name)
    return AddFile(path=name, partition_values={}, size=(root / name).stat().st_size, modification_time=0, data_change=True)


def test_enabling_later_backfills_every_live_file_in_the_same_commit(tmp_path):
    root = tmp_path / "t"
    t = Table.create(root, SCHEMA)
    t.append(rows(0, 3))
    t.append(rows(3, 5))
    with t.transaction() as txn:  # a file whose add has no stats: its footer gives the count
        txn.add_files([_file_without_stats(root, rows(5, 9))])
    t.delete("id = 0")  # copy-on-write: the rewritten file is a new add
    enabling = t.transaction("SET TBLPROPERTIES")
    enabling.update_metadata(configuration=ROW_TRACKING)
    t.append(rows(9, 10))  # a concurrent append at the old protocol: no ids
    version = enabling.commit().version
    commit = commit_actions(root, version)
    assert "rowTracking" in next(a["protocol"] for a in commit if "protocol" in a)["writerFeatures"]
    backfilled = [a["add"] for a in commit if "add" in a]
    live = t.snapshot().files()
    assert sorted(a["path"] for a in backfilled) == sorted(live.column("path").to_pylist())  # the winner's too
    assert all(a["dataChange"] is False and a["defaultRowCommitVersion"] == version for a in backfilled)
    assert live.column("base_row_id").null_count == 0
    assert marks(root) == [(version, 8)]  # 9 live rows: ids 0..8
    assert sorted(t.snapshot().to_arrow(with_row_ids=True).column("row_id").to_pylist()) == list(range(9))
    t.append(rows(10, 12))
    assert [a["baseRowId"] for a in adds(root, version + 1)] == [9]


def test_rewrites_preserve_stable_ids_through_the_materialized_columns(tmp_path):
    root = tmp_path / "t"
    t = Table.create(root, SCHEMA, properties=ROW_TRACKING)
    t.append(rows(0, 3))
    t.append(rows(3, 6))
    original = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in t.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    # Compaction: same rows, new files, ids and versions kept.
    with t.transaction("OPTIMIZE") as txn:
        old = txn.read_whole_table()
        txn.remove_files(old, data_change=False)
        txn.write(t.snapshot().to_arrow(with_row_ids=True), data_change=False, preserve_row_ids=True)
    compacted = t.snapshot()
    assert compacted.files().column("base_row_id").to_pylist() == [6]  # a fresh range for the new file
    assert {r["id"]: (r["row_id"], r["row_commit_version"]) for r in compacted.to_arrow(with_row_ids=True).to_pylist()} == original
    conf = compacted.metadata.configuration
    file_columns = pq.read_schema(root / compacted.files().column("path")[0].as_py()).names
    assert conf[ID_COLUMN] in file_columns and conf[ID_COLUMN] not in compacted.to_arrow().column_names
    # An update: the changed row keeps its id, gets the new version; an insert gets a new id.
    current = compacted.to_arrow(with_row_ids=True)
    updated = current.filter(pa.compute.equal(current.column("id"), 4))
    updated = updated.set_column(updated.schema.get_field_index("row_commit_version"), "row_commit_version", pa.nulls(1, pa.int64()))
    updated = updated.set_column(0, "id", pa.array([40], pa.int64()))
    copied = current.filter(pa.compute.not_equal(current.column("id"), 4))
    inserted = rows(50, 51)
    with t.transaction("MERGE") as txn:
        txn.remove_files(txn.read_whole_table())
        txn.write(pa.concat_tables([copied, updated, inserted.append_column("row_id", pa.nulls(1, pa.int64()))
                                    .append_column("row_commit_version", pa.nulls(1, pa.int64()))], promote_options="permissive"),
                  preserve_row_ids=True)
    version = t.latest_version()
    final = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in t.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    expected = {k: v for k, v in original.items() if k != 4}
    expected[40] = (original[4][0], version)
    base = adds(root, version)[0]["baseRowId"]
    expected[50] = (base + 6, version)  # the inserted row is the file's seventh: its default id
    assert final == expected
    assert len({v[0] for v in final.values()}) == len(final)
    # The tables stay readable by delta-rs and DuckDB, hidden columns hidden.
    theirs = DeltaTable(str(root)).to_pyarrow_table()
    assert sorted(theirs.column("id").to_pylist()) == sorted(final) and theirs.column_names == ["id", "region"]
    con = duckdb_delta()
    duck = con.sql(f"select * from delta_scan('{root}')").fetch_arrow_table()
    assert sorted(duck.column("id").to_pylist()) == sorted(final) and sorted(duck.column_names) == ["id", "region"]


def test_preserving_or_reading_ids_needs_row_tracking(tmp_path):
    t = Table.create(tmp_path / "t", SCHEMA)
    t.append(rows(0, 2))
    with pytest.raises(InvalidArgumentError, match="row tracking"):
        t.snapshot().to_arrow(with_row_ids=True)
    with pytest.raises(InvalidArgumentError, match="row tracking"), t.transaction() as txn:
        txn.write(rows(2, 3), preserve_row_ids=True)
    assert t.latest_version() == 1


def test_corpus_table_written_with_row_tracking_reads_its_ids():
    root = CORPUS / "table_with_liquid_clustering"
    if not root.exists():
        pytest.skip("conformance corpus not available")
    snapshot = Table(root).snapshot()
    files = snapshot.files()
    expected = []
    for path, base, version in zip(files.column("path").to_pylist(), files.column("base_row_id").to_pylist(),
                                   files.column("default_row_commit_version").to_pylist()):
        data = pq.read_table(root / path)
        expected += [(i, base + pos, version) for pos, i in enumerate(data.column("id").to_pylist())]
    read = snapshot.to_arrow(with_row_ids=True)
    assert sorted(zip(*(read.column(c).to_pylist() for c in ("id", "row_id", "row_commit_version")))) == sorted(expected)
    assert len(expected) == 10


# --- concurrent writers in real processes -------------------------------------------------------


def _append_worker(job: dict[str, Any], barrier: Any) -> dict[str, Any]:
    t = Table(job["uri"])
    barrier.wait(timeout=120)
    versions = []
    for i in range(job["commits"]):
        lo = job["first_id"] + i * 3
        versions.append(int(t.append(rows(lo, lo + 1 + i % 3))))
    return {"versions": versions}


def test_concurrent_writers_never_share_ids(tmp_path):
    root = tmp_path / "t"
    t = Table.create(root, SCHEMA, properties=ROW_TRACKING)
    jobs = [{"uri": str(root), "commits": 6, "first_id": 1000 * w} for w in range(3)]
    reports = run_together(_append_worker, jobs, timeout_s=300)
    assert sorted(v for r in reports for v in r["versions"]) == list(range(1, 19))
    ranges = sorted((a["baseRowId"], orjson.loads(a["stats"])["numRecords"], v) for v in range(1, 19) for a in adds(root, v))
    for (base, n, _), (next_base, _, _) in zip(ranges, ranges[1:]):
        assert base + n == next_base  # disjoint and without gaps
    assert all(a["defaultRowCommitVersion"] == v for v in range(1, 19) for a in adds(root, v))
    mark_list = marks(root)
    assert [v for v, _ in mark_list] == list(range(1, 19))
    assert all(a < b for (_, a), (_, b) in zip(mark_list, mark_list[1:]))
    total = t.snapshot().to_arrow().num_rows
    assert mark_list[-1][1] == total - 1
    assert_ids_cover(t, total)
