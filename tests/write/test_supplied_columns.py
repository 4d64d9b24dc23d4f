"""Identity, generated and default columns (PROTOCOL.md; issue 25 points 4-6): the table supplies
their values on every write path through the one conform step, the commit keeps identity
high-water marks, and independent readers see the same rows."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import MetadataChangedError, ProtocolViolationError, SchemaError, TxnLogError
from txnlog.schema import LONG_MAX, default_column, generated_column, identity_column

from ..duckdb_delta import duckdb_delta

UTC = pa.timestamp("us", tz="UTC")


def _ts(*days: int) -> pa.Array:
    return pa.array([dt.datetime(2024, 5, d, 13, tzinfo=dt.timezone.utc) for d in days], UTC)


def _field_meta(table: Table, name: str) -> dict:
    fields = json.loads(table.snapshot().metadata.schema_string)["fields"]
    return next(f for f in fields if f["name"] == name)["metadata"]


def _events(path: Path, *, generated: str = "always", properties: dict[str, str] | None = None) -> Table:
    schema = pa.schema([
        identity_column("id", start=100, step=10, generated=generated),
        pa.field("ts", UTC),
        generated_column("day", pa.date32(), "CAST(ts AS DATE)"),
        default_column("status", pa.string(), "'new'"),
        pa.field("v", pa.int64()),
    ])
    return Table.create(str(path), schema=schema, partition_by=["day"], properties=properties or {})


def test_a_new_identity_generated_default_table_has_the_features_delta_requires(tmp_path: Path) -> None:
    table = _events(tmp_path)
    protocol = table.snapshot().protocol
    assert protocol.min_writer_version == 7
    assert {"identityColumns", "generatedColumns", "allowColumnDefaults"} <= set(protocol.writer_features or ())


def test_identity_values_are_generated_unique_and_the_high_water_mark_kept(tmp_path: Path) -> None:
    # The hazard: ids were written as NULL and no high-water mark was kept.
    table = _events(tmp_path)
    table.append(pa.table({"ts": _ts(1, 2, 2), "v": [1, 2, 3]}))
    assert _field_meta(table, "id")["delta.identity.highWaterMark"] == 120
    table.append(pa.table({"ts": _ts(3), "v": [4]}))
    rows = table.snapshot().to_arrow().sort_by("v").to_pylist()
    assert [r["id"] for r in rows] == [100, 110, 120, 130]
    assert [r["day"] for r in rows] == [dt.date(2024, 5, d) for d in (1, 2, 2, 3)]
    assert {r["status"] for r in rows} == {"new"}
    assert _field_meta(table, "id")["delta.identity.highWaterMark"] == 130
    tags = table.history(1)[0].to_dict().get("tags")
    assert tags == {"delta.identity.schemaUpdate": "true"}  # an identity-only metadata update, as delta-spark tags it


def test_generated_values_are_computed_in_utc_whatever_zone_the_data_carries(tmp_path: Path) -> None:
    # 03:00 UTC on May 2nd is May 1st in Los Angeles: the day is UTC's, the table's own zone.
    table = _events(tmp_path)
    instants = [dt.datetime(2024, 5, 2, 3, tzinfo=dt.timezone.utc), dt.datetime(2024, 5, 2, 23, tzinfo=dt.timezone.utc)]
    zoned = pa.array(instants, pa.timestamp("us", tz="America/Los_Angeles"))
    table.append(pa.table({"ts": zoned, "v": [1, 2]}))
    assert [r["day"] for r in table.snapshot().to_arrow().sort_by("v").to_pylist()] == [dt.date(2024, 5, 2)] * 2
    # A given value is checked against the UTC day too.
    table.append(pa.table({"ts": zoned.slice(0, 1), "day": [dt.date(2024, 5, 2)], "v": [3]}))
    with pytest.raises(ProtocolViolationError, match="column 'day'"):
        table.append(pa.table({"ts": zoned.slice(0, 1), "day": [dt.date(2024, 5, 1)], "v": [4]}))


def test_check_constraints_read_timestamps_in_utc_whatever_zone_the_data_carries(tmp_path: Path) -> None:
    # 01:00 UTC on May 2nd is still May 1st in Los Angeles; 23:00 UTC on May 1st is May 1st in both.
    table = Table.create(str(tmp_path), pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("v", pa.int64())]),
                         properties={"delta.constraints.from_may_2nd": "CAST(ts AS DATE) >= DATE'2024-05-02'"})
    instants = [dt.datetime(2024, 5, 2, 1, tzinfo=dt.timezone.utc), dt.datetime(2024, 5, 1, 23, tzinfo=dt.timezone.utc)]
    zoned = pa.array(instants, pa.timestamp("us", tz="America/Los_Angeles"))
    table.append(pa.table({"ts": zoned.slice(0, 1), "v": [1]}))
    with pytest.raises(ProtocolViolationError, match="from_may_2nd"):
        table.append(pa.table({"ts": zoned.slice(1, 1), "v": [2]}))
    assert table.snapshot().to_arrow().column("v").to_pylist() == [1]


def test_independent_readers_see_the_generated_values(tmp_path: Path) -> None:
    table = _events(tmp_path)
    table.append(pa.table({"ts": _ts(1, 2), "v": [1, 2]}))
    con = duckdb_delta()
    got = con.sql(f"SELECT id, day, status, v FROM delta_scan('{tmp_path}') ORDER BY v").fetchall()
    assert got == [(100, dt.date(2024, 5, 1), "new", 1), (110, dt.date(2024, 5, 2), "new", 2)]
    deltalake = pytest.importorskip("deltalake")
    rows = deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table().sort_by("v").select(["id", "day", "status", "v"]).to_pylist()
    assert [tuple(r.values()) for r in rows] == got


def test_explicit_values_are_refused_for_always_and_kept_for_by_default(tmp_path: Path) -> None:
    always = _events(tmp_path / "always")
    with pytest.raises(SchemaError, match="'id'.*GENERATED ALWAYS") as err:
        always.append(pa.table({"id": [1], "ts": _ts(1), "v": [1]}))
    assert err.value.field == "id" and always.latest_version() == 0
    by_default = _events(tmp_path / "default", generated="by default")
    by_default.append(pa.table({"id": pa.array([7, None], pa.int64()), "ts": _ts(1, 1), "v": [1, 2]}))
    by_default.append(pa.table({"ts": _ts(2), "v": [3]}))
    assert [r["id"] for r in by_default.snapshot().to_arrow().sort_by("v").to_pylist()] == [7, 100, 110]


def test_a_wrong_generated_value_is_refused_naming_the_column_and_a_right_one_accepted(tmp_path: Path) -> None:
    # The hazard: wrong generated values were accepted.
    table = _events(tmp_path)
    with pytest.raises(ProtocolViolationError, match="column 'day'.*CAST\\(ts AS DATE\\)"):
        table.append(pa.table({"ts": _ts(1), "day": [dt.date(2023, 1, 1)], "v": [1]}))
    assert table.latest_version() == 0
    table.append(pa.table({"ts": _ts(1), "day": [dt.date(2024, 5, 1)], "v": [1]}))
    table.append(pa.table({"ts": pa.nulls(1, UTC), "day": pa.nulls(1, pa.date32()), "v": [2]}))  # NULL <=> NULL
    assert [r["day"] for r in table.snapshot().to_arrow().sort_by("v").to_pylist()] == [dt.date(2024, 5, 1), None]


def test_generation_expressions_of_other_functions(tmp_path: Path) -> None:
    schema = pa.schema([
        pa.field("ts", UTC), pa.field("s", pa.string()),
        generated_column("y", pa.int32(), "year(ts)"),
        generated_column("ym", pa.string(), "date_format(ts, 'yyyy-MM')"),
        generated_column("head", pa.string(), "substring(s, 1, 2)"),
        generated_column("up", pa.string(), "upper(s) || '!'"),
    ])
    table = Table.create(str(tmp_path), schema=schema)
    table.append(pa.table({"ts": _ts(9), "s": ["abc"]}))
    assert table.snapshot().to_arrow().select(["y", "ym", "head", "up"]).to_pylist() == [
        {"y": 2024, "ym": "2024-05", "head": "ab", "up": "ABC!"}]


def test_identity_overflow_is_refused_and_leaves_the_table_alone(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path), schema=pa.schema([identity_column("id", start=LONG_MAX - 1), pa.field("v", pa.int64())]))
    table.append(pa.table({"v": [1, 2]}))  # LONG_MAX - 1, LONG_MAX
    with pytest.raises(ProtocolViolationError, match="'id'.*overflows"):
        table.append(pa.table({"v": [3]}))
    assert table.latest_version() == 1
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [LONG_MAX - 1, LONG_MAX]


def test_a_negative_step_counts_down(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path), schema=pa.schema([identity_column("id", start=-1, step=-2), pa.field("v", pa.int64())]))
    table.append(pa.table({"v": [1, 2]}))
    table.append(pa.table({"v": [3]}))
    assert [r["id"] for r in table.snapshot().to_arrow().sort_by("v").to_pylist()] == [-1, -3, -5]
    assert _field_meta(table, "id")["delta.identity.highWaterMark"] == -5


def test_merge_inserts_get_identity_generated_and_default_values_and_updates_recompute(tmp_path: Path) -> None:
    table = _events(tmp_path)
    table.append(pa.table({"ts": _ts(1), "v": [1]}))
    source = pa.table({"v": [1, 2], "ts": _ts(4, 5)})
    table.merge(source, "v", when_matched_update={"ts": "s.ts"}, when_not_matched_insert={"v": "s.v", "ts": "s.ts"})
    rows = table.snapshot().to_arrow().sort_by("v").to_pylist()
    assert [(r["id"], r["day"], r["status"]) for r in rows] == [(100, dt.date(2024, 5, 4), "new"), (110, dt.date(2024, 5, 5), "new")]
    assert _field_meta(table, "id")["delta.identity.highWaterMark"] == 110
    with pytest.raises(SchemaError, match="'id'"):
        table.merge(pa.table({"v": [9], "id": [1]}), "v", when_not_matched_insert={"v": "s.v", "id": "s.id"})


def test_an_identity_only_commit_does_not_fail_a_transaction_that_changes_no_metadata(tmp_path: Path) -> None:
    table = _events(tmp_path)
    table.append(pa.table({"ts": _ts(1), "v": [1]}))
    with table.transaction("DELETE") as deleting:
        files = deleting.filter_files("v = 1")
        table.append(pa.table({"ts": _ts(2), "v": [2]}))  # wins: moves the high-water mark only
        deleting.remove_files(files)
        deleting.commit()
    assert [r["id"] for r in table.snapshot().to_arrow().to_pylist()] == [110]
    assert _field_meta(table, "id")["delta.identity.highWaterMark"] == 110


def test_two_concurrent_identity_appends_do_not_both_commit(tmp_path: Path) -> None:
    table = _events(tmp_path)
    first = table.transaction("WRITE")
    first.write(pa.table({"ts": _ts(1), "v": [1]}))
    table.append(pa.table({"ts": _ts(2), "v": [2]}))  # the same ids, committed first
    with pytest.raises(MetadataChangedError):
        first.commit()
    ids = table.snapshot().to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids))


def test_concurrent_writers_in_threads_never_share_an_id(tmp_path: Path) -> None:
    table = _events(tmp_path)
    errors: list[BaseException] = []

    def append(k: int) -> None:
        for _attempt in range(20):
            try:
                Table(str(tmp_path)).append(pa.table({"ts": _ts(1, 2), "v": [k, k]}))
                return
            except MetadataChangedError:
                continue
            except TxnLogError as e:  # pragma: no cover - reported below
                errors.append(e)
                return

    threads = [threading.Thread(target=append, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = table.snapshot().to_arrow().column("id").to_pylist()
    assert len(ids) == 8 and len(set(ids)) == 8


def test_a_default_needs_its_feature_and_applies_to_rows_lacking_the_column(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64()), default_column("n", pa.int32(), "41 + 1"), default_column("t", pa.string(), "'x'")])
    table = Table.create(str(tmp_path), schema=schema)
    table.append(pa.table({"k": [1]}))
    table.append(pa.table({"k": [2], "n": pa.array([None], pa.int32())}))  # given (NULL): kept
    table.merge(pa.table({"k": [3]}), "k", when_not_matched_insert={"k": "s.k"})
    assert table.snapshot().to_arrow().sort_by("k").to_pylist() == [
        {"k": 1, "n": 42, "t": "x"}, {"k": 2, "n": None, "t": "x"}, {"k": 3, "n": 42, "t": "x"}]


def test_a_filter_on_the_source_column_prunes_files_through_the_generated_partition_column(tmp_path: Path) -> None:
    table = _events(tmp_path, properties={"delta.dataSkippingNumIndexedCols": "0"})  # no stats on ts: only the partitions can skip
    for day in (1, 2, 3):
        table.append(pa.table({"ts": _ts(day), "v": [day]}))
    snapshot = table.snapshot()
    assert snapshot.files("ts > TIMESTAMP '2024-05-02 00:00:00+00:00'").num_rows == 2
    assert snapshot.files("ts < '2024-05-01T20:00:00+00:00'").num_rows == 1  # day <= 2024-05-01
    assert snapshot.files("ts = TIMESTAMP '2024-05-03 13:00:00+00:00' AND v > 0").num_rows == 1
    assert snapshot.files("ts > TIMESTAMP '2024-05-02 00:00:00+00:00' OR v = 1").num_rows == 3  # no top-level comparison: no pruning
    # pruning never changes which rows match
    assert sorted(snapshot.to_arrow(predicate="ts >= TIMESTAMP '2024-05-02 13:00:00+00:00'").column("v").to_pylist()) == [2, 3]


def test_by_default_ids_given_as_ints_with_nulls_are_numbered_as_longs(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path), schema=pa.schema([identity_column("id", generated="by default"), pa.field("v", pa.int64())]))
    table.append(pa.table({"id": pa.array([None, 5, None], pa.int32()), "v": [1, 2, 3]}))
    table.append(pa.table({"v": [4]}))  # the mark passed the given 5: numbering goes on after it
    assert [r["id"] for r in table.snapshot().to_arrow().sort_by("v").to_pylist()] == [1, 5, 2, 6]


def test_an_append_of_given_ids_below_the_mark_commits_over_an_identity_only_winner(tmp_path: Path) -> None:
    # IdentityColumnConflictSuite: an insert of explicit values that leaves the mark alone changes no
    # metadata, so a concurrent commit that only moved the mark does not fail it.
    table = _events(tmp_path, generated="by default")
    table.append(pa.table({"ts": _ts(1, 1), "v": [1, 2]}))  # ids 100, 110: mark 110
    loser = table.transaction("WRITE")
    loser.write(pa.table({"id": [105], "ts": _ts(2), "v": [3]}))
    table.append(pa.table({"ts": _ts(3), "v": [4]}))  # wins: id 120, mark 120
    loser.commit()
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [100, 105, 110, 120]
    assert _field_meta(table, "id")["delta.identity.highWaterMark"] == 120


def test_an_empty_batch_keeps_the_types_of_the_columns_it_would_number_and_compute(tmp_path: Path) -> None:
    """Missing identity and generated columns are untyped placeholders until computed; a batch
    with no rows computes nothing, so its placeholders must keep the columns' types."""
    from txnlog.write.conform import ConformSpec, IdentityAllocator

    table = Table.create(str(tmp_path / "t"), pa.schema([identity_column("id"), pa.field("v", pa.int64()),
                                                         generated_column("w", pa.int64(), "v * 2")]))
    spec = ConformSpec.for_configuration(table.snapshot().table_configuration, str(tmp_path / "t"))
    for rows in ([], [5]):
        batch = spec.conform_batch(pa.record_batch({"v": pa.array(rows, pa.int64())}), IdentityAllocator())
        assert {f.name: f.type for f in batch.schema} == {"v": pa.int64(), "id": pa.int64(), "w": pa.int64()}
        assert batch.to_pylist() == [{"v": v, "id": 1, "w": v * 2} for v in rows]
