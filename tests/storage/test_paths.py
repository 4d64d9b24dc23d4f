"""Path containment: a log entry never makes txnlog follow a path out of the table root."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from txnlog import AddFile, Table
from txnlog.errors import UnsafePathError
from txnlog.storage.paths import check_new_file_path, locate

ROOT = "s3://bucket/tables/t"
SCHEMA = pa.schema([("id", pa.int64())])


@pytest.mark.parametrize(
    "path, relative",
    [
        ("part-1.parquet", "part-1.parquet"),
        ("p=a/part-1.parquet", "p=a/part-1.parquet"),
        ("p=a%252Fb/x.parquet", "p=a%2Fb/x.parquet"),
        ("a/../b.parquet", "b.parquet"),
        ("s3://bucket/tables/t/x.parquet", "x.parquet"),
        ("s3a://bucket/tables/t/y/x.parquet", "y/x.parquet"),
        ("/tables/t/x.parquet", "x.parquet"),
    ],
)
def test_paths_inside_the_root(path: str, relative: str) -> None:
    location = locate(ROOT, path)
    assert location.relative == relative
    assert location.uri == f"{ROOT}/{relative}"


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "a/../../x.parquet",
        "..%2F..%2Fetc%2Fpasswd",
        "/etc/passwd",
        "s3://other-bucket/tables/t/x.parquet",
        "s3://bucket/tables/t2/x.parquet",
        "s3://bucket/tables/t/../u/x.parquet",
        "file:///etc/passwd",
        "gs://bucket/tables/t/x.parquet",
        "",
    ],
)
def test_escapes_are_refused_naming_the_path(path: str) -> None:
    with pytest.raises(UnsafePathError) as err:
        locate(ROOT, path, version=7)
    assert err.value.path == path and err.value.version == 7
    assert repr(path) in str(err.value) and "version 7" in str(err.value)


def test_absolute_paths_elsewhere_need_the_opt_in_and_relative_escapes_never_pass() -> None:
    assert locate(ROOT, "s3://source/t/x.parquet", allow_absolute=True).uri == "s3://source/t/x.parquet"
    assert locate(ROOT, "s3://source/t/x.parquet", allow_absolute=True).relative is None
    with pytest.raises(UnsafePathError):
        locate(ROOT, "../x.parquet", allow_absolute=True)
    # Writing: absolute paths only in the table's own storage (same bucket), with the opt-in.
    assert check_new_file_path(ROOT, "s3://bucket/shared/x.parquet", allow_absolute=True).relative is None
    with pytest.raises(UnsafePathError, match="another storage"):
        check_new_file_path(ROOT, "s3://other/x.parquet", allow_absolute=True)


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "s3://other-bucket/x.parquet", "x/../../y.parquet"])
def test_add_files_refuses_escaping_paths(tmp_path: Path, path: str) -> None:
    table = Table.create(tmp_path / "t", SCHEMA)
    with table.transaction() as txn:
        with pytest.raises(UnsafePathError, match="refusing|outside|another") as err:
            txn.add_files([AddFile(path, {}, 10, 1)])
        assert err.value.path == path
        txn.abort()
    assert table.latest_version() == 0


def test_absolute_paths_inside_own_storage_with_the_opt_in(tmp_path: Path) -> None:
    Table.create(tmp_path / "t", SCHEMA)
    table = Table(tmp_path / "t", allow_absolute_paths=True)
    elsewhere = str(tmp_path / "shared" / "x.parquet")
    with table.transaction() as txn:
        txn.add_files([AddFile(elsewhere, {}, 10, 1)])
    assert table.snapshot().file_uris() == [f"file://{elsewhere}"]


def _hostile_table(log_writer: Any, path: str) -> str:
    w = log_writer()
    w.create()
    w.commit(1, w.add("good.parquet"), dataclasses.replace(w.add("x"), path=path))
    return str(w.uri)


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "file:///etc/passwd"])
def test_file_uris_refuse_a_hostile_entry_but_files_still_lists_it(log_writer: Any, path: str) -> None:
    uri = _hostile_table(log_writer, path)
    snapshot = Table(uri).snapshot()
    assert sorted(snapshot.files().column("path").to_pylist()) == sorted(["good.parquet", path])
    with pytest.raises(UnsafePathError) as err:
        snapshot.file_uris()
    assert err.value.path == path and err.value.version == 1


def test_absolute_entries_are_resolved_with_the_opt_in(log_writer: Any) -> None:
    uri = _hostile_table(log_writer, "/data/source-table/part-0.parquet")
    uris = Table(uri, allow_absolute_paths=True).snapshot().file_uris()
    assert "file:///data/source-table/part-0.parquet" in uris
    with pytest.raises(UnsafePathError):
        Table(uri).snapshot().file_uris()  # without the opt-in


def test_a_sidecar_outside_the_table_is_refused(log_writer: Any) -> None:
    import orjson

    from txnlog.log.actions import Protocol

    w = log_writer()
    w.create(protocol=Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",)))
    lines = [orjson.loads(line) for line in w.store.read("_delta_log/00000000000000000000.json").splitlines()]
    head = [obj for obj in lines if "protocol" in obj or "metaData" in obj]
    sidecar = {"sidecar": {"path": "../../../../etc/passwd", "sizeInBytes": 10, "modificationTime": 1}}
    body = b"\n".join(orjson.dumps(o) for o in [{"checkpointMetadata": {"version": 0}}, *head, sidecar])
    w.store.put("_delta_log/00000000000000000000.checkpoint.00000000-0000-0000-0000-000000000000.json", body)
    with pytest.raises(UnsafePathError) as err:
        Table(w.uri).snapshot()
    assert err.value.path.endswith("../../../../etc/passwd") and err.value.version == 0
