"""Crash safety of log expiry: a real child process runs ``expire`` and is killed with SIGKILL
just before its k-th write or delete to storage (a fault-injecting store wrapper counts them);
then txnlog and deltalake must both read every version the log can still reconstruct, with the
files it had before. A few steps run by default; every step (and parallel deletes) under soak."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

import txnlog
from txnlog.maintenance import expire, tags
from txnlog.maintenance.layout import LogLayout

from .conftest import age, build, files_of, read_with_both

_SPAWN = multiprocessing.get_context("spawn")
_MUTATIONS = ("put", "put_if_absent", "delete", "open_atomic_output")


class KillAtStep:
    """Wraps a LogStore: the ``kill_at``-th mutation (1-based) SIGKILLs the process before it runs."""

    def __init__(self, store: Any, kill_at: int | None, counter: list[int]) -> None:
        self._store = store
        self._kill_at = kill_at
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in _MUTATIONS:
            return attr

        def mutate(*args: Any, **kwargs: Any) -> Any:
            self._counter[0] += 1
            if self._counter[0] == self._kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return attr(*args, **kwargs)

        return mutate


def _child(uri: str, kill_at: int | None, workers: int, out: Any) -> None:
    counter = [0]
    table = txnlog.Table(uri, store=KillAtStep(txnlog.Table(uri).store, kill_at, counter))  # type: ignore[arg-type]
    result = expire(table, retain_min=3, limit=100, max_workers=workers)
    out.put((counter[0], result.earliest_after))


def _run_child(uri: str, kill_at: int | None, workers: int) -> tuple[int, Any]:
    queue = _SPAWN.Queue()
    proc = _SPAWN.Process(target=_child, args=(uri, kill_at, workers, queue))
    proc.start()
    proc.join(120)
    got = queue.get(timeout=5) if proc.exitcode == 0 else None
    return proc.exitcode if proc.exitcode is not None else -999, got


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, set[str]], int, int]:
    """A 15-version table (checkpoint at 10) with a tag at 4, every commit 60 days old; the files
    of each version; how many storage mutations a full run makes; the earliest version after it."""
    path = tmp_path_factory.mktemp("crash") / "t"
    table = build(path, 15)
    age(table, range(16), days=60)
    tags.create(table, "keep", 4)
    expected = {v: files_of(table, v) for v in range(16)}
    probe = path.parent / "probe"
    shutil.copytree(path, probe)
    code, got = _run_child(str(probe), None, 1)
    assert code == 0 and got is not None
    steps, earliest_after = got
    assert earliest_after == 13 and steps >= 15
    return path, expected, steps, earliest_after


def _check_after_kill(tmp_path: Path, pristine: Any, kill_at: int, workers: int) -> None:
    path, expected, steps, earliest_after = pristine
    copy = tmp_path / f"t-{kill_at}-{workers}"
    shutil.copytree(path, copy)
    uri = "file://" + str(copy)
    code, _ = _run_child(uri, kill_at, workers)
    assert code == -signal.SIGKILL, f"the child was not killed at step {kill_at} (exit {code})"

    layout = LogLayout.of(txnlog.Table(uri).store)
    assert layout.latest == 15 and layout.earliest <= earliest_after
    readable = [*layout.retained_versions, 4]  # the tagged version stays readable throughout
    for version in readable:
        ours, theirs, our_ids, their_ids = read_with_both(uri, version)
        assert ours == theirs == expected[version], f"version {version} after a kill at step {kill_at}"
        assert our_ids == their_ids == list(range(1, version + 1))

    # Running it again finishes the job.
    table = txnlog.Table(uri)
    assert expire(table, retain_min=3, limit=100).earliest_after == earliest_after
    for version in (4, 13, 15):
        ours, theirs, _, _ = read_with_both(uri, version)
        assert ours == theirs == expected[version]


@pytest.mark.parametrize("step", ["first", "second", "middle", "last"])
def test_sigkill_during_expire_leaves_every_retained_version_readable(tmp_path, pristine, step):
    steps = pristine[2]
    kill_at = {"first": 1, "second": 2, "middle": steps // 2, "last": steps}[step]
    _check_after_kill(tmp_path, pristine, kill_at, workers=1)


@pytest.mark.soak
@pytest.mark.parametrize("workers", [1, 8])
def test_sigkill_at_every_step(tmp_path, pristine, workers):
    for kill_at in range(1, pristine[2] + 1):
        _check_after_kill(tmp_path, pristine, kill_at, workers)


def _child_slow_oldest_delete(uri: str, first_commit: str, out: Any) -> None:
    """Expire with 8 delete threads; the oldest commit's delete is slow, and the process dies
    once two commit files have been deleted: a crash inside a parallel window."""
    from txnlog.testing import FaultInjectingStore

    store = FaultInjectingStore(txnlog.Table(uri).store)
    store.delay("delete", 2.0, f"*{first_commit}")
    store.kill("delete", "_delta_log/*.json", skip=1, after=True)
    expire(txnlog.Table(uri, store=store), retain_min=3, limit=100, max_workers=8)
    out.put("finished")


def test_a_crash_inside_a_parallel_delete_window_leaves_no_gap_validate_reports(tmp_path: Path) -> None:
    """Commits deleted in parallel finish in any order. If the oldest one was still there when
    the process died, it stayed readable with holes above it and commits stranded beyond them,
    which validate reports as a version gap (the soak's crash test met it under load). The
    commits a reader could replay from are now deleted first, one by one."""
    from txnlog.maintenance import validate

    table = build(tmp_path / "t", 15)
    age(table, range(16), days=60)
    first = f"{0:020d}.json"
    queue = _SPAWN.Queue()
    proc = _SPAWN.Process(target=_child_slow_oldest_delete, args=(table.uri, first, queue))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL, f"the child was not killed (exit {proc.exitcode})"

    report = validate(txnlog.Table(table.uri))
    assert report.ok, [p.to_dict() for p in report.problems]
    layout = LogLayout.of(txnlog.Table(table.uri).store)
    for version in layout.retained_versions:
        ours, theirs, _, _ = read_with_both(table.uri, version)
        assert ours == theirs
    assert expire(txnlog.Table(table.uri), retain_min=3, limit=100).earliest_after == 13
    assert validate(txnlog.Table(table.uri)).ok
