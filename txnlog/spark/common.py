"""What the Spark writer, reader and transaction share: schema conversion between Spark and
Delta, and turning errors raised inside Spark tasks back into txnlog errors on the driver.

Only public PySpark APIs are used (they behave the same on a classic session and over Spark
Connect); nothing here touches the JVM or ``sparkContext``.
"""

from __future__ import annotations

import base64
import contextlib
import pickle
import re
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from txnlog.errors import InvalidArgumentError, SchemaError, TxnLogError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
# Characters Hadoop's glob matcher treats specially in a path given to spark.read.
_GLOB = re.compile(r"([\\\[\]{}*?])")
# A URI scheme and the slashes after it: what differs between how txnlog and Spark print a path.
SCHEME_PREFIX = r"^[A-Za-z][A-Za-z0-9+.-]*:/*"
_SCHEME_PREFIX = re.compile(SCHEME_PREFIX)
# Spark's Hadoop filesystems for the schemes txnlog opens with fsspec.
_HADOOP_SCHEMES = {"s3": "s3a", "gs": "gs", "gcs": "gs", "az": "abfss", "abfs": "abfss"}


def require_dataframe(df: Any) -> None:
    """Refuse anything but a PySpark DataFrame (classic or Connect) with a clear error."""
    cls = type(df)
    if not (cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")):
        raise InvalidArgumentError(f"expected a pyspark.sql.DataFrame, got {cls.__module__}.{cls.__name__}")


def delta_schema_of(spark_schema: StructType) -> str:
    """The Delta schemaString of a DataFrame's schema: Spark's own JSON, every field nullable
    (as delta-spark creates tables: a DataFrame's nullability is rarely meant as a constraint)."""

    def nullable(t: Any) -> Any:
        if isinstance(t, dict):
            kind = t.get("type")
            if kind == "struct":
                return {**t, "fields": [{**f, "nullable": True, "type": nullable(f["type"])} for f in t["fields"]]}
            if kind == "array":
                return {**t, "containsNull": True, "elementType": nullable(t["elementType"])}
            if kind == "map":
                return {**t, "valueContainsNull": True, "keyType": nullable(t["keyType"]), "valueType": nullable(t["valueType"])}
        return t

    return orjson.dumps(nullable(spark_schema.jsonValue())).decode()


def spark_schema_of(schema_string: str) -> StructType:
    """The Spark schema of a Delta schemaString (the same JSON form)."""
    try:
        return StructType.fromJson(orjson.loads(schema_string))
    except Exception as e:  # pyspark raises plain ValueError/KeyError for types it lacks
        raise SchemaError(f"the table schema cannot be expressed as a Spark schema: {e}", field="schemaString") from None


def arrow_schema_of(df: DataFrame) -> pa.Schema:
    """The Arrow schema the DataFrame's rows arrive in at ``mapInArrow`` tasks."""
    return arrow_schema_of_struct(df.schema)


def arrow_schema_of_struct(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark exchanges rows of ``schema`` in with Python (``mapInArrow``, a
    Python data source's batches): timestamps in UTC."""
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except Exception as e:
        raise SchemaError(f"the DataFrame's schema has a type txnlog cannot write: {e}") from None


def hadoop_path(uri: str) -> str:
    """A data file URI as a path for ``spark.read``: Hadoop's scheme names, glob characters escaped."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return _GLOB.sub(r"\\\1", uri)
    if scheme == "memory":
        raise InvalidArgumentError(f"Spark cannot read {uri}: memory:// tables live only in this Python process")
    escaped = _GLOB.sub(r"\\\1", rest)
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{escaped}"


def hadoop_table_path(uri: str) -> str:
    """A table root URI as a path for ``spark.read.format("delta").load``: Hadoop's scheme names
    (no glob escaping: a table path is not a pattern)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    if scheme == "memory":
        raise InvalidArgumentError(f"Spark cannot read {uri}: memory:// tables live only in this Python process")
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"


#: Spark's bound on the paths it lists on the driver; past it, listing them is a Spark job.
LISTING_THRESHOLD_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"
# Local files listed on the driver at most: a status each, cheap next to a job's tasks.
_DRIVER_LISTED_LOCAL_FILES = 100_000


def read_parquet_files(spark: SparkSession, schema: StructType, uris: list[str]) -> DataFrame:
    """``spark.read.schema(schema).parquet`` of the data files ``uris`` (txnlog's file list).

    Spark looks up every path it is given (its listing), and past 32 paths it does so in a Spark
    job of one task per path: on a local table of 100 files that job cost more than the scan of
    10M rows (profiled for issue 26). Local files are therefore listed on the driver, where a
    status costs microseconds, by raising Spark's bound while the DataFrame is made (classic
    sessions list then; over Spark Connect the plan is analysed later and keeps Spark's bound).
    Object stores keep Spark's job: there a status is a request, worth spreading."""
    paths = [hadoop_path(u) for u in uris]
    local = all(u.startswith("file:") or "://" not in u for u in uris)
    if not local or len(paths) > _DRIVER_LISTED_LOCAL_FILES:
        return spark.read.schema(schema).parquet(*paths)
    with session_confs(spark, {LISTING_THRESHOLD_CONF: str(max(len(paths), 32))}):
        return spark.read.schema(schema).parquet(*paths)


@contextlib.contextmanager
def session_confs(spark: SparkSession, confs: Mapping[str, str]) -> Iterator[None]:
    """``confs`` set in the session for the block, each restored (or unset) after it."""
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def analysed_lazily(df: DataFrame) -> bool:
    """A Spark Connect DataFrame: the server analyses its plan when it runs, under the session's
    settings then, not when it is made."""
    return type(df).__module__.startswith("pyspark.sql.connect")


def utc_session(spark: SparkSession) -> bool:
    """Whether ``spark``'s session time zone is UTC (under any of its names)."""
    zone = spark.conf.get("spark.sql.session.timeZone", None) or ""
    return zone.upper() in ("UTC", "ETC/UTC", "Z", "GMT", "ETC/GMT", "+00:00", "UTC+00:00", "GMT+00:00")


def in_utc(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """A block in which ``spark`` analyses expressions in UTC, the zone txnlog reads timestamps
    in. A classic session analyses a DataFrame when it is made (those made before keep their
    zone); Spark Connect when it runs, so only what runs inside the block is analysed so."""
    return contextlib.nullcontext() if utc_session(spark) else session_confs(spark, {"spark.sql.session.timeZone": "UTC"})


def path_key(uri: str) -> str:
    """A file's identity independent of how the scheme is spelled (``file:/x`` vs ``file:///x``):
    the URI without its scheme and leading slashes, not URI-encoded. Spark's ``_metadata.file_path``
    maps to the same text with :func:`spark_path_key`."""
    return _SCHEME_PREFIX.sub("", uri)


def spark_path_key(column: Any) -> Any:
    """:func:`path_key` of Spark's URI-encoded ``_metadata.file_path`` column."""
    # url_decode turns '+' into a space (form encoding); Spark leaves '+' unencoded in paths.
    decoded = F.url_decode(F.replace(column, F.lit("+"), F.lit("%2B")))
    return F.regexp_replace(decoded, SCHEME_PREFIX, "")


class SparkJobError(TxnLogError):
    """A Spark job txnlog ran failed for a reason outside txnlog's own checks (an executor lost,
    a task's Python error); the message carries Spark's. Nothing was committed."""


class SparkWorkerPythonError(SparkJobError):
    """Spark's Python workers could not import a module the job needs (``module``): they run an
    interpreter without txnlog and its dependencies. Nothing was committed."""

    def __init__(self, message: str, *, module: str) -> None:
        super().__init__(message)
        self.module = module


def _spark_failures() -> tuple[type[Exception], ...]:
    try:  # py4j is optional: the Spark Connect-only client lacks it, and raises PySparkExceptions only
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    except ImportError:
        return (PySparkException,)
    return (PySparkException, Py4JError)


#: What a Spark action raises on the driver when the job fails: PySpark's exceptions, and a raw
#: Py4J error for a JVM failure PySpark does not convert (a Python worker that cannot start).
SPARK_FAILURES = _spark_failures()
# How Python reports an import that failed, in a worker's traceback carried by Spark's error.
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def job_error(error: BaseException, job: str) -> SparkJobError:
    """The txnlog error for a failed Spark job (``job`` says what it did): a
    :class:`SparkWorkerPythonError` saying what to set when a worker could not import a module,
    else a :class:`SparkJobError` carrying Spark's message."""
    text = str(error)
    missing = _MISSING_MODULE.search(text)
    if missing is not None:
        module = missing.group(1)
        return SparkWorkerPythonError(
            f"{job} failed: Spark's Python workers cannot import {module!r}; set PYSPARK_PYTHON "
            f"(or spark.pyspark.python) to a Python that has txnlog installed (the driver runs {sys.executable})",
            module=module,
        )
    return SparkJobError(f"{job} failed: {text.strip()[:2000]}")


# --- column names in Spark ------------------------------------------------------------------


def quote_column(name: str) -> str:
    """``name`` as one Spark SQL identifier: backticks around it, its own backticks doubled, so
    that a dot or a space is part of the name rather than a path into a struct."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string expression whatever it holds: base64 inside the quotes, so
    no quote or backslash needs escaping under either setting of
    ``spark.sql.parser.escapedStringLiterals``; the optimizer folds it to a constant."""
    return f"cast(unbase64('{base64.b64encode(text.encode()).decode()}') AS string)"


def nullable_inside(kind: Any) -> Any:
    """``kind`` with every struct field, list element and map value nullable: the type a value is
    cast to. Spark refuses a cast that adds NOT NULL inside a type; the nulls there are for the
    writer to count against the table's rules, as it counts a column's, and a reader returns
    what the files hold."""
    if isinstance(kind, T.StructType):
        return T.StructType([T.StructField(f.name, nullable_inside(f.dataType), True, f.metadata) for f in kind.fields])
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(nullable_inside(kind.elementType), True)
    if isinstance(kind, T.MapType):
        return T.MapType(nullable_inside(kind.keyType), nullable_inside(kind.valueType), True)
    return kind


def column(name: str) -> Any:
    """The top-level column called ``name`` (whatever characters it holds)."""
    return F.col(quote_column(name))


# --- errors raised in tasks -----------------------------------------------------------------


def encode_error(error: TxnLogError) -> str:
    """A txnlog error raised in a task, as text a result row can carry to the driver."""
    return base64.b64encode(pickle.dumps(error)).decode()


def decode_error(text: str) -> TxnLogError:
    error = pickle.loads(base64.b64decode(text))
    if not isinstance(error, TxnLogError):  # never expected: tasks only encode TxnLogErrors
        return TxnLogError(str(error))
    return error


__all__ = [
    "analysed_lazily",
    "nullable_inside",
    "SPARK_FAILURES",
    "SparkJobError",
    "SparkWorkerPythonError",
    "arrow_schema_of",
    "arrow_schema_of_struct",
    "column",
    "decode_error",
    "delta_schema_of",
    "encode_error",
    "hadoop_path",
    "hadoop_table_path",
    "in_utc",
    "job_error",
    "path_key",
    "read_parquet_files",
    "quote_column",
    "require_dataframe",
    "session_confs",
    "spark_path_key",
    "spark_schema_of",
    "utc_session",
]
