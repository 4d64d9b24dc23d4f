"""readStream / writeStream .format("txnlog"): a txnlog table as a streaming source and sink,
on the shared session. Every stream runs with Trigger.AvailableNow (or is stopped once it has
caught up), so each test is a few small micro-batches."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txnlog.spark as ts
from txnlog import Table
from txnlog.schema import identity_column

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")
from pyspark.errors import StreamingQueryException  # noqa: E402

CHILD = Path(__file__).with_name("stream_source_child.py")


@pytest.fixture(scope="module")
def spark_ds(spark: Any) -> Any:
    ts.register(spark)
    return spark


def _append(uri: str, start: int, n: int, properties: dict[str, str] | None = None) -> None:
    data = pa.table({"id": pa.array(range(start, start + n), pa.int64()), "name": [f"n{i}" for i in range(start, start + n)]})
    table = Table(uri)
    if not table.exists():
        table = Table.create(uri, data.schema, properties=properties)
    table.append(data)


def _ids(uri: str) -> list[int]:
    return sorted(Table(uri).snapshot().to_arrow(columns=["id"]).column("id").to_pylist())


def _run_to_table(spark: Any, source: str, sink: str, checkpoint: str, **options: str) -> None:
    reader = spark.readStream.format("txnlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = reader.load(source).writeStream.format("txnlog").option("checkpointLocation", checkpoint).trigger(availableNow=True).start(sink)
    query.awaitTermination(180)


def _batches(spark: Any, source: str, checkpoint: str, **options: str) -> list[list[tuple[Any, ...]]]:
    """The rows of each micro-batch of an AvailableNow stream of ``source``, in batch order."""
    seen: list[list[tuple[Any, ...]]] = []
    reader = spark.readStream.format("txnlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load(source)

    def collect(batch: Any, batch_id: int) -> None:
        rows = [tuple(r) for r in batch.collect()]
        if rows:
            seen.append(sorted(rows, key=repr))

    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination(180)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    return seen


# Under soak: the killed-stream test below restarts after appends too, from a SIGKILL.
@pytest.mark.soak
def test_stream_to_table_every_row_once_across_appends_and_restarts(spark_ds: Any, tmp_path: Path) -> None:
    source, sink, checkpoint = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ckpt")
    _append(source, 0, 10)
    _append(source, 10, 10)
    _run_to_table(spark_ds, source, sink, checkpoint)
    assert _ids(sink) == list(range(20))  # the snapshot the query started from, whole

    _append(source, 20, 5)
    _append(source, 25, 5)
    _run_to_table(spark_ds, source, sink, checkpoint)  # a restart: only the new commits
    assert _ids(sink) == list(range(30))
    _run_to_table(spark_ds, source, sink, checkpoint)  # nothing new: nothing written
    assert _ids(sink) == list(range(30))
    # Every sink commit records the query's transaction: one per batch, batch ids in order.
    snapshot = Table(sink).snapshot()
    app_id = (tmp_path / "ckpt" / "metadata").read_text().split('"id":"')[1].split('"')[0]
    assert snapshot.app_transaction_version(app_id) is not None


def _stream_reader(uri: str, **options: str) -> Any:
    from txnlog.spark.datasource import TxnlogDataSource

    source = TxnlogDataSource({"path": uri, **options})
    return source.streamReader(source.schema())


def _rows(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r.get("_change_type")) for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist())


@pytest.mark.parametrize("change_feed", [False, True], ids=["files", "change-feed"])
def test_first_batch_keeps_its_rows_when_spark_asks_the_initial_offset_again(tmp_path: Path, change_feed: bool) -> None:
    """Spark's MicroBatchExecution plans batch 0 with ``latestOffset(initialOffset(), limit)``
    and runs it with ``partitions(initialOffset(), end)``, a second call, as does a restart
    whose batch 0 was planned and not committed. Commits landing in between must not move the
    batch's start: that lost every row before them (the two-hop job's hop 2 saw once an empty
    first batch)."""
    uri = str(tmp_path / "src")
    properties = {"delta.enableChangeDataFeed": "true"} if change_feed else None
    _append(uri, 0, 10, properties)
    _append(uri, 10, 10)
    options = {"readChangeFeed": "true"} if change_feed else {}
    planner = _stream_reader(uri, **options)
    end = planner.latestOffset(planner.initialOffset(), planner.getDefaultReadLimit())
    _append(uri, 20, 5)  # lands after batch 0 is planned
    _append(uri, 25, 5)
    kind = "insert" if change_feed else None
    first = [(i, kind) for i in range(20)]
    assert _rows(planner, planner.initialOffset(), end) == first  # the same process, asked again
    restarted = _stream_reader(uri, **options)  # a restart: a new process, the offset log's end
    assert _rows(restarted, restarted.initialOffset(), end) == first
    following = restarted.latestOffset(end, restarted.getDefaultReadLimit())
    assert _rows(restarted, end, following) == [(i, kind) for i in range(20, 30)]


@pytest.mark.parametrize("change_feed", [False, True], ids=["files", "change-feed"])
def test_a_schema_change_stops_the_stream_in_either_mode(tmp_path: Path, change_feed: bool) -> None:
    """A stream reads with the schema it started with: a commit changing it stops the stream,
    naming the version, in a stream of files and in a stream of changes alike. (The change
    feed stream used to go on, reading the new rows in the old schema: the new column's values
    were silently dropped.)"""
    from txnlog.errors import SchemaError

    uri = str(tmp_path / "src")
    _append(uri, 0, 3, {"delta.enableChangeDataFeed": "true"})
    options = {"readChangeFeed": "true"} if change_feed else {}
    planner = _stream_reader(uri, startingVersion="1", **options)
    start = planner.initialOffset()
    table = Table(uri)
    wider = pa.schema([("id", pa.int64()), ("name", pa.string()), ("extra", pa.string())])
    with table.transaction("ADD COLUMNS") as txn:
        txn.update_metadata(schema=wider)
        txn.commit()
    changed_at = table.latest_version()
    table.append(pa.table({"id": [3], "name": ["n3"], "extra": ["kept?"]}, schema=wider))
    with pytest.raises(SchemaError, match=f"version {changed_at}"):
        end = planner.latestOffset(start, planner.getDefaultReadLimit())
        _rows(planner, start, end)


def test_a_batch_spanning_the_snapshot_and_later_commits_reads_both(tmp_path: Path) -> None:
    """A rate-limited first batch stops inside the starting snapshot; the next one takes the
    snapshot's last file and a later commit's file together (listed with and without stats)."""
    uri = str(tmp_path / "src")
    for i in range(3):
        _append(uri, i * 2, 2)  # versions 1..3, a file each
    planner = _stream_reader(uri, maxFilesPerTrigger="2")
    limit = planner.getDefaultReadLimit()
    start = planner.initialOffset()
    first = planner.latestOffset(start, limit)
    assert first == {"version": 3, "index": 2, "snapshot": True}
    _append(uri, 6, 2)  # version 4
    second = planner.latestOffset(first, limit)
    assert second == {"version": 5, "index": 0, "snapshot": False}
    assert len(_rows(planner, start, first)) == 4
    assert sorted(i for i, _ in _rows(planner, first, second)) == sorted({*range(8)} - {i for i, _ in _rows(planner, start, first)})


def test_a_batch_is_planned_from_the_commits_its_offset_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """partitions() takes the commits latestOffset() classified for the same batch: each commit
    is read once per batch (they were forgotten and read again), then dropped when Spark
    commits the batch."""
    from txnlog.spark.datasource import stream_read

    uri = str(tmp_path / "src")
    _append(uri, 0, 2)
    planner = _stream_reader(uri, startingVersion="1")
    for i in range(1, 6):
        _append(uri, i * 2, 2)  # versions 2..6
    reads: list[tuple[int, int]] = []
    real = stream_read.commit_changes

    def counted(store: Any, listing: Any, first: int, last: int) -> Any:
        reads.append((first, last))
        return real(store, listing, first, last)

    monkeypatch.setattr(stream_read, "commit_changes", counted)
    start = planner.initialOffset()
    end = planner.latestOffset(start, planner.getDefaultReadLimit())
    assert reads == [(1, 6)]
    assert sorted(i for i, _ in _rows(planner, start, end)) == list(range(12))
    assert reads == [(1, 6)]  # nothing read again
    planner.commit(end)
    assert not planner._versions  # what the committed batch needed is dropped


def test_starting_latest_begins_after_the_version_the_first_batch_finds(tmp_path: Path) -> None:
    uri = str(tmp_path / "src")
    _append(uri, 0, 10)
    planner = _stream_reader(uri, startingVersion="latest")
    _append(uri, 10, 5)  # before the first batch is planned: not read, as the query starts later
    end = planner.latestOffset(planner.initialOffset(), planner.getDefaultReadLimit())
    _append(uri, 15, 5)
    assert _rows(planner, planner.initialOffset(), end) == []
    following = planner.latestOffset(end, planner.getDefaultReadLimit())
    assert _rows(planner, end, following) == [(i, None) for i in range(15, 20)]


def test_restart_of_an_unfinished_first_batch_loses_no_row(spark_ds: Any, tmp_path: Path) -> None:
    """The first batch fails after Spark has logged its end offset; the table moves on; the
    restarted query runs that batch again from the same start."""
    source, sink, checkpoint = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ckpt")
    _append(source, 0, 10)
    _append(source, 10, 10)

    def fail(batch: Any, batch_id: int) -> None:
        raise RuntimeError("the first batch fails")

    query = spark_ds.readStream.format("txnlog").load(source).writeStream.foreachBatch(fail).option(
        "checkpointLocation", checkpoint).trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException, match="the first batch fails"):
        query.awaitTermination(180)
    assert (tmp_path / "ckpt" / "offsets" / "0").exists() and not (tmp_path / "ckpt" / "commits" / "0").exists()
    _append(source, 20, 5)
    _append(source, 25, 5)
    _run_to_table(spark_ds, source, sink, checkpoint)
    assert _ids(sink) == list(range(30))


def test_rate_limit_at_most_n_files_per_batch(spark_ds: Any, tmp_path: Path) -> None:
    source = str(tmp_path / "src")
    for i in range(5):
        _append(source, i * 3, 3)  # one file of 3 rows per commit
    batches = _batches(spark_ds, source, str(tmp_path / "c1"), maxFilesPerTrigger="2")
    assert [len(b) for b in batches] == [6, 6, 3]
    assert sorted(r[0] for b in batches for r in b) == list(range(15))
    # maxBytesPerTrigger: a file at least as large as the limit fills a batch alone.
    batches = _batches(spark_ds, source, str(tmp_path / "c2"), maxBytesPerTrigger="1")
    assert [len(b) for b in batches] == [3] * 5


def test_starting_version_reads_only_later_commits(spark_ds: Any, tmp_path: Path) -> None:
    source = str(tmp_path / "src")
    for i in range(4):
        _append(source, i * 10, 10)  # versions 0 (create) .. 4; version k >= 1 adds ids from (k-1)*10
    batches = _batches(spark_ds, source, str(tmp_path / "c"), startingVersion="3")
    assert sorted(r[0] for b in batches for r in b) == list(range(20, 40))
    batches = _batches(spark_ds, source, str(tmp_path / "c2"), startingVersion="latest")
    assert batches == []


def test_delete_in_source_fails_the_stream_unless_skip_change_commits(spark_ds: Any, tmp_path: Path) -> None:
    source = str(tmp_path / "src")
    _append(source, 0, 10)
    _append(source, 10, 10)
    result = Table(source).delete("id < 5")
    assert result is not None
    deleted_at = result.version
    _append(source, 100, 3)
    with pytest.raises(StreamingQueryException) as failure:
        _batches(spark_ds, source, str(tmp_path / "c1"), startingVersion="1")
    message = str(failure.value)
    assert f"version {deleted_at}" in message and "DELETE" in message and "skipChangeCommits" in message

    batches = _batches(spark_ds, source, str(tmp_path / "c2"), startingVersion="1", skipChangeCommits="true")
    assert sorted(r[0] for b in batches for r in b) == [*range(20), 100, 101, 102]


def test_read_change_feed_streams_inserts_and_deletes(spark_ds: Any, tmp_path: Path) -> None:
    source = str(tmp_path / "src")
    _append(source, 0, 4, properties={"delta.enableChangeDataFeed": "true"})
    _append(source, 4, 4)
    # DELETE of a whole file: the version's removes are its change rows (no cdc file needed).
    assert Table(source).delete("id >= 4") is not None
    _append(source, 50, 2)
    batches = _batches(spark_ds, source, str(tmp_path / "c"), readChangeFeed="true", startingVersion="1")
    got = sorted((r[0], r[2], r[3]) for b in batches for r in b)
    expected = Table(source).changes(1)
    want = sorted(zip(expected["id"].to_pylist(), expected["_change_type"].to_pylist(), expected["_commit_version"].to_pylist(), strict=True))
    assert got == want
    assert {kind for _, kind, _ in got} == {"insert", "delete"}
    # Without startingVersion: the snapshot's rows as inserts at its version, then nothing more.
    snapshot_batches = _batches(spark_ds, source, str(tmp_path / "c2"), readChangeFeed="true")
    latest = Table(source).latest_version()
    assert sorted((r[0], r[2], r[3]) for b in snapshot_batches for r in b) == [(i, "insert", latest) for i in (0, 1, 2, 3, 50, 51)]


@pytest.mark.parametrize("deletion_vectors", [True, False], ids=["merge-on-read", "copy-on-write"])
def test_read_change_feed_streams_update_images_and_deletes(spark_ds: Any, tmp_path: Path, deletion_vectors: bool) -> None:
    source = str(tmp_path / "src")
    properties = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": str(deletion_vectors).lower()}
    _append(source, 0, 6, properties=properties)  # version 1: one file of ids 0..5
    table = Table(source)
    updated = table.update("id = 1", set={"name": "'renamed'"})
    deleted = table.delete("id = 2")
    assert updated is not None and deleted is not None
    # The mode under test: a deletion vector on the file, or the file rewritten.
    metrics = [h.commit_info.operation_metrics or {} for h in table.history() if h.version in (updated.version, deleted.version)]
    vectors = sum(int(m.get("numDeletionVectorsAdded", 0)) + int(m.get("numDeletionVectorsUpdated", 0)) for m in metrics)
    assert (vectors > 0) is deletion_vectors

    batches = _batches(spark_ds, source, str(tmp_path / "c"), readChangeFeed="true", startingVersion="1", maxFilesPerTrigger="1")
    got = sorted((r[3], r[2], r[0], r[1]) for b in batches for r in b)  # (version, change type, id, name)
    want = sorted(
        [(1, "insert", i, f"n{i}") for i in range(6)]
        + [(updated.version, "update_preimage", 1, "n1"), (updated.version, "update_postimage", 1, "renamed"),
           (deleted.version, "delete", 2, "n2")]
    )
    assert got == want
    # A version is one indivisible step: with one file per trigger, a batch per version, the
    # update's two images together.
    assert [sorted({r[2] for r in b}) for b in batches] == [["insert"], ["update_postimage", "update_preimage"], ["delete"]]


def test_expired_start_version_names_the_version_and_the_retention(spark_ds: Any, tmp_path: Path) -> None:
    from txnlog.maintenance import expire
    from txnlog.properties import LOG_RETENTION

    source = str(tmp_path / "src")
    _append(source, 0, 3, properties={"delta.enableChangeDataFeed": "true"})  # versions 0, 1
    running = str(tmp_path / "running")
    assert sorted(r[0] for b in _batches(spark_ds, source, running, startingVersion="1") for r in b) == [0, 1, 2]
    for i in range(1, 6):
        _append(source, i * 3, 3)  # versions 2..6: the running query's next version is 2
    result = expire(Table(source), retain_min=1, retain_max=2, limit=100)
    assert result.earliest_after == 5  # versions 0..4 are gone; a checkpoint at 5 keeps the table readable

    # A restarted query whose next version was expired, and new queries asking for expired versions.
    cases = [(running, {}, 2), (str(tmp_path / "fresh"), {"startingVersion": "1"}, 1),
             (str(tmp_path / "cdf"), {"startingVersion": "3", "readChangeFeed": "true"}, 3)]
    for checkpoint, options, version in cases:
        with pytest.raises(StreamingQueryException) as failure:
            _batches(spark_ds, source, checkpoint, **options)
        message = str(failure.value)
        assert f"version {version}" in message and LOG_RETENTION.key in message, (options, message[:2000])
    # From a version still in the log, the stream reads on.
    assert sorted(r[0] for b in _batches(spark_ds, source, str(tmp_path / "later"), startingVersion="5") for r in b) == list(range(12, 18))


def test_complete_mode_overwrites_each_batch(spark_ds: Any, tmp_path: Path) -> None:
    source, sink, checkpoint = str(tmp_path / "src"), str(tmp_path / "agg"), str(tmp_path / "c")
    _append(source, 0, 10)

    def run() -> None:
        from pyspark.sql import functions as F

        counts = spark_ds.readStream.format("txnlog").load(source).groupBy((F.col("id") % 2).alias("parity")).count()
        query = (counts.writeStream.format("txnlog").outputMode("complete").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(sink))
        query.awaitTermination(180)

    run()
    _append(source, 10, 5)
    run()
    rows = sorted(tuple(r.values()) for r in Table(sink).snapshot().to_arrow().to_pylist())
    assert rows == [(0, 8), (1, 7)]


def test_killed_stream_restarts_with_no_row_lost_or_repeated(spark_ds: Any, tmp_path: Path) -> None:
    source, sink, checkpoint = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ckpt")
    for i in range(6):
        _append(source, i * 5, 5)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), source, sink, checkpoint, "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=300)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert child.returncode == -signal.SIGKILL, out + err[-3000:]
    landed = _ids(sink)
    assert 0 < len(landed) < 30 and len(landed) == len(set(landed))  # killed mid-stream

    _append(source, 100, 5)
    _run_to_table(spark_ds, source, sink, checkpoint)
    assert _ids(sink) == [*range(30), *range(100, 105)]


IDENTITY_SINK = pa.schema([identity_column("key"), pa.field("id", pa.int64()), pa.field("name", pa.string())])


def _keys_and_mark(uri: str) -> tuple[list[int], int | None]:
    snapshot = Table(uri).snapshot()
    keys = snapshot.to_arrow(columns=["key"]).column("key").to_pylist()
    return keys, snapshot.table_configuration.identity_columns["key"].high_water_mark


def test_stream_to_an_identity_table_numbers_each_batch_past_the_last(spark_ds: Any, tmp_path: Path) -> None:
    """The sink refused identity tables: its tasks numbered every batch from the marks of the
    query's start. Now each batch's values follow the previous batch's, across a restart too."""
    source, sink, checkpoint = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ckpt")
    for k in range(3):
        _append(source, 10 * k, 10)
    Table.create(sink, IDENTITY_SINK)
    _run_to_table(spark_ds, source, sink, checkpoint, maxFilesPerTrigger="1")
    assert [h.commit_info.operation for h in Table(sink).history()].count("STREAMING UPDATE") == 3
    _append(source, 30, 10)
    _run_to_table(spark_ds, source, sink, checkpoint, maxFilesPerTrigger="1")  # a restart: a new plan
    assert _ids(sink) == list(range(40))
    keys, mark = _keys_and_mark(sink)
    assert None not in keys and len(set(keys)) == 40
    assert mark == max(keys)


def test_an_identity_batch_replayed_commits_nothing_and_one_beaten_by_another_writer_conflicts(tmp_path: Path) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from txnlog.errors import CommitConflictError
    from txnlog.spark.datasource import TxnlogDataSource

    sink = str(tmp_path / "sink")
    Table.create(sink, IDENTITY_SINK)
    struct = StructType([StructField("id", LongType()), StructField("name", StringType())])
    writer = TxnlogDataSource({"path": sink, "txnAppId": "app"}).streamWriter(struct, False)

    def batch(start: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"id": list(range(start, start + 5)), "name": [f"n{i}" for i in range(start, start + 5)]})

    def task(rows: pa.RecordBatch) -> Any:
        """What a Spark task runs: a copy of the writer as it was pickled at the query's start."""
        return pickle.loads(pickle.dumps(writer)).write(iter([rows]))

    writer.commit([task(batch(0))], 0)
    writer.commit([task(batch(5))], 1)
    version = Table(sink).latest_version()
    writer.commit([task(batch(5))], 1)  # a replay after a crash: already committed
    assert Table(sink).latest_version() == version
    keys, mark = _keys_and_mark(sink)
    assert len(set(keys)) == 10 and mark == max(keys)
    assert sorted(_ids(sink)) == list(range(10))

    written = task(batch(10))  # numbered past the marks of `version`...
    Table(sink).append(pa.table({"id": [99], "name": ["other"]}))  # ...which another writer moves first
    with pytest.raises(CommitConflictError):
        writer.commit([written], 2)
    keys, mark = _keys_and_mark(sink)
    assert len(set(keys)) == len(keys) == 11 and mark == max(keys)


def test_an_identity_stream_with_merge_schema_evolves_the_table_once_and_numbers_past_every_writer(tmp_path: Path) -> None:
    """The sink refused mergeSchema on identity tables. Its tasks now evolve the table as they
    find it: another writer's values before the first batch and between batches are never
    numbered again, and the new column is added once."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from txnlog.spark.datasource import TxnlogDataSource

    sink = str(tmp_path / "sink")
    Table.create(sink, pa.schema([identity_column("key"), pa.field("id", pa.int64())]))
    struct = StructType([StructField("id", LongType()), StructField("name", StringType())])
    writer = TxnlogDataSource({"path": sink, "txnAppId": "app", "mergeSchema": "true"}).streamWriter(struct, False)

    def task(start: int) -> Any:
        """What a Spark task runs (one per batch here: outside Spark every task is partition 0)."""
        rows = pa.RecordBatch.from_pydict({"id": list(range(start, start + 5)), "name": [f"n{i}" for i in range(start, start + 5)]})
        return pickle.loads(pickle.dumps(writer)).write(iter([rows]))

    Table(sink).append(pa.table({"id": [-1, -2]}))  # after the plan, before the evolution
    before = Table(sink).latest_version()
    writer.commit([task(0)], 0)
    assert [f.name for f in Table(sink).snapshot().schema] == ["key", "id", "name"]
    Table(sink).append(pa.table({"id": [-3], "name": ["other"]}))  # between batches
    writer.commit([task(5)], 1)
    snapshot = Table(sink).snapshot()
    # Batch 0 is the commit after `before`, and it added the column.
    assert Table(sink).snapshot(version=before + 1).app_transaction_version("app") == 0
    assert [f.name for f in Table(sink).snapshot(version=before + 1).schema] == ["key", "id", "name"]
    rows = snapshot.to_arrow().to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == sorted([(-1, None), (-2, None), (-3, "other")] + [(i, f"n{i}") for i in range(10)])
    keys, mark = _keys_and_mark(sink)
    assert None not in keys and len(set(keys)) == len(keys) == 13 and mark == max(keys)


def test_stream_with_merge_schema_adds_the_streams_new_columns_once(spark_ds: Any, tmp_path: Path) -> None:
    source, sink, checkpoint = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ckpt")
    _append(source, 0, 5)
    _append(source, 5, 5)
    Table.create(sink, pa.schema([("id", pa.int64())])).append(pa.table({"id": pa.array([-1], pa.int64())}))
    with pytest.raises(StreamingQueryException, match="(?i)name"):  # without mergeSchema the new column is refused
        _run_to_table(spark_ds, source, sink, str(tmp_path / "strict"), maxFilesPerTrigger="1")
    query = (spark_ds.readStream.format("txnlog").option("maxFilesPerTrigger", "1").load(source).writeStream.format("txnlog")
             .option("checkpointLocation", checkpoint).option("mergeSchema", "true").trigger(availableNow=True).start(sink))
    query.awaitTermination(180)
    rows = sorted((r["id"], r["name"]) for r in Table(sink).snapshot().to_arrow().to_pylist())
    assert rows == [(-1, None)] + [(i, f"n{i}") for i in range(10)]
    assert [h.commit_info.operation for h in Table(sink).history()].count("STREAMING UPDATE") == 2
