"""Storage fixtures: a real moto S3 server on 127.0.0.1.

Self-contained on purpose, so the moto fixtures can move to ``tests/conftest.py`` as they are.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
from txnlog import maintenance
from txnlog.errors import FileAlreadyExistsError, ObjectNotFoundError, VersionNotFoundError
from txnlog.storage import LogStore


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _serve(argv_for_port: Callable[[int], list[str]], log_path: Path, timeout: float = 60) -> Iterator[int]:
    port = free_port()
    with open(log_path, "wb") as log:  # the child keeps its own handle
        proc = subprocess.Popen(argv_for_port(port), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{argv_for_port(port)[0]} did not start: {log_path.read_text()}")
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def local_server() -> Callable[..., contextlib.AbstractContextManager[int]]:
    """Runs an emulator subprocess on a free port of 127.0.0.1, logging to a file:
    ``with local_server(lambda port: argv, log_path) as port: ...``."""
    return _serve


# Fake credentials for moto, as the environment variables boto and delta-rs read.
_MOTO_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[dict[str, str]]:
    """A moto S3 server; yields storage_options that both txnlog and deltalake accept."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    from tests.moto_atomic import make_conditional_writes_atomic

    make_conditional_writes_atomic()
    saved = {k: os.environ.get(k) for k in _MOTO_ENV}
    os.environ.update(_MOTO_ENV)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": _MOTO_ENV["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": _MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_bucket(moto_s3: dict[str, str]) -> str:
    """A new, empty bucket on the moto server, as ``s3://name``."""
    import boto3

    name = f"txnlog-{uuid.uuid4().hex[:16]}"
    client: Any = boto3.client(
        "s3",
        endpoint_url=moto_s3["AWS_ENDPOINT_URL"],
        aws_access_key_id=moto_s3["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=moto_s3["AWS_SECRET_ACCESS_KEY"],
        region_name=moto_s3["AWS_REGION"],
    )
    client.create_bucket(Bucket=name)
    return f"s3://{name}"


# --- the LogStore contract, run against every store that can commit ------------------------
#
# A test that takes the ``contract_check`` argument runs once per check below, each getting a
# fresh, empty store from the test's own store fixture.

LOG = "_delta_log"
V0 = f"{LOG}/00000000000000000000.json"


def check_put_if_absent_twice(store: LogStore) -> None:
    store.put_if_absent(V0, b'{"commitInfo":{"n":1}}\n')
    with pytest.raises(FileAlreadyExistsError) as raised:
        store.put_if_absent(V0, b'{"commitInfo":{"n":2}}\n')
    assert raised.value.path == V0
    assert store.read(V0) == b'{"commitInfo":{"n":1}}\n'


def check_threads_race_one_winner(store: LogStore) -> None:
    writers = 8
    barrier = threading.Barrier(writers)

    def attempt(i: int) -> int | None:
        barrier.wait()
        try:
            store.put_if_absent(V0, f"writer {i}".encode())
        except FileAlreadyExistsError:
            return None
        return i

    with ThreadPoolExecutor(writers) as pool:
        winners = [i for i in pool.map(attempt, range(writers)) if i is not None]
    assert len(winners) == 1
    assert store.read(V0) == f"writer {winners[0]}".encode()


def check_list_from(store: LogStore) -> None:
    assert store.list_from(LOG) == []
    for v in (3, 1, 2):
        store.put_if_absent(f"{LOG}/{v:020d}.json", b"x" * v)
    store.put(f"{LOG}/_last_checkpoint", b"{}")
    assert [f.name for f in store.list_from(LOG, f"{2:020d}")] == [
        f"{2:020d}.json",
        f"{3:020d}.json",
        "_last_checkpoint",
    ]
    # Written a moment ago, after a listing: must be seen at once (no stale listing cache).
    store.put_if_absent(f"{LOG}/{4:020d}.json", b"4444")
    listed = store.list_from(LOG, f"{3:020d}")
    assert [f.path for f in listed] == [f"{LOG}/{3:020d}.json", f"{LOG}/{4:020d}.json", f"{LOG}/_last_checkpoint"]
    assert [f.size for f in listed] == [3, 4, 2]
    assert all(f.modification_time > 1_500_000_000_000 for f in listed)
    assert store.list_from("no/such/dir") == []


def check_missing_objects(store: LogStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        store.read(V0)
    with pytest.raises(ObjectNotFoundError):
        store.info(V0)
    assert not store.exists(V0)
    store.put_if_absent(V0, b"abc")
    assert store.exists(V0)
    assert store.info(V0).size == 3


def check_put_overwrites(store: LogStore) -> None:
    store.put(f"{LOG}/_last_checkpoint", b"one")
    store.put(f"{LOG}/_last_checkpoint", b"second")
    assert store.read(f"{LOG}/_last_checkpoint") == b"second"


def check_delete_is_idempotent(store: LogStore) -> None:
    store.put("part-0.parquet", b"data")
    store.delete("part-0.parquet")
    store.delete("part-0.parquet")
    store.delete("never/existed.parquet")
    assert not store.exists("part-0.parquet")


def check_walk_files(store: LogStore) -> None:
    paths = {V0, "part-0.parquet", "year=2024/month=1/part-1.parquet", "year=2024/month=2/part-2.parquet"}
    for p in paths:
        store.put(p, p.encode())
    assert {f.path for f in store.walk_files()} == paths
    assert {f.path: f.size for f in store.walk_files("year=2024")} == {
        p: len(p) for p in paths if p.startswith("year=2024/")
    }
    assert list(store.walk_files("no/such/dir")) == []


def check_parquet_roundtrip(store: LogStore) -> None:
    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", None]})
    fs, _ = store.arrow_filesystem()
    # As the contract asks of writers: create the parent first (no marker objects on object stores).
    fs.create_dir(store.arrow_path("year=2024"), recursive=True)
    pq.write_table(table, store.arrow_path("year=2024/part-0.parquet"), filesystem=fs)
    assert pq.read_table(store.arrow_path("year=2024/part-0.parquet"), filesystem=fs).equals(table)
    assert [f.path for f in store.walk_files()] == ["year=2024/part-0.parquet"]
    with store.open_input("year=2024/part-0.parquet") as f:
        assert pq.read_table(f).equals(table)


def check_object_deleted_after_open(store: LogStore) -> None:
    """A log expiry may delete a checkpoint between a reader's open and its reads: a read that
    then finds the object gone raises ObjectNotFoundError (never the backend's own error), as
    open_input and read do for an object that is not there at all."""
    table = pa.table({"id": list(range(60_000))})
    data = pa.BufferOutputStream()
    pq.write_table(table, data, row_group_size=20_000)
    store.put("gone.parquet", data.getvalue().to_pybytes())
    parquet = pq.ParquetFile(store.open_input("gone.parquet"))  # reads the footer, at the end
    store.delete("gone.parquet")
    try:
        # Row group 0 is at the start: an object store fetches it now, a local file still has it.
        first = parquet.read_row_group(0)
    except ObjectNotFoundError as e:
        assert e.path == "gone.parquet"
    else:
        assert first.equals(table.slice(0, 20_000))
    with pytest.raises(ObjectNotFoundError):
        store.open_input("gone.parquet")
    with pytest.raises(ObjectNotFoundError):
        store.read("gone.parquet")


CONTRACT_CHECKS = [
    check_put_if_absent_twice,
    check_threads_race_one_winner,
    check_list_from,
    check_missing_objects,
    check_put_overwrites,
    check_delete_is_idempotent,
    check_walk_files,
    check_parquet_roundtrip,
    check_object_deleted_after_open,
]


# --- a log expiry racing the readers of a table, on every store ---------------------------
#
# A test that takes the ``expiry_race`` argument runs once per race below, each given the URI of
# a new table on the test's store and the storage options to open it with. The expiry deletes a
# checkpoint a moment after a reader opened it, before the reader reads it: what the load run on
# S3 met as vacuums failing with "checkpoint ... is unreadable: The specified key does not exist".

RACE_SCHEMA = pa.schema([("id", pa.int64())])
CHECKPOINT_3 = "_delta_log/00000000000000000003.checkpoint.parquet"


def _table_with_a_checkpoint(uri: str, options: dict[str, Any] | None) -> txnlog.Table:
    """Versions 3 to 5 of a table (ids 2, 3, 4 live, id 1 deleted at version 3), the earliest
    checkpointed and its commits expired: as a log a checkpointer and an expirer keep."""
    table = txnlog.Table.create(uri, RACE_SCHEMA, storage_options=options)
    for i in (1, 2):
        table.append(pa.table({"id": [i]}, schema=RACE_SCHEMA))
    with table.transaction(operation="DELETE") as txn:
        txn.remove_files(txn.filter_files("id = 1"))
    maintenance.checkpoint(table)
    for i in (3, 4):
        table.append(pa.table({"id": [i]}, schema=RACE_SCHEMA))
    assert maintenance.expire(table, retain_min=3, older_than=0).earliest_after == 3
    return table


def _expire_when_opened(table: txnlog.Table, options: dict[str, Any] | None, *, skip: int = 0) -> list[str]:
    """Make ``table``'s store run a log expiry (on a store of its own, keeping version 5 only:
    a checkpoint written there, commits 3 and 4 and checkpoint 3 deleted) right after it opens a
    checkpoint, once, after ``skip`` such opens: the checkpoint it opened is deleted before it
    reads it. Returns the paths it fired on (fault injection of a race)."""
    store = table.store
    open_input = store.open_input
    fired: list[str] = []
    opened = [0]

    def open_then_expire(path: str) -> Any:
        stream = open_input(path)
        if ".checkpoint." in path and not fired:
            opened[0] += 1
            if opened[0] > skip:
                fired.append(path)
                maintenance.expire(txnlog.Table(table.uri, options), retain_min=1, older_than=0)
        return stream

    store.open_input = open_then_expire  # type: ignore[method-assign]
    return fired


def _live_ids(table: txnlog.Table) -> list[int]:
    snap = table.snapshot()
    fs, root = snap.store.arrow_filesystem()
    paths = [f"{root}/{snap.locate(p).relative}" for p in snap.files(stats=False).column("path").to_pylist()]
    return sorted(pq.ParquetDataset(paths, filesystem=fs).read(columns=["id"]).column("id").to_pylist())


def race_fresh_snapshot(uri: str, options: dict[str, Any] | None) -> None:
    """A new reader opens the newest checkpoint, expiry deletes it and the commits after it:
    the reader lists the log again and reads from the new one."""
    _table_with_a_checkpoint(uri, options)
    table = txnlog.Table(uri, options)
    fired = _expire_when_opened(table, options)
    snap = table.snapshot()
    assert fired == [CHECKPOINT_3]
    assert snap.version == 5 and snap.num_files == 3
    assert snap.files().column("stats").null_count == 0
    assert snap.tombstones().num_rows == 1
    assert _live_ids(table) == [2, 3, 4]


def race_old_version(uri: str, options: dict[str, Any] | None) -> None:
    """A reader of the earliest version (as vacuum reads it) whose checkpoint expires under it:
    the version is gone, which the reader says, and no checkpoint is called corrupt. (A store
    that keeps serving an open file, as a local disk does, may still read it whole.)"""
    _table_with_a_checkpoint(uri, options)
    table = txnlog.Table(uri, options)
    fired = _expire_when_opened(table, options)
    try:
        snap = table.snapshot(3)
    except VersionNotFoundError as e:
        assert e.version == 3
    else:
        assert snap.version == 3 and snap.num_files == 1
    assert fired == [CHECKPOINT_3]


def race_deferred_reads(uri: str, options: dict[str, Any] | None) -> None:
    """A snapshot leaves stats and tombstones in its checkpoint; expiry deletes that checkpoint
    as the snapshot opens it again to read them: it rebuilds its version from the log as it is."""
    _table_with_a_checkpoint(uri, options)
    table = txnlog.Table(uri, options)
    fired = _expire_when_opened(table, options, skip=1)
    snap = table.snapshot()
    assert snap.state.pending_stats is not None and not fired
    assert snap.tombstones().num_rows == 1
    assert fired == [CHECKPOINT_3]
    assert snap.files().column("stats").null_count == 0 and snap.num_files == 3


def race_vacuum(uri: str, options: dict[str, Any] | None) -> None:
    """Vacuum, as the load run's, with the log expiring under the 1st, 2nd or 3rd checkpoint it
    opens (today: for the latest version, for the earliest, for the latest's tombstones)."""
    for skip in range(3):
        table = _table_with_a_checkpoint(f"{uri}-{skip}", options)
        live = set(table.snapshot().files(stats=False).column("path").to_pylist())
        removed = set(table.snapshot().tombstones().column("path").to_pylist())  # id 1's file
        racing = txnlog.Table(table.uri, options)
        fired = _expire_when_opened(racing, options, skip=skip)
        result = maintenance.vacuum(racing, retention=0, force=True)
        assert fired == [CHECKPOINT_3] and len(removed) == 1
        assert set(result.files) == removed and result.end_version is not None
        assert set(table.snapshot().files(stats=False).column("path").to_pylist()) == live
        assert _live_ids(table) == [2, 3, 4]


def race_checkpoint(uri: str, options: dict[str, Any] | None) -> None:
    """A checkpoint streams the previous one, which expiry deletes as it opens it: it lists the
    log again and finds the version checkpointed."""
    _table_with_a_checkpoint(uri, options)
    table = txnlog.Table(uri, options)
    fired = _expire_when_opened(table, options)
    result = maintenance.checkpoint(table)
    assert fired == [CHECKPOINT_3]
    assert result.version == 5
    assert txnlog.Table(uri, options).snapshot().num_files == 3


EXPIRY_RACES = [race_fresh_snapshot, race_old_version, race_deferred_reads, race_vacuum, race_checkpoint]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "contract_check" in metafunc.fixturenames:
        metafunc.parametrize("contract_check", CONTRACT_CHECKS, ids=[c.__name__[6:] for c in CONTRACT_CHECKS])
    if "expiry_race" in metafunc.fixturenames:
        metafunc.parametrize("expiry_race", EXPIRY_RACES, ids=[c.__name__[5:] for c in EXPIRY_RACES])
