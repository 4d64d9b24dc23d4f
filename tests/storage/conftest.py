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

from txnlog.errors import FileAlreadyExistsError, ObjectNotFoundError
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


CONTRACT_CHECKS = [
    check_put_if_absent_twice,
    check_threads_race_one_winner,
    check_list_from,
    check_missing_objects,
    check_put_overwrites,
    check_delete_is_idempotent,
    check_walk_files,
    check_parquet_roundtrip,
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "contract_check" in metafunc.fixturenames:
        metafunc.parametrize("contract_check", CONTRACT_CHECKS, ids=[c.__name__[6:] for c in CONTRACT_CHECKS])
