"""Types, statistics and pruning: a filter through the exported stats never drops a matching row."""

from __future__ import annotations

import datetime as dt
import decimal
import os

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import EqualTo, GreaterThan, GreaterThanOrEqual, IsNull, LessThan, LessThanOrEqual

import txnlog
from txnlog.iceberg import export
from txnlog.log.actions import AddFile

from .helpers import canon, delta_rows, iceberg_rows, iceberg_table

UTC = dt.timezone.utc

ALL_TYPES = pa.schema(
    [
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec", pa.decimal128(10, 3)),
        ("s", pa.string()),
        ("bin", pa.binary()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ("arr", pa.list_(pa.int64())),
        ("m", pa.map_(pa.string(), pa.int32())),
    ]
)


def test_all_primitive_types_and_timestamp_edges_read_back(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, ALL_TYPES)
    edges = [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    data = pa.table(
        {
            "b": [True, False, None],
            "i8": [-128, 127, None],
            "i16": [-32768, 32767, 0],
            "i32": [-(2**31), 2**31 - 1, 0],
            "i64": [-(2**63), 2**63 - 1, 0],
            "f32": [-1.5, 3.25, None],
            "f64": [float("-inf"), 1e300, 0.0],
            "dec": [decimal.Decimal("-9999999.999"), decimal.Decimal("1.500"), None],
            "s": ["", "ünïcödé ✓", "x" * 40],
            "bin": [b"\x00\xff", b"", None],
            "d": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)],
            "ts": edges,
            "ntz": [e.replace(tzinfo=None) for e in edges],
            "st": [{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}],
            "arr": [[1, 2], [], None],
            "m": [[("k", 1)], [], None],
        },
        schema=ALL_TYPES,
    )
    table.append(data)
    export(uri)
    got = iceberg_rows(uri)
    assert canon(got) == canon(delta_rows(uri))
    for f in ("ts", "ntz", "s", "dec", "d", "i64"):
        assert canon(got, [f]) == canon(data, [f])
    ice = iceberg_table(uri)
    types = {f.name: str(f.field_type) for f in ice.schema().fields}
    assert types["ts"] == "timestamptz" and types["ntz"] == "timestamp" and types["dec"] == "decimal(10, 3)" and types["bin"] == "binary"
    # Pruning on the edges finds the rows.
    assert iceberg_rows(uri, row_filter=EqualTo("ts", "9999-12-31T23:59:59.999999+00:00")).num_rows == 1
    # Strings compare as UTF-8 bytes: "ü" (0xC3...) sorts after "x"; the 40-char max was cut in the stats.
    assert sorted(iceberg_rows(uri, row_filter=GreaterThanOrEqual("s", "x" * 40)).column("s").to_pylist()) == ["x" * 40, "ünïcödé ✓"]
    assert iceberg_rows(uri, row_filter=LessThan("i64", -(2**62))).num_rows == 1


def _ms_stats_file(table: txnlog.Table, name: str, micros: list[int]) -> AddFile:
    """A data file whose stats say what delta-spark writes: timestamps cut to milliseconds."""
    ts = pa.array(micros, pa.timestamp("us", tz="UTC"))
    path = f"{name}.parquet"
    pq.write_table(pa.table({"id": list(range(len(micros))), "ts": ts}), f"{table.uri[len('file://'):]}/{path}")

    def ms(us: int) -> str:
        return (dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=us - us % 1000)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    stats = {"numRecords": len(micros), "minValues": {"id": 0, "ts": ms(min(micros))}, "maxValues": {"id": len(micros) - 1, "ts": ms(max(micros))}, "nullCount": {"id": 0, "ts": 0}}
    size = os.path.getsize(f"{table.uri[len('file://'):]}/{path}")
    return AddFile(path=path, partition_values={}, size=size, modification_time=0, stats=orjson.dumps(stats).decode())


def test_millisecond_truncated_timestamp_maximum_is_rounded_up(tmp_path):
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))]))
    top = 1_700_000_000_123_999  # .123999: Delta's stats say .123
    with table.transaction("WRITE") as txn:
        txn.add_files([_ms_stats_file(table, "f1", [1_700_000_000_000_000, top])])
    export(uri)
    data_file = next(iter(iceberg_table(uri).scan().plan_files())).file
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import TimestamptzType

    ts_id = iceberg_table(uri).schema().find_field("ts").field_id
    assert from_bytes(TimestamptzType(), data_file.upper_bounds[ts_id]) >= top
    # A reader pruning by a bound of .123000 would skip the file and lose the row.
    found = iceberg_rows(uri, row_filter=GreaterThan("ts", "2023-11-14T22:13:20.123500+00:00"))
    assert found.column("id").to_pylist() == [1]


values = st.integers(-50, 50)
names = st.sampled_from(["", "a", "ab", "b", "zz", "é", "a" * 33])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(st.tuples(st.one_of(st.none(), values), st.one_of(st.none(), names), st.sampled_from(["p", "q", None])), min_size=1, max_size=6), min_size=1, max_size=4),
    column=st.sampled_from(["n", "s", "part"]),
    op=st.sampled_from(["=", "<", "<=", ">", ">=", "null"]),
    pivot_n=values,
    pivot_s=names,
)
def test_filters_never_drop_a_matching_row(tmp_path_factory, batches, column, op, pivot_n, pivot_s):
    uri = str(tmp_path_factory.mktemp("h") / "t")
    schema = pa.schema([("n", pa.int64()), ("s", pa.string()), ("part", pa.string())])
    table = txnlog.Table.create(uri, schema, partition_by=["part"])
    for rows in batches:
        table.append(pa.table({"n": [r[0] for r in rows], "s": [r[1] for r in rows], "part": [r[2] for r in rows]}, schema=schema))
    export(uri)
    everything = delta_rows(uri)
    pivot = pivot_n if column == "n" else (pivot_s if column == "s" else "p")
    if op == "null":
        expr, mask = IsNull(column), pc.is_null(everything[column])
    else:
        build = {"=": EqualTo, "<": LessThan, "<=": LessThanOrEqual, ">": GreaterThan, ">=": GreaterThanOrEqual}[op]
        fn = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[op]
        expr, mask = build(column, pivot), pc.fill_null(fn(everything[column], pa.scalar(pivot, everything.schema.field(column).type)), False)
    expected = everything.filter(mask)
    got = iceberg_rows(uri, row_filter=expr)
    assert canon(got, ["n", "s", "part"]) == canon(expected, ["n", "s", "part"])


def test_stats_decoded_file_by_file_match_the_columnar_parse(tmp_path, monkeypatch):
    """A commit's few adds take the per-file JSON path; a rebuild's many take the Arrow one:
    both must give the same bounds and counts."""
    from txnlog.iceberg import datafiles
    from txnlog.iceberg.schema import iceberg_schema, partition_spec

    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, ALL_TYPES)
    rows = [
        {"b": True, "i8": 1, "i16": -2, "i32": 3, "i64": 2**40, "f32": 0.5, "f64": float("nan"), "dec": decimal.Decimal("12.345"), "s": "a" * 31,
         "bin": b"x", "d": dt.date(2020, 2, 29), "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 1000, tzinfo=UTC), "ntz": dt.datetime(1960, 5, 5, 1, 2, 3, 456789),
         "st": {"x": -7, "y": "q"}, "arr": [1], "m": [("a", 1)]},
        {k: None for k in ALL_TYPES.names},
    ]
    for row in rows:
        table.append(pa.Table.from_pylist([row], schema=ALL_TYPES))
    snap = table.snapshot()
    schema = iceberg_schema(snap.schema, snap.configuration, None, 0)
    spec = partition_spec(schema, (), [], 999)

    def as_dicts(files: list) -> list:
        return [(f.file_path, f.record_count, f.value_counts, f.null_value_counts, f.lower_bounds, f.upper_bounds) for f in files]

    by_file = as_dicts(datafiles.data_files(snap.files(), snap.metadata, schema, spec, snap.store))
    monkeypatch.setattr(datafiles, "_FEW_FILES", 0)
    by_column = as_dicts(datafiles.data_files(snap.files(), snap.metadata, schema, spec, snap.store))
    assert by_file == by_column
    assert any(lower for _, _, _, _, lower, _ in by_file)  # bounds were exported at all
