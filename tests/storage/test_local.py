"""LocalLogStore (plain paths and ``file://``) and the refusal of stores without put-if-absent."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest

from txnlog.errors import FileAlreadyExistsError, PutIfAbsentUnsupportedError
from txnlog.storage import LocalLogStore, open_store
from txnlog.storage.fsspec_store import FsspecLogStore

LOG = "_delta_log"
V0 = f"{LOG}/00000000000000000000.json"


@pytest.fixture
def local_store(tmp_path: Path) -> LocalLogStore:
    store = open_store(tmp_path / "t")
    assert isinstance(store, LocalLogStore)
    return store


def test_contract(local_store: LocalLogStore, contract_check: Callable[..., None]) -> None:
    contract_check(local_store)


def test_paths_and_file_uris_open_the_same_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    stores = [open_store("t"), open_store(str(tmp_path / "t") + "/"), open_store(f"file://{tmp_path}/t")]
    assert {(s.root_uri, s.root_path) for s in stores} == {(f"file://{tmp_path}/t", str(tmp_path / "t"))}  # type: ignore[attr-defined]


def _race(root: str, names: list[str], start: Any, results: Any) -> None:
    store = open_store(root)
    won = []
    start.wait()
    for name in names:
        try:
            # Large enough that a reader could catch a partly written file if writes weren't atomic.
            store.put_if_absent(name, f"{os.getpid()}:{name}:".encode() * 20_000)
            won.append(name)
        except FileAlreadyExistsError:
            pass
    results.put((os.getpid(), won))


def test_processes_race_each_name_has_one_winner(tmp_path: Path) -> None:
    root, names = str(tmp_path / "t"), [f"{LOG}/{v:020d}.json" for v in range(20)]
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(root, names[i:] + names[:i], start, results)) for i in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    winners = {name: pid for pid, won in outcomes for name in won}
    assert sum(len(won) for _, won in outcomes) == len(names) == len(winners)
    store = open_store(root)
    for name, pid in winners.items():
        assert store.read(name) == f"{pid}:{name}:".encode() * 20_000
    assert sorted(os.listdir(tmp_path / "t" / LOG)) == sorted(n.split("/")[1] for n in names)


def test_no_temp_files_left_after_winning_or_losing(local_store: LocalLogStore) -> None:
    local_store.put_if_absent(V0, b"won")
    with pytest.raises(FileAlreadyExistsError):
        local_store.put_if_absent(V0, b"lost")
    local_store.put(f"{LOG}/_last_checkpoint", b"{}")
    assert sorted(os.listdir(os.path.join(local_store.root_path, LOG))) == [
        "00000000000000000000.json",
        "_last_checkpoint",
    ]


def test_failed_write_leaves_no_temp_file(local_store: LocalLogStore) -> None:
    from txnlog.errors import StorageError

    os.makedirs(os.path.join(local_store.root_path, V0))  # a directory where the commit goes
    with pytest.raises(StorageError):
        local_store.put_if_absent(V0, b"x")
    assert os.listdir(os.path.join(local_store.root_path, LOG)) == ["00000000000000000000.json"]


@pytest.mark.parametrize("fsync", [True, "true"])
def test_fsync_option(tmp_path: Path, fsync: Any) -> None:
    store = open_store(tmp_path / "t", {"fsync": fsync})
    assert isinstance(store, LocalLogStore) and store.fsync is True
    store.put_if_absent(V0, b"durable")
    store.put(f"{LOG}/_last_checkpoint", b"{}")
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(V0, b"again")
    assert store.read(V0) == b"durable"
    assert not open_store(tmp_path / "t", {"fsync": "false"}).fsync  # type: ignore[attr-defined]


def test_store_without_put_if_absent_refuses_to_commit(tmp_path: Path) -> None:
    store = FsspecLogStore(f"file://{tmp_path}", fsspec.filesystem("file"), str(tmp_path))
    assert store.supports_put_if_absent is False
    with pytest.raises(PutIfAbsentUnsupportedError, match=V0) as raised:
        store.put_if_absent(V0, b"{}")
    assert raised.value.path == V0
    assert not (tmp_path / V0).exists()
    store.put("data/part-0.parquet", b"x")  # plain writes and reads still work
    assert [f.path for f in store.walk_files()] == ["data/part-0.parquet"]


@pytest.mark.parametrize(
    ("uri", "module", "extra"),
    [("s3://b/t", "s3fs", "s3"), ("az://c/t", "adlfs", "azure"), ("gs://b/t", "gcsfs", "gcs")],
)
def test_missing_cloud_extra_says_what_to_install(
    uri: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from txnlog.errors import StorageError

    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(StorageError, match=rf"pip install 'txnlog\[{extra}\]'"):
        open_store(uri)


def test_expiry_races(tmp_path: Path, expiry_race: Callable[..., None]) -> None:
    expiry_race(str(tmp_path / "t"), None)
