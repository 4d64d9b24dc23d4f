"""txnlog.testing.FaultInjectingStore does each fault it offers, on a real local store."""

from __future__ import annotations

import multiprocessing
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from txnlog.errors import AmbiguousWriteError, FileAlreadyExistsError, StorageError
from txnlog.storage import open_store
from txnlog.testing import FaultInjectingStore


@pytest.fixture
def store(tmp_path: Path) -> FaultInjectingStore:
    return FaultInjectingStore(open_store(tmp_path / "t"))


def test_fail_n_times_then_succeed(store: FaultInjectingStore) -> None:
    rule = store.fail("put_if_absent", "_delta_log/*.json", times=2)
    for _ in range(2):
        with pytest.raises(StorageError, match="injected fault: put_if_absent _delta_log/0.json"):
            store.put_if_absent("_delta_log/0.json", b"x")
    assert not store.inner.exists("_delta_log/0.json")  # a failure before the call wrote nothing
    store.put_if_absent("_delta_log/0.json", b"x")
    assert store.inner.read("_delta_log/0.json") == b"x"
    assert rule.fired == 2
    # Other paths and operations were never affected.
    store.put_if_absent("_delta_log/x.crc", b"y")


def test_skip_lets_the_first_calls_through(store: FaultInjectingStore) -> None:
    store.fail("put", "*", skip=2)
    store.put("a", b"1")
    store.put("b", b"2")
    with pytest.raises(StorageError):
        store.put("c", b"3")
    store.put("d", b"4")
    assert [p for op, p in store.calls if op == "put"] == ["a", "b", "c", "d"]


def test_custom_error(store: FaultInjectingStore) -> None:
    store.fail("read", error=lambda op, path: FileAlreadyExistsError(f"{op} {path}", path=path))
    store.put("a", b"1")
    with pytest.raises(FileAlreadyExistsError):
        store.read("a")


def test_fail_after_lands_the_write_and_reports_an_ambiguous_outcome(store: FaultInjectingStore) -> None:
    store.fail_after("put_if_absent")
    with pytest.raises(AmbiguousWriteError):
        store.put_if_absent("_delta_log/1.json", b"ours")
    assert store.inner.read("_delta_log/1.json") == b"ours"


def test_delay(store: FaultInjectingStore) -> None:
    store.delay("info", 0.2, times=1)
    store.put("a", b"1")
    start = time.monotonic()
    store.info("a")
    assert time.monotonic() - start >= 0.2
    start = time.monotonic()
    store.info("a")
    assert time.monotonic() - start < 0.2


def test_truncate_writes_a_prefix(store: FaultInjectingStore) -> None:
    store.truncate("put", "_delta_log/_last_checkpoint", keep=0.25)
    with pytest.raises(StorageError, match="cut short"):
        store.put("_delta_log/_last_checkpoint", b"0123456789abcdef")
    assert store.inner.read("_delta_log/_last_checkpoint") == b"0123"
    store.truncate("put", "hint", keep=0.5, raise_error=False)
    store.put("hint", b"abcdef")  # a torn write nobody noticed
    assert store.inner.read("hint") == b"abc"


def test_truncate_atomic_output(store: FaultInjectingStore) -> None:
    store.truncate("open_atomic_output", "_delta_log/*.parquet", keep=0.5, raise_error=False)
    with store.open_atomic_output("_delta_log/1.checkpoint.parquet") as out:
        out.write(b"x" * 100)
    assert store.inner.read("_delta_log/1.checkpoint.parquet") == b"x" * 50


def test_hide_newest_listing(store: FaultInjectingStore) -> None:
    for v in range(4):
        store.put_if_absent(f"_delta_log/{v:020}.json", b"{}")
    store.hide_newest("_delta_log", count=2)
    assert [f.name for f in store.list_from("_delta_log")] == [f"{v:020}.json" for v in range(2)]
    assert len(store.list_from("_delta_log")) == 4  # once only


def test_data_files_through_the_arrow_filesystem(store: FaultInjectingStore) -> None:
    fs, root = store.arrow_filesystem()
    fs.create_dir(f"{root}/part=1", recursive=True)
    data = pa.table({"id": list(range(1000))})
    store.truncate("write_data", "part=1/a.parquet", keep=0.3)
    with pytest.raises(StorageError, match="write_data of part=1/a.parquet cut short"):
        pq.write_table(data, f"{root}/part=1/a.parquet", filesystem=fs)
    store.truncate("write_data", "part=1/torn.parquet", keep=0.3, raise_error=False)
    pq.write_table(data, f"{root}/part=1/torn.parquet", filesystem=fs)
    with pytest.raises(pa.ArrowInvalid):  # what landed is not a whole Parquet file
        pq.read_table(f"{root}/part=1/torn.parquet", filesystem=fs)
    pq.write_table(data, f"{root}/part=1/b.parquet", filesystem=fs)
    assert pq.read_table(f"{root}/part=1/b.parquet", filesystem=fs).num_rows == 1000
    store.fail("read_data", "part=1/b.parquet")
    with pytest.raises(StorageError):
        pq.read_table(f"{root}/part=1/b.parquet", filesystem=fs)
    assert ("write_data", "part=1/b.parquet") in store.calls


def _killed_child(root: str) -> None:
    store = FaultInjectingStore(open_store(root))
    store.kill("put", "b", after=True)
    store.put("a", b"1")
    store.put("b", b"2")
    store.put("c", b"3")  # never reached


def test_kill_is_a_real_sigkill_at_that_step(tmp_path: Path) -> None:
    child = multiprocessing.get_context("spawn").Process(target=_killed_child, args=(str(tmp_path / "t"),))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    store = open_store(tmp_path / "t")
    assert store.read("a") == b"1" and store.read("b") == b"2" and not store.exists("c")


def test_unknown_operation_is_refused(store: FaultInjectingStore) -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        store.fail("rename")
