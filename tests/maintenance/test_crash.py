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
