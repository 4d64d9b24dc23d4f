"""SIGKILL at any point of a commit, a checkpoint, an expiry, a vacuum or a restore.

The approach of tests/maintenance/test_crash.py (which covers expiry step by step), extended to
every operation and to crash points inside a write: a real child process runs the operation on a
FaultInjectingStore whose rule SIGKILLs it before or after its k-th write, delete or data-file
write, or (for local temp files) between writing a temp file and renaming it into place, or in
the middle of writing a data file. A probe run counts the steps first.

After every kill: txnlog and deltalake read the same rows, validate finds nothing, an
acknowledged commit is there exactly once, an unacknowledged one at most once; vacuum removes
the leftovers (temp files in _delta_log, data files of the aborted write); running the operation
again finishes it. A few points per operation by default; every point, both sides, under soak.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

import txnlog
from txnlog.storage import open_store
from txnlog.testing import FaultInjectingStore

from .helpers import BEFORE, DONE, LEFTOVERS, NEW_ID, base_table, check_table, clean, leftovers, prepare_vacuum, run_operation

_CONTEXT = multiprocessing.get_context("spawn")
MUTATIONS = ("put_if_absent", "put", "delete", "open_atomic_output", "write_data")
OPERATIONS = ("commit", "checkpoint", "expire", "vacuum", "restore")


def _die(*args: Any, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _child(uri: str, operation: str, crash: dict[str, Any] | None, out: str) -> None:
    store = FaultInjectingStore(open_store(uri))
    if crash is not None:
        kind = crash["kind"]
        if kind in ("before", "after"):
            store.kill(crash["op"], "*", skip=crash["skip"], after=kind == "after")
        elif kind == "torn-data":  # the process dies with half of a data file written
            store.truncate("write_data", "*", raise_error=False, skip=crash["skip"])
            store.kill("write_data", "*", skip=crash["skip"], after=True)
        elif kind == "before-rename":  # a temp file written, the rename into place never done
            import txnlog.storage.local as local

            name = "link" if crash["op"] == "put_if_absent" else "replace"
            real = getattr(os, name)
            seen = [0]

            def rename_then_maybe_die(src: str, dst: str, *args: Any, **kwargs: Any) -> Any:
                seen[0] += 1
                if seen[0] > crash["skip"]:
                    _die()
                return real(src, dst, *args, **kwargs)

            setattr(local.os, name, rename_then_maybe_die)
    result = run_operation(operation, txnlog.Table(uri, store=store))
    steps = [(op, path) for op, path in store.calls if op in MUTATIONS]
    Path(out).write_text(json.dumps({"acknowledged": result is not None or operation != "commit", "steps": steps}))


def _run(uri: str, operation: str, crash: dict[str, Any] | None, out: Path) -> tuple[int, dict[str, Any] | None]:
    proc = _CONTEXT.Process(target=_child, args=(uri, operation, crash, str(out)))
    proc.start()
    proc.join(180)
    if proc.exitcode is None:
        proc.kill()
        pytest.fail(f"{operation} child hung with crash {crash}")
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.exitcode, report


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per operation: a table ready for it, and the mutating steps a full run makes."""
    base = tmp_path_factory.mktemp("crash-ops")
    out: dict[str, Any] = {}
    for operation in OPERATIONS:
        root = base / operation
        base_table(root)
        if operation == "vacuum":
            prepare_vacuum(root)
        probe = base / f"{operation}-probe"
        shutil.copytree(root, probe)
        code, report = _run(str(probe), operation, None, base / f"{operation}.json")
        assert code == 0 and report is not None, f"probe of {operation} failed (exit {code})"
        out[operation] = (root, [tuple(s) for s in report["steps"]])
    return out


def _crash_points(steps: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Every way to die: before and after each step; mid-write of each data file; between the
    temp file and the rename of each local put/put_if_absent/atomic output."""
    points = []
    seen: dict[str, int] = {}
    for op, path in steps:
        skip = seen.get(op, 0)
        seen[op] = skip + 1
        where = f"{op} #{skip + 1} {path.rsplit('/', 1)[-1][:40]}"
        points += [{"kind": "before", "op": op, "skip": skip, "where": where}, {"kind": "after", "op": op, "skip": skip, "where": where}]
        if op == "write_data":
            points.append({"kind": "torn-data", "op": op, "skip": skip, "where": where})
    renames = {"link": 0, "replace": 0}  # put_if_absent links its temp file; the others rename
    for op, _path in steps:
        if op in ("put_if_absent", "put", "open_atomic_output"):
            key = "link" if op == "put_if_absent" else "replace"
            points.append({"kind": "before-rename", "op": op, "skip": renames[key], "where": f"{key} of the temp file of {op}"})
            renames[key] += 1
    return points


def _check_after_kill(tmp_path: Path, pristine: dict[str, Any], operation: str, crash: dict[str, Any]) -> None:
    root, _steps = pristine[operation]
    copy = tmp_path / f"{operation}-{crash['kind']}-{crash['op']}-{crash['skip']}"
    shutil.copytree(root, copy)
    uri = str(copy)
    code, report = _run(uri, operation, crash, tmp_path / f"{copy.name}.json")
    if code == 0:
        pytest.skip(f"the crash point {crash['where']} was not reached ({crash['kind']})")
    assert code == -signal.SIGKILL, f"{operation} child exited {code} at {crash}"

    # 1. Both readers agree on a consistent table and validate finds nothing.
    attempted = set(DONE[operation]) | set(BEFORE) | {1, NEW_ID}
    ids = check_table(uri, acknowledged=set(), attempted=attempted)
    assert ids in (BEFORE, DONE[operation]), f"{operation} killed at {crash['where']}: neither before nor after ({ids})"

    # 2. Vacuum removes what the crash left: temp files, data files of the aborted write.
    clean(txnlog.Table(uri))
    assert leftovers(copy) == [], f"after a kill at {crash['where']} ({crash['kind']})"

    # 3. Running it again finishes the job, exactly once.
    run_operation(operation, txnlog.Table(uri))
    assert check_table(uri, acknowledged={NEW_ID} if operation == "commit" else set()) == DONE[operation]


def _default_points(steps: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A few crash points: around the first and last step, a torn data file and a temp file
    never renamed, when the operation has them."""
    points = _crash_points(steps)
    chosen = [points[0], [p for p in points if p["kind"] == "after"][-1]]
    for kind in ("torn-data", "before-rename"):
        chosen += [p for p in points if p["kind"] == kind][:1]
    if len(steps) > 2:
        chosen.append(points[len(steps)])  # a step in the middle
    unique = {json.dumps(p, sort_keys=True): p for p in chosen}
    return list(unique.values())


@pytest.mark.parametrize("operation", OPERATIONS)
def test_sigkill_during_operation(tmp_path: Path, pristine: dict[str, Any], operation: str) -> None:
    points = _default_points(pristine[operation][1])
    assert len(points) >= 3
    reached = 0
    for crash in points:
        try:
            _check_after_kill(tmp_path, pristine, operation, crash)
            reached += 1
        except pytest.skip.Exception:
            continue
    assert reached >= 2, f"fewer than two crash points of {operation} were reached"


@pytest.mark.soak
@pytest.mark.parametrize("operation", OPERATIONS)
def test_sigkill_at_every_point(tmp_path: Path, pristine: dict[str, Any], operation: str) -> None:
    for crash in _crash_points(pristine[operation][1]):
        try:
            _check_after_kill(tmp_path, pristine, operation, crash)
        except pytest.skip.Exception:
            continue


@pytest.mark.soak
def test_sigkill_at_random_points_many_rounds(tmp_path: Path, pristine: dict[str, Any]) -> None:
    """Rounds of random (operation, point) pairs; the seed is in the failure message."""
    seed = int(os.environ.get("TXNLOG_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    rounds = int(os.environ.get("TXNLOG_CRASH_ROUNDS", "10"))
    for i in range(rounds):
        operation = rng.choice(OPERATIONS)
        crash = rng.choice(_crash_points(pristine[operation][1]))
        try:
            _check_after_kill(tmp_path / str(i), pristine, operation, crash)
        except pytest.skip.Exception:
            continue
        except AssertionError as e:
            raise AssertionError(f"seed {seed}, round {i}: {e}") from e


def test_leftovers_named_by_the_suite_exist(pristine: dict[str, Any]) -> None:
    """The vacuum table really holds the planted leftovers, so the crash tests' vacuum checks
    are not vacuous."""
    root, _ = pristine["vacuum"]
    assert all((root / name).exists() for name in LEFTOVERS)
