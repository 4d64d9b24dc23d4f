"""delta-spark in the same SparkSession as txnlog: ``format("delta")``, Delta SQL and txnlog side by side.

:func:`with_delta` does what delta-spark's ``configure_spark_with_delta_pip`` does (Delta's
session extension and catalog, and its jars), but takes the jars from a local folder when one is
given, so a session starts offline. :func:`fetch_delta_jars` fills such a folder once, with
Spark's own package resolution (Ivy, from Maven Central)::

    python -m txnlog.spark.delta .delta-jars      # once, at set-up

    builder = SparkSession.builder.master("local[2]")
    spark = txnlog.spark.with_delta(builder, jars_dir=".delta-jars").getOrCreate()

The jars are delta-spark's JVM half for the Spark release PySpark reports: ``io.delta:delta-spark_<spark
major.minor>_2.13:<DELTA_SPARK_VERSION>`` and its dependencies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from txnlog.errors import StorageError, UnsupportedFeatureError

__all__ = [
    "DELTA_READER_CONF",
    "DELTA_SPARK_VERSION",
    "JARS_DIR_ENV",
    "delta_in_session",
    "delta_jars",
    "delta_package",
    "fetch_delta_jars",
    "with_delta",
]

# The newest delta-spark whose JVM artifacts Maven Central serves (4.4.1 exists on PyPI only).
DELTA_SPARK_VERSION = "4.4.0"
# The Spark releases that delta-spark version is built for.
_SUPPORTED_SPARK = ("4.2",)
_SCALA = "2.13"
# Where with_delta looks for fetched jars when no folder is passed.
JARS_DIR_ENV = "TXNLOG_DELTA_JARS_DIR"
_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: Spark conf: ``true`` hands txnlog's reads to delta-spark's reader when delta-spark is in the
#: session. Off by default: measured (docs/benchmarks.md, issue 26), txnlog's own scan was faster.
DELTA_READER_CONF = "spark.txnlog.read.deltaReader"
# Written beside the jars: the coordinate they were resolved for, so a new pin fetches again.
_STAMP = "COORDINATE"


def delta_package(spark_version: str | None = None) -> str:
    """The Maven coordinate of delta-spark's JVM half for ``spark_version`` (PySpark's by default).

    Raises :class:`UnsupportedFeatureError` for a Spark release this delta-spark is not built for.
    """
    if spark_version is None:
        import pyspark  # optional dependency: the spark extra

        spark_version = pyspark.__version__
    major_minor = ".".join(spark_version.split(".")[:2])
    if major_minor not in _SUPPORTED_SPARK:
        raise UnsupportedFeatureError(
            f"delta-spark {DELTA_SPARK_VERSION} is built for Spark {', '.join(_SUPPORTED_SPARK)}, not PySpark {spark_version}; "
            f"install pyspark=={_SUPPORTED_SPARK[-1]}.0 (the delta-spark extra) to use format('delta') beside txnlog",
            features=("delta-spark",),
        )
    return f"io.delta:delta-spark_{major_minor}_{_SCALA}:{DELTA_SPARK_VERSION}"


def delta_jars(jars_dir: str | os.PathLike[str]) -> list[Path]:
    """The jar files :func:`fetch_delta_jars` put in ``jars_dir`` for this PySpark, or ``[]``
    when the folder holds none (or holds jars resolved for another coordinate)."""
    root = Path(jars_dir)
    stamp = root / _STAMP
    if not stamp.is_file() or stamp.read_text().strip() != delta_package():
        return []
    return sorted((root / "jars").glob("*.jar"))


def with_delta(builder: Any, *, jars_dir: str | os.PathLike[str] | None = None) -> Any:
    """``builder`` with Delta's session extension, its catalog as ``spark_catalog``, and its jars.

    The jars come from ``jars_dir`` (else ``$TXNLOG_DELTA_JARS_DIR``) when it holds a fetched set;
    otherwise Spark resolves the package when the session starts, as delta-spark's own
    ``configure_spark_with_delta_pip`` does. Call it before ``getOrCreate()``: a running JVM
    does not take new jars. Spark Connect servers need the same settings at their start.
    """
    package = delta_package()
    folder = jars_dir if jars_dir is not None else os.environ.get(JARS_DIR_ENV)
    jars = delta_jars(folder) if folder else []
    builder = builder.config("spark.sql.extensions", _EXTENSION).config("spark.sql.catalog.spark_catalog", _CATALOG)
    if jars:
        return builder.config("spark.jars", ",".join(str(j) for j in jars))
    return builder.config("spark.jars.packages", package)


def delta_in_session(spark: Any) -> bool:
    """Whether txnlog's reads hand their scans to delta-spark's reader in ``spark``: its session
    extension is configured (a public, static conf, read the same way over Spark Connect) and
    :data:`DELTA_READER_CONF` is ``true``."""
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        enabled = (spark.conf.get(DELTA_READER_CONF, "false") or "false").strip().lower() == "true"
    except Exception:  # noqa: BLE001 - a session that cannot answer reads as today
        return False
    return enabled and _EXTENSION in extensions.split(",")


_FETCH = """
import os, sys
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("txnlog-fetch-delta-jars")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.jars.packages", sys.argv[1]).config("spark.jars.ivy", sys.argv[2]).getOrCreate())
spark.stop()
"""


def fetch_delta_jars(jars_dir: str | os.PathLike[str], *, timeout: float = 900) -> list[Path]:
    """Resolve delta-spark's jars (and their dependencies) into ``jars_dir`` once; later calls
    return the jars already there. Runs Spark's own package resolution in a child process."""
    root = Path(jars_dir).resolve()
    have = delta_jars(root)
    if have:
        return have
    package = delta_package()
    root.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([sys.executable, "-c", _FETCH, package, str(root)], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StorageError(f"could not resolve {package} into {root}: {e}") from None
    jars = sorted((root / "jars").glob("*.jar"))
    if done.returncode != 0 or not any(j.name.startswith("io.delta_delta-spark") for j in jars):
        tail = "\n".join((done.stderr or "").strip().splitlines()[-15:])
        raise StorageError(f"could not resolve {package} into {root} (exit {done.returncode}):\n{tail}")
    (root / _STAMP).write_text(package + "\n")
    return jars


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m txnlog.spark.delta JARS_DIR", file=sys.stderr)
        return 2
    for jar in fetch_delta_jars(argv[0]):
        print(jar)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
