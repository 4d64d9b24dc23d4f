"""One test per conflict rule and isolation level (docs/concurrency.md); the protocol and
metadata rules are in test_table_changes.py.

Each test starts the loser's transaction, lets a winner commit, then commits the loser: the
loser must either raise the precise error or commit at the version after the winner.
"""

from __future__ import annotations

import pytest

from txnlog.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
)
from txnlog.txn.isolation import IsolationLevel

from .conftest import make_file

LEVELS = list(IsolationLevel)


def blind_append(table, region="EU", lo=100, hi=110):
    with table.transaction("WRITE") as w:
        w.add_files([make_file(region, lo, hi)])
    return w.result


def read_then_append(table, region="EU", lo=100, hi=110):
    """A non-blind append: it read something first (isBlindAppend=false)."""
    with table.transaction("MERGE") as w:
        w.filter_files("region = 'nowhere'")
        w.add_files([make_file(region, lo, hi)])
    return w.result


def delete_where(table, predicate, operation="DELETE"):
    with table.transaction(operation) as w:
        w.remove_files(w.filter_files(predicate))
    return w.result


def compact(table, predicate):
    """OPTIMIZE: remove and re-add the same rows, all dataChange=false."""
    with table.transaction("OPTIMIZE") as w:
        files = w.filter_files(predicate)
        w.remove_files(files, data_change=False)
        w.add_files([make_file("EU", 1, 10, data_change=False)], data_change=False)
    return w.result


def test_blind_appends_never_conflict(table):
    loser = table.transaction("WRITE")
    loser.add_files([make_file("EU", 50, 60)])
    winner = blind_append(table)
    assert loser.commit() == winner + 1
    assert table.history(1)[0].commit_info.is_blind_append is True


@pytest.mark.parametrize("level", LEVELS)
def test_metadata_change_conflicts(table, level):
    loser = table.transaction("WRITE", level)
    loser.add_files([make_file("EU", 50, 60)])
    with table.transaction("SET TBLPROPERTIES") as w:
        w.update_metadata(configuration={"delta.checkpointInterval": "5"})
    with pytest.raises(MetadataChangedError) as err:
        loser.commit()
    assert err.value.winning_operation == "SET TBLPROPERTIES"


def test_same_domain_conflicts_other_domain_does_not(tmp_path):
    from txnlog import Table

    from .conftest import SCHEMA

    t = Table.create(tmp_path / "d", SCHEMA, properties={"delta.feature.domainMetadata": "supported"})
    a, b, c = t.transaction(), t.transaction(), t.transaction()
    a.set_domain_metadata("app.watermark", '{"w": 1}')
    b.set_domain_metadata("app.watermark", '{"w": 2}')
    c.set_domain_metadata("app.other", '{"x": 1}')
    a.commit()
    with pytest.raises(ConcurrentTransactionError, match="app.watermark"):
        b.commit()
    assert c.commit() == a.result + 1
    assert t.snapshot().domain_metadata("app.watermark") == '{"w": 1}'


@pytest.mark.parametrize("level", LEVELS)
def test_app_transaction_conflicts(table, level):
    loser = table.transaction("STREAMING UPDATE", level)
    assert loser.app_transaction_version("stream-1") is None
    loser.set_app_transaction("stream-1", 0)
    loser.add_files([make_file("EU", 50, 60)])
    other = table.transaction("STREAMING UPDATE")
    other.set_app_transaction("stream-2", 0)
    other.add_files([make_file("EU", 60, 70)])
    with table.transaction("STREAMING UPDATE") as w:
        w.set_app_transaction("stream-1", 0)
        w.add_files([make_file("EU", 70, 80)])
    with pytest.raises(ConcurrentTransactionError, match="stream-1"):
        loser.commit()
    assert other.commit() == w.result + 1  # a different app id does not conflict


@pytest.mark.parametrize(
    "level, winner_kind, conflicts",
    [
        (IsolationLevel.SERIALIZABLE, "blind", True),
        (IsolationLevel.SERIALIZABLE, "non_blind", True),
        (IsolationLevel.WRITE_SERIALIZABLE, "blind", False),
        (IsolationLevel.WRITE_SERIALIZABLE, "non_blind", True),
        (IsolationLevel.SNAPSHOT_ISOLATION, "blind", False),
        (IsolationLevel.SNAPSHOT_ISOLATION, "non_blind", False),
    ],
)
def test_concurrent_append_matching_read_predicate(table, level, winner_kind, conflicts):
    loser = table.transaction("UPDATE", level)
    loser.remove_files(loser.filter_files("region = 'EU'"))
    loser.add_files([make_file("EU", 1, 10)])
    winner = blind_append(table, "EU") if winner_kind == "blind" else read_then_append(table, "EU")
    if conflicts:
        with pytest.raises(ConcurrentAppendError) as err:
            loser.commit()
        assert err.value.winning_version == winner
        assert err.value.predicate == "region = 'EU'"
        assert err.value.conflicting_file.startswith("region=EU/")
    else:
        assert loser.commit() == winner + 1


@pytest.mark.parametrize("level", [IsolationLevel.SERIALIZABLE, IsolationLevel.WRITE_SERIALIZABLE])
def test_append_outside_read_partition_does_not_conflict(table, level):
    loser = table.transaction("UPDATE", level)
    loser.remove_files(loser.filter_files("region = 'EU'"))
    winner = read_then_append(table, "US")
    assert loser.commit() == winner + 1


def test_append_excluded_by_stats_does_not_conflict(table):
    """Beyond delta-spark: min/max stats of the winner's file rule it out of `id > 1000`."""
    loser = table.transaction("UPDATE", IsolationLevel.SERIALIZABLE)
    loser.filter_files("region = 'EU' AND id > 1000")
    loser.add_files([make_file("EU", 1001, 1002)])
    winner = read_then_append(table, "EU", 1, 10)
    assert loser.commit() == winner + 1

    again = table.transaction("UPDATE", IsolationLevel.SERIALIZABLE)
    again.filter_files("region = 'EU' AND id > 1000")
    again.add_files([make_file("EU", 2000, 2001)])
    read_then_append(table, "EU", 500, 1500)  # its max id is above 1000: it may hold matches
    with pytest.raises(ConcurrentAppendError):
        again.commit()


@pytest.mark.parametrize(
    "level, winner_kind, conflicts",
    [
        (IsolationLevel.SERIALIZABLE, "blind", True),
        (IsolationLevel.WRITE_SERIALIZABLE, "blind", False),
        (IsolationLevel.WRITE_SERIALIZABLE, "non_blind", True),
        (IsolationLevel.SNAPSHOT_ISOLATION, "non_blind", False),
    ],
)
def test_whole_table_read_and_concurrent_append(table, level, winner_kind, conflicts):
    loser = table.transaction("OVERWRITE", level)
    loser.remove_files(loser.read_whole_table())
    winner = blind_append(table, "US") if winner_kind == "blind" else read_then_append(table, "US")
    if conflicts:
        with pytest.raises(ConcurrentAppendError, match="read in full"):
            loser.commit()
    else:
        assert loser.commit() == winner + 1


def test_compaction_adds_are_not_appends(table):
    loser = table.transaction("UPDATE", IsolationLevel.SERIALIZABLE)
    loser.filter_files("region = 'US'")
    loser.add_files([make_file("US", 30, 31)])
    with table.transaction("OPTIMIZE") as w:
        w.add_files([make_file("EU", 1, 10, data_change=False)], data_change=False)
    assert loser.commit() == w.result + 1


@pytest.mark.parametrize("level", LEVELS)
def test_delete_of_a_read_file_conflicts(table, level):
    loser = table.transaction("UPDATE", level)
    loser.filter_files("id = 5")
    loser.add_files([make_file("EU", 5, 5)])
    winner = delete_where(table, "region = 'EU'")
    with pytest.raises(ConcurrentDeleteReadError) as err:
        loser.commit()
    assert err.value.winning_version == winner
    assert err.value.conflicting_file.startswith("region=EU/")


def test_delete_of_an_unread_file_does_not_conflict(table):
    loser = table.transaction("UPDATE", IsolationLevel.SERIALIZABLE)
    loser.remove_files(loser.filter_files("region = 'US'"))
    winner = delete_where(table, "region = 'EU'")
    assert loser.commit() == winner + 1


def test_any_delete_conflicts_with_whole_table_read(table):
    """Even a file the loser never saw: it was added and deleted after the loser's read."""
    loser = table.transaction("WRITE", IsolationLevel.SNAPSHOT_ISOLATION)
    loser.read_whole_table()
    loser.add_files([make_file("EU", 50, 51)])
    blind_append(table, "US", 500, 600)  # SnapshotIsolation: appends do not count
    delete_where(table, "id >= 500")
    with pytest.raises(ConcurrentDeleteReadError, match="read in full"):
        loser.commit()


def test_compaction_of_a_read_file_does_not_fail_a_reader(table):
    """Beyond delta-spark: OPTIMIZE's dataChange=false removes leave the rows unchanged."""
    loser = table.transaction("MERGE", IsolationLevel.SERIALIZABLE)
    loser.filter_files("region = 'EU'")
    loser.add_files([make_file("US", 40, 41)])
    winner = compact(table, "region = 'EU'")
    assert loser.commit() == winner + 1


@pytest.mark.parametrize("winner_compacts", [False, True])
def test_delete_delete_conflicts_even_against_compaction(table, winner_compacts):
    loser = table.transaction("DELETE", IsolationLevel.SNAPSHOT_ISOLATION)
    loser.remove_files(loser.filter_files("region = 'EU'"))
    winner = compact(table, "region = 'EU'") if winner_compacts else delete_where(table, "region = 'EU'")
    expected = ConcurrentDeleteDeleteError if winner_compacts else (ConcurrentDeleteReadError, ConcurrentDeleteDeleteError)
    with pytest.raises(expected) as err:
        loser.commit()
    assert err.value.winning_version == winner


def test_compaction_is_downgraded_to_snapshot_isolation(table):
    """A dataChange=false transaction ignores concurrent appends even if it read everything."""
    loser = table.transaction("OPTIMIZE", IsolationLevel.SERIALIZABLE)
    files = loser.read_whole_table()
    loser.remove_files(files, data_change=False)
    loser.add_files([make_file("EU", 1, 20, data_change=False)], data_change=False)
    winner = read_then_append(table, "EU")
    assert loser.commit() == winner + 1
    assert table.history(1)[0].commit_info.isolation_level == "SnapshotIsolation"


def test_conflict_is_checked_against_every_winner(table):
    loser = table.transaction("UPDATE")
    loser.remove_files(loser.filter_files("region = 'US'"))
    blind_append(table, "EU")  # harmless
    read_then_append(table, "EU")  # harmless
    third = delete_where(table, "region = 'US'")
    with pytest.raises((ConcurrentDeleteReadError, ConcurrentDeleteDeleteError)) as err:
        loser.commit()
    assert err.value.winning_version == third
