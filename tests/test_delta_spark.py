"""Interop with Spark + Delta (delta-spark), the reference implementation, in the shared test
session: `make jars` fetches delta-spark's jars once at set-up and the ``spark`` fixture starts
with them (txnlog.spark.with_delta); the tests here take ``delta_spark``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import UnsupportedFeatureError

pytestmark = pytest.mark.spark


def test_the_coordinate_follows_pysparks_release_and_refuses_one_delta_spark_lacks() -> None:
    from txnlog.spark.delta import DELTA_SPARK_VERSION, delta_package

    assert delta_package("4.2.0") == f"io.delta:delta-spark_4.2_2.13:{DELTA_SPARK_VERSION}"
    with pytest.raises(UnsupportedFeatureError, match=r"not PySpark 4\.3\.0.*pyspark==4\.2\.0"):
        delta_package("4.3.0")


def test_with_delta_takes_fetched_jars_and_otherwise_asks_spark_to_resolve(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    from txnlog.spark import delta_jars, with_delta

    from .conftest import delta_jars_dir

    jars = delta_jars(delta_jars_dir())
    if not jars:
        pytest.skip("delta-spark's jars are not fetched; run `make jars`")
    options = with_delta(SparkSession.Builder(), jars_dir=delta_jars_dir())._options
    assert options["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert options["spark.jars"].split(",") == [str(j) for j in jars]
    assert "spark.jars.packages" not in options
    # An empty folder: Spark resolves the package at start, as configure_spark_with_delta_pip does.
    options = with_delta(SparkSession.Builder(), jars_dir=tmp_path)._options
    assert options["spark.jars.packages"].startswith("io.delta:delta-spark_")


def test_fetching_again_is_a_no_op_that_returns_the_same_jars() -> None:
    from txnlog.spark import delta_jars

    from .conftest import delta_jars_dir

    if not delta_jars(delta_jars_dir()):
        pytest.skip("delta-spark's jars are not fetched; run `make jars`")
    done = subprocess.run([sys.executable, "-m", "txnlog.spark.delta", str(delta_jars_dir())], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(j) for j in delta_jars(delta_jars_dir())]


def test_spark_delta_reads_txnlog_tables_and_txnlog_reads_its_commits(delta_spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    t = Table.create(tmp_path / "t", schema, partition_by=["region"], properties={"delta.checkpointInterval": "2"})
    for i in range(3):
        t.append(pa.table({"id": [i, i + 10], "region": ["EU", "US"]}, schema=schema))
    with t.transaction("DELETE") as txn:
        txn.remove_files(txn.filter_files("region = 'US'"))

    df = delta_spark.read.format("delta").load(str(tmp_path / "t"))
    assert sorted(r.id for r in df.collect()) == [0, 1, 2]

    delta_spark.createDataFrame([(99, "APAC")], "id long, region string").write.format("delta").mode("append").save(
        str(tmp_path / "t")
    )
    snap = Table(tmp_path / "t").snapshot()
    assert snap.version == 5
    assert sorted(snap.files().column("partition_values").to_pylist(maps_as_pydicts="lossy"), key=str)[0] == {"region": "APAC"}
    t.append(pa.table({"id": [7], "region": ["EU"]}, schema=schema))
    assert delta_spark.read.format("delta").load(str(tmp_path / "t")).count() == 5


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_spark_delta_reads_delta_encoded_integer_columns(delta_spark, tmp_path, vectorized):
    from tests.dml.test_write_table import stepped_integers

    data = stepped_integers(5_000)
    Table.create(tmp_path / "t", data.schema).append(data)
    before = delta_spark.conf.get("spark.sql.parquet.enableVectorizedReader")
    delta_spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
    try:
        rows = delta_spark.read.format("delta").load(str(tmp_path / "t")).orderBy("id").collect()
    finally:
        delta_spark.conf.set("spark.sql.parquet.enableVectorizedReader", before)
    assert [r.asDict() for r in rows] == data.to_pylist()
