"""txnlog and delta-spark commit to one table at the same time (tests/txn/mixed_writers.py):
DELETE, UPDATE, MERGE (deletion vectors on), appends, OPTIMIZE, property and feature changes,
from threads of the shared session and from separate processes, and streams of both engines.
The final table equals the serial run of the committed transactions, each commit's change rows
are its change, row ids stay unique; the load test loses and doubles no row."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.txn import mixed_writers as mixed
from tests.txn import row_level_model as model
from txnlog import Table
from txnlog.errors import CommitConflictError

#: A mixed history took 6 minutes at a load average of 25 on 2 cores.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


def _txnlog_process(path: str, ops: list[model.Op]) -> tuple[list[tuple[int, model.Op]], dict[str, int]]:
    history = mixed.History()
    mixed.txnlog_writer(Path(path), ops, history)
    return history.txnlog, dict(history.conflicts)


def _delta_process(path: str, plans: dict[str, list[model.Op]], ready: str) -> tuple[dict[str, model.Op], dict[str, int], list[str]]:
    """delta-spark's writers in a JVM of their own: a local session started here, one thread
    per writer. ``ready`` is created once the session runs, so the other side starts with it."""
    from tests.conftest import local_session_builder

    builder = local_session_builder("txnlog-tests-delta-writers")
    assert builder is not None, "delta-spark's jars are absent"
    spark = builder.getOrCreate()
    try:
        spark.read.format("delta").load(path).count()  # the first snapshot, before the race
        Path(ready).touch()
        history = mixed.History()
        mixed.run_threads([lambda name=name: mixed.delta_writer(spark, Path(path), plans[name], history, name) for name in plans])
        return history.delta, dict(history.conflicts), history.errors
    finally:
        spark.stop()


def run_mixed(spark: Any, path: Path, seed: int, ops_per_writer: int, txnlog_in: str, delta_in: str = "threads") -> mixed.History:
    """Two txnlog writers and two delta-spark writers run random operations on the table at
    ``path``: txnlog's in threads of this process or in processes of their own; delta-spark's in
    threads of the shared session, or of a session in another process (another JVM)."""
    rng = random.Random(seed)
    plans = {name: [mixed.random_op(rng) for _ in range(ops_per_writer)] for name in ("t1", "t2", "d1", "d2")}
    history = mixed.History()
    txnlog_threads = [lambda name=name: mixed.txnlog_writer(path, plans[name], history) for name in ("t1", "t2")]
    if delta_in == "process":
        assert txnlog_in == "threads"
        ready = path.parent / "delta-writers-ready"
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            future = pool.submit(_delta_process, str(path), {n: plans[n] for n in ("d1", "d2")}, str(ready))
            deadline = time.monotonic() + 300
            while not ready.exists() and not future.done() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert ready.exists(), f"the delta-spark process did not start: {future.exception() if future.done() else 'timeout'}"
            mixed.run_threads(txnlog_threads)
            delta, conflicts, errors = future.result(timeout=900)
        history.delta.update(delta)
        history.conflicts.update(conflicts)
        history.errors += errors
        return history
    targets = [lambda name=name: mixed.delta_writer(spark, path, plans[name], history, name) for name in ("d1", "d2")]
    if txnlog_in == "threads":
        mixed.run_threads(targets + txnlog_threads)
        return history
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_txnlog_process, str(path), plans[name]) for name in ("t1", "t2")]
        mixed.run_threads(targets)
        for future in futures:
            committed, conflicts = future.result(timeout=900)
            history.txnlog += committed
            history.conflicts.update(conflicts)
    return history


def check_mixed(spark: Any, table: Table, path: Path, start: int, history: mixed.History) -> None:
    assert not history.errors, "\n".join(history.errors)
    committed = history.committed(table, start)
    mixed.check_history(table, committed)
    mixed.check_row_ids(spark, path)
    by_delta = sorted((r["id"], r["v"]) for r in spark.read.format("delta").load(str(path)).collect())
    assert by_delta == model.table_rows(table)
    by_txnlog = {v for v, _ in history.txnlog}
    assert by_txnlog and len(committed) > len(by_txnlog), f"one side committed nothing: {history.conflicts}"


# Under soak: the default suite's mixed-engine tests are the streams-and-DML, the load with a
# compactor and the deterministic conflicts below; the long history (threads) is soak's too.
@pytest.mark.soak
@pytest.mark.parametrize("txnlog_in", ["threads", "processes"])
def test_a_mixed_history_equals_the_serial_run_of_its_commits(delta_spark: Any, tmp_path: Path, txnlog_in: str) -> None:
    path = tmp_path / "t"
    table = mixed.create(path)
    start = table.latest_version()
    history = run_mixed(delta_spark, path, seed=24 if txnlog_in == "threads" else 25, ops_per_writer=5, txnlog_in=txnlog_in)
    check_mixed(delta_spark, table, path, start, history)


@pytest.mark.soak
def test_a_mixed_history_with_delta_spark_in_another_process(delta_spark: Any, tmp_path: Path) -> None:
    """delta-spark's writers in a JVM of their own (as two jobs on one table are): no shared
    in-memory DeltaLog state, only the log on disk, as between txnlog and delta-spark."""
    path = tmp_path / "t"
    table = mixed.create(path)
    start = table.latest_version()
    history = run_mixed(delta_spark, path, seed=26, ops_per_writer=8, txnlog_in="threads", delta_in="process")
    check_mixed(delta_spark, table, path, start, history)


#: Seed 0 (txnlog in threads) under ``soak``, the rest (odd seeds: txnlog in processes)
#: ``exhaustive``; the short history above runs txnlog in processes under ``soak``.
@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.soak if s < 1 else pytest.mark.exhaustive) for s in range(6)])
def test_long_mixed_histories(delta_spark: Any, tmp_path: Path, seed: int) -> None:
    path = tmp_path / "t"
    table = mixed.create(path)
    start = table.latest_version()
    history = run_mixed(delta_spark, path, seed=seed, ops_per_writer=30, txnlog_in="processes" if seed % 2 else "threads")
    check_mixed(delta_spark, table, path, start, history)


def test_each_side_meets_the_others_commit_as_a_conflict(delta_spark: Any, tmp_path: Path) -> None:
    """Deterministic: a txnlog UPDATE and a delta-spark UPDATE of the same row, each losing once."""
    path = tmp_path / "t"
    table = mixed.create(path)
    loser = model.begin(table, model.Op("update", (3,), 1))
    assert loser is not None
    delta_spark.sql(f"UPDATE delta.`{path}` SET v = v + 10 WHERE id = 3")
    with pytest.raises(CommitConflictError):
        loser.commit()
    # delta-spark's MERGE reads every file (no target-only predicate): it meets a txnlog
    # commit of a deletion vector between its read and its commit as a conflict. The gate
    # holds the MERGE in its scan until txnlog has committed.
    gate = tmp_path / "gate"
    delta_spark.udf.register("hold", _hold(str(gate)), "boolean")
    errors: list[BaseException] = []

    def merge() -> None:
        try:
            delta_spark.sql(
                f"MERGE INTO delta.`{path}` AS t USING (SELECT 5 AS id, 50 AS v) AS s ON t.id = s.id AND hold(t.id) "
                "WHEN MATCHED THEN UPDATE SET v = s.v"
            ).collect()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=merge)
    thread.start()
    deadline = time.monotonic() + 600
    while not (gate / "held").exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    table.update("id = 5", {"v": "v + 1"})
    (gate / "go").touch()
    thread.join()
    assert errors and mixed.is_delta_conflict(errors[0]), errors
    assert dict(model.table_rows(table))[5] == 1


def _hold(gate: str) -> Any:
    """A UDF that blocks the first time it runs until ``gate/go`` exists (``gate/held`` says
    it is waiting)."""

    def hold(_: int) -> bool:
        import os
        import time as clock

        os.makedirs(gate, exist_ok=True)
        if not os.path.exists(os.path.join(gate, "go")):
            open(os.path.join(gate, "held"), "w").close()
            while not os.path.exists(os.path.join(gate, "go")):
                clock.sleep(0.05)
        return True

    return hold


def test_streams_of_both_engines_and_dml_share_the_table(delta_spark: Any, tmp_path: Path) -> None:
    """A delta-spark stream and a txnlog stream (foreachBatch sink) append micro-batches while
    both engines run DML: every streamed row lands once, and the rest is the serial model."""
    from txnlog.spark import foreach_batch_sink

    path = tmp_path / "t"
    table = mixed.create(path)
    start = table.latest_version()
    streamed: list[int] = []
    sources = {}
    for engine, base in (("delta", 5000), ("txnlog", 6000)):
        folder = tmp_path / f"source-{engine}"
        folder.mkdir()
        for batch in range(3):
            ids = list(range(base + 10 * batch, base + 10 * batch + 5))
            streamed += ids
            pq.write_table(pa.table({"id": ids, "v": [0] * len(ids)}, schema=model.SCHEMA), folder / f"{batch}.parquet")
        sources[engine] = (
            delta_spark.readStream.schema("id long, v long").option("maxFilesPerTrigger", 1).parquet(str(folder))
        )
    queries = [
        sources["delta"].writeStream.format("delta").option("checkpointLocation", str(tmp_path / "ck-delta"))
        .trigger(availableNow=True).start(str(path)),
        sources["txnlog"].writeStream.foreachBatch(foreach_batch_sink(str(path), app_id="txnlog-stream"))
        .option("checkpointLocation", str(tmp_path / "ck-txnlog")).trigger(availableNow=True).start(),
    ]
    rng = random.Random(7)
    history = mixed.History()
    plans = [[model.random_op(rng) for _ in range(4)] for _ in range(2)]
    mixed.run_threads([
        lambda: mixed.txnlog_writer(path, plans[0], history),
        lambda: mixed.delta_writer(delta_spark, path, plans[1], history, "d"),
    ])
    for query in queries:
        query.awaitTermination(900)
        assert query.exception() is None
    assert not history.errors, history.errors
    final = [r[0] for r in model.table_rows(table)]
    assert sorted(i for i in final if i >= 5000) == sorted(streamed)  # none lost, none twice
    # The streams' commits are appends of what their change rows say; with them, the model holds.
    stream_ops = {}
    for version in range(start + 1, table.latest_version() + 1):
        inserted = [c for c in table.changes(version, version, columns=["id", "v"]).to_pylist() if c["id"] >= 5000]
        if inserted:
            stream_ops[version] = model.Op("append", tuple(c["id"] for c in inserted), 0)
    history.txnlog += list(stream_ops.items())
    mixed.check_history(table, history.committed(table, start))
    mixed.check_row_ids(delta_spark, path)


def _load(spark: Any, path: Path, seconds: float) -> None:
    """2 txnlog and 2 delta-spark writers append id blocks, a txnlog compactor rewrites, for
    ``seconds``; then every acknowledged row is there exactly once, nothing else is."""
    table = mixed.create(path)
    initial = [r[0] for r in model.table_rows(table)]
    acknowledged: list[int] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []
    counters = iter(range(10**9))

    def block() -> list[int]:
        with lock:
            base = 100_000 + 100 * next(counters)
        return list(range(base, base + 5))

    def txnlog_appender() -> None:
        t = Table(str(path))
        while time.monotonic() < stop:
            ids = block()
            t.append(pa.table({"id": ids, "v": [1] * len(ids)}, schema=model.SCHEMA))
            with lock:
                acknowledged.extend(ids)

    def delta_appender() -> None:
        session = spark.newSession()
        app = f"loader-{threading.get_ident()}"
        for n in range(10**9):
            if time.monotonic() >= stop:
                return
            ids = block()
            data = session.createDataFrame([(i, 1) for i in ids], "id long, v long")
            while True:  # an idempotent write (txnAppId, txnVersion): retried, it lands once
                try:
                    data.write.format("delta").mode("append").option("txnAppId", app).option("txnVersion", n).save(str(path))
                    break
                except Exception as e:  # noqa: BLE001
                    if mixed.LISTING_GAP not in str(e):
                        raise
            with lock:
                acknowledged.extend(ids)

    def compactor() -> None:
        t = Table(str(path))
        while time.monotonic() < stop:
            try:
                t.optimize()
            except CommitConflictError:
                pass
            time.sleep(0.2)

    def guarded(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        return run

    mixed.run_threads([guarded(f) for f in (txnlog_appender, txnlog_appender, delta_appender, delta_appender, compactor)])
    assert not errors, errors
    by_txnlog = sorted(r[0] for r in model.table_rows(Table(str(path))))
    by_delta = sorted(r.id for r in spark.read.format("delta").load(str(path)).select("id").collect())
    assert by_txnlog == by_delta == sorted(initial + acknowledged)
    mixed.check_row_ids(spark, path)


def test_load_two_txnlog_two_delta_spark_writers_and_a_compactor(delta_spark: Any, tmp_path: Path) -> None:
    _load(delta_spark, tmp_path / "t", seconds=8)


@pytest.mark.soak
def test_load_soak(delta_spark: Any, tmp_path: Path) -> None:
    _load(delta_spark, tmp_path / "t", seconds=90)
