"""The main job end to end on local Spark: commits land, a re-run changes nothing, and
delta-rs reads the result."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from spark_jobs import pipeline  # noqa: E402

from txnlog import Table  # noqa: E402


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_pipeline_commits_once_and_rerun_is_a_no_op(tmp_path, capsys):
    uri = str(tmp_path / "events")
    assert pipeline.main(["--table", uri, "--batches", "2", "--rows", "300"]) == 0
    first = Table(uri).snapshot()
    assert first.version == 3  # create, two batches, the delete
    assert first.app_transaction_version(pipeline.APP_ID) == 1

    assert pipeline.main(["--table", uri, "--batches", "2", "--rows", "300"]) == 0
    assert "already committed, skipped" in capsys.readouterr().out
    assert Table(uri).latest_version() == first.version

    rows = deltalake.DeltaTable(uri).to_pyarrow_table()
    # The generator: region ["EU", "US", "APAC"][id % 3], amount (id * 7 % 1000) / 10.
    expected = {i for i in range(600) if not (i % 3 == 2 and (i * 7 % 1000) / 10 < 10)}
    assert len(expected) < 600  # the delete had something to do
    assert sorted(rows["event_id"].to_pylist()) == sorted(expected)
