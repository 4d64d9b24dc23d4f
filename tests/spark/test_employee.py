"""The seeds' employee scenario on Spark, as two concurrent jobs.

tx2 gives everyone in Sales a 10% raise; tx1 moves Bob from Sales to Marketing and commits
first. tx2 read Bob as Sales, so its commit must fail, and no library retry may rescue it:
re-running it would give a different raise than its author meant. A raise job that loses
only to a compaction, though, is safe to re-run, and txnlog.retry does.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

import txnlog  # noqa: E402
from txnlog import Table  # noqa: E402
from txnlog.errors import CommitConflictError, ConcurrentAppendError, ConcurrentDeleteDeleteError  # noqa: E402
from txnlog.spark import transaction  # noqa: E402
from txnlog.spark.optimize import optimize  # noqa: E402
from txnlog.spark.sink import is_compaction_conflict  # noqa: E402

pytestmark = pytest.mark.spark

EMPLOYEE = pa.schema([("id", pa.int64()), ("name", pa.string()), ("department", pa.string()), ("salary", pa.float64())])
STAFF = [(1, "Alice", "Sales", 3000.0), (2, "Bob", "Sales", 4000.0), (3, "Charlie", "Marketing", 3500.0)]


def employee_table(uri: str, files: int) -> Table:
    table = Table.create(uri, EMPLOYEE)
    per_file = -(-len(STAFF) // files)
    for i in range(0, len(STAFF), per_file):
        part = STAFF[i : i + per_file]
        table.append(pa.table({n: [row[j] for row in part] for j, n in enumerate(EMPLOYEE.names)}, schema=EMPLOYEE))
    assert table.snapshot().num_files == files
    return table


def staff(uri: str) -> list[tuple]:
    rows = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
    return sorted((r["id"], r["name"], r["department"], round(r["salary"], 2)) for r in rows)


def run_jobs(*jobs) -> list[BaseException | None]:
    errors: list[BaseException | None] = [None] * len(jobs)

    def runner(i, job):
        try:
            job()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors[i] = e

    threads = [threading.Thread(target=runner, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return errors


def test_raise_job_fails_when_bob_moved_first(spark, tmp_path):
    uri = str(tmp_path / "employee")
    employee_table(uri, files=1)  # every row in one file, as in the seeds
    tx2_read, tx1_committed = threading.Event(), threading.Event()
    attempts = []

    def raise_sales():  # tx2
        attempts.append(1)
        with transaction(spark, uri, operation="UPDATE") as tx:
            tx.update("department = 'Sales'", set={"salary": "salary * 1.1"})
            tx2_read.set()
            assert tx1_committed.wait(120)

    def move_bob():  # tx1
        assert tx2_read.wait(120)
        with transaction(spark, uri, operation="UPDATE") as tx:
            tx.update("id = 2", set={"department": "'Marketing'"})
        tx1_committed.set()

    # The application retries compaction conflicts only: this one is not, so it surfaces.
    raise_errors, move_errors = run_jobs(lambda: txnlog.retry(raise_sales, on=ConcurrentDeleteDeleteError, attempts=3), move_bob)
    assert move_errors is None
    assert isinstance(raise_errors, ConcurrentAppendError), raise_errors
    assert raise_errors.winning_operation == "UPDATE"
    assert raise_errors.conflicting_file is not None
    assert len(attempts) == 1
    assert staff(uri) == [(1, "Alice", "Sales", 3000.0), (2, "Bob", "Marketing", 4000.0), (3, "Charlie", "Marketing", 3500.0)]


def test_raise_job_that_lost_to_compaction_is_retried(spark, tmp_path):
    uri = str(tmp_path / "employee")
    employee_table(uri, files=3)
    read_done, compacted = threading.Event(), threading.Event()
    seen: list[CommitConflictError] = []

    def raise_sales():
        with transaction(spark, uri, operation="UPDATE") as tx:
            tx.update("department = 'Sales'", set={"salary": "salary * 1.1"})
            if not read_done.is_set():  # first attempt: let the compaction win
                read_done.set()
                assert compacted.wait(120)

    def compact():
        assert read_done.wait(120)
        result = optimize(spark, uri, target_file_size=1 << 20)
        assert result.version is not None and result.files_removed == 3
        compacted.set()

    def safe_retry():
        def attempt():
            try:
                return raise_sales()
            except CommitConflictError as e:
                seen.append(e)
                raise

        return txnlog.retry(attempt, on=ConcurrentDeleteDeleteError, attempts=3)

    raise_errors, compact_errors = run_jobs(safe_retry, compact)
    assert compact_errors is None and raise_errors is None
    assert len(seen) == 1 and is_compaction_conflict(seen[0])
    # The raise applied once, to exactly the people in Sales.
    assert staff(uri) == [(1, "Alice", "Sales", 3300.0), (2, "Bob", "Sales", 4400.0), (3, "Charlie", "Marketing", 3500.0)]
