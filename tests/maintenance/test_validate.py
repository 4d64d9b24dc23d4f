"""validate names each kind of damage with its version and file, and passes healthy tables."""

from __future__ import annotations

import os

import orjson

from txnlog.log.actions import AddFile
from txnlog.maintenance import expire, tags, validate

from .conftest import age, build


def _root(table) -> str:
    return table.uri.removeprefix("file://")


def _kinds(report) -> list[str]:
    return [p.kind for p in report.problems]


def test_healthy_table_passes(table_path):
    table = build(table_path, 25)
    report = validate(table)
    assert report.ok, report.problems
    assert report.checked["checkpointsCompared"] == 2 and report.checked["files"] == 25


def test_healthy_after_expiry_with_a_tag(table_path):
    table = build(table_path, 20)
    age(table, range(21), days=60)
    tags.create(table, "t", 3)
    expire(table, retain_min=4, limit=100)
    report = validate(table)
    assert report.ok, report.problems
    assert report.earliest_version == 17


def test_deleted_data_file(table_path):
    table = build(table_path, 6)
    victim = table.snapshot(3).files().column("path").to_pylist()
    gone = sorted(set(victim) - set(table.snapshot(2).files().column("path").to_pylist()))[0]  # added at version 3
    os.unlink(os.path.join(_root(table), gone))
    report = validate(table)
    assert _kinds(report) == ["missing-file"]
    assert report.problems[0].path == gone and report.problems[0].version == 3


def test_file_with_the_wrong_size(table_path):
    table = build(table_path, 4)
    path = table.snapshot().files().column("path").to_pylist()[0]
    with open(os.path.join(_root(table), path), "ab") as f:
        f.write(b"extra")
    report = validate(table)
    assert _kinds(report) == ["wrong-size"] and report.problems[0].path == path
    assert "bytes" in report.problems[0].message


def test_version_gap(table_path):
    table = build(table_path, 6)
    os.unlink(os.path.join(_root(table), "_delta_log", f"{3:020d}.json"))
    report = validate(table)
    assert "version-gap" in _kinds(report)
    gap = next(p for p in report.problems if p.kind == "version-gap")
    assert gap.version == 3 and gap.path.endswith(f"{3:020d}.json")


def test_gap_below_a_checkpoint_with_commits_stranded_above_it(table_path):
    table = build(table_path, 15)  # checkpoint at 10
    os.unlink(os.path.join(_root(table), "_delta_log", f"{5:020d}.json"))
    report = validate(table)
    gap = next(p for p in report.problems if p.kind == "version-gap")
    assert gap.version == 5 and "6..9" in gap.message


def test_corrupt_checkpoint(table_path):
    table = build(table_path, 12)
    checkpoint = os.path.join(_root(table), "_delta_log", f"{10:020d}.checkpoint.parquet")
    data = open(checkpoint, "rb").read()
    with open(checkpoint, "wb") as f:
        f.write(data[:100] + b"\x00" * 64 + data[164:])
    report = validate(table)
    corrupt = [p for p in report.problems if p.kind == "corrupt-checkpoint"]
    assert corrupt and corrupt[0].version == 10 and corrupt[0].path.endswith("checkpoint.parquet")


def test_checkpoint_that_disagrees_with_the_commits(table_path):
    table = build(table_path, 12)
    # A checkpoint written from a different history: one more file than the commits say.
    from txnlog.log.checkpoint_writer import write_checkpoint

    with table.transaction() as txn:
        txn.add_files([AddFile(path="extra.parquet", partition_values={"part": "a"}, size=1, modification_time=0)])
    snapshot = table.snapshot()  # version 13 includes extra.parquet
    os.rename(
        os.path.join(_root(table), "_delta_log", f"{13:020d}.json"), os.path.join(_root(table), "moved.json")
    )
    with open(os.path.join(_root(table), "_delta_log", f"{13:020d}.json"), "wb") as f:
        f.write(orjson.dumps({"commitInfo": {"operation": "WRITE", "timestamp": 1}}) + b"\n")
    write_checkpoint(snapshot)
    report = validate(table)
    mismatch = [p for p in report.problems if p.kind == "checkpoint-mismatch"]
    assert mismatch and mismatch[0].version == 13 and "extra.parquet" in mismatch[0].message


def test_stale_last_checkpoint(table_path):
    table = build(table_path, 22)  # checkpoints at 10 and 20
    table.store.put("_delta_log/_last_checkpoint", orjson.dumps({"version": 10}))
    report = validate(table)
    stale = [p for p in report.problems if p.kind == "last-checkpoint"]
    assert len(stale) == 1 and "stale" in stale[0].message and stale[0].version == 10
    assert stale[0].path == "_delta_log/_last_checkpoint"


def test_last_checkpoint_naming_a_missing_checkpoint_or_corrupt(table_path):
    table = build(table_path, 12)
    table.store.put("_delta_log/_last_checkpoint", orjson.dumps({"version": 7}))
    assert "no complete checkpoint" in validate(table).problems[0].message
    table.store.put("_delta_log/_last_checkpoint", b"{not json")
    assert _kinds(validate(table)) == ["last-checkpoint"]


def test_path_escaping_the_table(log_writer):
    writer = log_writer()
    writer.create()
    writer.commit(1, writer.add("../../etc/passwd"))
    report = validate(__import__("txnlog").Table(writer.uri))
    assert _kinds(report) == ["unsafe-path"] and report.problems[0].path == "../../etc/passwd"
