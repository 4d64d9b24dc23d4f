"""Large commits are parsed column-wise (pyarrow's JSON reader); the result must equal the
row-wise parse exactly, for every table of the corpus and for hand-made edge cases."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

import txnlog
from txnlog.errors import LogCorruptError, TxnLogError
from txnlog.log import commits


def state_of(uri: str, version: int | None = None) -> tuple:
    snap = txnlog.Table(uri).snapshot(version)
    def rows(table: pa.Table) -> list[dict]:
        # A path can be live twice (with different deletion vectors): sort on the whole key.
        return sorted(table.to_pylist(maps_as_pydicts="lossy"), key=lambda r: (r["path"], repr(r["deletion_vector"])))

    return (
        snap.version,
        rows(snap.files()),
        [(r["path"], r["deletion_timestamp"], r["data_change"]) for r in rows(snap.tombstones())],
        snap.app_transactions,
        snap.domains,
    )


def both_ways(monkeypatch, uri: str, version: int | None = None) -> tuple[tuple, tuple]:
    monkeypatch.setattr(commits, "COLUMNAR_COMMIT_BYTES", 1 << 62)
    row_wise = state_of(uri, version)
    monkeypatch.setattr(commits, "COLUMNAR_COMMIT_BYTES", 0)
    columnar = state_of(uri, version)
    return row_wise, columnar


def _normalize(state: tuple) -> tuple:
    # Column-wise parsing turns absent partition keys into null values: the same partition.
    version, files, *rest = state
    for f in files:
        f["partition_values"] = {k: v for k, v in (f["partition_values"] or {}).items() if v is not None}
    return (version, files, *rest)


def test_every_corpus_table_parses_the_same_both_ways(conformance_dir: Path, monkeypatch):
    checked = 0
    for table in sorted(p.parent for p in conformance_dir.joinpath("tables").glob("**/_delta_log")):
        try:
            row_wise, columnar = both_ways(monkeypatch, str(table))
        except TxnLogError:
            continue  # tables txnlog refuses (tested elsewhere)
        assert _normalize(columnar) == _normalize(row_wise), table.name
        checked += 1
    assert checked >= 45


def _add(path: str, part: str | None, dv: dict | None = None, stats: bool = True) -> dict:
    body = {"path": path, "partitionValues": {"part": part}, "size": 10, "modificationTime": 1, "dataChange": True}
    if stats:
        body["stats"] = '{"numRecords":1}'
    if dv:
        body["deletionVector"] = dv
    return {"add": body}


def _remove(path: str, dv: dict | None = None) -> dict:
    body = {"path": path, "deletionTimestamp": 5, "dataChange": True}
    if dv:
        body["deletionVector"] = dv
    return {"remove": body}


def test_random_commits_parse_the_same_both_ways(log_writer, monkeypatch):
    w = log_writer()
    w.create(partition_columns=("part",))
    rng = random.Random(7)
    dv1 = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "sizeInBytes": 4, "cardinality": 2}
    dv2 = {"storageType": "u", "pathOrInlineDv": "cd", "sizeInBytes": 4, "cardinality": 3}
    live: set[str] = set()
    for version in range(1, 12):
        actions = []
        used: set[str] = set()  # one action per logical file and per appId in a commit (PROTOCOL.md)
        for _ in range(rng.randint(1, 40)):
            path = f"part={rng.choice('ab')}/f{rng.randint(0, 30)}.parquet"
            choice = rng.random()
            if choice < 0.7 and path in used:
                continue
            if choice < 0.5:
                actions.append(_add(path, rng.choice(["a", "b", None]), stats=rng.random() < 0.8))
                live.add(path)
                used.add(path)
            elif choice < 0.7:
                actions.append(_remove(path))
                used.add(path)
            elif choice < 0.85:
                if path + "dv" not in used:
                    actions += [_remove(path, dv1), _add(path, "a", dv2)]
                    used.add(path + "dv")
            elif "txn" not in used:
                actions.append({"txn": {"appId": "app", "version": version}})
                used.add("txn")
        w.commit(version, *actions)
    for version in (3, 7, 11):
        row_wise, columnar = both_ways(monkeypatch, w.uri, version)
        assert _normalize(columnar) == _normalize(row_wise)


def test_missing_path_in_a_large_commit_names_the_line(log_writer, monkeypatch):
    w = log_writer()
    w.create(partition_columns=("part",))
    w.commit(1, _add("a.parquet", "a"), {"add": {"size": 3, "partitionValues": {}}})
    monkeypatch.setattr(commits, "COLUMNAR_COMMIT_BYTES", 0)
    with pytest.raises(LogCorruptError, match="line 2 lacks required field 'path'") as err:
        txnlog.Table(w.uri).snapshot()
    assert err.value.version == 1


def test_tags_fall_back_to_the_row_wise_parser(log_writer, monkeypatch):
    w = log_writer()
    w.create(partition_columns=("part",))
    tagged = _add("t.parquet", "a")
    tagged["add"]["tags"] = {"INSERTION_TIME": "1"}
    w.commit(1, tagged)
    monkeypatch.setattr(commits, "COLUMNAR_COMMIT_BYTES", 0)
    files = txnlog.Table(w.uri).snapshot().files()
    assert files.column("tags").to_pylist(maps_as_pydicts="lossy") == [{"INSERTION_TIME": "1"}]


def test_a_large_commit_really_takes_the_columnar_path(log_writer):
    w = log_writer()
    w.create(partition_columns=("part",))
    w.commit(1, *[_add(f"part=a/f{i:06d}.parquet", "a") for i in range(12000)])
    tmp_table_uri = w.uri
    size = (Path(tmp_table_uri.removeprefix("file://")) / "_delta_log" / "00000000000000000001.json").stat().st_size
    assert size > commits.COLUMNAR_COMMIT_BYTES
    from txnlog.log.segment import list_log

    store = txnlog.Table(tmp_table_uri).store
    [commit] = commits.read_commits(store, [list_log(store, 1).commits[1]], columnar=True)
    assert commit.columnar is not None and commit.columnar.adds.num_rows == 12000
    assert txnlog.Table(tmp_table_uri).snapshot().num_files == 12000
    assert orjson.loads(txnlog.Table(tmp_table_uri).snapshot().files().column("stats")[0].as_py()) == {"numRecords": 1}
    assert pa.types.is_map(txnlog.Table(tmp_table_uri).snapshot().files().schema.field("partition_values").type)
