"""txnlog.retry: re-run a unit of work after a conflict it lists, with real concurrent commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog
from txnlog.errors import ConcurrentAppendError, InvalidArgumentError, MetadataChangedError

SCHEMA = pa.schema([("id", pa.int64()), ("dept", pa.string()), ("salary", pa.int64())])


def _employees(tmp_path: Path) -> txnlog.Table:
    table = txnlog.Table.create(tmp_path / "emp", SCHEMA, partition_by=["dept"])
    table.append(pa.table({"id": [1, 2, 3], "dept": ["eng", "eng", "ops"], "salary": [100, 110, 90]}, schema=SCHEMA))
    return table


def _raise_eng(table: txnlog.Table, interfere: list[int]) -> int:
    """Read the eng rows, write them back raised by 10%; the first ``interfere[0]`` calls see a
    hire committed to eng by another writer between their read and their commit."""
    with table.transaction("UPDATE") as txn:
        files = txn.filter_files("dept = 'eng'")
        import pyarrow.parquet as pq

        rows = pa.concat_tables([pq.read_table(table.data_file_uri(p).removeprefix("file://")) for p in files.column("path").to_pylist()])
        raised = rows.set_column(rows.schema.get_field_index("salary"), "salary", pa.array([s * 11 // 10 for s in rows.column("salary").to_pylist()]))
        txn.remove_files(files)
        txn.write(raised.append_column("dept", pa.array(["eng"] * raised.num_rows)).select(SCHEMA.names).cast(SCHEMA))
        if interfere[0] > 0:
            interfere[0] -= 1
            txnlog.Table(table.uri).append(pa.table({"id": [100 + interfere[0]], "dept": ["eng"], "salary": [50]}, schema=SCHEMA))
    assert txn.result is not None
    return int(txn.result)


def test_retry_reruns_the_unit_of_work_until_it_commits(tmp_path: Path) -> None:
    table = _employees(tmp_path)
    interfere = [2]
    calls = []

    def work() -> int:
        calls.append(1)
        return _raise_eng(table, interfere)

    version = txnlog.retry(work, on=(ConcurrentAppendError,), attempts=4, backoff=0.01)
    assert len(calls) == 3 and version == 4  # two hires won, then the raise committed
    salaries = {r["id"]: r["salary"] for r in _rows(table)}
    # The raise re-read the table each time: both hires were raised too, nothing lost.
    assert salaries == {1: 110, 2: 121, 3: 90, 100: 55, 101: 55}


def _rows(table: txnlog.Table) -> list[dict[str, Any]]:
    import deltalake

    return deltalake.DeltaTable(table.uri.removeprefix("file://")).to_pyarrow_table().to_pylist()


def test_retry_gives_up_after_its_attempts_and_lets_other_errors_through(tmp_path: Path) -> None:
    table = _employees(tmp_path)
    interfere = [5]
    with pytest.raises(ConcurrentAppendError) as info:
        txnlog.retry(lambda: _raise_eng(table, interfere), on=(ConcurrentAppendError,), attempts=2, backoff=0)
    assert interfere == [3]
    assert any("2 attempt" in note for note in info.value.__notes__)
    calls = []

    def metadata_race() -> None:
        calls.append(1)
        raise MetadataChangedError("schema changed", winning_version=9)

    with pytest.raises(MetadataChangedError):
        txnlog.retry(metadata_race, on=(ConcurrentAppendError,), attempts=5, backoff=0)
    assert len(calls) == 1
    with pytest.raises(InvalidArgumentError):
        txnlog.retry(lambda: None, attempts=0)
    with pytest.raises(InvalidArgumentError):
        txnlog.retry(lambda: None, on=("ConcurrentAppendError",))  # type: ignore[arg-type]


@pytest.mark.spark
def test_two_spark_jobs_conflict_and_retry_handles_the_safe_one(spark: Any, tmp_path: Path) -> None:
    """The employee scenario on Spark: a raise job (read-modify-write) and a hiring job race.
    The raise loses with ConcurrentAppendError; re-run by txnlog.retry it re-reads and includes
    the new hire."""
    import txnlog.spark as ts

    uri = str(tmp_path / "emp")
    ts.write(spark.createDataFrame([(1, "eng", 100), (2, "ops", 90)], "id long, dept string, salary long"), uri, partition_by=["dept"])
    pending_hires: list[int] = []
    attempts: list[int] = []

    def raise_eng() -> int:
        attempts.append(1)
        with ts.transaction(spark, uri, operation="UPDATE") as tx:
            tx.update("dept = 'eng'", set={"salary": "salary + 10"})
            if pending_hires:  # the hiring job commits while the raise is in flight
                ts.write(spark.createDataFrame([(pending_hires.pop(), "eng", 80)], "id long, dept string, salary long"), uri)
        assert tx.result is not None
        return int(tx.result)

    pending_hires.append(3)
    with pytest.raises(ConcurrentAppendError):  # without retry, the conflict surfaces
        raise_eng()
    pending_hires.append(4)
    attempts.clear()
    version = txnlog.retry(raise_eng, on=(ConcurrentAppendError,), attempts=3, backoff=0.01)
    assert len(attempts) == 2 and version == 3  # hire 4 won version 2; the re-run raise is version 3
    assert sorted((r.id, r.salary) for r in ts.read(spark, uri).collect()) == [(1, 110), (2, 90), (3, 90), (4, 90)]
