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
