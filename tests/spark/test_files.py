"""txnlog.spark.files: the file list reconstructed on Spark executors agrees with the
single-machine replay (Snapshot.files()) on the whole conformance corpus at every version, and
on tables with V2 checkpoints and sidecars, multi-part checkpoints, removes, re-adds and
deletion vectors."""

from __future__ import annotations

import datetime as dt
import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

import txnlog
import txnlog.spark
from txnlog.errors import TxnLogError, UnsupportedFeatureError, VersionNotFoundError
from txnlog.log import checkpoint_writer
from txnlog.log.actions import DeletionVectorDescriptor, Protocol, RemoveFile
from txnlog.log.checkpoint_writer import write_checkpoint
from txnlog.log.filenames import LOG_DIR, SIDECAR_DIR, classic_checkpoint_path
from txnlog.log.segment import list_log
from txnlog.storage import open_store

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

NOW_MS = 1_800_000_000_000


def _stats_value(value: Any) -> Any:
    """Stats JSON, normalized: when only stats_parsed is in a checkpoint, each side renders it
    to JSON its own way (timestamps spelled differently, decimals as strings or numbers)."""
    if isinstance(value, dict):
        return {k: _stats_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
        except ValueError:
            pass
        try:
            return float(value)
        except ValueError:
            return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _row(path: str, size: int, partition_values: Any, stats: str | None, dv: dict[str, Any] | None) -> tuple[Any, ...]:
    pv = tuple(sorted(dict(partition_values or {}).items()))
    parsed = _stats_value(orjson.loads(stats)) if stats else None
    dv_key = tuple(sorted(dv.items())) if dv else None
    return (path, size, pv, orjson.dumps(parsed, default=str, option=orjson.OPT_SORT_KEYS) if parsed else None, dv_key)


def _expected(snapshot: txnlog.Snapshot) -> list[tuple[Any, ...]]:
    files = snapshot.files().to_pylist(maps_as_pydicts="strict")
    return sorted((_row(f["path"], f["size"], f["partition_values"], f["stats"], f["deletion_vector"]) for f in files), key=repr)


def _rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        d = r.asDict(recursive=True)
        out.append(_row(d["path"], d["size"], d["partition_values"], d["stats"], d["deletion_vector"]))
    return sorted(out, key=repr)


def _by_version(spark: Any, uri: str, versions: list[int]) -> dict[int, list[tuple[Any, ...]]]:
    """One Spark job for all ``versions``: their file lists, tagged and unioned."""
    from pyspark.sql import functions as F

    frames = [txnlog.spark.files(spark, uri, v).withColumn("_v", F.lit(v)) for v in versions]
    rows = functools.reduce(lambda a, b: a.unionByName(b), frames).collect()
    out: dict[int, list[Any]] = {v: [] for v in versions}
    for r in rows:
        out[r["_v"]].append(r)
    return {v: _rows(rs) for v, rs in out.items()}


# --- the conformance corpus --------------------------------------------------------------------


# Every log layout and reader feature of the corpus, for the default run; the whole corpus
# (a Spark job per table, minutes on two cores) runs under soak.
DEFAULT_CASES = {
    "checkpoint-v2-table",
    "checkpoint_with_partitions",
    "delta-0.8.0-partitioned",
    "python-0.25.5-checkpoint",
    "table-with-dv-small",
    "table_with_column_mapping",
    "table_failed_last_checkpoint_update",
}


def conformance_cases(root: Path, test_name: str) -> list[Any]:
    tables = root / "tables"
    names = sorted(str(p.parent.relative_to(tables)) for p in tables.rglob("_delta_log"))
    return [pytest.param(name, id=name, marks=() if name in DEFAULT_CASES else pytest.mark.soak) for name in names]


def test_corpus_at_every_version(spark: Any, conformance_dir: Path, conformance_case: str) -> None:
    root = conformance_dir / "tables" / conformance_case
    table = txnlog.Table(root)
    store = open_store(root)
    listing = list_log(store)
    latest = listing.latest_version()
    assert latest is not None
    readable: dict[int, txnlog.Snapshot] = {}
    refused: dict[int, type[TxnLogError]] = {}
    for v in range(latest + 1):
        try:
            readable[v] = table.snapshot(v)
        except TxnLogError as e:
            refused[v] = type(e)
    for v, error in refused.items():
        # What the single-machine replay refuses at call time (unreadable features, versions
        # whose commits were cleaned up), the Spark path refuses too.
        if error in (UnsupportedFeatureError, VersionNotFoundError):
            with pytest.raises(error):
                txnlog.spark.files(spark, str(root), v)
    if not readable:
        pytest.skip(f"txnlog reads no version of {conformance_case}")
    actual = _by_version(spark, str(root), list(readable))
    for v, snapshot in readable.items():
        assert actual[v] == _expected(snapshot), f"{conformance_case} at version {v}"


# --- hand-made tables: checkpoint layouts --------------------------------------------------------


def _dv(n: int) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor(storage_type="u", path_or_inline_dv=f"ab^-aqEH.-t@S}}K{n:08d}", size_in_bytes=34, cardinality=n, offset=1)


def _busy_table(writer: Any, *, checkpoint: Callable[[str], None], **create: Any) -> None:
    writer.create(**create)
    writer.commit(1, *(writer.add(f"part={i % 3}/f{i}.parquet", num_records=i, partition_values={"part": str(i % 3)}) for i in range(30)))
    writer.commit(2, *(RemoveFile(f"part={i % 3}/f{i}.parquet", deletion_timestamp=NOW_MS) for i in range(0, 30, 5)))
    checkpoint(writer.uri)
    writer.commit(
        3,
        RemoveFile("part=1/f1.parquet", deletion_timestamp=NOW_MS),
        writer.add("part=1/f1.parquet", num_records=100, partition_values={"part": "1"}, deletion_vector=_dv(3)),
        writer.add("part=0/f0.parquet", num_records=5, partition_values={"part": "0"}),  # re-added tombstone
        RemoveFile("part=2/f2.parquet", deletion_timestamp=NOW_MS),
    )
    writer.commit(4, writer.add("part=0/new.parquet", num_records=7, partition_values={"part": "0"}), RemoveFile("part=0/f3.parquet", deletion_timestamp=NOW_MS))
    writer.commit(5, writer.add("part=0/f3.parquet", num_records=8, partition_values={"part": "0"}), RemoveFile("part=0/new.parquet", deletion_timestamp=NOW_MS))
    writer.commit(6, RemoveFile("part=1/f1.parquet", deletion_timestamp=NOW_MS, deletion_vector=_dv(3)))


def _checkpoint_at_2(uri: str) -> None:
    write_checkpoint(txnlog.Table(uri).snapshot(2), now_ms=0)


def _multi_part_at_2(uri: str) -> None:
    _checkpoint_at_2(uri)
    classic = Path(uri, classic_checkpoint_path(2))
    rows = pq.read_table(classic)
    classic.unlink()
    size = -(-rows.num_rows // 3)
    for i in range(3):
        pq.write_table(rows.slice(i * size, size), Path(uri, LOG_DIR, f"{2:020d}.checkpoint.{i + 1:010d}.{3:010d}.parquet"))


V2 = Protocol(3, 7, ("v2Checkpoint", "deletionVectors"), ("v2Checkpoint", "deletionVectors"))
DVS = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))


@pytest.mark.parametrize("layout", ["json-only", "classic", "multi-part", "v2-sidecars", "v2-json-top-level"])
def test_checkpoint_layouts(spark: Any, layout: str, log_writer: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    writer = log_writer()
    protocol, configuration, checkpoint = DVS, {}, _checkpoint_at_2
    if layout == "json-only":
        checkpoint = lambda uri: None  # noqa: E731
    elif layout == "multi-part":
        checkpoint = _multi_part_at_2
    elif layout.startswith("v2"):
        protocol, configuration = V2, {"delta.checkpointPolicy": "v2"}
        monkeypatch.setattr(checkpoint_writer, "CHUNK_ROWS", 4)
        monkeypatch.setattr(checkpoint_writer, "SIDECAR_MAX_ROWS", 8)
        if layout == "v2-json-top-level":
            checkpoint = _v2_json_top_level
    _busy_table(writer, checkpoint=checkpoint, protocol=protocol, partition_columns=("part",), configuration=configuration)
    if layout.startswith("v2"):
        assert len(os.listdir(Path(writer.uri, SIDECAR_DIR))) >= 3
    table = txnlog.Table(writer.uri)
    versions = list(range(2 if layout != "json-only" else 0, 7))
    actual = _by_version(spark, writer.uri, versions)
    for v in versions:
        assert actual[v] == _expected(table.snapshot(v)), f"{layout} at version {v}"
    # 30 added, 6 removed; f0 back, f2 gone; new added then gone, f3 gone then back; f1 with its DV gone.
    assert len(actual[6]) == 23


def _v2_json_top_level(uri: str) -> None:
    """A V2 checkpoint whose top-level file is JSON (sidecars and one inline add)."""
    _checkpoint_at_2(uri)
    log = Path(uri, LOG_DIR)
    (top,) = [p for p in log.iterdir() if p.name.startswith(f"{2:020d}.checkpoint.") and p.suffix == ".parquet"]
    rows = pq.read_table(top).to_pylist(maps_as_pydicts="strict")
    top.unlink()
    lines = [orjson.dumps({k: v for k, v in row.items() if v is not None}) for row in rows]
    assert any(b'"sidecar"' in line for line in lines)
    top.with_suffix(".json").write_bytes(b"\n".join(lines) + b"\n")


def test_an_unreadable_table_is_refused_before_any_job(spark: Any, log_writer: Callable[..., Any]) -> None:
    writer = log_writer()
    writer.create(protocol=Protocol(3, 7, ("futureFeature",), ("futureFeature",)))
    with pytest.raises(UnsupportedFeatureError, match="futureFeature"):
        txnlog.spark.files(spark, writer.uri)


def test_a_sidecar_outside_the_table_is_refused(spark: Any, log_writer: Callable[..., Any], tmp_path: Path) -> None:
    from txnlog.errors import UnsafePathError

    writer = log_writer()
    writer.create(protocol=V2, configuration={"delta.checkpointPolicy": "v2"})
    writer.commit(1, writer.add("a.parquet"))
    _v2_json_top_level_with_sidecar(writer.uri, "../../../outside.parquet")
    with pytest.raises(UnsafePathError):
        txnlog.spark.files(spark, writer.uri)


def _v2_json_top_level_with_sidecar(uri: str, sidecar: str) -> None:
    line = orjson.dumps({"sidecar": {"path": sidecar, "sizeInBytes": 1, "modificationTime": 1}})
    checkpoint = orjson.dumps({"checkpointMetadata": {"version": 1}})
    protocol = orjson.dumps({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["v2Checkpoint"], "writerFeatures": ["v2Checkpoint"]}})
    Path(uri, LOG_DIR, f"{1:020d}.checkpoint.00000000-0000-0000-0000-000000000001.json").write_bytes(b"\n".join([checkpoint, protocol, line]) + b"\n")
    shutil.rmtree(Path(uri, SIDECAR_DIR), ignore_errors=True)
