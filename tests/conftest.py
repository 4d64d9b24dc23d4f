"""Shared fixtures: the conformance corpus and scratch table locations."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from txnlog.log.actions import Action, AddFile, Metadata, Protocol
from txnlog.log.codec import encode_action
from txnlog.log.filenames import commit_path
from txnlog.storage import LogStore, open_store

REPO_ROOT = Path(__file__).resolve().parent.parent


def _conformance_root() -> Path | None:
    """The corpus (``tables/`` and ``expected/``): $TXNLOG_CONFORMANCE_DIR, else ../shared/conformance."""
    configured = os.environ.get("TXNLOG_CONFORMANCE_DIR")
    root = Path(configured) if configured else REPO_ROOT.parent / "shared" / "conformance"
    return root if (root / "tables").is_dir() and (root / "expected").is_dir() else None



@contextmanager
def session_confs(spark: Any, values: Mapping[str, str]) -> Iterator[None]:
    """Set Spark session confs for a block, then restore each (unset where it was unset):
    txnlog's own helper, imported only by the tests that use Spark."""
    from txnlog.spark.common import session_confs as confs

    with confs(spark, values):
        yield


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    """The conformance corpus; skips when absent, but fails under CI=true, where it must be there."""
    root = _conformance_root()
    if root is None:
        where = os.environ.get("TXNLOG_CONFORMANCE_DIR") or str(REPO_ROOT.parent / "shared" / "conformance")
        message = f"conformance corpus not found at {where} (set TXNLOG_CONFORMANCE_DIR)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return root


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking ``conformance_case`` get one case per item of their module's
    ``conformance_cases(root)``; without a corpus, one placeholder that skips or fails through
    the ``conformance_dir`` fixture."""
    if "conformance_case" not in metafunc.fixturenames:
        return
    root = _conformance_root()
    cases: list[Any] = (
        list(metafunc.module.conformance_cases(root, metafunc.function.__name__))
        if root is not None
        else [pytest.param(None, id="corpus-missing")]
    )
    metafunc.parametrize("conformance_case", cases)


@pytest.fixture
def tmp_table_uri(tmp_path: Path) -> str:
    """A local path for a new table (nothing is created there)."""
    return str(tmp_path / f"table-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def memory_table_uri() -> str:
    """A fresh ``memory://`` table root, unique per test."""
    return f"memory://txnlog-tests/{uuid.uuid4().hex}"


# A two-column schema for hand-written logs.
SCHEMA_STRING = orjson.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
).decode()


class LogWriter:
    """Writes hand-made commits into a table's ``_delta_log`` with the store's put-if-absent."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.store: LogStore = open_store(uri)

    def commit(self, version: int, *actions: Action | Mapping[str, Any] | bytes) -> None:
        """One commit file: each item is an action, a raw ``{kind: body}`` object, or a raw line."""
        lines = [
            a if isinstance(a, bytes) else orjson.dumps(a if isinstance(a, Mapping) else encode_action(a))
            for a in actions
        ]
        self.store.put_if_absent(commit_path(version), b"\n".join(lines) + b"\n")

    def create(
        self,
        *extra: Action | Mapping[str, Any],
        partition_columns: tuple[str, ...] = (),
        configuration: Mapping[str, str] | None = None,
        protocol: Protocol = Protocol(1, 2),  # noqa: B008 (a frozen record)
    ) -> None:
        """Version 0: protocol, metaData, then ``extra``."""
        metadata = Metadata(
            id="00000000-0000-0000-0000-000000000001",
            schema_string=SCHEMA_STRING,
            partition_columns=partition_columns,
            configuration=dict(configuration or {}),
            created_time=1_700_000_000_000,
        )
        self.commit(0, protocol, metadata, *extra)

    @staticmethod
    def add(path: str, *, size: int = 100, num_records: int | None = None, **kwargs: Any) -> AddFile:
        stats = orjson.dumps({"numRecords": num_records}).decode() if num_records is not None else None
        return AddFile(path=path, partition_values=kwargs.pop("partition_values", {}), size=size,
                       modification_time=1_700_000_000_000, stats=stats, **kwargs)


@pytest.fixture
def log_writer(tmp_table_uri: str) -> Callable[..., LogWriter]:
    """``log_writer()`` writes to a fresh local table, ``log_writer(uri)`` to ``uri``."""
    return lambda uri=None: LogWriter(uri or tmp_table_uri)


def delta_jars_dir() -> Path:
    """Where `make jars` put delta-spark's jars: $TXNLOG_DELTA_JARS_DIR, else ./.delta-jars."""
    return Path(os.environ.get("TXNLOG_DELTA_JARS_DIR") or REPO_ROOT / ".delta-jars")


def local_session_builder(app_name: str, *, delta: bool = True) -> Any:
    """The builder of the tests' local SparkSession, with delta-spark from its jars folder (None
    when ``delta`` and the jars are absent). Child processes that need a Spark of their own (a
    delta-spark writer in another JVM) build theirs with it too."""
    from pyspark.sql import SparkSession

    from txnlog.spark import delta_jars, with_delta

    # Python workers must import this interpreter's txnlog, and every Spark process talks to the
    # loopback address only (Spark picks the machine's other interface by default here).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        # pyspark's call-site capture for error contexts costs four py4j round trips per Column
        # call; the tests build many small plans (7% of test_native_write's time).
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # delta-spark rebuilds a snapshot's state with this many tasks (50 by default): tiny
        # test tables load several times faster with two.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # The suite is CPU-bound on two cores, 87% of it in the JVMs: Spark evaluates expressions
        # interpreted rather than compiling each query's generated code with Janino (20% off the
        # Spark modules timed in turns). Results are the same either way (Spark's own suites run
        # both modes); the standalone cluster's round trip (tests/spark/test_cluster.py), `make run`
        # and the benchmarks run codegen.
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    )
    if os.environ.get("TXNLOG_TEST_EVENT_LOG"):  # a folder: Spark's event log of the run, to see where its time goes
        builder = builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", os.environ["TXNLOG_TEST_EVENT_LOG"])
    if not delta:
        return builder
    jars_dir = delta_jars_dir()
    return with_delta(builder, jars_dir=jars_dir) if delta_jars(jars_dir) else None


@pytest.fixture(scope="session")
def spark() -> Any:
    """The one local SparkSession of a test process (PySpark takes ~20 s to start here; each
    pytest-xdist worker that reaches a Spark test starts its own), with
    delta-spark in it (``format("delta")``, Delta SQL) beside txnlog.

    Tests that need Spark take this fixture; tests must not stop it or change session-wide
    settings they do not restore. Without delta-spark's jars the session starts without Delta
    (tests taking ``delta_spark`` skip), except under CI=true, where their absence fails.
    """
    pytest.importorskip("pyspark")
    builder = local_session_builder("txnlog-tests")
    if builder is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"delta-spark's jars are not in {delta_jars_dir()}: `make jars` fetches them at set-up")
        builder = local_session_builder("txnlog-tests", delta=False)
    session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def delta_spark(spark: Any) -> Any:
    """The shared session, for tests that need delta-spark in it; skips when its jars are absent
    (the ``spark`` fixture already failed under CI=true)."""
    if "DeltaSparkSessionExtension" not in (spark.conf.get("spark.sql.extensions", "") or ""):
        pytest.skip(f"delta-spark's jars are not in {delta_jars_dir()}; run `make jars`")
    return spark


#: The modules that take a minute or more. They go first, so that under pytest-xdist (``make
#: test``) neither worker is left running one of them alone at the end.
LONG_MODULES = (
    "tests/spark/test_cluster.py",
    "tests/interop/test_delta_spark_reads_txnlog.py",
    "tests/interop/test_txnlog_continues_delta_spark.py",
    "tests/txn/test_delta_spark_conflicts.py",
    "tests/spark/test_native_write.py",
    "tests/spark/test_streaming_source.py",
    "tests/spark_jobs/test_pipeline.py",
    "tests/spark/test_merge_clauses.py",
    "tests/txn/test_conflict_matrix.py",
    "tests/spark/test_files.py",
    "tests/txn/test_mixed_writers.py",
    "tests/spark/test_dml_deletion_vectors.py",
    "tests/spark/test_change_data.py",
    "tests/spark/test_corpus.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {module: i for i, module in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order
