"""MemoryLogStore: ``memory://`` tables, shared by every store of the process."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import fsspec
import pytest

from txnlog.errors import FileAlreadyExistsError
from txnlog.storage import open_store
from txnlog.storage.memory import MemoryLogStore

V0 = "_delta_log/00000000000000000000.json"


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = uuid.uuid4().hex
    yield f"memory://{name}/t"
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


@pytest.fixture
def memory_store(memory_uri: str) -> MemoryLogStore:
    store = open_store(memory_uri)
    assert isinstance(store, MemoryLogStore)
    return store


def test_contract(memory_store: MemoryLogStore, contract_check: Callable[..., None]) -> None:
    contract_check(memory_store)


def test_stores_on_one_uri_share_the_table(memory_uri: str) -> None:
    a, b = open_store(memory_uri), open_store(memory_uri + "/")
    a.put_if_absent(V0, b"a")
    with pytest.raises(FileAlreadyExistsError):
        b.put_if_absent(V0, b"b")
    assert [f.path for f in b.list_from("_delta_log")] == [V0]
    assert b.read(V0) == b"a"


def test_store_at_the_memory_root() -> None:
    store = open_store("memory://")
    name = f"{uuid.uuid4().hex}/x.json"
    try:
        store.put_if_absent(name, b"1")
        assert name in {f.path for f in store.walk_files()}
    finally:
        store.delete(name)


def test_iter_read_yields_in_order_with_a_bounded_number_in_flight(memory_store: MemoryLogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    paths = [f"_delta_log/{v:020d}.json" for v in range(40)]
    for i, path in enumerate(paths):
        memory_store.put_if_absent(path, f"{i}".encode())
    lock = threading.Lock()
    started: list[str] = []
    running, most = 0, 0
    read = memory_store.read

    def slow_read(path: str) -> bytes:  # instrumentation around the real read
        nonlocal running, most
        with lock:
            started.append(path)
            running += 1
            most = max(most, running)
        time.sleep(0.005)
        try:
            return read(path)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(memory_store, "read", slow_read)
    reader = memory_store.iter_read(paths)
    assert next(reader) == b"0"
    assert len(started) <= 1 + memory_store.read_ahead  # not every object read up front
    assert [int(b) for b in reader] == list(range(1, 40))
    assert 1 < most <= memory_store.read_ahead and sorted(started) == paths


def test_expiry_races(memory_uri: str, expiry_race: Callable[..., None]) -> None:
    expiry_race(memory_uri, None)
