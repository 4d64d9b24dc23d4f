"""Spark's own Parquet writer writing txnlog's data files (issue 26): the same rows written
through it and through txnlog's Python tasks give the same statistics, column by column, and
the same tables on every layout; delta-spark and deltalake read what it wrote; a killed job
leaves only files vacuum removes."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txnlog
import txnlog.spark as ts
from tests.conftest import REPO_ROOT, session_confs
from txnlog import properties as props
from txnlog.errors import ProtocolViolationError, SchemaError
from txnlog.file_facts import physical_name
from txnlog.maintenance import vacuum
from txnlog.schema import delta_field_metadata, generated_column, identity_column
from txnlog.spark import SparkJobError
from txnlog.spark.native import NATIVE_WRITE_CONF, unsupported
from txnlog.write import null_elements, null_map_values, null_values

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
SCHEMA = (
    "id long, p string, s string, st struct<a: int, b: struct<c: string, d: double>>, ts timestamp, ntz timestamp_ntz, "
    "dec decimal(10,2), big decimal(38,6), day date, bin binary, flag boolean, f float, d double, arr array<int>, "
    "m map<string, int>, nan double, huge string"
)
CUT = "z" * 30 + "\U0010ffff" * 3 + "c" * 10  # txnlog's cut max keeps characters above U+FFFD


def _row(k: int) -> tuple[Any, ...]:
    if k % 9 == 4:  # nulls everywhere but the id and partition
        return (k, f"p{k % 3}") + (None,) * 15
    return (
        k, f"p{k % 3}", ["a" * 40 + str(k), CUT, f"aé{k}", "z" * 33][k % 4],
        None if k % 5 == 1 else {"a": None if k % 4 == 0 else k, "b": None if k % 7 == 2 else {"c": f"c{k}", "d": -0.0 if k % 6 == 0 else k / 3}},
        dt.datetime(2021, 3, 4, 5, 6, 7, 123456 + k, tzinfo=UTC), dt.datetime(1999, 12, 31, 23, 59, 59, k),
        decimal.Decimal(f"{k - 20}.{k % 100:02d}"), decimal.Decimal(f"-{k}123456789012345678901234.{k % 1000000:06d}"),
        dt.date(1969, 12, 1) + dt.timedelta(days=k * 11), bytes([k % 256]), k % 2 == 0, float(k) / 8, k / 3,
        [k, None], {"k": k}, float("nan") if k == 10 else float(k), ("h" * 5000 + str(k)) if k % 3 == 0 else str(k),
    )


ROWS = [_row(k) for k in range(40)]


@contextmanager
def python_tasks(spark: Any) -> Iterator[None]:
    """Every write of the block through txnlog's Python tasks (the path before issue 26)."""
    with session_confs(spark, {NATIVE_WRITE_CONF: "false"}):
        yield


def _files(uri: str) -> list[dict[str, Any]]:
    return txnlog.Table(uri).snapshot().files().select(["path", "partition_values", "stats"]).to_pylist()


def _logical(tree: Any, fields: list[pa.Field], mapped: bool) -> Any:
    """A stats tree keyed by physical names, keyed by logical ones."""
    if not isinstance(tree, dict):
        return tree
    by_physical = {physical_name(f, mapped): f for f in fields}
    return {by_physical[k].name: _logical(v, list(by_physical[k].type) if pa.types.is_struct(by_physical[k].type) else [], mapped)
            for k, v in tree.items()}


def _stats_by_file(uri: str, version: int | None = None) -> list[tuple[list[tuple[str, Any]], dict[str, Any]]]:
    """Each file's (partition values, stats), with logical names, sorted."""
    snapshot = txnlog.Table(uri).snapshot(version)
    config = snapshot.table_configuration
    mapped, fields = config.is_column_mapped, list(config.schema)
    out = []
    for f in snapshot.files().select(["path", "partition_values", "stats"]).to_pylist():
        stats = json.loads(f["stats"], parse_float=decimal.Decimal)
        out.append((sorted(_logical(dict(f["partition_values"]), fields, mapped).items()),
                    {k: _logical(v, fields, mapped) for k, v in stats.items()}))
    return sorted(out, key=lambda x: json.dumps(x, default=str))


def _both(spark: Any, tmp_path: Path, write: Any) -> tuple[str, str]:
    """``write(uri)`` once natively and once through the Python tasks; the two table URIs."""
    native, python = str(tmp_path / "native"), str(tmp_path / "python")
    write(native)
    with python_tasks(spark):
        write(python)
    assert all(f["path"].startswith("job-") for f in _files(native)), "the native path wrote the files"
    assert not any(f["path"].startswith("job-") for f in _files(python))
    return native, python


def _rows(spark: Any, uri: str) -> list[Any]:
    return sorted((tuple(r) for r in ts.read(spark, uri).drop("nan").collect()), key=lambda r: r[0])


def test_stats_from_sparks_footers_equal_txnlogs_own_column_by_column(spark: Any, tmp_path: Path) -> None:
    """Nulls, strings past the 32-character cut (and past the 4 KiB footers keep), nested
    structs with null parents and children, timestamps with microseconds, decimals stored as
    longs and as bytes, dates before 1970, binary and booleans (null counts only), lists and
    maps, -0.0 and a NaN: one file each way, the same stats JSON."""
    df = spark.createDataFrame(ROWS, SCHEMA).coalesce(1)
    native, python = _both(spark, tmp_path, lambda uri: ts.write(df, uri))
    (native_stats,), (python_stats,) = _stats_by_file(native), _stats_by_file(python)
    for key in ("numRecords", "minValues", "maxValues", "nullCount"):
        got, expected = native_stats[1].get(key), python_stats[1].get(key)
        if isinstance(expected, dict):
            assert set(got) == set(expected), key
            for column in expected:
                assert got[column] == expected[column], (key, column)
        else:
            assert got == expected, key
    assert native_stats == python_stats
    assert "nan" not in python_stats[1]["maxValues"] and python_stats[1]["maxValues"]["s"] == CUT[:33] + "\ufffd"
    assert _rows(spark, native) == _rows(spark, python)


def test_a_nan_anywhere_in_a_file_gives_the_stats_txnlogs_writer_gives(spark: Any, tmp_path: Path) -> None:
    """Spark's writer counts nothing for NaN: its footers hold NaN as the max of a chunk with
    one, wherever it is (first, last, every value), for doubles, floats and a double in a
    struct, and those files' bounds are then read from the rows, as txnlog's writer gives them."""
    nan = float("nan")
    values = {"first": [nan, 1.0, -2.0], "last": [1.0, -2.0, nan], "only": [nan, nan, None], "none": [1.5, None, -2.0]}
    rows = [(p, i, d, d, {"d": d}) for p, ds in values.items() for i, d in enumerate(ds)]
    df = spark.createDataFrame(rows, "p string, i int, d double, f float, st struct<d: double>").repartition(1)
    native, python = _both(spark, tmp_path, lambda uri: ts.write(df, uri, partition_by=["p"]))
    native_stats, python_stats = _stats_by_file(native), _stats_by_file(python)
    assert native_stats == python_stats
    by_partition = {dict(p)["p"]: stats for p, stats in native_stats}
    for p in ("first", "last", "only"):  # a NaN leaves no bounds (txnlog's rule), and no bound is guessed without it
        assert "d" not in by_partition[p]["maxValues"] and "f" not in by_partition[p]["minValues"]
    assert by_partition["none"]["maxValues"]["d"] == decimal.Decimal("1.5") and by_partition["none"]["minValues"]["st"]["d"] == -2


def test_files_hold_physical_names_field_ids_micros_and_no_partition_column(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark.createDataFrame(ROWS, SCHEMA).select("id", "p", "st", "ts", "ntz")
    ts.write(df, uri, partition_by=["p"], properties={"delta.columnMapping.mode": "id"})
    config = txnlog.Table(uri).snapshot().table_configuration
    (first, *_) = _files(uri)
    assert first["path"].startswith("job-")
    schema = pq.read_schema(os.path.join(uri, first["path"]))

    def ids(fields: list[pa.Field]) -> list[tuple[str, int]]:
        out = []
        for f in fields:
            out.append((physical_name(f, True), int(delta_field_metadata(f)[props.COLUMN_MAPPING_ID_KEY])))
            if pa.types.is_struct(f.type):
                out += ids(list(f.type))
        return out

    def written(fields: list[pa.Field]) -> list[tuple[str, int]]:
        out = []
        for f in fields:
            out.append((f.name, int(f.metadata[b"PARQUET:field_id"])))
            if pa.types.is_struct(f.type):
                out += written(list(f.type))
        return out

    assert written(list(schema)) == ids([f for f in config.schema if f.name != "p"])
    by_name = {f.name: f.type for f in schema}
    assert by_name[config.physical_name("ts")] == pa.timestamp("us", tz="UTC")
    assert by_name[config.physical_name("ntz")] == pa.timestamp("us")
    assert config.physical_name("p") not in by_name and set(dict(first["partition_values"])) == {config.physical_name("p")}


LAYOUTS = {
    "partitioned": ({}, ["p"]),
    "partitioned by a date and an int": ({}, ["day", "k"]),
    "column mapping name": ({"delta.columnMapping.mode": "name"}, ["p"]),
    "column mapping id": ({"delta.columnMapping.mode": "id"}, []),
    "deletion vectors": ({"delta.enableDeletionVectors": "true"}, []),
    "row tracking": ({"delta.enableRowTracking": "true"}, []),
    "change data feed": ({"delta.enableChangeDataFeed": "true"}, ["p"]),
}
#: The layouts the default suite runs; the others (a plain partition column, name mapping and row
#: tracking without vectors, each the same writer path as one here; the change data feed, which
#: test_native_change_data.py compares on more layouts) run under ``soak``.
DEFAULT_LAYOUTS = {"partitioned by a date and an int", "column mapping id", "deletion vectors"}
SIMPLE = "id long, p string, k int, day date, s string, st struct<a: int, b: string>, v double"


def _simple(spark: Any, start: int, n: int) -> Any:
    return spark.range(start, start + n, 1, 2).selectExpr(
        "id", "concat('p', id % 3) as p", "cast(id % 4 as int) as k", "date_add(date'2020-01-01', cast(id % 2 as int)) as day",
        "repeat(cast(id as string), 20) as s", "if(id % 5 = 0, null, named_struct('a', cast(id as int), 'b', cast(id as string))) as st",
        "id / 7 as v")


def _history(spark: Any, uri: str, properties: dict[str, str], partition_by: list[str]) -> None:
    """Create, append, UPDATE, DELETE, MERGE, each in Spark (not on the driver): every rewrite
    goes through the same writer."""
    from txnlog.spark.driver import DRIVER_SCAN_CELLS_CONF

    first = _simple(spark, 0, 60)
    ts.write(first if partition_by else first.coalesce(1), uri, partition_by=partition_by, properties=properties)
    ts.write(_simple(spark, 60, 30), uri)
    with session_confs(spark, {DRIVER_SCAN_CELLS_CONF: "0"}):
        with ts.transaction(spark, uri) as tx:
            tx.update("id % 10 = 1", {"s": "upper(s)", "v": "v + 1"})
        with ts.transaction(spark, uri) as tx:
            tx.delete("id % 10 = 2")
        source = _simple(spark, 80, 20).selectExpr("id", "p", "k", "day", "'merged' as s", "st", "v")
        ts.merge(spark, uri, source, on="id", when_matched_update="*", when_not_matched_insert="*")


@pytest.mark.parametrize("layout", [n if n in DEFAULT_LAYOUTS else pytest.param(n, marks=pytest.mark.soak) for n in LAYOUTS])
def test_every_layout_gives_the_same_table_either_way(spark: Any, tmp_path: Path, layout: str) -> None:
    """The same history natively and through the Python tasks: the same files' stats at
    version 0, the same rows, row ids kept alike, the same change feed; deltalake reads it."""
    properties, partition_by = LAYOUTS[layout]
    deltalake = pytest.importorskip("deltalake")
    native, python = _both(spark, tmp_path, lambda uri: _history(spark, uri, properties, partition_by))
    assert _stats_by_file(native, 0) == _stats_by_file(python, 0)  # the same rows in the same files

    def rows(uri: str) -> list[Any]:
        return sorted((tuple(r) for r in ts.read(spark, uri).collect()), key=lambda r: r[0])

    assert rows(native) == rows(python)
    expected_ids = ({i for i in range(90) if i % 10 != 2} | set(range(80, 100)))
    assert [r[0] for r in rows(native)] == sorted(expected_ids)
    if not ({"delta.columnMapping.mode", "delta.enableDeletionVectors"} & set(properties)):  # deltalake 1.6 reads neither
        independent = deltalake.DeltaTable(native).to_pyarrow_table().sort_by("id")
        assert independent.column("s").to_pylist() == [r[4] for r in rows(python)]
    if "delta.enableRowTracking" in properties:
        native_ids, python_ids = (txnlog.Table(u).snapshot().to_arrow(["id"], with_row_ids=True).sort_by("id") for u in (native, python))
        assert len(set(native_ids.column("row_id").to_pylist())) == native_ids.num_rows
        # The same rows kept their commit versions (ids are numbered per file, in file order).
        assert native_ids.column("row_commit_version").to_pylist() == python_ids.column("row_commit_version").to_pylist()
    if "delta.enableChangeDataFeed" in properties:

        def changes(uri: str) -> list[Any]:
            df = ts.read_changes(spark, uri, 0).select("id", "s", "_change_type", "_commit_version")
            return sorted(tuple(r) for r in df.collect())

        assert changes(native) == changes(python)


@pytest.mark.parametrize("properties", [{}, {"delta.columnMapping.mode": "id"}, {"delta.enableDeletionVectors": "true"}],
                         ids=["plain", "column mapping id", "deletion vectors"])
def test_delta_spark_and_deltalake_read_what_the_native_path_wrote(delta_spark: Any, tmp_path: Path, properties: dict[str, str]) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "t")
    df = spark_rows = delta_spark.createDataFrame(ROWS, SCHEMA).drop("nan", "huge", "m")
    ts.write(df, uri, partition_by=["p"], properties=properties)
    with ts.transaction(delta_spark, uri) as tx:
        tx.delete("id % 4 = 1")
    expected = sorted((tuple(r) for r in spark_rows.where("id % 4 != 1").collect()), key=lambda r: r[0])
    seen = delta_spark.read.format("delta").load(uri).select(*spark_rows.columns).collect()
    assert sorted((tuple(r) for r in seen), key=lambda r: r[0]) == expected
    if not properties:  # deltalake 1.6 reads neither column mapping nor deletion vectors
        independent = deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id", "p", "s", "dec"]).sort_by("id").to_pylist()
        assert [(r["id"], r["p"], r["s"], r["dec"]) for r in independent] == [(r[0], r[1], r[2], r[6]) for r in expected]


EDGE_PARTITIONS = "k int, ts timestamp, ntz timestamp_ntz, dec decimal(20,7), f float, d double"
EDGE_ROWS = [
    (0, dt.datetime(2020, 1, 1, tzinfo=UTC), dt.datetime(2020, 1, 1, 12, 30, 5, 123000), decimal.Decimal("1.5"), 0.1, 1e10),
    (1, dt.datetime(1850, 6, 1, 0, 0, 0, 1, tzinfo=UTC), dt.datetime(1, 1, 1, 0, 0, 0, 1), decimal.Decimal("0.0000001"),
     float("inf"), float("nan")),
    (2, None, None, None, None, None),
    (3, dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     decimal.Decimal("-12345.6789012"), -0.0, float("-inf")),
    (4, dt.datetime(2021, 3, 14, 10, 30, 0, 500, tzinfo=UTC), dt.datetime(2021, 3, 14, 4, 30), decimal.Decimal("0"),
     3.4028235e38, 5e-324),
]


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles"])
def test_timestamp_decimal_and_floating_partitions_are_written_natively_as_the_python_tasks_write_them(
        delta_spark: Any, tmp_path: Path, zone: str) -> None:
    """Partition columns of every type whose directory text Spark's writer can give back exactly
    (NaN, infinities, -0.0, the extremes of floats and doubles, scaled decimals, microseconds,
    years 1 and 9999): the same partition values as txnlog's own writer, and the rows read back
    by txnlog and delta-spark as written. A timestamp partition is the same instant in a session
    whose zone has daylight saving time and local mean time before 1883."""
    partition_by = ["ts", "ntz", "dec", "f", "d"]

    def comparable(row: Any) -> tuple[Any, ...]:
        return tuple("NaN" if isinstance(v, float) and v != v else v for v in row)

    with session_confs(delta_spark, {"spark.sql.session.timeZone": zone}):
        df = delta_spark.createDataFrame(EDGE_ROWS, EDGE_PARTITIONS)
        native, python = _both(delta_spark, tmp_path, lambda uri: ts.write(df, uri, partition_by=partition_by))
        assert _stats_by_file(native) == _stats_by_file(python)
        expected = sorted(comparable(r) for r in df.collect())
        for uri in (native, python):
            assert sorted(comparable(r) for r in ts.read(delta_spark, uri).select(*df.columns).collect()) == expected
        seen = delta_spark.read.format("delta").load(native).select(*df.columns).collect()
        assert sorted(comparable(r) for r in seen) == expected
    # The instant, not the session's wall clock, as txnlog's writer serializes it.
    assert {dict(f["partition_values"])["ts"] for f in _files(native)} == \
        {None, "2020-01-01T00:00:00.000000Z", "1850-06-01T00:00:00.000001Z", "1969-12-31T23:59:59.999999Z", "2021-03-14T10:30:00.000500Z"}


#: NUL and control bytes, the escape character the native path uses for NUL (U+FFFF), characters a
#: directory name escapes, UTF-8 past ASCII, the empty value and NULL.
BINARY_PARTITIONS = [b"\x00", b"a\x00b\x01", "\uffff0\uffff\x00".encode(), b"", None, b"a/b=c%25d%00", "é€".encode(), b"\x7f {[]^?*"]


def test_binary_partitions_are_written_natively_as_the_python_tasks_write_them(delta_spark: Any, tmp_path: Path) -> None:
    """A binary partition value is stored as the text its UTF-8 bytes are (as delta-spark and
    deltalake read it; Hadoop refuses NUL in a directory, so the native path escapes it there):
    the same partition values as txnlog's own writer, the rows read back by txnlog, delta-spark
    and deltalake. Bytes that are no UTF-8 text are refused with the Python tasks' error, and
    the native write leaves no file behind."""
    rows = [(i, value, f"r{i}") for i, value in enumerate(BINARY_PARTITIONS)]
    schema = pa.schema([("id", pa.int64()), ("b", pa.binary()), ("s", pa.string())])

    def write(uri: str) -> None:
        txnlog.Table.create(uri, schema, partition_by=["b"])
        ts.write(delta_spark.createDataFrame(rows, "id long, b binary, s string"), uri)

    native, python = _both(delta_spark, tmp_path, write)
    # An empty binary partition value is recorded as NULL, by txnlog's writer as by Spark's.
    texts = {None} | {v.decode() for v in BINARY_PARTITIONS if v}
    expected = [(i, None if v == b"" else v, s) for i, v, s in rows]
    deltalake = pytest.importorskip("deltalake")
    for uri in (native, python):
        assert {dict(f["partition_values"])["b"] for f in _files(uri)} == texts
        assert sorted((r["id"], r["b"], r["s"]) for r in txnlog.Table(uri).snapshot().to_arrow().to_pylist()) == expected
        assert sorted((r.id, None if r.b is None else bytes(r.b), r.s) for r in ts.read(delta_spark, uri).collect()) == expected
        seen = delta_spark.read.format("delta").load(uri).collect()
        assert sorted((r.id, None if r.b is None else bytes(r.b), r.s) for r in seen) == expected
        assert sorted((r["id"], r["b"], r["s"]) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()) == expected

    bad = delta_spark.createDataFrame([(50, bytearray(b"ok"), "x"), (51, bytearray(b"a\xff"), "y")], "id long, b binary, s string")
    errors = []
    for uri in (native, python):
        version = txnlog.Table(uri).snapshot().version
        with python_tasks(delta_spark) if uri == python else contextlib.nullcontext():
            with pytest.raises(SchemaError, match=r"binary partition value b'a\\xff' of column 'b' is not UTF-8") as caught:
                ts.write(bad, uri)
        errors.append(str(caught.value))
        assert txnlog.Table(uri).snapshot().version == version
    assert errors[0] == errors[1]
    assert not [p for p in (tmp_path / "native").rglob("*.parquet") if p.relative_to(tmp_path / "native").parts[0] not in
                {f["path"].split("/")[0] for f in _files(native)}]


def test_the_native_path_falls_back_to_the_python_tasks_where_it_cannot_do_the_same(spark: Any, tmp_path: Path) -> None:
    """Each case the native path does not do yet is named, and the write still succeeds through
    the Python tasks with their result."""
    df = spark.createDataFrame([(1, "a")], "id long, s string")

    def context(uri: str) -> txnlog.WriteContext:
        return txnlog.WriteContext.for_snapshot(txnlog.Table(uri).snapshot())

    # Generated columns are computed in UTC, as txnlog's writer computes them and prunes by them:
    # in a classic session natively in any zone (Spark Connect analyses the plan when it runs).
    uri = str(tmp_path / "generated")
    txnlog.Table.create(uri, pa.schema([("id", pa.int64()), ("s", pa.string()), generated_column("g", pa.int64(), "id * 2")]))
    assert unsupported(df, context(uri), data_change=True) is None
    with session_confs(spark, {"spark.sql.session.timeZone": "America/Los_Angeles"}):
        assert unsupported(df, context(uri), data_change=True) is None
    plain = str(tmp_path / "plain")
    ts.write(df, plain)
    ctx = context(plain)
    assert unsupported(df, ctx, data_change=True, target_file_size=1 << 20) == "files cut at an explicit target size"
    assert unsupported(df.selectExpr("cast(id as decimal(20, 0)) as id", "s"), ctx, data_change=True) == \
        "column 'id' cast from decimal(20,0) to bigint"
    assert unsupported(df.selectExpr("cast(id as int) as id", "s"), ctx, data_change=True) is None  # a widening
    # A narrowing cast is native for new rows (each value counted), not for a rewrite's copies;
    # an integer to a decimal that cannot hold every value of its type the tasks refuse outright.
    narrow = str(tmp_path / "narrow")
    txnlog.Table.create(narrow, pa.schema([("id", pa.int32()), ("d", pa.decimal128(5, 0))]))
    assert unsupported(df.selectExpr("id", "cast(id as decimal(9, 0)) as d"), context(narrow), data_change=True) is None
    assert unsupported(df.selectExpr("id"), context(narrow), data_change=False) == "column 'id' cast from bigint to int"
    assert unsupported(df.selectExpr("cast(id as int) as id", "cast(id as int) as d"), context(narrow), data_change=True) == \
        "column 'd' cast from int to decimal(5,0)"
    with pytest.raises(SchemaError, match="Precision is not great enough"):
        ts.write(df.selectExpr("cast(id as int) as id", "cast(id as int) as d"), narrow)


def test_nulls_in_a_not_null_column_are_refused_and_nothing_is_left(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    txnlog.Table.create(uri, pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string())]))
    bad = spark.createDataFrame([(1, "a"), (None, "b")], "id long, s string")
    with pytest.raises(SchemaError) as native:
        ts.write(bad, uri)
    assert [p for p in Path(uri).rglob("*") if p.is_file() and "_delta_log" not in p.parts] == []  # the job's files deleted
    with python_tasks(spark), pytest.raises(SchemaError) as python:
        ts.write(bad, uri)
    assert (str(native.value), native.value.field) == (str(python.value), python.value.field) == (str(native.value), "id")
    assert txnlog.Table(uri).latest_version() == 0


NESTED = pa.schema([
    ("id", pa.int64()),
    ("s", pa.struct([pa.field("x", pa.int64(), nullable=False), ("inner", pa.struct([pa.field("y", pa.string(), nullable=False)]))])),
    ("arr", pa.list_(pa.struct([pa.field("z", pa.int32(), nullable=False)]))),
    ("els", pa.list_(pa.field("element", pa.int32(), nullable=False))),
    ("m", pa.map_(pa.string(), pa.field("value", pa.struct([pa.field("w", pa.int64(), nullable=False)]), nullable=False))),
    # NOT NULL fields of every kind under a struct that is null in most rows (placeholders there).
    ("t", pa.struct([pa.field(n, kind, nullable=False) for n, kind in [
        ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("b", pa.binary()), ("f", pa.bool_()), ("dec", pa.decimal128(10, 2)),
        ("l", pa.list_(pa.int32())), ("mm", pa.map_(pa.string(), pa.int32())), ("ntz", pa.timestamp("us")), ("st", pa.string())]])),
])
NESTED_SPARK = ("id long, s struct<x: long, inner: struct<y: string>>, arr array<struct<z: int>>, els array<int>, m map<string, struct<w: long>>, "
                "t struct<d: date, ts: timestamp, b: binary, f: boolean, dec: decimal(10,2), l: array<int>, mm: map<string,int>, "
                "ntz: timestamp_ntz, st: string>")
#: ``t`` of the row with id 1 (null in every other row).
NESTED_T = (dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 1, 2, 3, 4, tzinfo=UTC), bytearray(b"\x00\xff"), True, decimal.Decimal("1.25"),
            [1, None], {"a": 1}, dt.datetime(2024, 2, 29, 1, 2, 3), "t")


def _nested_frame(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame([(*r, NESTED_T if r[0] == 1 else None) for r in rows], NESTED_SPARK)


@pytest.mark.parametrize("mapping", [pytest.param("none", marks=pytest.mark.soak), "id"])
def test_not_null_fields_inside_columns_are_kept_natively_as_the_python_tasks_keep_them(
        delta_spark: Any, tmp_path: Path, mapping: str) -> None:
    """NOT NULL inside structs, list elements and map values: nulls where a rule allows them
    (under a null struct, a null list or map, a nullable element) are written natively with the
    Python tasks' stats, rows and Parquet fields; each rule broken is refused with the error
    every txnlog writer gives (the nulls inside list elements counted), and nothing is kept; a
    MERGE's rewrite keeps the same rules."""
    spark = delta_spark
    properties = {} if mapping == "none" else {"delta.columnMapping.mode": mapping}
    good = [
        (1, (1, ("a",)), [(1,), None, (2,)], [1, 2], {"k": (1,)}),
        (2, None, None, None, None),
        (3, (2, None), [], [], {}),
        (4, (3, ("b",)), [None], [3], {"k": (2,), "j": (3,)}),
    ]

    def write(uri: str) -> None:
        txnlog.Table.create(uri, NESTED, properties=properties)
        ts.write(_nested_frame(spark, good), uri)

    native, python = _both(spark, tmp_path, write)
    assert _stats_by_file(native) == _stats_by_file(python)
    assert txnlog.Table(native).snapshot().to_arrow().sort_by("id") == txnlog.Table(python).snapshot().to_arrow().sort_by("id")
    # The same Parquet fields: NOT NULL inside is `required` either way, so every reader sees it.
    def shape(field: pa.Field) -> Any:  # types and nullability at every level, not names (random under id mapping)
        children = [field.type.field(i) for i in range(field.type.num_fields)]
        return (field.nullable, str(field.type) if not children else [shape(c) for c in children])

    native_file, python_file = (pq.read_schema(str(Path(uri) / _files(uri)[0]["path"])) for uri in (native, python))
    assert [shape(f) for f in native_file] == [shape(f) for f in python_file]
    # Each rule broken: the error the core gives every writer, with the nulls counted where
    # lists hold them; the Python tasks raise the same for the nulls inside list elements.
    broken = {
        "s.x": ([(5, (None, ("c",)), None, None, None), (6, (None, None), None, None, None)], null_values("s.x", 2)),
        "s.inner.y": ([(5, (1, (None,)), None, None, None)], null_values("s.inner.y", 1)),
        "arr.element.z": ([(5, None, [(None,), (1,), (None,)], None, None), (6, None, [(None,)], None, None)],
                          null_values("arr.element.z", 3)),
        "els.element": ([(5, None, None, [1, None], None)], null_elements("els")),
        "m.value": ([(5, None, None, None, {"k": None})], null_map_values("m")),
        "m.value.w": ([(5, None, None, None, {"k": (None,), "j": (None,)})], null_values("m.value.w", 2)),
    }
    for field, (rows, expected) in broken.items():
        with pytest.raises(SchemaError) as refused:
            ts.write(_nested_frame(spark, good + rows), native)
        assert (str(refused.value), refused.value.field) == (str(expected), field)
        assert txnlog.Table(native).latest_version() == 1
    with python_tasks(spark), pytest.raises(SchemaError) as refused:
        ts.write(_nested_frame(spark, good + broken["arr.element.z"][0]), python)
    assert str(refused.value) == str(broken["arr.element.z"][1])
    assert {str(p.relative_to(native)).split("/")[0] for p in Path(native).rglob("*.parquet")} == \
        {f["path"].split("/")[0] for f in _files(native)}  # no refused job left a file
    # A MERGE's rewrite and inserts keep the same rules (the rows cast to the table's types).
    source = _nested_frame(spark, [(1, (7, None), None, [7], {"n": (7,)}), (9, None, [(9,)], None, None)])
    for uri, confs in ((native, {}), (python, {NATIVE_WRITE_CONF: "false"})):
        with session_confs(spark, confs):
            ts.merge(spark, uri, source, on="id", when_matched_update="*", when_not_matched_insert="*")
    merged = txnlog.Table(native).snapshot().to_arrow().sort_by("id")
    assert merged.to_pylist() == txnlog.Table(python).snapshot().to_arrow().sort_by("id").to_pylist()
    assert ts.read(spark, native).toArrow().sort_by("id").to_pylist() == merged.to_pylist()
    # delta-spark reads the nulls under null structs as txnlog does (it refuses to write them).
    by_delta_spark = spark.read.format("delta").load(native).select(*merged.column_names).collect()
    assert sorted(by_delta_spark, key=lambda r: r["id"]) == sorted(ts.read(spark, native).collect(), key=lambda r: r["id"])
    assert merged.column("id").to_pylist() == [1, 2, 3, 4, 9] and merged.column("s").to_pylist()[0] == {"x": 7, "inner": None}


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_check_constraints_and_replace_where_are_counted_natively_and_refused_as_the_python_tasks_refuse(
        spark: Any, tmp_path: Path, mapping: str) -> None:
    """A CHECK constraint over logical names (physical ones under column mapping), a NULL result
    failing it: the native write refuses the same rows with the same error as the Python tasks,
    and keeps nothing; a replaceWhere's rows are checked the same way."""
    schema = "id long, p string, amount double"
    properties = {"delta.constraints.positive": "amount > 0 AND p <> 'x'"}
    if mapping != "none":
        properties |= {"delta.columnMapping.mode": mapping}
    good = spark.createDataFrame([(1, "a", 1.5), (2, "b", 2.0)], schema)
    bad = spark.createDataFrame([(3, "a", 1.0), (4, "b", -1.0), (5, "x", 3.0), (6, "a", None)], schema)
    errors = {}
    for path in ("native", "python"):
        uri = str(tmp_path / path)
        with session_confs(spark, {NATIVE_WRITE_CONF: "auto" if path == "native" else "false"}):
            ts.write(good, uri, partition_by=["p"], properties=properties)
            with pytest.raises(ProtocolViolationError, match=r"CHECK constraint positive \(amount > 0 AND p <> 'x'\) is violated by 3 row") as e:
                ts.write(bad, uri)
            errors[path] = e.value
            with pytest.raises(ProtocolViolationError, match=r"1 written row\(s\) do not match the replaceWhere condition .p = 'a'. ") as e:
                ts.write(good, uri, mode="overwrite", replace_where="p = 'a'")
            assert e.value.rule == "replaceWhere"
            assert txnlog.Table(uri).latest_version() == 0
            _assert_vacuum_leaves_only_the_table(uri)
            assert ts.write(good.where("p = 'a'"), uri, mode="overwrite", replace_where="p = 'a'") is not None
        assert sorted(r.id for r in ts.read(spark, uri).collect()) == [1, 2]
        assert all(f["path"].startswith("job-") == (path == "native") for f in _files(uri))
    assert errors["native"].rule == errors["python"].rule == "constraint:positive"


def test_check_constraints_and_replace_where_read_timestamps_in_utc_natively_in_any_session_zone(spark: Any, tmp_path: Path) -> None:
    """txnlog reads a CHECK constraint and a replaceWhere in UTC (as its Python writer and its file
    pruning do), whatever the session's zone: in a Los Angeles session, a row at 01:00 UTC on May
    2nd is on May 2nd natively as through the Python tasks, and one at 23:00 UTC on May 1st is not."""
    after = dt.datetime(2024, 5, 2, 1, tzinfo=dt.timezone.utc)  # 18:00 on May 1st in Los Angeles
    on_the_2nd = spark.createDataFrame([(1, after)], "id long, ts timestamp")
    on_the_1st = spark.createDataFrame([(2, after - dt.timedelta(hours=2))], "id long, ts timestamp")
    replacement = spark.createDataFrame([(3, after + dt.timedelta(hours=1))], "id long, ts timestamp")
    for path in ("native", "python"):
        uri = str(tmp_path / path)
        zone = {NATIVE_WRITE_CONF: "auto" if path == "native" else "false", "spark.sql.session.timeZone": "America/Los_Angeles"}
        with session_confs(spark, zone):
            ts.write(on_the_2nd, uri, properties={"delta.constraints.from_may_2nd": "CAST(ts AS DATE) >= DATE'2024-05-02'"})
            with pytest.raises(ProtocolViolationError, match="from_may_2nd"):
                ts.write(on_the_1st, uri)
            ts.write(replacement, uri, mode="overwrite", replace_where="CAST(ts AS DATE) = DATE'2024-05-02'")
        assert [r.id for r in ts.read(spark, uri).collect()] == [3], path
        assert all(f["path"].startswith("job-") == (path == "native") for f in _files(uri))


def _identity_marks(uri: str) -> dict[str, int]:
    schema = txnlog.Table(uri).snapshot().table_configuration
    return {name: i.high_water_mark for name, i in schema.identity_columns.items() if i.high_water_mark is not None}


def test_identity_values_are_numbered_natively_unique_across_tasks_and_past_the_mark(spark: Any, tmp_path: Path) -> None:
    """GENERATED ALWAYS (start 10, step -3) and BY DEFAULT columns written by Spark's Parquet
    writer from 4 tasks, twice: every value unique, on the column's step, beyond the previous
    mark, given BY DEFAULT values kept; the marks are the furthest values."""
    uri = str(tmp_path / "t")
    txnlog.Table.create(uri, pa.schema([identity_column("id", start=10, step=-3), identity_column("ref", generated="by default"),
                                        ("v", pa.int64())]))
    first = spark.range(0, 1000, 1, 4).selectExpr("id as v", "if(id % 10 = 0, 5000 + id, null) as ref")
    ts.write(first, uri)
    marks = _identity_marks(uri)
    ts.write(spark.range(1000, 1600, 1, 3).selectExpr("id as v"), uri)
    rows = ts.read(spark, uri).collect()
    assert all(f["path"].startswith("job-") for f in _files(uri)), "the native path wrote the files"
    ids = [r.id for r in rows]
    assert len(rows) == 1600 and len(set(ids)) == 1600 and all((10 - i) % 3 == 0 and i <= 10 for i in ids)
    given = {r.v: r.ref for r in rows if r.v < 1000 and r.v % 10 == 0}
    assert given == {v: 5000 + v for v in range(0, 1000, 10)}
    refs = [r.ref for r in rows]
    assert None not in refs and len(set(refs)) == len(refs)
    second = [r.id for r in rows if r.v >= 1000]
    assert max(second) < marks["id"], "the second write's ids are past the first's mark"
    assert _identity_marks(uri)["id"] == min(ids)
    with pytest.raises(SchemaError, match="gives values for column 'id' .* a GENERATED ALWAYS identity column"):
        with ts.transaction(spark, uri) as tx:
            tx.write(spark.range(3).selectExpr("id", "id as v"))
    assert len(ts.read(spark, uri).collect()) == 1600


def test_an_identity_overflow_is_refused_natively_as_by_the_python_tasks(spark: Any, tmp_path: Path) -> None:
    df = spark.range(0, 50, 1, 2).selectExpr("id as v")
    errors = {}
    for path in ("native", "python"):
        uri = str(tmp_path / path)
        txnlog.Table.create(uri, pa.schema([identity_column("id", start=(1 << 63) - 40), ("v", pa.int64())]))
        with session_confs(spark, {NATIVE_WRITE_CONF: "auto" if path == "native" else "false"}):
            with pytest.raises(ProtocolViolationError, match="identity column 'id' of table .* overflows") as e:
                ts.write(df, uri)
        errors[path] = e.value
        assert txnlog.Table(uri).latest_version() == 0
        _assert_vacuum_leaves_only_the_table(uri)
    assert errors["native"].rule == errors["python"].rule == "identityColumns"


@pytest.mark.parametrize("zone", [pytest.param("UTC", marks=pytest.mark.soak), "America/Los_Angeles"])
def test_generated_columns_are_computed_and_checked_natively_as_by_the_python_tasks(delta_spark: Any, tmp_path: Path, zone: str) -> None:
    """A generated partition column (``CAST(ts AS DATE)``) and one over an identity column:
    computed where the rows lack them or give NULL, given values kept when right; the same
    table either way. A wrong given value is refused with the Python tasks' error, and nothing
    is kept. In a session whose zone is behind UTC the dates are still UTC's, natively too (a
    row at 03:00 UTC is on the day before in Los Angeles), and a value given in UTC is right."""
    schema = pa.schema([identity_column("id"), ("ts", pa.timestamp("us", tz="UTC")), ("v", pa.int64()),
                        generated_column("day", pa.date32(), "CAST(ts AS DATE)"), generated_column("twice", pa.int64(), "id * 2 + v")])
    start = dt.datetime(2026, 3, 1, 22, tzinfo=dt.timezone.utc)
    rows = [(start + dt.timedelta(hours=5 * i), i) for i in range(40)]
    lacking = delta_spark.createDataFrame(rows, "ts timestamp, v long").repartition(3)
    given = delta_spark.createDataFrame([(ts, v, ts.date() if v % 2 else None) for ts, v in rows], "ts timestamp, v long, day date")
    wrong = delta_spark.createDataFrame([(start, 1, start.date() + dt.timedelta(days=1))], "ts timestamp, v long, day date")
    tables, errors = {}, {}
    for path in ("native", "python"):
        uri = str(tmp_path / path)
        txnlog.Table.create(uri, schema, partition_by=["day"])
        with session_confs(delta_spark, {NATIVE_WRITE_CONF: "auto" if path == "native" else "false", "spark.sql.session.timeZone": zone}):
            ts.write(lacking, uri)
            ts.write(given, uri)
            with pytest.raises(ProtocolViolationError) as e:
                ts.write(wrong, uri)
        errors[path] = e.value
        assert txnlog.Table(uri).latest_version() == 2
        _assert_vacuum_leaves_only_the_table(uri)
        assert all(f["path"].startswith("job-") == (path == "native") for f in _files(uri))
        tables[path] = sorted((r.v, r.ts, r.day, r.twice - 2 * r.id) for r in ts.read(delta_spark, uri).collect())
        ids = [r.id for r in ts.read(delta_spark, uri).collect()]
        assert len(set(ids)) == len(ids) == 80
        partitions = {dict(f["partition_values"])["day"] for f in _files(uri)}
        assert partitions == {str(ts.date()) for ts, _ in rows}
    assert tables["native"] == tables["python"]
    seen = delta_spark.read.format("delta").load(str(tmp_path / "native")).collect()  # delta-spark reads the generated values
    assert sorted((r.v, r.ts.replace(tzinfo=None), r.day) for r in seen) == sorted((v, t.replace(tzinfo=None), d) for v, t, d, _ in tables["native"])
    assert [r[2] for r in tables["native"]] == sorted([ts.date() for ts, _ in rows] * 2)
    assert all(r[3] == r[0] for r in tables["native"]), "twice = id * 2 + v"
    assert str(errors["native"]).replace("native", "python") == str(errors["python"])
    assert "column 'day'" in str(errors["native"]) and "2026-03-02" in str(errors["native"])
    assert errors["native"].rule == errors["python"].rule == "generatedColumns"
    # An expression Spark cannot evaluate is refused before any file is written, naming the column.
    unknown = str(tmp_path / "unknown")
    txnlog.Table.create(unknown, pa.schema([("v", pa.int64()), generated_column("g", pa.int64(), "no_such_function(v)")]))
    with pytest.raises(SchemaError, match="generation expression 'no_such_function.v.' of column 'g'") as refused:
        ts.write(lacking.select("v"), unknown)
    assert refused.value.field == "g" and txnlog.Table(unknown).latest_version() == 0
    assert [p for p in Path(unknown).rglob("*") if p.is_file() and "_delta_log" not in p.parts] == []


def test_an_empty_write_leaves_no_file(spark: Any, tmp_path: Path) -> None:
    """Also where Spark optimizes the plan to no rows (``limit(0)``) and so counts nothing (the
    NaN count of a double column)."""
    uri = str(tmp_path / "t")
    assert ts.write(spark.createDataFrame([], "id long, v double"), uri) == 0
    assert ts.write(spark.range(3).selectExpr("id", "id / 2 as v").limit(0), uri) is None
    assert txnlog.Table(uri).snapshot().num_files == 0
    assert [p for p in Path(uri).rglob("*") if p.is_file() and "_delta_log" not in p.parts] == []


def test_a_failed_job_leaves_only_files_vacuum_removes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ts.write(spark.range(5).selectExpr("id", "'x' as s"), uri)
    failing = spark.range(0, 20_000, 1, 4).selectExpr("if(id = 19999, raise_error('boom'), id) as id", "'y' as s")
    with pytest.raises(SparkJobError, match="boom"):
        ts.write(failing, uri)
    assert txnlog.Table(uri).latest_version() == 0
    _assert_vacuum_leaves_only_the_table(uri)


def _assert_vacuum_leaves_only_the_table(uri: str) -> None:
    table = txnlog.Table(uri)
    live = {p for p in table.snapshot().files().column("path").to_pylist()}
    vacuum(table, retention=0, force=True)
    left = {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file() and "_delta_log" not in p.parts}
    assert left == live


CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[2])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    import txnlog.spark as ts
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    df = spark.range(0, 400_000_000, 1, 8).selectExpr("id", "repeat(cast(id as string), 8) as s")
    ts.write(df, sys.argv[1])
""")


def kill_while_staging(tmp_path: Path, uri: str, child_script: str, staged_glob: str) -> None:
    """Run ``child_script`` (given the table's URI and the repository) in a process of its own,
    and kill it with SIGKILL (its JVM with it) once a non-empty file matches ``staged_glob``
    below ``uri``; then check that the kill left such files."""
    script = tmp_path / "child.py"
    script.write_text(child_script)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    child = subprocess.Popen([sys.executable, str(script), uri, str(REPO_ROOT)], start_new_session=True, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if [p for p in Path(uri).glob(staged_glob) if p.stat().st_size > 0]:
                break
            assert child.poll() is None, "the child ended before it wrote"
            time.sleep(0.5)
        else:
            pytest.fail("the child's job wrote no file in 300 s")
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    time.sleep(1)
    assert list(Path(uri).glob(staged_glob)), "the kill left staged files"


@pytest.mark.soak
def test_a_killed_job_leaves_only_files_vacuum_removes(spark: Any, tmp_path: Path) -> None:
    """A process writing natively is killed with SIGKILL (its JVM with it) while its tasks write:
    nothing is committed, and vacuum removes every file the job left."""
    uri = str(tmp_path / "t")
    ts.write(spark.range(5).selectExpr("id", "'x' as s"), uri)
    kill_while_staging(tmp_path, uri, CHILD, "job-*/_temporary/**/*.parquet")
    assert txnlog.Table(uri).latest_version() == 0
    _assert_vacuum_leaves_only_the_table(uri)


NARROWED = pa.schema([("id", pa.int32()), ("small", pa.int16()), ("f", pa.float32()), ("exact", pa.float64()),
                      ("amount", pa.decimal128(6, 2)), ("wide", pa.decimal128(22, 2))])
NARROWED_ROWS = "id long, small int, f double, exact long, amount decimal(10,3), wide long"


def test_narrowing_casts_are_written_natively_and_refused_as_the_python_tasks_refuse(spark: Any, tmp_path: Path) -> None:
    """A DataFrame of wider types than the table's (Python ints arrive as longs): values that
    fit are written natively, equal to the Python tasks' table; each value the cast would change
    (out of an int's or a short's range, past a double's exact integers, rounded or out of a
    decimal's precision) is refused by both with the same error naming the column, and nothing
    is kept. A double narrowed to a float rounds, as Arrow's cast does."""
    fits = spark.createDataFrame([(1, -32768, 0.1, 1 << 53, decimal.Decimal("1234.560"), 1 << 62),
                                  (-(1 << 31), 32767, 1e300, -(1 << 53), decimal.Decimal("-0.010"), None),
                                  (None, None, float("nan"), None, None, -5)], NARROWED_ROWS)

    def history(uri: str) -> None:
        txnlog.Table.create(uri, NARROWED)
        ts.write(fits, uri)

    native, python = _both(spark, tmp_path, history)
    assert _stats_by_file(native) == _stats_by_file(python)
    def rows(uri: str) -> list[str]:
        return sorted(repr(r) for r in txnlog.Table(uri).snapshot().to_arrow().to_pylist())  # repr: NaN equals NaN

    assert rows(native) == rows(python)
    kept = {r["small"]: r for r in txnlog.Table(native).snapshot().to_arrow().to_pylist()}
    assert kept[32767]["f"] == float("inf") and kept[32767]["amount"] == decimal.Decimal("-0.01")  # 1e300 past a float's range
    assert kept[-32768]["f"] == float(np.float32(0.1)) and kept[-32768]["exact"] == float(1 << 53)

    good = (1, 1, 1.0, 1, decimal.Decimal("1.000"), 1)
    lossy = {
        "id": (1 << 31, r"from bigint to int32: 1 value\(s\) would change, e.g. 2147483648"),
        "small": (40_000, r"from int to int16: 1 value\(s\) would change, e.g. 40000"),
        "exact": ((1 << 53) + 1, r"from bigint to double: 1 value\(s\) would change, e.g. 9007199254740993"),
        "amount": (decimal.Decimal("1.005"), r"from decimal\(10,3\) to decimal128\(6, 2\): 1 value\(s\) would change, e.g. 1.005"),
    }
    for name, (value, native_text) in lossy.items():
        index = NARROWED.names.index(name)
        rows = spark.createDataFrame([good, good[:index] + (value,) + good[index + 1:]], NARROWED_ROWS)
        errors = {}
        for uri, python_path in ((native, False), (python, True)):
            with session_confs(spark, {NATIVE_WRITE_CONF: "false" if python_path else "auto"}):
                with pytest.raises(SchemaError, match=f"values of column '{name}' cannot be cast safely") as e:
                    ts.write(rows, uri)
            errors[uri] = e.value
            assert txnlog.Table(uri).latest_version() == 1
        assert errors[native].field == errors[python].field == name
        assert re.search(native_text, str(errors[native])), errors[native]
    with pytest.raises(SchemaError, match="values of column 'amount' cannot be cast safely"):  # past the precision
        ts.write(spark.createDataFrame([good[:4] + (decimal.Decimal("12345.000"),) + good[5:]], NARROWED_ROWS), native)
    _assert_vacuum_leaves_only_the_table(native)
