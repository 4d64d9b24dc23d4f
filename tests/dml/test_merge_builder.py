"""The MERGE builder: clauses in Delta's order, against a Python model of Delta's MERGE and
against deltalake's merge; deletion vectors, the change data feed, row tracking and row-level
rebasing with every clause."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txnlog
from txnlog.dml import ClauseSpec, MergePlan
from txnlog.errors import ConcurrentRowsError, InvalidArgumentError

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
Row = dict[str, int]


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: the builder method, its arguments, and what it means to the model."""

    method: str
    updates: dict[str, str] | None
    predicate: str | None
    holds: Callable[..., bool]  # (t, s) for matched, (s) for not matched, (t) by source
    value: Callable[..., int] | None = None  # the new v

    def add(self, builder: Any) -> Any:
        args: dict[str, Any] = {"predicate": self.predicate}
        if self.updates is not None:
            args["updates"] = self.updates
        return getattr(builder, self.method)(**args)

    @property
    def kind(self) -> str:
        return "by_source" if "by_source" in self.method else "not_matched" if "not_matched" in self.method else "matched"


MATCHED_CONDITIONS = [(None, lambda t, s: True), ("s.v > t.v", lambda t, s: s["v"] > t["v"]),
                      ("t.v % 2 = 0", lambda t, s: t["v"] % 2 == 0), ("s.v < 5", lambda t, s: s["v"] < 5)]
SOURCE_CONDITIONS = [(None, lambda s: True), ("s.v > 3", lambda s: s["v"] > 3), ("s.v % 2 = 1", lambda s: s["v"] % 2 == 1)]
TARGET_CONDITIONS = [(None, lambda t: True), ("t.v > 4", lambda t: t["v"] > 4), ("t.v % 3 = 0", lambda t: t["v"] % 3 == 0)]


@st.composite
def clauses(draw: Any) -> list[Clause]:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["update", "update_all", "delete", "insert", "insert_all", "by_source_update", "by_source_delete"]))
        if kind in ("update", "update_all", "delete"):
            sql, holds = draw(st.sampled_from(MATCHED_CONDITIONS))
            if kind == "delete":
                out.append(Clause("when_matched_delete", None, sql, holds))
            elif kind == "update_all":
                out.append(Clause("when_matched_update_all", None, sql, holds, lambda t, s: s["v"]))
            else:
                out.append(Clause("when_matched_update", {"v": "t.v + s.v"}, sql, holds, lambda t, s: t["v"] + s["v"]))
        elif kind in ("insert", "insert_all"):
            sql, holds = draw(st.sampled_from(SOURCE_CONDITIONS))
            if kind == "insert_all":
                out.append(Clause("when_not_matched_insert_all", None, sql, holds, lambda s: s["v"]))
            else:
                out.append(Clause("when_not_matched_insert", {"id": "s.id", "v": "s.v * 10"}, sql, holds, lambda s: s["v"] * 10))
        else:
            sql, holds = draw(st.sampled_from(TARGET_CONDITIONS))
            if kind == "by_source_delete":
                out.append(Clause("when_not_matched_by_source_delete", None, sql, holds))
            else:
                out.append(Clause("when_not_matched_by_source_update", {"v": "t.v + 100"}, sql, holds, lambda t: t["v"] + 100))
    # Delta's rule: of each kind, only the last clause may go without a predicate.
    for kind in ("matched", "not_matched", "by_source"):
        of_kind = [c for c in out if c.kind == kind]
        if any(c.predicate is None for c in of_kind[:-1]):
            out = [c for c in out if c.kind != kind or c.predicate is not None or c is of_kind[-1]]
    return out


def model(target: list[Row], source: list[Row], clauses: list[Clause]) -> tuple[list[Row], Counter[tuple[int, int, str]]]:
    """Delta's MERGE of ``source`` into ``target`` (unique ids on both sides): the rows after it,
    and its change rows."""
    by_id = {s["id"]: s for s in source}
    target_ids = {t["id"] for t in target}
    out: list[Row] = []
    changes: Counter[tuple[int, int, str]] = Counter()

    def first(kind: str, *row: Row) -> Clause | None:
        return next((c for c in clauses if c.kind == kind and c.holds(*row)), None)

    for t in target:
        s = by_id.get(t["id"])
        clause = first("matched", t, s) if s is not None else first("by_source", t)
        if clause is None:
            out.append(t)
        elif clause.value is None:  # a delete
            changes[(t["id"], t["v"], "delete")] += 1
        else:
            new = {"id": t["id"], "v": clause.value(t, s) if s is not None else clause.value(t)}
            out.append(new)
            changes[(t["id"], t["v"], "update_preimage")] += 1
            changes[(new["id"], new["v"], "update_postimage")] += 1
    for s in source:
        if s["id"] in target_ids:
            continue
        clause = first("not_matched", s)
        if clause is not None:
            assert clause.value is not None
            new = {"id": s["id"], "v": clause.value(s)}
            out.append(new)
            changes[(new["id"], new["v"], "insert")] += 1
    return sorted(out, key=lambda r: r["id"]), changes


def write_target(uri: str, target: list[Row], properties: dict[str, str]) -> txnlog.Table:
    table = txnlog.Table.create(uri, SCHEMA, properties=properties)
    half = len(target) // 2  # two files: one may be left alone
    for part in (target[:half], target[half:]):
        if part:
            table.append(pa.Table.from_pylist(part, schema=SCHEMA))
    return table


def read(table: txnlog.Table) -> list[Row]:
    return sorted(table.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])


rows_of = st.lists(st.fixed_dictionaries({"id": st.integers(0, 15), "v": st.integers(0, 9)}), max_size=10, unique_by=lambda r: r["id"])
PROPERTIES = [
    {},
    {"delta.enableDeletionVectors": "true"},
    {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true", "delta.enableRowTracking": "true"},
    {"delta.enableChangeDataFeed": "true", "delta.enableRowTracking": "true"},
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=rows_of, source=rows_of, clause_list=clauses(), properties=st.sampled_from(PROPERTIES))
def test_random_clause_lists_do_what_delta_does(tmp_path_factory: Any, target: list[Row], source: list[Row],
                                                clause_list: list[Clause], properties: dict[str, str]) -> None:
    base = tmp_path_factory.mktemp("merge")
    table = write_target(str(base / "ours"), target, properties)
    before = table.snapshot()
    ids_before = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in before.to_arrow(with_row_ids=True).to_pylist()} \
        if "delta.enableRowTracking" in properties else {}
    builder = table.merge(pa.Table.from_pylist(source, schema=SCHEMA), "t.id = s.id")
    for clause in clause_list:
        clause.add(builder)
    result = builder.execute()
    expected, changes = model(target, source, clause_list)
    assert read(table) == expected
    assert (result is None) == (not changes)

    # deltalake's merge of the same clauses gives the same rows.
    theirs = str(base / "theirs")
    deltalake.write_deltalake(theirs, pa.Table.from_pylist(target, schema=SCHEMA))
    merger = deltalake.DeltaTable(theirs).merge(pa.Table.from_pylist(source, schema=SCHEMA), "t.id = s.id", source_alias="s", target_alias="t")
    for clause in clause_list:
        merger = clause.add(merger)
    merger.execute()
    assert sorted(deltalake.DeltaTable(theirs).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == expected

    if result is None:
        return
    if "delta.enableChangeDataFeed" in properties:
        recorded = table.changes(result.version, result.version).select(["id", "v", "_change_type"]).to_pylist()
        assert Counter((r["id"], r["v"], r["_change_type"]) for r in recorded) == changes
    if ids_before:
        after = table.snapshot().to_arrow(with_row_ids=True).to_pylist()
        old_ids = {row_id for row_id, _ in ids_before.values()}
        for row in after:
            if row["id"] in ids_before:  # kept or updated: the same row id
                assert row["row_id"] == ids_before[row["id"]][0]
                updated = (row["id"], row["v"], "update_postimage") in changes
                assert row["row_commit_version"] == (result.version if updated else ids_before[row["id"]][1])
            else:  # inserted: a new id
                assert row["row_id"] not in old_ids and row["row_commit_version"] == result.version


def test_aliases_and_qualified_update_columns_as_deltalake(tmp_path: Path) -> None:
    table = write_target(str(tmp_path / "t"), [{"id": 1, "v": 1}, {"id": 2, "v": 2}], {"delta.enableDeletionVectors": "true"})
    source = pa.table({"id": [1, 3], "v": [10, 30]})
    (table.merge(source, "target.id = src.id", source_alias="src", target_alias="target")
     .when_matched_update({"target.v": "target.v + src.v"}, predicate="src.v > target.v")
     .when_not_matched_insert({"id": "src.id", "v": "src.v"})
     .when_not_matched_by_source_delete(predicate="target.v = 2")
     .execute())
    assert read(table) == [{"id": 1, "v": 11}, {"id": 3, "v": 30}]
    info = table.history(1)[0].commit_info
    assert info.operation == "MERGE"
    assert info.operation_metrics["numTargetRowsNotMatchedBySourceDeleted"] == "1"
    assert info.operation_metrics["numTargetRowsMatchedUpdated"] == "1"
    assert info.operation_metrics["numTargetRowsInserted"] == "1"


def test_wrong_clause_lists_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    table = write_target(str(tmp_path / "t"), [{"id": 1, "v": 1}], {})
    source = pa.table({"id": [1], "v": [5]})
    with pytest.raises(InvalidArgumentError, match="reads the source"):
        table.merge(source, "id").when_not_matched_by_source_update({"v": "s.v"}).execute()
    with pytest.raises(InvalidArgumentError, match="only the last may omit its predicate"):
        table.merge(source, "id").when_matched_delete().when_matched_update({"v": "1"}).execute()
    with pytest.raises(InvalidArgumentError, match="at least one clause"):
        table.merge(source, "id").execute()
    with pytest.raises(InvalidArgumentError, match="cannot take '\\*'"):
        table.merge(source, "id").when_not_matched_by_source_update("*").execute()  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        table.merge(source)
    assert table.latest_version() == 1


def test_an_empty_source_still_applies_the_by_source_clauses(tmp_path: Path) -> None:
    table = write_target(str(tmp_path / "t"), [{"id": 1, "v": 1}, {"id": 2, "v": 7}], {"delta.enableDeletionVectors": "true"})
    table.merge(SCHEMA.empty_table(), "id").when_not_matched_by_source_delete("t.v > 4").execute()
    assert read(table) == [{"id": 1, "v": 1}]


def by_source_merge(table: txnlog.Table, predicate: str) -> Any:
    """An open MERGE transaction deleting, by source, the rows ``predicate`` picks."""
    txn = table.transaction("MERGE")
    source = pa.table({"id": [1], "v": [0]})
    assert txn.snapshot is not None
    plan = MergePlan.build(txn.snapshot, source.column_names, "id", [ClauseSpec("not_matched_by_source", "delete", predicate)],
                           config=txn.table_configuration)
    txnlog.dml.run_merge(txn, plan, source)
    return txn


def test_a_by_source_merge_commits_through_a_concurrent_deletion_of_other_rows(tmp_path: Path) -> None:
    properties = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
    table = write_target(str(tmp_path / "t"), [{"id": i, "v": i} for i in range(8)], properties)
    late = by_source_merge(table, "t.v >= 6")
    table.delete("id = 2")  # a row the MERGE neither matched nor changed
    result = late.commit()
    assert result.rebased
    assert [r["id"] for r in read(table)] == [0, 1, 3, 4, 5]
    clash = by_source_merge(table, "t.v >= 4")
    table.delete("id = 5")  # a row it deletes
    with pytest.raises(ConcurrentRowsError):
        clash.commit()
    assert [r["id"] for r in read(table)] == [0, 1, 3, 4]


def test_aliases_that_swap_txnlogs_own_names_are_rewritten_at_once(tmp_path: Path) -> None:
    table = write_target(str(tmp_path / "t"), [{"id": 1, "v": 1}, {"id": 2, "v": 2}], {})
    # The target is called s and the source t: s.v is the target's value, t.v the source's.
    (table.merge(pa.table({"id": [1, 2], "v": [10, 1]}), "s.id = t.id", target_alias="s", source_alias="t")
     .when_matched_update({"v": "s.v + t.v"}, predicate="t.v > s.v").execute())
    assert read(table) == [{"id": 1, "v": 11}, {"id": 2, "v": 2}]


# Keys from a narrow range, from all of int64, and at its ends: a file's keys are looked up by
# slot when their range is narrow and by hash otherwise, and a NULL key matches nothing.
wide_keys = st.one_of(st.integers(-3, 40), st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 2**63 - 1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.lists(wide_keys, max_size=30, unique=True), source=st.lists(wide_keys, max_size=20, unique=True),
       every=st.integers(1, 3), null_keys=st.integers(0, 2), files=st.integers(1, 3), vectors=st.booleans())
def test_keys_of_any_range_match_the_equal_source_key(tmp_path_factory: Any, target: list[int], source: list[int], every: int,
                                                      null_keys: int, files: int, vectors: bool) -> None:
    source = list(dict.fromkeys(target[::every] + source))  # every'th target key is matched
    rows = [{"id": k, "v": i} for i, k in enumerate(target)] + [{"id": None, "v": -1 - i} for i in range(null_keys)]
    properties = {"delta.enableDeletionVectors": "true"} if vectors else {}
    table = txnlog.Table.create(str(tmp_path_factory.mktemp("keys") / "t"), SCHEMA, properties=properties)
    for part in range(files):
        if chunk := rows[part::files]:
            table.append(pa.Table.from_pylist(chunk, schema=SCHEMA))
    new = {k: 1000 + i for i, k in enumerate(source)}
    (table.merge(pa.Table.from_pylist([{"id": k, "v": v} for k, v in new.items()], schema=SCHEMA), "t.id = s.id")
     .when_matched_update({"v": "s.v"}).when_not_matched_insert_all().execute())
    expected = [{"id": r["id"], "v": new.get(r["id"], r["v"])} for r in rows]
    expected += [{"id": k, "v": v} for k, v in new.items() if k not in set(target)]

    def order(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["id"] is None, r["id"] or 0, r["v"])

    assert sorted(table.snapshot().to_arrow().to_pylist(), key=order) == sorted(expected, key=order)


def test_merge_expressions_read_source_timestamps_in_utc_whatever_zone_they_carry(tmp_path: Path) -> None:
    # 03:00 UTC on May 2nd is May 1st in Los Angeles: txnlog's SQL computes in UTC, as its
    # generated columns and file pruning do.
    import datetime as dt

    import txnlog

    table = txnlog.Table.create(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("day", pa.date32()), ("h", pa.int32())]))
    instant = dt.datetime(2024, 5, 2, 3, tzinfo=dt.timezone.utc)
    source = pa.table({"id": [1], "ts": pa.array([instant], pa.timestamp("us", tz="America/Los_Angeles"))})
    table.merge(source, "t.id = s.id").when_not_matched_insert({"id": "s.id", "day": "CAST(s.ts AS DATE)", "h": "hour(s.ts)"}).execute()
    assert table.snapshot().to_arrow().to_pylist() == [{"id": 1, "day": dt.date(2024, 5, 2), "h": 3}]


def test_timestamp_literals_are_values_in_utc_with_or_without_an_offset(tmp_path: Path) -> None:
    """``TIMESTAMP'...'`` as a value (not only in a condition): without an offset a UTC wall
    clock, as in conditions; with one, that instant. Arrow refuses the zone-free text for a
    zoned column, so the evaluator reads it as UTC's."""
    import datetime as dt

    import txnlog

    table = txnlog.Table.create(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))]))
    source = pa.table({"id": [1, 2]})
    table.merge(source, "t.id = s.id").when_not_matched_insert({
        "id": "s.id", "ts": "CASE WHEN s.id = 1 THEN TIMESTAMP'2024-05-02 00:00:00' ELSE TIMESTAMP'2024-05-02 09:00:00+09:00' END"}).execute()
    table.update("ts >= TIMESTAMP'2024-05-02 00:00:00'", set={"id": "id * 10"})
    midnight = dt.datetime(2024, 5, 2, tzinfo=dt.timezone.utc)
    assert sorted((r["id"], r["ts"]) for r in table.snapshot().to_arrow().to_pylist()) == [(10, midnight), (20, midnight)]
