"""Row-level concurrency: a merge-on-read DML commits through a concurrent compaction or a
concurrent DML on other rows of the same files, and a compaction carries a concurrent DML's
deletions onto its output. Each case is an explicit interleaving: the loser reads before the
winner commits and commits after it. Outcomes are checked against DuckDB's delta_scan."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.dml.conftest import duckdb_rows, sorted_rows
from txnlog import Table, dml
from txnlog import properties as props
from txnlog.errors import CommitConflictError, ConcurrentDeleteDeleteError, ConcurrentDeleteReadError, ConcurrentRowsError
from txnlog.optimize import OptimizeParameters, stage_optimize

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
ROW_LEVEL = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}


def make_table(path: Path, properties: dict[str, str] = ROW_LEVEL, files: int = 3, rows: int = 10) -> Table:
    table = Table.create(str(path), SCHEMA, properties=properties)
    for k in range(files):
        table.append(pa.table({"id": list(range(k * rows, (k + 1) * rows)), "v": [0] * rows}))
    return table


def compact(table: Table) -> int:
    version = table.optimize()
    assert version is not None
    return int(version)


def rows(table: Table) -> list[tuple]:
    return sorted_rows([(r["id"], r["v"]) for r in table.snapshot().to_arrow().to_pylist()])


def independent_rows(table: Table) -> list[tuple]:
    return sorted_rows(duckdb_rows(table.uri, ["id", "v"]))


def test_delete_commits_through_a_concurrent_compaction(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    txn = table.transaction("DELETE")
    dml.delete(txn, "id in (3, 15, 27)")
    optimized = compact(table)
    result = txn.commit()
    assert result.version == optimized + 1
    assert [(s.version, s.operation, s.kind) for s in result.rebased] == [(optimized, "OPTIMIZE", "compaction")]
    expected = [(i, 0) for i in range(30) if i not in (3, 15, 27)]
    assert rows(table) == expected == independent_rows(table)
    assert table.snapshot().num_files == 1  # the compacted file, with the deletions as its vector
    info = table.history(limit=1)[0].commit_info
    assert info.other[props.REBASE_COMMIT_INFO_KEY] == [{"version": optimized, "operation": "OPTIMIZE", "kind": "compaction", "files": 3}]


def test_update_over_a_compaction_keeps_its_new_rows_and_row_ids(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    before = {r["id"]: r["row_id"] for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    txn = table.transaction("UPDATE")
    dml.update(txn, "id % 7 = 0", {"v": "v + 100"})
    compact(table)
    result = txn.commit()
    assert result.rebased and result.rebased[0].kind == "compaction"
    expected = [(i, 100 if i % 7 == 0 else 0) for i in range(30)]
    assert rows(table) == expected == independent_rows(table)
    after = {r["id"]: r["row_id"] for r in table.snapshot().to_arrow(with_row_ids=True).to_pylist()}
    assert after == before  # updated rows keep their ids through the compaction and the rebase


def test_merge_over_a_compaction(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    source = pa.table({"id": [5, 25, 40], "v": [7, 8, 9]})
    txn = table.transaction("MERGE")
    dml.merge(txn, source, "id", when_matched_update="*", when_not_matched_insert="*")
    compact(table)
    assert txn.commit().rebased
    expected = sorted_rows([(i, {5: 7, 25: 8}.get(i, 0)) for i in range(30)] + [(40, 9)])
    assert rows(table) == expected == independent_rows(table)


def test_two_deletes_of_other_rows_of_the_same_file_both_commit(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    first, second = table.transaction("DELETE"), table.transaction("DELETE")
    dml.delete(first, "id in (1, 2)")
    dml.delete(second, "id in (4, 5)")
    won = first.commit()
    result = second.commit()
    assert [(s.version, s.kind) for s in result.rebased] == [(won.version, "deletion vector")]
    expected = [(i, 0) for i in range(30) if i not in (1, 2, 4, 5)]
    assert rows(table) == expected == independent_rows(table)


def test_update_racing_a_delete_of_other_rows_commits_and_keeps_both(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    update, delete = table.transaction("UPDATE"), table.transaction("DELETE")
    dml.update(update, "id = 12", {"v": "1"})
    dml.delete(delete, "id = 13")
    delete.commit()
    update.commit()
    expected = [(i, 1 if i == 12 else 0) for i in range(30) if i != 13]
    assert rows(table) == expected == independent_rows(table)


def test_the_same_rows_conflict_naming_the_file_and_rows(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    first, second = table.transaction("UPDATE"), table.transaction("DELETE")
    dml.update(first, "id in (11, 12)", {"v": "5"})
    dml.delete(second, "id in (12, 13)")
    first.commit()
    with pytest.raises(ConcurrentRowsError) as caught:
        second.commit()
    error = caught.value
    assert isinstance(error, ConcurrentDeleteReadError)  # handlers of the file-level error still catch it
    assert error.conflicting_file and error.conflicting_file in str(error)
    assert error.detail == [2]  # the physical position of id 12 in its file
    assert "row positions 2" in str(error)
    assert rows(table) == [(i, 5 if i in (11, 12) else 0) for i in range(30)]


def test_compaction_carries_a_concurrent_delete_onto_its_output(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    optimize = table.transaction("OPTIMIZE")
    stage_optimize(optimize, OptimizeParameters())
    deleted = table.delete("id in (0, 17, 29)")
    result = optimize.commit()
    assert [(s.version, s.operation, s.kind) for s in result.rebased] == [(deleted.version, "DELETE", "deletion vector")]
    assert rows(table) == [(i, 0) for i in range(30) if i not in (0, 17, 29)] == independent_rows(table)
    assert table.snapshot().num_files == 1
    assert table.history(limit=1)[0].commit_info.operation == "OPTIMIZE"


def test_without_row_tracking_a_compaction_still_conflicts_and_says_what_would_help(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", {"delta.enableDeletionVectors": "true"})
    txn = table.transaction("DELETE")
    dml.delete(txn, "id = 3")
    compact(table)
    with pytest.raises(ConcurrentDeleteDeleteError, match="enabling row tracking"):
        txn.commit()


def test_a_copy_on_write_winner_still_conflicts(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    txn = table.transaction("DELETE")
    dml.delete(txn, "id = 3")
    with table.transaction("WRITE") as rewrite:  # a copy-on-write rewrite of the first file
        first = rewrite.filter_files("id < 10")
        rewrite.write(pa.table({"id": list(range(10)), "v": [9] * 10}))
        rewrite.remove_files(first)
    with pytest.raises(CommitConflictError) as caught:
        txn.commit()
    assert not isinstance(caught.value, ConcurrentRowsError)
    assert rows(table) == [(i, 9 if i < 10 else 0) for i in range(30)]


def test_a_winner_adding_rows_the_delete_would_match_still_conflicts(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", {**ROW_LEVEL, "delta.isolationLevel": "Serializable"})
    txn = table.transaction("DELETE")
    dml.delete(txn, "v = 0 and id < 5")
    table.update("id = 12", {"v": "0"})  # touches another file; its new row has v = 0 but id 12
    txn.commit()  # no new row matches: it commits
    txn2 = table.transaction("DELETE")
    dml.delete(txn2, "v = 1 or id = 27")  # (one that deletes nothing commits under SnapshotIsolation)
    table.update("id = 20", {"v": "1"})  # a new row that the DELETE would have matched
    with pytest.raises(Exception, match="matches this transaction's read predicate|read"):
        txn2.commit()


def test_row_level_concurrency_can_be_turned_off(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", {**ROW_LEVEL, "txnlog.rowLevelConcurrency.enabled": "false"})
    txn = table.transaction("DELETE")
    dml.delete(txn, "id = 3")
    compact(table)
    with pytest.raises(ConcurrentDeleteDeleteError) as caught:
        txn.commit()
    assert "row tracking" not in str(caught.value)  # it is on: the property is what stops the rebase


def test_a_winners_new_rows_are_judged_by_their_values_not_only_their_stats(tmp_path: Path) -> None:
    """The winner's new row versions (ids 5 and 20) have stats [5, 20], which may hold id 6 that
    the loser reads; their values do not, so the loser commits."""
    table = make_table(tmp_path / "t")
    loser, winner = table.transaction("UPDATE"), table.transaction("UPDATE")
    dml.update(loser, "id in (6, 25)", {"v": "v + 1"})
    dml.update(winner, "id in (5, 20)", {"v": "v + 2"})
    winner.commit()
    loser.commit()
    expected = [(i, {6: 1, 25: 1, 5: 2, 20: 2}.get(i, 0)) for i in range(30)]
    assert rows(table) == expected == independent_rows(table)
    # Without the rebase the stats alone decide, as before.
    table2 = make_table(tmp_path / "t2", {**ROW_LEVEL, "txnlog.rowLevelConcurrency.enabled": "false"})
    loser, winner = table2.transaction("UPDATE"), table2.transaction("UPDATE")
    dml.update(loser, "id in (6, 25)", {"v": "v + 1"})
    dml.update(winner, "id in (5, 20)", {"v": "v + 2"})
    winner.commit()
    with pytest.raises(CommitConflictError):
        loser.commit()
