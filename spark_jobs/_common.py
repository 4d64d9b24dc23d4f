"""What every job shares: the local SparkSession, logging, and exit codes."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

#: Exit codes of every job.
OK = 0
FAILED = 1  # a txnlog error (bad table, bad predicate, storage): the message names it
USAGE = 2  # argparse's own code for bad arguments
CONFLICT = 3  # a conflict that is not safe to retry (or retries ran out)


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The jobs report progress themselves; txnlog's own INFO lines are for --verbose.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def local_session(app_name: str, master: str = "local[2]", *, delta: bool = False) -> Any:
    """The embedded default: a local SparkSession on the loopback address whose Python workers
    run this interpreter (so they import the same txnlog, pyarrow and fsspec). ``delta``: with
    delta-spark beside txnlog (``txnlog.spark.with_delta``: its jars from
    ``$TXNLOG_DELTA_JARS_DIR``, which `make jars` fills, else resolved by Spark at start)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from txnlog.spark import with_delta

    builder = SparkSession.builder
    if delta:
        builder = with_delta(builder).config("spark.databricks.delta.snapshotPartitions", "2")
    spark = (
        builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def has_delta(spark: Any) -> bool:
    """Whether delta-spark is in ``spark`` (its session extension is configured)."""
    return "DeltaSparkSessionExtension" in (spark.conf.get("spark.sql.extensions", "") or "")


def duckdb_delta() -> Any:
    """A DuckDB connection with its delta extension (delta_scan, on delta-kernel-rs): an
    independent reader of txnlog tables that, unlike deltalake, reads deletion vectors. The
    extension comes from the duckdb-ext-delta package (DuckDB cannot download it here)."""
    import importlib.util
    from pathlib import Path

    import duckdb

    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the duckdb-ext-delta package is not installed: pip install duckdb-ext-delta (the dev extra has it)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    con = duckdb.connect(config={"extension_directory": str(folder)})
    con.sql("LOAD delta")
    return con
