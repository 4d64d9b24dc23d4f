"""Crashes, storage faults, the post-commit hook, the CLI and a SQL catalog."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

import txnlog
from txnlog.errors import TxnLogError
from txnlog.iceberg import export
from txnlog.storage import open_store
from txnlog.testing import FaultInjectingStore

from .helpers import canon, delete_rows_where, delta_rows, iceberg_rows, iceberg_table, local_path, snapshots_by_delta_version

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _rows(start: int, n: int = 2) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": ["a"] * n}, schema=SCHEMA)


def _table(tmp_path, **kwargs) -> tuple[str, txnlog.Table]:
    uri = str(tmp_path / "t")
    return uri, txnlog.Table.create(uri, SCHEMA, partition_by=["part"], **kwargs)


def _export_in_child_killed_at(uri: str, operation: str, pattern: str, *, after: bool) -> int:
    script = textwrap.dedent(
        f"""
        import txnlog
        from txnlog.iceberg import export
        from txnlog.storage import open_store
        from txnlog.testing import FaultInjectingStore
        store = FaultInjectingStore(open_store({uri!r}))
        store.kill({operation!r}, {pattern!r}, after={after!r})
        export(txnlog.Table({uri!r}, store=store))
        """
    )
    return subprocess.run([sys.executable, "-c", script], timeout=120).returncode


@pytest.mark.parametrize(
    ("operation", "pattern", "after"),
    [
        ("put", "metadata/manifest-*", True),  # manifests written, no metadata file yet
        ("put_if_absent", "metadata/v*.metadata.json", False),  # just before the metadata file
        ("put", "metadata/version-hint.text", False),  # metadata file written, hint not
    ],
)
def test_sigkill_mid_export_leaves_readable_metadata_and_catch_up_writes_no_duplicate(tmp_path, operation, pattern, after):
    uri, table = _table(tmp_path)
    table.append(_rows(0))
    export(uri)
    for i in range(3):
        table.append(_rows(10 * (i + 1)))
    assert _export_in_child_killed_at(uri, operation, pattern, after=after) == -9
    # Whatever the child got to, the Iceberg table reads and shows a whole Delta version.
    shown = iceberg_table(uri).metadata.properties["txnlog.delta.version"]
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri, int(shown)))
    export(uri)
    versions = snapshots_by_delta_version(uri)  # asserts one snapshot per Delta version
    assert sorted(versions) == [1, 2, 3, 4]
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))


@pytest.mark.parametrize(
    ("operation", "pattern"),
    [("put", "metadata/manifest-*"), ("put", "metadata/snap-*"), ("put_if_absent", "metadata/v*.metadata.json"), ("read", "metadata/*")],
)
def test_storage_faults_raise_a_txnlog_error_naming_the_file_and_leave_metadata_readable(tmp_path, operation, pattern):
    uri, table = _table(tmp_path)
    table.append(_rows(0))
    export(uri)
    table.append(_rows(5))
    store = FaultInjectingStore(open_store(uri))
    store.fail(operation, pattern, times=None)
    with pytest.raises(TxnLogError) as caught:
        export(txnlog.Table(uri, store=store))
    assert "metadata/" in str(caught.value)
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri, 1))
    result = export(uri)
    assert result.delta_version == 2 and canon(iceberg_rows(uri)) == canon(delta_rows(uri))


def test_hook_failure_never_fails_the_commit_and_the_next_export_catches_up(tmp_path):
    uri, table = _table(tmp_path, properties={"delta.universalFormat.enabledFormats": "iceberg"})
    table.append(_rows(0))
    assert snapshots_by_delta_version(uri).keys() == {1}  # the create is metadata only
    store = FaultInjectingStore(open_store(uri))
    store.fail("put_if_absent", "metadata/*", times=None)
    faulty = txnlog.Table(uri, store=store)
    result = faulty.append(_rows(7))
    assert result is not None and result.version == 2
    assert [f.hook for f in result.hook_failures] == ["iceberg-export"]
    assert isinstance(result.hook_failures[0].error, TxnLogError)
    assert canon(delta_rows(uri)) == canon(pa.concat_tables([_rows(0), _rows(7)]))
    table.append(_rows(20))  # a healthy commit's hook catches up versions 2 and 3
    assert sorted(snapshots_by_delta_version(uri)) == [1, 2, 3]
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))


def _commit_vector(tmp_path, version: int, path: str, dv: dict) -> None:
    """A hand-written commit giving the live file ``path`` the deletion vector ``dv``."""
    log = tmp_path / "t" / "_delta_log"
    add = {**json.loads([ln for ln in (log / f"{1:020d}.json").read_text().splitlines() if '"add"' in ln][0])["add"], "deletionVector": dv}
    remove = {"path": path, "deletionTimestamp": 1, "dataChange": True}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in ({"protocol": protocol}, {"remove": remove}, {"add": add})) + "\n")


def test_an_inline_deletion_vector_becomes_a_position_delete(tmp_path):
    uri, table = _table(tmp_path, properties={"delta.enableDeletionVectors": "true"})
    table.append(_rows(0, 10))
    export(uri)
    delete_rows_where(table, lambda rows: pa.array([v == 3 for v in rows["id"].to_pylist()]), max_inline_bytes=64)
    (vector,) = [v for v in table.snapshot().files()["deletion_vector"].to_pylist() if v is not None]
    assert vector["storage_type"] == "i"  # one row: inline in the log (as asked), no vector file
    export(uri)
    assert canon(iceberg_rows(uri)) == canon(table.snapshot().to_arrow()) == canon(_rows(0, 10).filter(pa.array([i != 3 for i in range(10)])))


def test_an_unreadable_deletion_vector_fails_the_export_naming_the_file(tmp_path):
    """A vector file that is gone: the export stops, naming the data file, and the metadata
    already written stays as it was (never a snapshot that shows deleted rows)."""
    uri, table = _table(tmp_path)
    table.append(_rows(0))
    first = export(uri)
    path = table.snapshot().files().column("path")[0].as_py()
    missing = {"storageType": "u", "pathOrInlineDv": "J.Dy=B})x<YARTP5LcO1", "offset": 1, "sizeInBytes": 34, "cardinality": 1}
    _commit_vector(tmp_path, 2, path, missing)
    with pytest.raises(TxnLogError, match=path) as caught:
        export(uri)
    assert "deletion vector" in str(caught.value)
    assert local_path(iceberg_table(uri).metadata_location) == local_path(first.metadata_location or "")
    assert sorted(snapshots_by_delta_version(uri)) == [1]


def test_cli_export_iceberg_json(tmp_path):
    uri, table = _table(tmp_path)
    table.append(_rows(0))
    out = subprocess.run([sys.executable, "-m", "txnlog", "export-iceberg", uri, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    # camelCase keys, as every other command's --json
    assert doc["deltaVersion"] == 1 and doc["rebuilt"] and len(doc["snapshotIds"]) == 1 and doc["tableUri"] == table.uri
    assert doc["metadataLocation"].endswith("/metadata/v1.metadata.json") and doc["previousDeltaVersion"] is None
    again = subprocess.run([sys.executable, "-m", "txnlog", "export-iceberg", uri, "--full", "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout)["rebuildReason"] == "a full export was requested"
    human = subprocess.run([sys.executable, "-m", "txnlog", "export-iceberg", uri], capture_output=True, text=True, timeout=120)
    assert human.returncode == 0 and "already shows version 1" in human.stdout, human.stderr
    missing = subprocess.run([sys.executable, "-m", "txnlog", "export-iceberg", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 3


def test_sql_catalog_sees_each_export(tmp_path):
    uri, table = _table(tmp_path)
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    table.append(_rows(0))
    first = export(uri, catalog=catalog, identifier="db.sales")
    assert first.catalog_identifier == "db.sales"
    loaded = catalog.load_table("db.sales")
    assert canon(loaded.scan().to_arrow()) == canon(delta_rows(uri))
    table.append(_rows(5))
    table.append(_rows(9))
    export(uri, catalog=catalog, identifier="db.sales")
    loaded = catalog.load_table("db.sales")
    assert canon(loaded.scan().to_arrow()) == canon(delta_rows(uri))
    ours = iceberg_table(uri).metadata
    assert [s.snapshot_id for s in loaded.metadata.snapshots] == [s.snapshot_id for s in ours.snapshots]
    assert loaded.metadata.properties["txnlog.delta.version"] == "3"


def test_async_hook_exports_every_commit_off_the_commit_path_and_reports_failures_later(tmp_path):
    from txnlog.iceberg import wait_for_exports

    uri, table = _table(tmp_path, properties={"txnlog.iceberg.export.enabled": "true", "txnlog.iceberg.export.async": "true"})
    for i in range(12):
        assert not table.append(_rows(10 * i)).hook_failures
    assert wait_for_exports(table, timeout=120)
    # The first run is a rebuild at whatever version was newest when it started; after it,
    # coalesced runs still write one snapshot per commit.
    versions = sorted(snapshots_by_delta_version(uri))
    first = versions[0]
    assert versions == list(range(first, 13))
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))
    # A background failure shows on the next commit's hook_failures, and a later export catches up.
    store = FaultInjectingStore(open_store(uri))
    store.fail("put_if_absent", "metadata/*", times=None)
    faulty = txnlog.Table(uri, store=store)
    faulty.append(_rows(500))
    assert wait_for_exports(faulty, timeout=120)
    reported = faulty.append(_rows(600))
    assert [f.hook for f in reported.hook_failures] == ["iceberg-export"]
    wait_for_exports(faulty, timeout=120)
    table.append(_rows(700))
    assert wait_for_exports(table, timeout=120)
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))
    assert sorted(snapshots_by_delta_version(uri)) == list(range(first, table.latest_version() + 1))


def test_two_processes_committing_with_the_hook_never_corrupt_the_metadata(tmp_path):
    uri, table = _table(tmp_path, properties={"txnlog.iceberg.export.enabled": "true"})
    script = textwrap.dedent(
        f"""
        import sys
        import pyarrow as pa
        import txnlog
        table = txnlog.Table({uri!r})
        schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
        for i in range(12):
            result = table.append(pa.table({{"id": [int(sys.argv[1]) * 1000 + i], "part": ["a"]}}, schema=schema))
            assert not result.hook_failures, result.hook_failures
        """
    )
    children = [subprocess.Popen([sys.executable, "-c", script, str(k)]) for k in (1, 2)]
    assert [c.wait(timeout=300) for c in children] == [0, 0]
    export(uri)  # whatever a lost race left behind is caught up here
    assert sorted(snapshots_by_delta_version(uri)) == list(range(1, table.latest_version() + 1))
    assert canon(iceberg_rows(uri)) == canon(delta_rows(uri))
    assert iceberg_rows(uri).num_rows == 24


def test_commits_to_tables_without_the_export_never_import_pyiceberg(tmp_path):
    """Every committing process loads the hook entry points; pyiceberg (seconds to import) must
    load only for tables that export."""
    script = textwrap.dedent(
        f"""
        import sys
        import pyarrow as pa
        import txnlog
        schema = pa.schema([("id", pa.int64())])
        table = txnlog.Table.create({str(tmp_path / "plain")!r}, schema)
        table.append(pa.table({{"id": [1]}}, schema=schema))
        assert "iceberg-export" in table.hooks
        assert "pyiceberg" not in sys.modules, "a plain commit imported pyiceberg"
        exporting = txnlog.Table.create({str(tmp_path / "exporting")!r}, schema, properties={{"txnlog.iceberg.export.enabled": "true"}})
        assert "pyiceberg" in sys.modules
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_without_pyiceberg_an_exporting_table_commits_and_reports_why_it_did_not_export(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["pyiceberg"] = None  # as if the iceberg extra were not installed
        import pyarrow as pa
        import txnlog
        schema = pa.schema([("id", pa.int64())])
        table = txnlog.Table.create({str(tmp_path / "t")!r}, schema, properties={{"txnlog.iceberg.export.enabled": "true"}})
        result = table.append(pa.table({{"id": [1]}}, schema=schema))
        assert result.version == 1
        [failure] = result.hook_failures
        assert failure.hook == "iceberg-export" and "pip install 'txnlog[iceberg]'" in str(failure.error), failure
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
