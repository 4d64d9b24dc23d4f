"""Model check of row-level concurrency: random interleavings of DELETE, UPDATE, MERGE, appends
and OPTIMIZE on a small table with deletion vectors and row tracking. Whatever commits, the
table must equal the serial execution of the committed transactions in commit order, row for
row (tests/txn/row_level_model.py holds the reference), and read the same by DuckDB.

Two drivers: an explicit interleaving generator in one process (hypothesis draws which
transaction reads when and which commits when: every schedule is reproducible), and worker
processes racing for real."""

from __future__ import annotations

import multiprocessing
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dml.conftest import duckdb_rows
from tests.txn import row_level_model as model
from txnlog import Table
from txnlog.errors import CommitConflictError

ops = st.builds(lambda seed: model.random_op(random.Random(seed)), st.integers(0, 2**32))


@st.composite
def schedules(draw: Any, max_txns: int = 6) -> tuple[list[model.Op], list[tuple[str, int]]]:
    """Transactions and an interleaving of their events: ("begin", i) always before ("commit", i)."""
    txns = draw(st.lists(ops, min_size=2, max_size=max_txns))
    pending = [[("begin", i), ("commit", i)] for i in range(len(txns))]
    events: list[tuple[str, int]] = []
    while any(pending):
        choice = draw(st.sampled_from([i for i, p in enumerate(pending) if p]))
        events.append(pending[choice].pop(0))
    return txns, events


def run_schedule(path: Path, txns: list[model.Op], events: list[tuple[str, int]]) -> tuple[Table, list[model.Op], int]:
    """Run the interleaving; (the table, the committed ops in commit order, rebased commits)."""
    table = model.create(path)
    open_txns: dict[int, Any] = {}
    committed: list[tuple[int, model.Op]] = []
    rebased = 0
    for event, i in events:
        if event == "begin":
            open_txns[i] = model.begin(table, txns[i])
            continue
        txn = open_txns.pop(i)
        if txn is None:
            continue
        try:
            result = txn.commit()
        except CommitConflictError:
            continue
        committed.append((result.version, txns[i]))
        rebased += bool(result.rebased)
    committed.sort(key=lambda c: c[0])
    return table, [op for _, op in committed], rebased


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schedule=schedules())
def test_every_interleaving_equals_the_serial_execution_of_its_commits(tmp_path_factory: pytest.TempPathFactory, schedule: Any) -> None:
    txns, events = schedule
    table, committed, _ = run_schedule(tmp_path_factory.mktemp("model") / "t", txns, events)
    assert model.table_rows(table) == model.serial(committed), f"ops {txns}\nevents {events}\ncommitted {committed}"


def test_seeded_interleavings_rebase_and_equal_serial_execution(tmp_path: Path) -> None:
    """Seeded schedules where every transaction reads before any commits (the most contended
    interleaving): each equals its serial execution, and some commits got through by rebasing,
    or the check would prove nothing new."""
    rebased = 0
    for seed in range(12):
        rng = random.Random(seed)
        txns = [model.random_op(rng) for _ in range(4)]
        order = list(range(len(txns)))
        rng.shuffle(order)
        events = [("begin", i) for i in range(len(txns))] + [("commit", i) for i in order]
        table, committed, n = run_schedule(tmp_path / f"t{seed}", txns, events)
        rebased += n
        assert model.table_rows(table) == model.serial(committed), f"seed {seed}: ops {txns}, commit order {order}"
    assert rebased > 0


def test_a_known_interleaving_rebases_and_an_independent_reader_agrees(tmp_path: Path) -> None:
    """Two updates of other rows of one file and an OPTIMIZE, all reading before any commits:
    every one commits, two of them rebased."""
    txns = [model.Op("update", (1,), 5), model.Op("update", (2,), 7), model.Op("optimize")]
    events = [("begin", 0), ("begin", 1), ("begin", 2), ("commit", 2), ("commit", 0), ("commit", 1)]
    table, committed, rebased = run_schedule(tmp_path / "t", txns, events)
    assert len(committed) == 3 and rebased == 2
    expected = model.serial(committed)
    assert model.table_rows(table) == expected
    assert sorted(tuple(r) for r in duckdb_rows(table.uri, ["id", "v"])) == expected


# -- worker processes racing for real ------------------------------------------------------------


def _worker(uri: str, seed: int, count: int, out: Any) -> None:
    rng = random.Random(seed)
    table = Table(uri)
    for _ in range(count):
        op = model.random_op(rng)
        try:
            txn = model.begin(table, op)
            if txn is None:
                continue
            result = txn.commit()
        except CommitConflictError:
            continue
        out.put((result.version, op, bool(result.rebased)))


def race(path: Path, workers: int, ops_each: int, seed: int) -> tuple[Table, list[model.Op], int]:
    table = model.create(path)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [context.Process(target=_worker, args=(table.uri, seed * 100 + w, ops_each, out)) for w in range(workers)]
    for p in procs:
        p.start()
    results = []
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    while not out.empty():
        results.append(out.get())
    results.sort(key=lambda r: r[0])
    return table, [op for _, op, _ in results], sum(r[2] for r in results)


def test_processes_racing_commit_histories_equal_to_serial_execution(tmp_path: Path) -> None:
    table, committed, _ = race(tmp_path / "t", workers=3, ops_each=6, seed=1)
    assert committed
    assert model.table_rows(table) == model.serial(committed)
    assert sorted(tuple(r) for r in duckdb_rows(table.uri, ["id", "v"])) == model.serial(committed)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_processes_racing_long(tmp_path: Path) -> None:
    rebased = 0
    for seed in range(5):
        table, committed, n = race(tmp_path / f"t{seed}", workers=4, ops_each=25, seed=seed)
        rebased += n
        assert model.table_rows(table) == model.serial(committed), f"seed {seed}"
    assert rebased > 0


@pytest.mark.soak
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schedule=schedules(max_txns=10))
def test_every_interleaving_long(tmp_path_factory: pytest.TempPathFactory, schedule: Any) -> None:
    txns, events = schedule
    table, committed, _ = run_schedule(tmp_path_factory.mktemp("model") / "t", txns, events)
    assert model.table_rows(table) == model.serial(committed), f"ops {txns}\nevents {events}"
