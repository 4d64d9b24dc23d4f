"""Python DELETE, UPDATE and MERGE on tables with the change data feed and with row tracking.

Random operation sequences (the strategy of test_model) run against a model that knows, per
operation, the rows it deleted, updated (before and after) and inserted, and which stable row id
and row commit version each live row has: after every commit ``Table.changes`` of that version
equals the model's change rows (and deltalake's ``load_cdf`` equals ``Table.changes`` where it
can read the table: no deletion vectors, no column mapping), and
``Snapshot.to_arrow(with_row_ids=True)`` gives every surviving row the id it had, a new unique id
above every earlier one to each inserted row, and the commit's version to each changed row."""

from __future__ import annotations

import collections
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings

import txnlog
from tests.dml.conftest import sorted_rows, table_rows
from tests.dml.test_model import COLUMNS, MERGES, SCHEMA, SETS, Row, _run, operations
from txnlog.errors import ProtocolViolationError

pytest.importorskip("pyroaring")

CDF = {"delta.enableChangeDataFeed": "true"}
ROWS = {"delta.enableRowTracking": "true"}
DV = {"delta.enableDeletionVectors": "true"}
NO_DV = {"delta.enableDeletionVectors": "false"}

# name -> (properties, partition columns, whether deltalake's load_cdf can read it)
LAYOUTS: dict[str, tuple[dict[str, str], list[str], bool]] = {
    "cow": ({**CDF, **NO_DV}, [], True),
    "cow-partitioned": ({**CDF, **NO_DV}, ["part"], True),
    "cow-rows": ({**CDF, **NO_DV, **ROWS}, ["part"], False),
    "dv": ({**CDF, **DV}, [], False),
    "dv-partitioned-rows": ({**CDF, **DV, **ROWS}, ["part"], False),
    "dv-column-mapped": ({**CDF, **DV, "delta.columnMapping.mode": "name"}, ["part"], False),
    "rows-only-cow": ({**NO_DV, **ROWS}, [], False),
    "rows-only-dv": ({**DV, **ROWS}, ["part"], False),
}

RID, RCV = "_rid", "_rcv"  # the model's row id and row commit version (None: the commit assigns)
Change = tuple[Any, ...]  # (part, id, v, _change_type)


def _values(row: Row) -> tuple[Any, ...]:
    return tuple(row[c] for c in COLUMNS)


def _change(row: Row, kind: str) -> Change:
    return (*_values(row), kind)


def _step(model: list[Row], op: tuple[str, Any]) -> tuple[list[Row], list[Change]]:
    """The rows after ``op`` (updated rows keep their id, with no commit version yet; inserted
    rows have neither) and the change rows it makes."""
    kind, arg = op
    fresh = {RID: None, RCV: None}
    if kind == "append":
        return model + [{**r, **fresh} for r in arg], [_change(r, "insert") for r in arg]
    if kind == "delete":
        return [r for r in model if not arg.holds(r)], [_change(r, "delete") for r in model if arg.holds(r)]
    if kind == "update":
        condition, which = arg
        out, changes = [], []
        for r in model:
            if condition.holds(r):
                new = {**SETS[which][1](r), RID: r[RID], RCV: None}
                out.append(new)
                changes += [_change(r, "update_preimage"), _change(new, "update_postimage")]
            else:
                out.append(r)
        return out, changes
    rows, which = arg
    spec = MERGES[which]
    out, changes, matched_sources = [], [], set()
    for target in model:
        source = next((s for s in rows if spec["match"](target, s)), None)
        if source is None:
            out.append(target)
            continue
        matched_sources.add(source["id"])
        if spec["drop"](target, source):
            changes.append(_change(target, "delete"))
        elif spec["new"] is not None:
            new = {**spec["new"](target, source), RID: target[RID], RCV: None}
            out.append(new)
            changes += [_change(target, "update_preimage"), _change(new, "update_postimage")]
        else:
            out.append(target)
    inserted = [s for s in rows if s["id"] not in matched_sources]
    return out + [{**s, **fresh} for s in inserted], changes + [_change(s, "insert") for s in inserted]


def _changes_of(table: txnlog.Table, version: int) -> collections.Counter[Change]:
    got = table.changes(version, version)
    assert set(got.column("_commit_version").to_pylist()) <= {version}
    return collections.Counter(tuple(r[c] for c in [*COLUMNS, "_change_type"]) for r in got.to_pylist())


def _same_as_deltalake(uri: str, table: txnlog.Table, start: int, end: int) -> None:
    """deltalake's load_cdf equals Table.changes row for row (commit timestamps aside: deltalake
    takes commitInfo.timestamp, the protocol the commit file's time)."""
    ours = table.changes(start, end).drop_columns(["_commit_timestamp"])
    theirs = pa.table(DeltaTable(uri).load_cdf(starting_version=start, ending_version=end).read_all())
    theirs = theirs.select(ours.column_names).cast(ours.schema)
    keys = [(c, "ascending") for c in ours.column_names]
    assert ours.sort_by(keys).equals(theirs.sort_by(keys)), (ours.to_pylist(), theirs.to_pylist())


def _check_row_ids(table: txnlog.Table, model: list[Row], version: int, seen_max: int) -> int:
    """Match the table's rows to the model's by stable id; give the model's new rows their ids.
    Returns the highest id now live or ever seen."""
    live = table.snapshot().to_arrow(with_row_ids=True).to_pylist()
    ids = [r["row_id"] for r in live]
    assert len(set(ids)) == len(ids), "two live rows share a row id"
    by_id = {r["row_id"]: r for r in live}
    new_rows: dict[tuple[Any, ...], list[Row]] = collections.defaultdict(list)
    for row in model:
        if row[RID] is None:
            new_rows[_values(row)].append(row)
            continue
        got = by_id.pop(row[RID], None)
        assert got is not None, f"row {row} lost its id {row[RID]}"
        assert _values(got) == _values(row), f"id {row[RID]} moved to another row"
        expected_version = version if row[RCV] is None else row[RCV]
        assert got["row_commit_version"] == expected_version, f"row {row}: commit version {got['row_commit_version']}"
        row[RCV] = expected_version
    # What is left: the inserted rows, with fresh ids above any earlier one, at this version.
    for got in by_id.values():
        assert got["row_id"] > seen_max, f"inserted row {got} reused id {got['row_id']} (ids up to {seen_max} were taken)"
        assert got["row_commit_version"] == version
        candidates = new_rows.get(_values(got))
        assert candidates, f"row {got} is not in the model"
        row = candidates.pop()
        row[RID], row[RCV] = got["row_id"], version
    assert not any(new_rows.values()), f"inserted rows missing: {[r for rows in new_rows.values() for r in rows]}"
    return max([seen_max, *ids])


def _check_sequence(layout: str, ops: list[tuple[str, Any]]) -> None:
    properties, partition_by, deltalake_reads = LAYOUTS[layout]
    change_data, tracking = properties.get("delta.enableChangeDataFeed") == "true", properties.get("delta.enableRowTracking") == "true"
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "t")
        table = txnlog.Table.create(uri, SCHEMA, partition_by=partition_by, properties=properties)
        model: list[Row] = []
        seen_max = -1
        for op in ops:
            before = table.latest_version()
            _run(table, op)
            model, expected = _step(model, op)
            version = table.latest_version()
            if version == before:
                assert not expected, f"{op[0]} changed rows but committed nothing"
                continue
            assert table_rows(table.snapshot().to_arrow(), COLUMNS) == sorted_rows([_values(r) for r in model])
            if change_data:
                assert _changes_of(table, version) == collections.Counter(expected), f"changes of {op[0]} at version {version}"
            if tracking:
                seen_max = _check_row_ids(table, model, version, seen_max)
        if change_data and deltalake_reads and table.latest_version() > 1:
            _same_as_deltalake(uri, table, 1, table.latest_version())


@pytest.mark.parametrize("layout", list(LAYOUTS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
def test_changes_and_row_ids_match_the_model(layout: str, ops: list[tuple[str, Any]]) -> None:
    _check_sequence(layout, ops)


# --- examples --------------------------------------------------------------------------------

CDF_SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string())])


def _actions(uri: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(uri, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _cdc_paths(uri: str, version: int) -> list[str]:
    return [a["cdc"]["path"] for a in _actions(uri, version) if "cdc" in a]


def _table(uri: str, properties: dict[str, str]) -> txnlog.Table:
    table = txnlog.Table.create(uri, CDF_SCHEMA, partition_by=["p"], properties=properties)
    table.append(pa.table({"id": [1, 2, 3, 4], "p": ["a", "a", "b", "c"], "v": ["w", "x", "y", "z"]}))
    return table


@pytest.mark.parametrize("dv", [False, True])
def test_every_dml_writes_change_files_but_a_whole_file_delete(tmp_path: Path, dv: bool) -> None:
    uri = str(tmp_path / "t")
    table = _table(uri, {**CDF, **(DV if dv else NO_DV)})
    deleted = table.delete("id = 1")
    updated = table.update("id = 3", set={"v": "'Y'"})
    merged = table.merge(pa.table({"id": [2, 9], "p": ["a", "d"], "v": ["X", "n"]}), "id",
                         when_matched_update="*", when_not_matched_insert="*")
    dropped = table.delete("p = 'c'")  # the whole partition: its file is removed, unread
    assert all(_cdc_paths(uri, v) for v in (deleted, updated, merged))
    assert all(p.startswith("_change_data/p=") for v in (deleted, updated, merged) for p in _cdc_paths(uri, v))
    assert _cdc_paths(uri, dropped) == []
    metrics = {e.version: e.commit_info.operation_metrics for e in table.history()}
    assert metrics[deleted]["numAddedChangeFiles"] == metrics[updated]["numAddedChangeFiles"] == "1"
    assert metrics[merged]["numTargetChangeFilesAdded"] == "2"  # partitions a and d
    assert metrics[dropped]["numAddedChangeFiles"] == "0"
    got = table.changes(deleted).drop_columns(["_commit_timestamp"]).sort_by([("_commit_version", "ascending"), ("id", "ascending"), ("_change_type", "ascending")])
    assert got.to_pylist() == [
        {"id": 1, "p": "a", "v": "w", "_change_type": "delete", "_commit_version": deleted},
        {"id": 3, "p": "b", "v": "Y", "_change_type": "update_postimage", "_commit_version": updated},
        {"id": 3, "p": "b", "v": "y", "_change_type": "update_preimage", "_commit_version": updated},
        {"id": 2, "p": "a", "v": "X", "_change_type": "update_postimage", "_commit_version": merged},
        {"id": 2, "p": "a", "v": "x", "_change_type": "update_preimage", "_commit_version": merged},
        {"id": 9, "p": "d", "v": "n", "_change_type": "insert", "_commit_version": merged},
        {"id": 4, "p": "c", "v": "z", "_change_type": "delete", "_commit_version": dropped},
    ]
    if not dv:
        _same_as_deltalake(uri, table, 1, dropped)


@pytest.mark.parametrize(
    "properties, before, after",
    [
        ({}, (1, 2, None), (1, 4, None)),  # legacy: writer version 4 holds the feature
        ({"delta.columnMapping.mode": "name"}, (2, 5, None), (2, 5, None)),  # already above 4
        (DV, (3, 7, ["appendOnly", "deletionVectors", "invariants"]), (3, 7, ["appendOnly", "changeDataFeed", "deletionVectors", "invariants"])),
    ],
)
def test_enabling_the_feed_on_an_existing_table_upgrades_its_protocol_as_delta_spark_does(
    tmp_path: Path, properties: dict[str, str], before: tuple[Any, ...], after: tuple[Any, ...]
) -> None:
    uri = str(tmp_path / "t")
    table = _table(uri, properties)

    def protocol() -> tuple[Any, ...]:
        p = table.snapshot().protocol
        return p.min_reader_version, p.min_writer_version, p.writer_features and sorted(p.writer_features)

    assert protocol() == before
    # The commit that turns the feed on is bound by it: a rewrite in it needs change files.
    with pytest.raises(ProtocolViolationError):
        with table.transaction("UPDATE") as txn:
            txn.update_metadata(configuration={**table.snapshot().configuration, **CDF})
            txn.remove_files(txn.filter_files("p = 'a'"))
            txn.write(pa.table({"id": [1], "p": ["a"], "v": ["w"]}))
    with table.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**table.snapshot().configuration, **CDF})
    enabled = table.latest_version()
    assert protocol() == after
    updated = table.update("id = 2", set={"v": "'X'"})
    assert _cdc_paths(uri, updated)
    got = table.changes(enabled).drop_columns(["_commit_timestamp"]).sort_by("_change_type")
    assert got.to_pylist() == [
        {"id": 2, "p": "a", "v": "X", "_change_type": "update_postimage", "_commit_version": updated},
        {"id": 2, "p": "a", "v": "x", "_change_type": "update_preimage", "_commit_version": updated},
    ]
    if not properties:
        _same_as_deltalake(uri, table, enabled, updated)
