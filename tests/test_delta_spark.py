"""Interop with Spark + Delta (delta-spark), the reference implementation.

delta-spark's JVM jars come from Maven, which this environment cannot reach. Point
TXNLOG_DELTA_SPARK_JARS at the jars (comma-separated: delta-spark_2.13-<v>.jar and
delta-storage-<v>.jar) to run these tests; without them they skip, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table

JARS = [j for j in os.environ.get("TXNLOG_DELTA_SPARK_JARS", "").split(",") if j]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        not JARS or not all(Path(j).exists() for j in JARS),
        reason="delta-spark jars not present (no Maven access here); set TXNLOG_DELTA_SPARK_JARS to run",
    ),
]


@pytest.fixture(scope="module")
def delta_spark():
    pyspark = pytest.importorskip("pyspark")
    spark = (
        pyspark.sql.SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(JARS))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    yield spark
    spark.stop()


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
