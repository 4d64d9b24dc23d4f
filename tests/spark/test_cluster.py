"""txnlog.spark (the functions, format("txnlog") for batch, and its streaming source and sink)
on a real cluster shape and over Spark Connect.

Each test starts its own Spark processes: a standalone master and its workers (pyspark's own
``bin/spark-class``), and a local Spark Connect server (whose master is that cluster in the default
suite's test). A test process holds one SparkContext
(the session fixture's), so the driver of each run is a child Python process; every Spark process
is bound to 127.0.0.1 and stopped by its process id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import txnlog
import txnlog.spark

from ..conftest import delta_jars_dir

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")
SPARK_HOME = Path(pyspark.__file__).parent
REPO = Path(__file__).resolve().parents[2]

# The driver program: a write/read round trip through txnlog.spark, checked by txnlog's core.
DRIVER = r"""
import json, os, sys
from pyspark.sql import SparkSession
import txnlog.spark as ts

builder = SparkSession.builder.appName("txnlog-cluster-test")
mode, target, uri, scope = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
# delta-spark beside txnlog (scope "full"): its jars reach the executors (or the Connect server)
# from the folder. Its first use costs a cluster run half a minute of class loading; the shared
# session's tests check it beside txnlog in the default suite.
with_delta = scope == "full" and bool(ts.delta_jars(os.environ.get("TXNLOG_DELTA_JARS_DIR", "")))
if with_delta:
    builder = ts.with_delta(builder)
if mode == "connect":
    builder = builder.remote(target)
else:
    builder = builder.master(target).config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if mode == "connect-cluster":
        # Spark 4's connect API mode: a local Connect server whose master is the standalone
        # cluster, and this client talks to it over gRPC.
        builder = builder.config("spark.api.mode", "connect")
# A low maxResultSize: the wide MERGE source below cannot come to the driver whole.
spark = (builder.config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "4")
         .config("spark.driver.maxResultSize", "4m")
         .config("spark.ui.enabled", "false").config("spark.pyspark.python", sys.executable).getOrCreate())
df = spark.range(0, 5000, numPartitions=4).selectExpr("id", "cast(id % 5 as string) as p", "id * 2 as v")
version = ts.write(df, uri, partition_by=["p"])
totals = ts.read(spark, uri).groupBy().agg({"v": "sum", "*": "count"}).collect()[0].asDict()
# The data source: its class travels by reference, so the executors (or the Connect server's
# workers) import txnlog themselves.
ts.register(spark)
df.write.format("txnlog").mode("append").option("partitionBy", "p").save(uri + "_format")
back = spark.read.format("txnlog").load(uri + "_format").groupBy().agg({"v": "sum", "*": "count"}).collect()[0].asDict()
# The rest (scope "full", under soak): the streaming source and sink, and MERGE.
streamed, query_id = {"count(1)": None, "sum(v)": None}, None
if scope == "full":
    # The streaming source and sink: the table written above streamed into a third one, twice (the
    # second run, from the query's checkpoint, finds nothing new and writes nothing).
    for _ in range(2):
        query = (spark.readStream.format("txnlog").option("maxFilesPerTrigger", "2").load(uri + "_format")
                 .writeStream.format("txnlog").option("checkpointLocation", uri + "_checkpoint").trigger(availableNow=True)
                 .start(uri + "_stream"))
        query.awaitTermination(240)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    query_id = str(query.id)
    streamed = spark.read.format("txnlog").load(uri + "_stream").groupBy().agg({"v": "sum", "*": "count"}).collect()[0].asDict()
    # MERGE, small enough to run whole on the driver, then the same shape found by Spark's jobs.
    ts.write(df, uri + "_merge")
    upserts = spark.range(4990, 5010, numPartitions=2).selectExpr("id", "cast(id % 5 as string) as p", "id * 100 as v")
    ts.merge(spark, uri + "_merge", upserts, on="id", when_matched_update="*", when_not_matched_insert="*")
    spark.conf.set("spark.txnlog.dml.driverScanCells", "0")
    ts.merge(spark, uri + "_merge", spark.range(0, 10).selectExpr("id", "-1 as v"), on="id", when_matched_update={"v": "s.v"})
    # Few rows but 12 MB: over maxResultSize, so Spark merges it (the driver would have collected
    # it). The classic driver's conf: a Connect server has its own.
    spark.conf.unset("spark.txnlog.dml.driverScanCells")
    ts.write(spark.range(0, 100).selectExpr("id", "'a' as p"), uri + "_wide")
    if not mode.startswith("connect"):
        wide = spark.range(0, 64, numPartitions=2).selectExpr("id", "repeat('x', 200000) as p")
        ts.merge(spark, uri + "_wide", wide, on="id", when_matched_update="*")
# delta-spark reads a table txnlog wrote, appends to it, and txnlog reads delta-spark's commit.
delta = {}
if with_delta:
    ts.write(df, uri + "_delta", partition_by=["p"])
    delta = spark.read.format("delta").load(uri + "_delta").groupBy().agg({"v": "sum", "*": "count"}).collect()[0].asDict()
    spark.range(5000, 5010).selectExpr("id", "cast(id % 5 as string) as p", "id * 2 as v").write.format("delta").mode("append").save(uri + "_delta")
result = {"mode": mode, "delta": delta, "kind": type(df).__module__, "version": int(version), "count": totals["count(1)"], "sum": totals["sum(v)"],
          "format_count": back["count(1)"], "format_sum": back["sum(v)"],
          "stream_count": streamed["count(1)"], "stream_sum": streamed["sum(v)"], "query_id": query_id, "scope": scope}
print("RESULT " + json.dumps(result), flush=True)
spark.stop()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="localhost",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
        SPARK_HOME=str(SPARK_HOME),
        TXNLOG_DELTA_JARS_DIR=str(delta_jars_dir()),
    )
    return env


def _run_driver(mode: str, target: str, uri: str, tmp_path: Path, scope: str) -> dict[str, object]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(script), mode, target, uri, scope], env=_env(), capture_output=True, text=True, timeout=420)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"driver failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return dict(json.loads(lines[-1][len("RESULT "):]))


def _check(result: dict[str, object], uri: str) -> None:
    assert result["version"] == 0
    assert result["count"] == 5000
    assert result["sum"] == sum(range(5000)) * 2
    assert (result["format_count"], result["format_sum"]) == (result["count"], result["sum"])
    for table in (uri, uri + "_format"):
        snap = txnlog.Table(table).snapshot()
        assert snap.version == 0 and sorted({m[0][1] for m in snap.files().column("partition_values").to_pylist()}) == list("01234")
    if result["scope"] != "full":
        assert result["delta"] == {}
    elif txnlog.spark.delta_jars(delta_jars_dir()):
        assert result["delta"] == {"count(1)": 5000, "sum(v)": result["sum"]}
        # delta-spark's append is version 1, read by txnlog.
        appended = txnlog.Table(uri + "_delta").snapshot()
        assert appended.version == 1 and sorted(appended.to_arrow().column("id").to_pylist()) == list(range(5010))
    elif os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"delta-spark's jars are not in {delta_jars_dir()}")
    if result["scope"] == "full":
        _check_streams_and_merges(result, uri)


def _check_streams_and_merges(result: dict[str, object], uri: str) -> None:
    assert (result["stream_count"], result["stream_sum"]) == (result["count"], result["sum"])
    # The stream's commits: one per micro-batch of at most 2 files, keyed by the query's id.
    streamed = txnlog.Table(uri + "_stream").snapshot()
    batches = streamed.app_transaction_version(str(result["query_id"]))
    files = txnlog.Table(uri + "_format").snapshot().num_files
    assert batches is not None and batches + 1 == (files + 1) // 2
    merged = {r["id"]: (r["p"], r["v"]) for r in txnlog.Table(uri + "_merge").snapshot().to_arrow().to_pylist()}
    expected = {i: (str(i % 5), -1 if i < 10 else (i * 100 if i >= 4990 else i * 2)) for i in range(5010)}
    assert merged == expected
    wide = txnlog.Table(uri + "_wide").snapshot().to_arrow().to_pylist()
    merged_wide = 0 if str(result["mode"]).startswith("connect") else 64
    assert sorted((r["id"], len(r["p"]), r["p"][:1]) for r in wide) == [
        (i, 200000, "x") if i < merged_wide else (i, 1, "a") for i in range(100)
    ]


def _wait_for_port(port: int, procs: list[subprocess.Popen[bytes]], log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"a Spark process exited with {p.returncode}:\n{log.read_text()[-4000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"port {port} did not open within {timeout} s:\n{log.read_text()[-4000:]}")


@pytest.fixture
def standalone_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A master and its workers on 127.0.0.1 (two of one core each, or the ``(workers, cores)``
    a test parametrizes); yields the master URL; stops them by pid."""
    workers, cores = (2, 1) if not hasattr(request, "param") else request.param
    spark_class = SPARK_HOME / "bin" / "spark-class"
    if not spark_class.exists():
        pytest.skip(f"pyspark has no {spark_class}")
    port, log = _free_port(), tmp_path / "cluster.log"
    procs: list[subprocess.Popen[bytes]] = []
    with open(log, "ab") as out:
        try:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(_free_port())],
                env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            _wait_for_port(port, procs, log)
            for _ in range(workers):
                procs.append(subprocess.Popen(
                    [str(spark_class), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                     "--cores", str(cores), "--memory", "1g", "--webui-port", str(_free_port()), "--work-dir", str(tmp_path / "work")],
                    env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            yield f"spark://127.0.0.1:{port}"
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)  # the process group we started: spark-class and its JVM
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


#: The default suite runs one round trip: a Spark Connect client whose server's master is the
#: standalone cluster, writing and reading through the functions and the data source.
#: ``soak`` runs the classic API on the cluster with delta-spark, the streaming source and sink
#: and the MERGE shapes too; ``exhaustive`` those over Connect, and Connect's own local server
#: (each run is two minutes or more here).
SCOPES = ["core", pytest.param("full", marks=pytest.mark.exhaustive)]


def _assert_executors_ran(tmp_path: Path, workers: int) -> None:
    """Each worker launched an executor (its work folder holds one per executor)."""
    apps = list((tmp_path / "work").glob("app-*/*"))
    assert len(apps) >= workers, apps


# One worker with two cores: the executor is still a process apart from the driver and the Connect
# server, and the second executor JVM's warm-up (half a minute of CPU on two cores) goes. The classic
# test under soak keeps two workers.
@pytest.mark.parametrize("standalone_cluster", [(1, 2)], indirect=True, ids=["one-worker"])
@pytest.mark.parametrize("scope", SCOPES)
def test_round_trip_over_spark_connect_on_a_standalone_cluster(standalone_cluster: str, tmp_path: Path, scope: str) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs grpcio (pip install 'txnlog[spark]')")
    uri = str(tmp_path / "table")
    result = _run_driver("connect-cluster", standalone_cluster, uri, tmp_path, scope)
    assert "connect" in str(result["kind"])
    _check(result, uri)
    _assert_executors_ran(tmp_path, 1)


@pytest.mark.soak
def test_round_trip_on_a_standalone_cluster_with_two_workers(standalone_cluster: str, tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    result = _run_driver("classic", standalone_cluster, uri, tmp_path, "full")
    assert "connect" not in str(result["kind"])
    _check(result, uri)
    _assert_executors_ran(tmp_path, 2)


@pytest.mark.exhaustive
def test_round_trip_over_spark_connects_local_server(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs grpcio (pip install 'txnlog[spark]')")
    uri = str(tmp_path / "table")
    result = _run_driver("connect", "local[2]", uri, tmp_path, "core")
    assert "connect" in str(result["kind"])
    _check(result, uri)
