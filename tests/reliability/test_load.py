"""Load: writer processes appending at once, with readers, a checkpointer, an expirer and a
vacuum running (see tests/reliability/load.py for what is checked). Short variants by default;
the issue's sizes under soak (benchmarks/load.py runs those and prints the figures)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import txnlog

from .load import LoadConfig, LoadResult, create_table, moto_server, new_bucket, rows_for, run_load, snapshot_pairs
from .partition_load import PartitionLoadConfig, PartitionLoadResult, run_partition_load


def _judge(result: LoadResult) -> None:
    assert not result.violations, result.violations[:10]
    writers = result.config.txnlog_writers + result.config.deltalake_writers
    assert result.committed + result.deltalake_committed + result.failed + result.conflicts == writers * result.config.commits
    assert result.committed >= 0.9 * result.config.txnlog_writers * result.config.commits, result.summary()
    assert result.reader_snapshots > 0
    if result.config.checkpointer:
        assert result.maintenance_runs.get("checkpoint", 0) > 0, result.maintenance_errors[:5]
    assert not [e for e in result.maintenance_errors if "conflict" not in e], result.maintenance_errors[:5]
    assert not result.hook_failures, result.hook_failures[:5]


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    pytest.importorskip("moto.server")
    server, options = moto_server()
    try:
        yield options
    finally:
        server.stop()


def test_torn_and_doubled_commits_are_detected(tmp_path: Path) -> None:
    """The readers' check can fail: a commit with one of its two files, or a commit applied
    twice, is seen."""
    config = LoadConfig(uri=str(tmp_path / "t"))
    create_table(config)
    table = txnlog.Table(config.uri)
    table.append(rows_for(7, "x"))
    table.append(rows_for(8, "x").slice(0, 1))  # torn: only partition a
    table.append(rows_for(7, "x"))  # doubled
    pairs = snapshot_pairs(table.snapshot().files())
    assert pairs == {7: 4, 8: 1}


#: The expirer's retention with delta-rs writers on the table: longer than any of their commits
#: (see LoadConfig.expire_older_than), yet short enough that expiry runs during the load.
MIXED_RETENTION = "30s"


def test_short_load_local_with_deltalake_writers(tmp_path: Path) -> None:
    config = LoadConfig(uri=str(tmp_path / "t"), txnlog_writers=3, deltalake_writers=1, commits=15, expire_older_than=MIXED_RETENTION)
    _judge(run_load(config))


def test_short_load_on_s3(s3: dict[str, str]) -> None:
    uri = new_bucket(s3, f"load-{uuid.uuid4().hex[:12]}")
    # moto answers a few requests per ms on this machine: a short run keeps to the checkpointer.
    result = run_load(
        LoadConfig(uri=uri, storage_options=s3, txnlog_writers=2, commits=6, readers=1, expirer=False, vacuum=False)
    )
    _judge(result)


# The soak sizes keep `make soak` within 20 minutes on 2 shared cores; benchmarks/load.py runs
# the sizes (500 commits per writer).


@pytest.mark.soak
def test_load_8_writers(tmp_path: Path) -> None:
    result = run_load(LoadConfig(uri=str(tmp_path / "t"), txnlog_writers=8, commits=120))
    _judge(result)


@pytest.mark.soak
def test_load_4_txnlog_and_2_deltalake_writers(tmp_path: Path) -> None:
    config = LoadConfig(uri=str(tmp_path / "t"), txnlog_writers=4, deltalake_writers=2, commits=200, expire_older_than=MIXED_RETENTION)
    _judge(run_load(config))


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_load_4_writers_on_s3(s3: dict[str, str]) -> None:
    """100 commits: the 2000 of the full size (benchmarks/load.py --only s3) took 684-1210 s,
    mostly moto serving every request of every process from one Python process."""
    uri = new_bucket(s3, f"load-{uuid.uuid4().hex[:12]}")
    result = run_load(LoadConfig(uri=uri, storage_options=s3, txnlog_writers=4, commits=25))
    _judge(result)




# --- issue 28: per-partition statistics under appenders, an updater, delta-rs and checkpoints ----


def _judge_partitions(result: PartitionLoadResult) -> None:
    assert not result.violations, [*result.violations[:10], *result.timelines[:1]]
    config = result.config
    assert result.committed["txnlog"] == config.appenders * config.commits, result.failures[:5]  # blind appends never conflict
    assert result.committed["updater"] >= 0.9 * config.commits, result.failures[:5]
    assert result.reader_snapshots > 0 and result.versions_checked > 0 and result.checkpoints > 0
    assert not result.maintenance_errors, result.maintenance_errors[:5]
    assert not result.hook_failures, result.hook_failures[:5]


def test_partition_statistics_short_load(tmp_path: Path) -> None:
    _judge_partitions(run_partition_load(PartitionLoadConfig(uri=str(tmp_path / "t"), commits=10)))


@pytest.mark.soak
def test_partition_statistics_load(tmp_path: Path) -> None:
    _judge_partitions(run_partition_load(PartitionLoadConfig(uri=str(tmp_path / "t"), commits=150, readers=2)))
