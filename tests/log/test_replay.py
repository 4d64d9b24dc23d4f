"""Action reconciliation (PROTOCOL.md "Action Reconciliation") on hand-written logs, and a
property test of file replay against a dict model, with checkpoints written by the test."""

from __future__ import annotations

import io
import json
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import deltalake
import hypothesis.strategies as st
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings

import txnlog
from txnlog import properties as props
from txnlog.log.actions import DeletionVectorDescriptor, DomainMetadata, Metadata, Protocol, RemoveFile, Txn
from txnlog.log.filenames import classic_checkpoint_path

T0 = 1_700_000_000_000
DV_PROTOCOL = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))


def _dv(name: str, offset: int | None = None) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor("u", name.ljust(20, "x"), size_in_bytes=34, cardinality=2, offset=offset)


def _keys(table: pa.Table) -> list[tuple[str, str | None]]:
    """(path, DV unique id) of each row, sorted."""
    return _sorted(_row_keys(table))


def _row_keys(table: pa.Table) -> list[tuple[str, str | None]]:
    dvs = table.column("deletion_vector").to_pylist()
    paths = table.column("path").to_pylist()
    out = []
    for path, dv in zip(paths, dvs):
        if dv is None:
            out.append((path, None))
        else:
            uid = f"{dv['storage_type']}{dv['path_or_inline_dv']}"
            out.append((path, f"{uid}@{dv['offset']}" if dv["offset"] is not None else uid))
    return out


def _sorted(keys: Any) -> list[tuple[str, str | None]]:
    return sorted(keys, key=lambda k: (k[0], k[1] or ""))


def _snap(w: Any, version: int | None = None) -> txnlog.Snapshot:
    return txnlog.Table(w.uri).snapshot(version=version)


# --- protocol, metaData, txn, domainMetadata --------------------------------------------------


def test_latest_protocol_and_metadata_win(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(configuration={"k": "0"})
    base = _snap(w).metadata
    w.commit(1, replace(base, configuration={"k": "1"}, description="one"))
    w.commit(2, Protocol(1, 4))
    w.commit(3, w.add("a.parquet"))
    w.commit(4, replace(base, configuration={"k": "4"}, partition_columns=("part",)))
    for version, (k, writer) in {0: ("0", 2), 1: ("1", 2), 2: ("1", 4), 3: ("1", 4), 4: ("4", 4)}.items():
        snap = _snap(w, version)
        assert snap.configuration == {"k": k}
        assert snap.protocol.min_writer_version == writer
    assert _snap(w, 3).metadata.description == "one"
    assert _snap(w).partition_columns == ("part",)
    assert _snap(w).metadata.description is None


def test_app_transactions_latest_per_app_wins(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(Txn("app-a", 1, T0))
    w.commit(1, Txn("app-b", 7))
    w.commit(2, Txn("app-a", 3))
    w.commit(3, Txn("app-a", 2))  # the latest wins, even when it is lower
    assert _snap(w, 0).app_transaction_version("app-a") == 1
    assert _snap(w, 0).app_transaction_version("app-b") is None
    assert _snap(w, 2).app_transaction_version("app-a") == 3
    snap = _snap(w)
    assert snap.app_transaction_version("app-a") == 2
    assert snap.app_transaction_version("app-b") == 7
    assert set(snap.app_transactions) == {"app-a", "app-b"}
    assert snap.app_transactions["app-a"] == Txn("app-a", 2)


def test_domain_metadata_latest_wins_and_removed_drops_it(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(DomainMetadata("d1", '{"v":1}'), DomainMetadata("d2", '{"v":1}'))
    w.commit(1, DomainMetadata("d1", '{"v":2}'))
    w.commit(2, DomainMetadata("d2", '{"v":1}', removed=True))
    w.commit(3, DomainMetadata("d2", '{"v":3}'))
    assert _snap(w, 1).domain_metadata("d1") == '{"v":2}'
    assert _snap(w, 1).domain_metadata("d2") == '{"v":1}'
    assert _snap(w, 2).domain_metadata("d2") is None
    assert set(_snap(w, 2).domains) == {"d1"}
    assert _snap(w).domain_metadata("d2") == '{"v":3}'
    assert _snap(w).domain_metadata("nope") is None


# --- files ---------------------------------------------------------------------------------------


def test_remove_with_one_dv_and_add_with_another(log_writer: Callable[..., Any]) -> None:
    """Writing a new DV for a file: remove (path, dv1) and add (path, dv2) in one commit."""
    w = log_writer()
    w.create(w.add("a.parquet"), protocol=DV_PROTOCOL)
    a = _snap(w).files()
    w.commit(1, RemoveFile("a.parquet", T0), w.add("a.parquet", deletion_vector=_dv("one")))
    w.commit(
        2,
        RemoveFile("a.parquet", T0 + 1, deletion_vector=_dv("one")),
        w.add("a.parquet", deletion_vector=_dv("two", offset=1)),
    )
    assert _keys(a) == [("a.parquet", None)]
    assert _keys(_snap(w, 1).files()) == [("a.parquet", "u" + "one".ljust(20, "x"))]
    snap = _snap(w)
    assert _keys(snap.files()) == [("a.parquet", "u" + "two".ljust(20, "x") + "@1")]
    dv = snap.files().column("deletion_vector").to_pylist()[0]
    assert (dv["storage_type"], dv["offset"], dv["size_in_bytes"], dv["cardinality"]) == ("u", 1, 34, 2)
    assert _keys(snap.tombstones()) == [("a.parquet", None), ("a.parquet", "u" + "one".ljust(20, "x"))]


def test_same_path_with_two_dvs_are_two_logical_files(log_writer: Callable[..., Any]) -> None:
    """An add for (path, dv2) does not replace a live (path, dv1): the key is the pair."""
    w = log_writer()
    w.create(w.add("a.parquet", deletion_vector=_dv("one")), protocol=DV_PROTOCOL)
    w.commit(1, w.add("a.parquet", deletion_vector=_dv("two")))
    assert len(_keys(_snap(w).files())) == 2


def test_remove_then_re_add(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(w.add("a.parquet", size=1), w.add("b.parquet", size=1))
    w.commit(1, RemoveFile("a.parquet", T0, size=1))
    w.commit(2, w.add("a.parquet", size=2))
    assert _keys(_snap(w, 1).files()) == [("b.parquet", None)]
    assert _keys(_snap(w, 1).tombstones()) == [("a.parquet", None)]
    snap = _snap(w)
    assert dict(zip(snap.files().column("path").to_pylist(), snap.files().column("size").to_pylist())) == {
        "a.parquet": 2,
        "b.parquet": 1,
    }
    assert snap.tombstones().num_rows == 0  # live again: no longer a tombstone


def test_tombstones_keep_the_latest_remove(log_writer: Callable[..., Any]) -> None:
    w = log_writer()
    w.create(w.add("a.parquet"), w.add("b.parquet"))
    w.commit(1, RemoveFile("a.parquet", T0 + 1, data_change=True))
    w.commit(2, w.add("a.parquet"))
    w.commit(3, RemoveFile("a.parquet", T0 + 3, data_change=False), RemoveFile("b.parquet", T0 + 4))
    tomb = _snap(w).tombstones().sort_by("path")
    assert tomb.column("path").to_pylist() == ["a.parquet", "b.parquet"]
    assert tomb.column("deletion_timestamp").to_pylist() == [T0 + 3, T0 + 4]
    assert tomb.column("data_change").to_pylist() == [False, True]
    assert _snap(w).num_files == 0


def test_unknown_actions_and_fields_are_ignored(log_writer: Callable[..., Any]) -> None:
    """PROTOCOL.md: readers must ignore actions and fields they do not know (forward compatibility)."""
    w = log_writer()
    w.create(
        {"futureAction": {"anything": [1, 2, 3]}},
        {"add": {"path": "a.parquet", "partitionValues": {}, "size": 5, "modificationTime": T0, "dataChange": True,
                 "futureField": {"nested": True}}},
    )
    w.commit(
        1,
        {"commitInfo": {"operation": "WRITE", "newThing": 1}},
        {"txn": {"appId": "x", "version": 4, "futureField": "y"}},
        {"remove": {"path": "a.parquet", "deletionTimestamp": T0, "dataChange": True, "futureField": 1}},
        {"add": {"path": "b.parquet", "partitionValues": {}, "size": 6, "modificationTime": T0, "dataChange": True}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2, "futureField": []}},
        {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False, "futureField": 0}},
        {"futureAction2": "scalar"},
    )
    snap = _snap(w)
    assert snap.files().column("path").to_pylist() == ["b.parquet"]
    assert snap.app_transaction_version("x") == 4
    assert snap.domain_metadata("d") == "{}"
    assert snap.tombstones().column("path").to_pylist() == ["a.parquet"]


# --- checkpoints written by the test ----------------------------------------------------------

_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
     ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
                                ("readerFeatures", pa.list_(pa.string())), ("writerFeatures", pa.list_(pa.string()))])),
        ("metaData", pa.struct([("id", pa.string()), ("format", pa.struct([("provider", pa.string()), ("options", _MAP)])),
                                ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                                ("configuration", _MAP), ("createdTime", pa.int64())])),
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        ("add", pa.struct([("path", pa.string()), ("partitionValues", _MAP), ("size", pa.int64()),
                           ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("stats", pa.string()),
                           ("deletionVector", _DV), ("futureField", pa.int64())])),
        ("remove", pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
                              ("size", pa.int64()), ("deletionVector", _DV)])),
        ("futureAction", pa.struct([("x", pa.int64())])),
    ]
)


def _write_checkpoint(w: Any, version: int, protocol: dict[str, Any], metadata: dict[str, Any],
                      live: dict[Any, dict[str, Any]], tombstones: dict[Any, dict[str, Any]]) -> None:
    """A classic checkpoint from the model: one row per action, the other columns null."""
    rows: list[dict[str, Any]] = [
        {"protocol": protocol},
        {"metaData": {**metadata, "format": {"provider": "parquet", "options": []}, "configuration": []}},
        {"futureAction": {"x": 1}},
    ]
    rows += [{"add": {**body, "partitionValues": [], "futureField": 9}} for body in live.values()]
    rows += [{"remove": body} for body in tombstones.values()]
    table = pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    w.store.put(classic_checkpoint_path(version), sink.getvalue())


# One commit: a list of (op, file index, dv index or None).
_op = st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 4), st.sampled_from([None, 0, 1]))
_commit = st.tuples(st.lists(_op, min_size=1, max_size=5), st.booleans())


def _dv_body(i: int | None) -> dict[str, Any] | None:
    return None if i is None else {"storageType": "u", "pathOrInlineDv": f"dv{i}".ljust(20, "x"),
                                   "offset": i or None, "sizeInBytes": 34, "cardinality": i + 1}


def _dv_key(i: int | None) -> str | None:
    body = _dv_body(i)
    if body is None:
        return None
    uid = body["storageType"] + body["pathOrInlineDv"]
    return f"{uid}@{body['offset']}" if body["offset"] is not None else uid


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=st.lists(_commit, min_size=1, max_size=8))
def test_file_replay_matches_a_dict_model(commits: list[tuple[list[tuple[str, int, int | None]], bool]],
                                          memory_table_uri: str, log_writer: Callable[..., Any]) -> None:
    """Random add/remove commits (with deletion vectors), some followed by a checkpoint written
    from the model: live files and tombstones match the model at every version."""
    w = log_writer(f"{memory_table_uri}/{uuid.uuid4().hex}")
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"]}
    w.create(protocol=DV_PROTOCOL)
    metadata = {"id": "00000000-0000-0000-0000-000000000001", "schemaString": _snap(w).metadata.schema_string,
                "partitionColumns": [], "createdTime": T0}
    live: dict[tuple[str, str | None], dict[str, Any]] = {}
    tombstones: dict[tuple[str, str | None], dict[str, Any]] = {}
    models = {0: ({}, {})}
    for version, (ops, checkpoint) in enumerate(commits, start=1):
        # A commit holds at most one action per logical file (PROTOCOL.md, Delta Log Entries).
        by_key = {(f"f{i}.parquet", _dv_key(d)): (op, i, d) for op, i, d in ops}
        actions = []
        for (path, dv_key), (op, i, d) in by_key.items():
            if op == "add":
                body = {"path": path, "partitionValues": {}, "size": version * 10 + i, "modificationTime": T0,
                        "dataChange": True, "deletionVector": _dv_body(d)}
                live[(path, dv_key)] = body
                tombstones.pop((path, dv_key), None)
            else:
                body = {"path": path, "deletionTimestamp": T0 + version, "dataChange": True,
                        "deletionVector": _dv_body(d)}
                live.pop((path, dv_key), None)
                tombstones[(path, dv_key)] = body
            actions.append({op: {k: v for k, v in body.items() if v is not None}})
        w.commit(version, *actions)
        if checkpoint:
            _write_checkpoint(w, version, protocol, metadata, live, tombstones)
        models[version] = (dict(live), dict(tombstones))

    table = txnlog.Table(w.uri)
    for version, (want_live, want_tomb) in models.items():
        snap = table.snapshot(version=version)
        files = snap.files()
        assert _keys(files) == _sorted(want_live), f"version {version}"
        sizes = dict(zip(_row_keys(files), files.column("size").to_pylist()))
        assert sizes == {k: v["size"] for k, v in want_live.items()}
        assert _keys(snap.tombstones()) == _sorted(want_tomb), f"version {version}"
        assert snap.tombstones().num_rows == len(want_tomb)
    # The latest snapshot, also reached by update() from the first one.
    first = table.snapshot(version=0).update()
    assert _keys(first.files()) == _sorted(models[len(commits)][0])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=st.lists(_commit, min_size=1, max_size=6))
def test_replay_over_delta_rs_checkpoints(commits: list[tuple[list[tuple[str, int, int | None]], bool]],
                                          log_writer: Callable[..., Any]) -> None:
    """Hand-written add/remove commits (no DVs), checkpoints written by delta-rs: txnlog's live
    files match the dict model and delta-rs's own listing."""
    with tempfile.TemporaryDirectory() as root:
        w = log_writer(root)
        w.create()
        live: dict[str, int] = {}
        for version, (ops, checkpoint) in enumerate(commits, start=1):
            by_path = {f"f{i}.parquet": op for op, i, _ in ops}
            actions: list[Any] = []
            for path, op in by_path.items():
                if op == "add":
                    live[path] = version
                    actions.append(w.add(path, size=version))
                else:
                    live.pop(path, None)
                    actions.append(RemoveFile(path, T0 + version))
            w.commit(version, *actions)
            if checkpoint:
                deltalake.DeltaTable(root).create_checkpoint()
        snap = txnlog.Table(root).snapshot()
        files = snap.files().sort_by("path")
        assert dict(zip(files.column("path").to_pylist(), files.column("size").to_pylist())) == live
        assert sorted(files.column("path").to_pylist()) == sorted(
            pa.table(deltalake.DeltaTable(root).get_add_actions(flatten=True)).column("path").to_pylist()
        )


def test_checkpoint_then_commits(log_writer: Callable[..., Any]) -> None:
    """Commits after a checkpoint reconcile against its columnar file list: removes of checkpoint
    files, re-adds with new DVs, and protocol/metaData/txn updates on top of the checkpoint's."""
    w = log_writer()
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"]}
    w.create(w.add("a.parquet"), w.add("b.parquet"), w.add("c.parquet"), Txn("app", 1), protocol=DV_PROTOCOL)
    metadata = _snap(w).metadata
    body = {"partitionValues": {}, "modificationTime": T0, "dataChange": True, "size": 100}
    _write_checkpoint(
        w, 0, protocol,
        {"id": metadata.id, "schemaString": metadata.schema_string, "partitionColumns": [], "createdTime": T0},
        {k: {"path": k, **body} for k in ("a.parquet", "b.parquet", "c.parquet")},
        {"old": {"path": "old.parquet", "deletionTimestamp": T0, "dataChange": True}},
    )
    w.store.delete("_delta_log/00000000000000000000.json")  # only the checkpoint tells version 0 now
    w.commit(
        1,
        RemoveFile("a.parquet", T0),
        RemoveFile("b.parquet", T0),
        w.add("b.parquet", deletion_vector=_dv("bdv")),
        Txn("app", 2),
        replace(metadata, configuration={"x": "y"}),
    )
    snap = _snap(w)
    assert _keys(snap.files()) == [("b.parquet", "u" + "bdv".ljust(20, "x")), ("c.parquet", None)]
    assert _keys(snap.tombstones()) == [("a.parquet", None), ("b.parquet", None), ("old.parquet", None)]
    assert snap.app_transaction_version("app") == 2
    assert snap.configuration == {"x": "y"}
    assert snap.protocol == DV_PROTOCOL
    assert isinstance(snap.metadata, Metadata)


def test_stats_from_a_checkpoint_without_json_stats(conformance_dir: Path) -> None:
    """delta-1.2.1-only-struct-stats checkpoints with writeStatsAsJson=false: its checkpoint has
    only ``stats_parsed``. The stats txnlog derives from it equal the JSON stats the same files
    got in their commits (still in the log): absent statistics left out, decimals as numbers,
    timestamps as UTC ISO-8601."""
    root = conformance_dir / "tables" / "delta-1.2.1-only-struct-stats"
    table = txnlog.Table(root)
    assert table.snapshot().table_property(props.WRITE_STATS_AS_JSON) is False
    from_commits: dict[str, Any] = {}
    for v in range(table.latest_version() + 1):
        for line in (root / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                from_commits[add["path"]] = json.loads(add["stats"])
    files = table.snapshot().files()
    derived = dict(zip(files.column("path").to_pylist(), files.column("stats").to_pylist()))
    assert set(derived) <= set(from_commits)
    assert all(derived.values())
    for path, stats in derived.items():
        assert json.loads(stats) == from_commits[path], path
