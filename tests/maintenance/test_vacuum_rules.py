"""VACUUM's two rules: txnlog's default keeps every file a version still in the log reads;
Delta's (``rule="delta"``) keeps only what the latest version reads and what was removed less
than the retention ago, and deletes what deltalake's vacuum deletes. Every file considered that
is not live at the latest version comes with the reason it goes or stays."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog.errors import InvalidArgumentError
from txnlog.maintenance import expire, tags, vacuum

from .conftest import DAY_MS, age, build

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _data_files(root: Path) -> set[str]:
    out = set()
    for directory, _, names in os.walk(root):
        relative = os.path.relpath(directory, root)
        if relative.split(os.sep)[0] == "_delta_log":
            continue
        out |= {os.path.normpath(os.path.join(relative, n)).replace(os.sep, "/") for n in names}
    return out


def _rows(uri: str) -> list[int]:
    return sorted(txnlog.Table(uri).snapshot().to_arrow(["id"]).column("id").to_pylist())


def _table_after_deletes(root: Path) -> txnlog.Table:
    """Appends, a DELETE dropping a whole partition and a copy-on-write DELETE rewriting a file."""
    table = txnlog.Table.create(str(root), SCHEMA, partition_by=["part"])
    table.append(pa.table({"id": [1, 2, 3], "part": ["a", "a", "b"]}))
    table.append(pa.table({"id": [4, 5], "part": ["b", "c"]}))
    table.delete("part = 'c'")
    table.delete("id = 2")
    return table


def _twins(tmp_path: Path) -> tuple[txnlog.Table, str]:
    ours = _table_after_deletes(tmp_path / "ours")
    theirs = tmp_path / "theirs"
    shutil.copytree(tmp_path / "ours", theirs)  # copy2: modification times kept
    return ours, str(theirs)


def test_delta_rule_deletes_what_deltalake_deletes_after_a_delete(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path)
    before = _data_files(tmp_path / "ours")
    # txnlog's default keeps what versions still in the log read: nothing goes, and each says why.
    kept = vacuum(ours, retention=0, force=True, dry_run=True)
    assert kept.files == () and kept.rule == "versions" and kept.num_live_files == 3
    assert {d.reason for d in kept.decisions} == {"retained-version"} and len(kept.decisions) == 2
    assert all("still in the log" in d.detail and not d.delete for d in kept.decisions)

    deleted_by_deltalake = DeltaTable(theirs).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    result = vacuum(ours, retention=0, force=True, rule="delta")
    assert sorted(result.files) == sorted(deleted_by_deltalake) and len(result.files) == 2
    assert _data_files(tmp_path / "ours") == _data_files(Path(theirs)) == before - set(result.files)
    assert all(d.delete and d.reason == "removed-long-ago" and "can no longer be read" in d.detail for d in result.decisions)
    assert _rows(ours.uri) == _rows(theirs) == [1, 3, 4]
    assert DeltaTable(ours.uri).to_pyarrow_table().num_rows == 3  # deltalake reads what we left


def test_delta_rule_with_orphans_matches_deltalakes_full_vacuum(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path)
    for root in (ours.uri.removeprefix("file://"), theirs):
        with open(os.path.join(root, "part=a", "part-orphan.parquet"), "wb") as f:
            f.write(b"x" * 7)
    deleted_by_deltalake = DeltaTable(theirs).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    result = vacuum(ours, retention=0, force=True, rule="delta")
    assert sorted(result.files) == sorted(deleted_by_deltalake) and "part=a/part-orphan.parquet" in result.files
    assert _data_files(tmp_path / "ours") == _data_files(Path(theirs))
    orphan = next(d for d in result.decisions if d.path == "part=a/part-orphan.parquet")
    assert orphan.reason == "unreferenced" and "named by no version" in orphan.detail


def test_both_rules_keep_young_tombstones_as_deltalake_does(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path)
    assert DeltaTable(theirs).vacuum(dry_run=True) == []  # the default 7 days
    for rule in ("versions", "delta"):
        result = vacuum(ours, rule=rule, dry_run=True)
        assert result.files == () and len(result.kept) == 2
    delta = vacuum(ours, rule="delta", dry_run=True)
    assert {d.reason for d in delta.decisions} == {"removed-recently"}
    assert all("less than 7d ago" in d.detail for d in delta.decisions)


def test_every_reason_to_keep_or_delete(table_path: Path) -> None:
    table = build(table_path, 4)  # versions 1-4 each add one file
    root = table.uri.removeprefix("file://")
    tagged = set(table.snapshot(2).files().column("path").to_pylist())
    tags.create(table, "audit", 2)
    with table.transaction("DELETE") as txn:  # v5 removes every file
        txn.remove_files(txn.filter_files("id >= 0"))
    table.append(pa.table({"id": [9], "part": ["a"]}))  # v6: the one live file
    age(table, range(7), days=60)
    expire(table, retain_min=2, limit=100)  # versions 5 and 6 are left
    month_ago = time.time() - 30 * 86_400
    for path in _data_files(table_path):
        os.utime(os.path.join(root, path), (month_ago, month_ago))
    for name, days in (("part=a/old-orphan.parquet", 30), ("part=a/young-orphan.parquet", 0), ("part=a/.x.0123456789abcdef0123456789abcdef.tmp", 30)):
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"x")
        if days:
            os.utime(os.path.join(root, name), (month_ago, month_ago))

    now = int(time.time() * 1000)
    decisions = {d.path: d for d in vacuum(table, dry_run=True, now_ms=now).decisions}
    removed_at_v5 = set(decisions) - tagged - {"part=a/old-orphan.parquet", "part=a/young-orphan.parquet", "part=a/.x.0123456789abcdef0123456789abcdef.tmp"}
    assert len(removed_at_v5) == 2
    assert {decisions[p].reason for p in tagged} == {"tagged"} and all("'audit'" in decisions[p].detail for p in tagged)
    assert {decisions[p].reason for p in removed_at_v5} == {"removed-recently"}  # v4 read them, and it expired
    assert decisions["part=a/old-orphan.parquet"].delete and decisions["part=a/old-orphan.parquet"].reason == "unreferenced"
    assert not decisions["part=a/young-orphan.parquet"].delete and decisions["part=a/young-orphan.parquet"].reason == "written-recently"
    assert decisions["part=a/.x.0123456789abcdef0123456789abcdef.tmp"].reason == "temporary-file"

    # Eight days on, with Delta's rule: the tombstones are old, and the tag still keeps its files.
    later = {d.path: d for d in vacuum(table, dry_run=True, now_ms=now + 8 * DAY_MS, rule="delta").decisions}
    assert {later[p].reason for p in removed_at_v5} == {"removed-long-ago"} and all(later[p].delete for p in removed_at_v5)
    assert {later[p].reason for p in tagged} == {"tagged"}
    assert later["part=a/young-orphan.parquet"].reason == "unreferenced"  # no longer young
    # With txnlog's rule, a version still in the log that reads a file keeps it, whatever its age.
    readers = build(table_path.parent / "readers", 2)
    with readers.transaction("DELETE") as txn:
        txn.remove_files(txn.filter_files("id = 1"))
    kept = vacuum(readers, dry_run=True, now_ms=now + 8 * DAY_MS)
    assert [(d.reason, d.detail) for d in kept.decisions] == [("retained-version", "added at version 1, still in the log (time travel reads it)")]


def test_an_unknown_rule_is_refused(table_path: Path) -> None:
    table = build(table_path, 1)
    with pytest.raises(InvalidArgumentError, match="'versions', 'delta'"):
        vacuum(table, rule="spark")


def test_an_engine_jobs_staged_files_are_orphans_other_hidden_files_are_not(table_path: Path) -> None:
    """Spark's output committer stages a job's files in ``_temporary/`` below the job directory
    txnlog's native writer gives it, at the table root or (change data) in ``_change_data/``: a
    killed job's files there are vacuumed like any orphan; a ``_temporary/`` anywhere else (not
    txnlog's) stays hidden."""
    table = build(table_path, 1)
    root = table.uri.removeprefix("file://")
    job = "job-" + "0123456789abcdef" * 2
    staged = [f"{job}/_temporary/0/_temporary/attempt_1/part-00000.snappy.parquet",
              f"{job}/_temporary/0/task_1/p=a/part-00001.snappy.parquet", f"{job}/part-00002.snappy.parquet",
              f"_change_data/{job}/_temporary/0/_temporary/attempt_2/p=a/part-00006.snappy.parquet",
              f"_change_data/{job}/p=a/part-00007.snappy.parquet"]
    hidden = ["_temporary/0/part-00003.parquet", "job-not-hex/_temporary/part-00004.parquet", f"{job}/_other/part-00005.parquet",
              "_change_data/job-not-hex/_temporary/part-00008.parquet", f"_change_data/p=a/{job}/_temporary/part-00009.parquet",
              f"_change_data/_temporary/{job}/part-00010.parquet"]
    month_ago = time.time() - 30 * 86_400
    for name in staged + hidden:
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"x")
        os.utime(os.path.join(root, name), (month_ago, month_ago))
    decisions = {d.path: d for d in vacuum(table, dry_run=True).decisions}
    assert {p for p in staged} <= set(decisions) and all(decisions[p].reason == "unreferenced" for p in staged)
    assert not set(hidden) & set(decisions)
    vacuum(table)
    assert {p for p in staged if os.path.exists(os.path.join(root, p))} == set()
    assert all(os.path.exists(os.path.join(root, p)) for p in hidden)
