"""The stats visitor: file skipping on partition values and min/max/nullCount stats.

Unit tests build FILES_SCHEMA tables by hand (stats JSON written with orjson). A hypothesis test
writes random data into random "files" the way a Delta writer would (see ``_writer_stats``) and
checks that skipping never drops a file holding a matching row (and that the row filter is exact).
deltalake, the independent writer and reader, checks the end-to-end answer; the conformance corpus
checks typed partitions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import deltalake
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txnlog
from txnlog.expressions import FilePredicate
from txnlog.file_facts import physical_names
from txnlog.schema import FIELD_METADATA_KEY

from .helpers import BASIC, files_table, kept, matching_rows, pred, stats

UTC = dt.timezone.utc

# --- comparisons on stats and partitions --------------------------------------------------------


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("region = 'EU'", ["f0", "f2"]),
        ("region <> 'EU'", ["f1"]),
        ("region != 'US'", ["f0", "f2"]),
        ("region IN ('US', 'APAC')", ["f1"]),
        ("region NOT IN ('US')", ["f0", "f2"]),
        ("region > 'F'", ["f1"]),
        ("id = 5", ["f0"]),
        ("id = 6", []),
        ("id < 8", ["f0"]),
        ("id <= 8", ["f0", "f2"]),
        ("id > 12", ["f1"]),
        ("id >= 12", ["f1", "f2"]),
        ("5 < id", ["f1", "f2"]),  # the literal on the left flips the operator
        ("id BETWEEN 6 AND 7", []),
        ("id BETWEEN 6 AND 8", ["f2"]),
        ("id IN (0, 21, 30)", []),
        ("id IN (3, 30)", ["f0"]),
        ("id <> 3", ["f0", "f1", "f2"]),
        ("region = 'EU' AND id > 10", ["f2"]),
        ("region = 'US' OR id < 2", ["f0", "f1"]),
        ("(region = 'US' AND id < 11) OR (region = 'EU' AND id > 12)", []),
        ("name = 'banana'", ["f0"]),
        ("name >= 'orange'", ["f1"]),
        ("name < 'apple'", []),
        ("name LIKE 'k%'", ["f1"]),
        ("name LIKE 'b%'", ["f0"]),
        ("name LIKE 'z%'", []),
        ("name NOT LIKE 'a%'", ["f0", "f1"]),  # the all-NULL file has no value to match
        ("name IS NULL", ["f0", "f2"]),
        ("name IS NOT NULL", ["f0", "f1"]),
        ("TRUE", ["f0", "f1", "f2"]),
        ("FALSE", []),
        ("1 = 1", ["f0", "f1", "f2"]),
        ("1 = 2", []),
    ],
)
def test_file_skipping(sql: str, expected: list[str]) -> None:
    assert kept(pred(sql), BASIC) == expected


def test_may_match_returns_one_boolean_per_file() -> None:
    mask = pred("id > 10").may_match(BASIC)
    assert isinstance(mask, pa.BooleanArray) and mask.null_count == 0
    assert mask.to_pylist() == [False, True, True]
    assert len(pred("id > 10").may_match(BASIC.slice(0, 0))) == 0


def test_not_is_pushed_down_rather_than_inverting_the_mask() -> None:
    # f0 holds ids 1..5: it may match both x < 3 and NOT (x < 3). Inverting "may match" would
    # drop it for the NOT and lose rows 3, 4, 5.
    assert kept(pred("id < 3"), BASIC) == ["f0"]
    assert kept(pred("NOT (id < 3)"), BASIC) == ["f0", "f1", "f2"]
    assert kept(pred("NOT (id < 9)"), BASIC) == ["f1", "f2"]
    assert kept(pred("NOT (region = 'EU' AND id < 9)"), BASIC) == ["f1", "f2"]  # De Morgan
    assert kept(pred("NOT (region = 'US' OR id > 5)"), BASIC) == ["f0"]
    assert kept(pred("NOT NOT (id > 12)"), BASIC) == ["f1"]
    assert kept(pred("NOT (id BETWEEN 1 AND 20)"), BASIC) == []
    assert kept(pred("NOT (name IS NULL)"), BASIC) == ["f0", "f1"]
    assert kept(pred("NOT (name LIKE 'k%')"), BASIC) == ["f0", "f1"]


def test_comparisons_with_null_are_never_true() -> None:
    data = pa.table({"region": ["EU", None], "id": [1, None]})
    schema = pa.schema([("region", pa.string()), ("id", pa.int64())])
    for sql in ("id = NULL", "NOT (id = NULL)", "id <> NULL", "id NOT IN (1, NULL)", "NOT (id IN (2, NULL))",
                "NULL", "NOT NULL", "region = NULL OR id = NULL"):
        p = FilePredicate(sql, schema, ["region"])
        assert kept(p, BASIC) == [], sql
        assert matching_rows(p, data) == [], sql
    # NULL in an IN list does not stop a non-null match.
    p = FilePredicate("id IN (1, NULL)", schema, ["region"])
    assert matching_rows(p, data) == [0]
    assert kept(p, BASIC) == ["f0"]


def test_null_rows_do_not_match_comparisons_or_their_negation() -> None:
    # f0 has only NULL partition values: neither region = 'EU' nor its negation holds there.
    files = files_table([({"region": None}, None), ({}, None), ({"region": "EU"}, None)])
    assert kept(pred("region = 'EU'"), files) == ["f2"]
    assert kept(pred("NOT (region = 'EU')"), files) == []
    assert kept(pred("region IS NULL"), files) == ["f0", "f1"]  # a missing key is NULL
    assert kept(pred("region IS NOT NULL"), files) == ["f2"]
    assert kept(pred("region <=> NULL"), files) == ["f0", "f1"]
    assert kept(pred("region IS DISTINCT FROM 'EU'"), files) == ["f0", "f1"]


def test_null_count_drives_is_null() -> None:
    files = files_table(
        [
            ({}, stats(3, {"id": 1}, {"id": 3}, {"id": 0})),
            ({}, stats(3, {"id": 1}, {"id": 1}, {"id": 2})),
            ({}, stats(3, {}, {}, {"id": 3})),  # all NULL: writers leave min/max out
            ({}, {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3}}),  # no nullCount
            ({}, None),
        ]
    )
    assert kept(pred("id IS NULL", []), files) == ["f1", "f2", "f3", "f4"]
    assert kept(pred("id IS NOT NULL", []), files) == ["f0", "f1", "f3", "f4"]
    assert kept(pred("id = 1", []), files) == ["f0", "f1", "f3", "f4"]
    assert kept(pred("id <> 1", []), files) == ["f0", "f3", "f4"]  # f1: the only non-null value is 1
    assert kept(pred("id NOT IN (1, 7)", []), files) == ["f0", "f3", "f4"]


def test_empty_files_never_match() -> None:
    files = files_table([({}, stats(0, {}, {}, {})), ({}, {"numRecords": 0})])
    assert kept(pred("id IS NULL", []), files) == []
    assert kept(pred("id > 0 OR name IS NULL", []), files) == []


def test_missing_or_unreadable_stats_mean_may_match() -> None:
    files = files_table(
        [
            ({}, None),
            ({}, ""),
            ({}, "  "),
            ({}, "{not json"),
            ({}, {"numRecords": 4}),
            ({}, {"numRecords": 4, "maxValues": {"id": 200}}),  # no min
            ({}, {"numRecords": 4, "minValues": {"id": "a string"}, "maxValues": {"id": 1}}),
            ({}, '{"numRecords": 4,\n "minValues": {"id": 100},\n "maxValues": {"id": 200}}'),  # pretty-printed
            ({}, stats(4, {"id": 100}, {"id": 200}, {"id": 0})),
        ]
    )
    assert kept(pred("id < 50", []), files) == ["f0", "f1", "f2", "f3", "f4", "f5", "f6"]


def test_long_in_lists() -> None:
    # Long lists are checked against stats as one [min, max] range, on partitions exactly.
    files = files_table(
        [({"region": str(i)}, stats(1, {"id": 10 * i}, {"id": 10 * i + 5}, {"id": 0})) for i in range(10)]
    )
    evens = ", ".join(str(v) for v in range(0, 80, 2))  # 40 values: 0 to 78
    assert kept(pred(f"id IN ({evens})"), files) == [f"f{i}" for i in range(8)]
    assert kept(pred(f"id IN ({evens}) AND id > 50"), files) == ["f5", "f6", "f7"]
    assert kept(pred(f"region IN ({', '.join(repr(str(v)) for v in range(0, 8, 2))}, '99')"), files) == [
        "f0", "f2", "f4", "f6"
    ]
    assert kept(pred(f"id NOT IN ({evens})"), files) == [f"f{i}" for i in range(10)]
    single = files_table([({}, stats(2, {"id": 4}, {"id": 4}, {"id": 0}))] * 2)
    assert kept(pred(f"id NOT IN ({evens})"), single) == []


def test_one_bad_stats_string_among_many_costs_only_that_file() -> None:
    good = [({}, stats(2, {"id": i}, {"id": i + 1}, {"id": 0})) for i in range(0, 2000, 2)]
    files = files_table(good[:500] + [({}, '{"numRecords": 2, "minValues": {"id": NaN}}')] + good[500:])
    assert kept(pred("id = 7", []), files) == ["f3", "f500"]


# --- stats that are not exact ----------------------------------------------------------------------


def test_string_max_is_an_inclusive_prefix_bound() -> None:
    # Writers truncate string stats: a max of 'abc' may stand for 'abcz...'.
    files = files_table(
        [
            ({}, stats(2, {"name": "abc"}, {"name": "abc"}, {"name": 0})),
            ({}, stats(2, {"name": "bb"}, {"name": "bb\uffff"}, {"name": 0})),  # tie-breaker style
        ]
    )
    assert kept(pred("name = 'abcz'", []), files) == ["f0"]
    assert kept(pred("name > 'abc'", []), files) == ["f0", "f1"]
    assert kept(pred("name >= 'abd'", []), files) == ["f1"]
    assert kept(pred("name < 'abc'", []), files) == []
    assert kept(pred("name <> 'abc'", []), files) == ["f0", "f1"]
    assert kept(pred("name = 'bc'", []), files) == []
    assert kept(pred("name LIKE 'ab%'", []), files) == ["f0"]
    # 'bb😀' sorts after 'bb\uffff' in UTF-8: U+FFFF is no upper bound for what follows 'bb'.
    assert kept(pred("name = 'bb😀'", []), files) == ["f1"]
    assert kept(pred("name LIKE 'bb😀%'", []), files) == ["f1"]
    assert matching_rows(pred("name = 'bb😀'", []), pa.table({"name": ["bb😀", "bb"]})) == [0]


def test_timestamp_stats_are_widened_by_a_millisecond() -> None:
    # The row 00:00:00.123456 is written with max '...00.123Z' (truncated to milliseconds).
    files = files_table([({}, stats(1, {"ts": "2020-01-01T00:00:00.123Z"}, {"ts": "2020-01-01T00:00:00.123Z"}, {"ts": 0}))])
    assert kept(pred("ts > TIMESTAMP '2020-01-01 00:00:00.123400'", []), files) == ["f0"]
    assert kept(pred("ts = TIMESTAMP '2020-01-01T00:00:00.123456Z'", []), files) == ["f0"]
    assert kept(pred("ts <> TIMESTAMP '2020-01-01 00:00:00.123'", []), files) == ["f0"]
    assert kept(pred("ts > TIMESTAMP '2020-01-01 00:00:00.124001'", []), files) == []
    assert kept(pred("ts < TIMESTAMP '2019-12-31 23:59:59'", []), files) == []
    # Offsets and naive strings (delta-rs writes timestamp_ntz stats with a space) both parse.
    offset = files_table([({}, stats(1, {"ts": "2020-01-01T02:00:00.000+02:00"}, {"ts": "2020-01-01T02:00:00.000+02:00"}, {"ts": 0}))])
    assert kept(pred("ts = TIMESTAMP '2020-01-01 00:00:00'", []), offset) == ["f0"]
    assert kept(pred("ts > TIMESTAMP '2020-01-01 01:00:00'", []), offset) == []
    ntz = pa.schema([("t", pa.timestamp("us"))])
    naive = files_table([({}, stats(1, {"t": "2020-01-01 05:00:00.000"}, {"t": "2020-01-01 05:00:00.000"}, {"t": 0}))])
    assert kept(FilePredicate("t > '2020-01-01 06:00:00'", ntz, []), naive) == []
    assert kept(FilePredicate("t >= '2020-01-01 05:00:00'", ntz, []), naive) == ["f0"]


def test_decimal_stats_written_as_doubles() -> None:
    # delta-rs writes decimal stats as doubles: 0.1 is not exact, yet for 15 digits or fewer the
    # nearest decimal is; beyond that, the double is only a bound a few ulps wide.
    files = files_table([({}, stats(1, {"amount": 0.1, "big": 0.1}, {"amount": 0.3, "big": 0.3}, {"amount": 0, "big": 0}))])
    schema = pa.schema([("amount", pa.decimal128(10, 2)), ("big", pa.decimal128(30, 20))])

    def check(sql: str, expected: list[str]) -> None:
        assert kept(FilePredicate(sql, schema, []), files) == expected, sql

    check("amount = 0.10", ["f0"])
    check("amount = 0.30", ["f0"])
    check("amount > 0.30", [])
    check("amount < 0.10", [])
    check("amount > 0.29", ["f0"])
    check("amount = 1", [])
    check("big = 0.3", ["f0"])
    check("big > 0.3", ["f0"])  # 0.3 as a double may stand for 0.30000000000000000001
    check("big > 0.30001", [])
    check("big < 0.09999", [])


def test_float_stats_leave_out_nan_so_not_equal_keeps_the_file() -> None:
    # delta-rs leaves NaN out of min/max; NaN <> 1.5 is true.
    files = files_table([({}, stats(2, {"price": 1.5}, {"price": 1.5}, {"price": 0}))])
    assert kept(pred("price <> 1.5", []), files) == ["f0"]
    assert kept(pred("price > 1.5", []), files) == []
    assert matching_rows(pred("price <> 1.5", []), pa.table({"price": [1.5, float("nan")]})) == [1]


def test_float32_stats_are_read_back_as_float32() -> None:
    # 0.1f is 0.100000001490116...: its JSON stat "0.1" read as a double would sit below it.
    schema = pa.schema([("f", pa.float32())])
    files = files_table([({}, stats(1, {"f": 0.1}, {"f": 0.1}, {"f": 0}))])
    literal = "0.10000000149011612"
    assert kept(FilePredicate(f"f >= {literal}", schema, []), files) == ["f0"]
    assert kept(FilePredicate(f"f = {literal}", schema, []), files) == ["f0"]
    assert matching_rows(FilePredicate(f"f >= {literal}", schema, []), pa.table({"f": pa.array([0.1], pa.float32())})) == [0]
    assert kept(FilePredicate("f > 0.2", schema, []), files) == []


def test_spark_nan_and_infinity_strings_in_stats() -> None:
    # Spark writes non-finite doubles as JSON strings; NaN as the max (it sorts last in Spark).
    files = files_table(
        [
            ({}, '{"numRecords": 2, "minValues": {"price": 1.0}, "maxValues": {"price": "NaN"}, "nullCount": {"price": 0}}'),
            ({}, '{"numRecords": 2, "minValues": {"price": "-Infinity"}, "maxValues": {"price": 0.5}, "nullCount": {"price": 0}}'),
            ({}, '{"numRecords": 2, "minValues": {"price": 7.0}, "maxValues": {"price": "Infinity"}, "nullCount": {"price": 0}}'),
        ]
    )
    assert kept(pred("price > 5", []), files) == ["f0", "f2"]
    assert kept(pred("price < 0", []), files) == ["f1"]
    assert kept(pred("price = 1", []), files) == ["f0"]


def test_stats_of_the_wrong_type_everywhere_stay_cheap_and_unknown() -> None:
    # A writer that wrote every id as a string: each file is unknown, and the bisection that
    # isolates bad documents stops early instead of reading 20,000 documents one by one.
    files = files_table([({}, {"numRecords": 1, "minValues": {"id": str(i)}, "maxValues": {"id": str(i)}})
                         for i in range(20_000)])
    assert pred("id = 1", []).may_match(files).to_pylist() == [True] * 20_000


def test_boolean_dates_and_structs() -> None:
    files = files_table(
        [
            ({}, stats(2, {"flag": False, "day": "2020-01-01", "s": {"a": 1}}, {"flag": False, "day": "2020-01-31", "s": {"a": 5}},
                       {"flag": 0, "day": 0, "s": {"a": 0, "b": 2}})),
            ({}, stats(2, {"flag": True, "day": "2021-01-01", "s": {"a": 10}}, {"flag": True, "day": "2021-01-01", "s": {"a": 10}},
                       {"flag": 0, "day": 0, "s": {"a": 0, "b": 0}})),
        ]
    )
    assert kept(pred("flag", []), files) == ["f1"]
    assert kept(pred("NOT flag", []), files) == ["f0"]
    assert kept(pred("flag IS TRUE", []), files) == ["f1"]
    assert kept(pred("flag IS NOT TRUE", []), files) == ["f0"]
    assert kept(pred("day = DATE '2020-01-15'", []), files) == ["f0"]
    assert kept(pred("day > '2020-06-01'", []), files) == ["f1"]
    assert kept(pred("s.a > 5", []), files) == ["f1"]
    assert kept(pred("S.A = 3", []), files) == ["f0"]
    assert kept(pred("s.b IS NULL", []), files) == ["f0"]
    assert kept(pred("s IS NULL", []), files) == ["f0", "f1"]  # no stats for a whole struct
    assert pred("s.a = 3", []).columns == {"s"}


# --- partition values ----------------------------------------------------------------------------


def test_typed_partition_values_are_parsed_from_their_serialization() -> None:
    schema = pa.schema(
        [
            ("i", pa.int32()),
            ("b", pa.bool_()),
            ("d", pa.date32()),
            ("t", pa.timestamp("us", tz="UTC")),
            ("n", pa.timestamp("us")),
            ("x", pa.decimal128(6, 2)),
            ("f", pa.float64()),
            ("s", pa.string()),
            ("v", pa.int64()),
        ]
    )
    parts = ["i", "b", "d", "t", "n", "x", "f", "s"]
    files = files_table(
        [
            ({"i": "-3", "b": "true", "d": "2020-02-29", "t": "2020-01-01 10:00:00", "n": "2020-01-01 10:00:00.5",
              "x": "1.50", "f": "2.5", "s": "a b"}, None),
            ({"i": "7", "b": "false", "d": "1969-12-31", "t": "2020-01-01T10:00:00.000001Z", "n": "2021-06-01 00:00:00",
              "x": "-0.01", "f": "-1E3", "s": ""}, None),
            ({"i": None, "b": "", "d": None, "t": None, "n": "", "x": None, "f": None, "s": None}, None),
        ]
    )

    def check(sql: str, expected: list[str]) -> None:
        assert kept(FilePredicate(sql, schema, parts), files) == expected, sql

    check("i = -3", ["f0"])
    check("i > 0", ["f1"])
    check("i IS NULL", ["f2"])
    check("b", ["f0"])
    check("NOT b", ["f1"])
    check("b IS NULL", ["f2"])  # an empty string is NULL for every type
    check("d = DATE '2020-02-29'", ["f0"])
    check("d < '1970-01-01'", ["f1"])
    check("t = TIMESTAMP '2020-01-01 10:00:00'", ["f0"])
    check("t > TIMESTAMP '2020-01-01 10:00:00'", ["f1"])
    check("t = TIMESTAMP '2020-01-01T10:00:00.000001Z'", ["f1"])
    check("n = TIMESTAMP_NTZ '2020-01-01 10:00:00.5'", ["f0"])
    check("n IS NULL", ["f2"])
    check("x = 1.5", ["f0"])
    check("x < 0", ["f1"])
    check("f = -1000", ["f1"])
    check("f >= 2.5", ["f0"])
    check("s = 'a b'", ["f0"])
    check("s IS NULL", ["f1", "f2"])  # Spark writes the empty string as NULL
    check("i = 7 AND s IS NULL", ["f1"])
    check("i = -3 OR d < '1970-01-01'", ["f0", "f1"])
    check("NOT (i = -3 OR d < '1970-01-01')", [])


def test_binary_partition_values() -> None:
    schema = pa.schema([("b", pa.binary())])
    # The text's UTF-8 bytes, as delta-spark and delta-rs read it: U+00FF is the bytes C3 BF.
    files = files_table([({"b": "\u0001\u0002"}, None), ({"b": "ab"}, None), ({"b": "\u00ff"}, None), ({"b": "\u0100"}, None)])
    assert kept(FilePredicate("b = X'0102'", schema, ["b"]), files) == ["f0"]
    assert kept(FilePredicate("b = 'ab'", schema, ["b"]), files) == ["f1"]
    assert kept(FilePredicate("b = X'C3BF'", schema, ["b"]), files) == ["f2"]
    assert kept(FilePredicate("b = X'FF'", schema, ["b"]), files) == []
    assert kept(FilePredicate("b = X'C480'", schema, ["b"]), files) == ["f3"]


def test_unparseable_partition_values_keep_the_file() -> None:
    schema = pa.schema([("i", pa.int32())])
    files = files_table([({"i": "2021.0"}, None), ({"i": "5"}, None), ({"i": "x"}, None)])
    assert kept(FilePredicate("i = 5", schema, ["i"]), files) == ["f0", "f1", "f2"]
    assert kept(FilePredicate("i = 6", schema, ["i"]), files) == ["f0", "f2"]


def test_column_mapping_uses_physical_names_for_stats_and_partitions() -> None:
    def field(name: str, t: pa.DataType, physical: str) -> pa.Field:
        meta = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": physical}
        return pa.field(name, t, metadata={FIELD_METADATA_KEY: orjson.dumps(meta)})

    schema = pa.schema(
        [
            field("Region", pa.string(), "col-r"),
            field("id", pa.int64(), "col-i"),
            field("s", pa.struct([field("a", pa.int64(), "col-a")]), "col-s"),
        ]
    )
    names = physical_names(schema, {"delta.columnMapping.mode": "name"})
    assert names == {"Region": "col-r", "id": "col-i", "s": "col-s"}
    assert physical_names(schema, {}) is None
    files = files_table(
        [
            ({"col-r": "EU"}, stats(1, {"col-i": 1, "col-s": {"col-a": 1}}, {"col-i": 1, "col-s": {"col-a": 1}}, {"col-i": 0})),
            ({"col-r": "US"}, stats(1, {"col-i": 9, "col-s": {"col-a": 9}}, {"col-i": 9, "col-s": {"col-a": 9}}, {"col-i": 0})),
        ]
    )
    assert kept(FilePredicate("region = 'EU'", schema, ["Region"], names), files) == ["f0"]
    assert kept(FilePredicate("id > 5", schema, ["Region"], names), files) == ["f1"]
    assert kept(FilePredicate("s.a < 5", schema, ["Region"], names), files) == ["f0"]
    p = FilePredicate("id > 5 AND s.a > 5", schema, ["Region"], names)
    logical = pa.table({"id": [1, 9], "s": [{"a": 1}, {"a": 9}]})
    physical = pa.table({"col-i": [1, 9], "col-s": [{"col-a": 1}, {"col-a": 9}]})
    assert logical.filter(p.row_filter()).num_rows == 1
    assert physical.filter(p.row_filter(physical=True)).column("col-i").to_pylist() == [9]


def test_snapshot_applies_column_mapping(conformance_dir: Path) -> None:
    snap = txnlog.Table(str(conformance_dir / "tables" / "table_with_column_mapping")).snapshot()
    assert snap.table_property(txnlog.properties.COLUMN_MAPPING_MODE) == "name"
    files = snap.files()
    part_field = snap.schema.field(snap.partition_columns[0])
    key = orjson.loads(part_field.metadata[FIELD_METADATA_KEY])["delta.columnMapping.physicalName"]
    values = pc.map_lookup(files.column("partition_values"), key, "first").to_pylist()
    for value in set(values):
        sql = f"`{part_field.name.upper()}` = '{value}'"
        got = snap.files(sql).column("path").to_pylist()
        assert sorted(got) == sorted(p for p, v in zip(files.column("path").to_pylist(), values) if v == value)


# --- the property: never drop a file that holds a matching row -------------------------------------

DATA_COLUMNS = {"id": pa.int64(), "name": pa.string(), "day": pa.date32(), "ts": pa.timestamp("us", tz="UTC")}
PARTITION_COLUMNS = {"k": pa.int32(), "c": pa.string(), "pd": pa.date32()}
PROPERTY_SCHEMA = pa.schema(list(PARTITION_COLUMNS.items()) + list(DATA_COLUMNS.items()))
ALPHABET = "abz\ufffd\uffff\U0001f600"
BASE_DAY = dt.date(2020, 1, 1)
BASE_TS = dt.datetime(2020, 1, 1, tzinfo=UTC)

_values: dict[str, st.SearchStrategy[Any]] = {
    "id": st.integers(-3, 8),
    "k": st.integers(-2, 3),
    "name": st.text(ALPHABET, min_size=0, max_size=4),
    "c": st.text(ALPHABET, min_size=1, max_size=3),  # an empty partition string would be NULL
    "day": st.integers(0, 20).map(lambda d: BASE_DAY + dt.timedelta(days=d)),
    "pd": st.integers(0, 3).map(lambda d: BASE_DAY + dt.timedelta(days=d)),
    "ts": st.integers(0, 200).map(lambda n: BASE_TS + dt.timedelta(microseconds=n * 997)),
}


def _nullable(column: str) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), _values[column], _values[column])


def _serialize_partition(column: str, value: Any) -> str | None:
    """Delta's partition value serialization."""
    if value is None:
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _writer_stats(rows: list[dict[str, Any]], prefix_length: int, max_style: str) -> dict[str, Any]:
    """Stats the way Delta writers produce them: nullCount per column, min/max over non-null values
    (left out when all are NULL), strings truncated to ``prefix_length`` characters (a truncated
    max plain, or followed by a U+FFFF or U+FFFD tie-breaker), timestamps truncated to milliseconds."""
    out: dict[str, Any] = {"numRecords": len(rows), "minValues": {}, "maxValues": {}, "nullCount": {}}
    for column in DATA_COLUMNS:
        values = [r[column] for r in rows if r[column] is not None]
        out["nullCount"][column] = len(rows) - len(values)
        if not values:
            continue
        low, high = min(values), max(values)
        if column == "name":
            if len(high) > prefix_length:
                high = high[:prefix_length] + ("" if max_style == "plain" else max_style)
            low = low[:prefix_length]
        elif column == "day":
            low, high = low.isoformat(), high.isoformat()
        elif column == "ts":
            low, high = (t.replace(microsecond=t.microsecond // 1000 * 1000) for t in (low, high))
            low, high = (t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" for t in (low, high))
        out["minValues"][column], out["maxValues"][column] = low, high
    return out


@st.composite
def _files(draw: st.DrawFn) -> list[tuple[dict[str, Any], list[dict[str, Any]], str | None]]:
    """Random files: partition values, rows (partition columns included), serialized stats."""
    prefix_length = draw(st.integers(1, 3))
    max_style = draw(st.sampled_from(["plain", "\uffff", "\ufffd"]))
    files = []
    for _ in range(draw(st.integers(1, 6))):
        partition = {c: draw(_nullable(c)) for c in PARTITION_COLUMNS}
        rows = [
            {**partition, **{c: draw(_nullable(c)) for c in DATA_COLUMNS}}
            for _ in range(draw(st.integers(0, 6)))
        ]
        with_stats = draw(st.booleans()) or draw(st.booleans())
        text = orjson.dumps(_writer_stats(rows, prefix_length, max_style)).decode() if with_stats else None
        files.append((partition, rows, text))
    return files


# A predicate is its SQL text and a pure-Python evaluation with SQL's three-valued logic.
Pred = tuple[str, Callable[[dict[str, Any]], bool | None]]

_PY_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_FLIP = {"=": "=", "<>": "<>", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _sql_literal(column: str, value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return f"'{value}'"
    return str(value)


def _and3(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or3(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _not3(a: bool | None) -> bool | None:
    return None if a is None else not a


def _compare3(a: Any, op: str, b: Any) -> bool | None:
    return None if a is None or b is None else _PY_OPS[op](a, b)


def _literals(column: str, pool: Sequence[Any]) -> st.SearchStrategy[Any]:
    """Literals for ``column``: random ones, and ones at or next to values in the data, where
    truncated string and timestamp stats are on the edge."""
    options = [_values[column]]
    if pool:
        seen = st.sampled_from(list(pool))
        options += [seen, seen]
        if column in ("name", "c"):
            options.append(st.tuples(seen, st.integers(0, 4)).map(lambda vk: vk[0][: vk[1]]))
            options.append(st.tuples(seen, st.sampled_from(ALPHABET)).map(lambda vc: vc[0] + vc[1]))
        if column == "ts":
            options.append(st.tuples(seen, st.integers(-1500, 1500)).map(lambda tu: tu[0] + dt.timedelta(microseconds=tu[1])))
    return st.one_of(options)


@st.composite
def _leaf(draw: st.DrawFn, pool: Mapping[str, Sequence[Any]]) -> Pred:
    kind = draw(st.sampled_from(["compare", "compare", "in", "null", "between", "like", "fraction"]))
    # Data columns twice: their stats are inexact, where skipping can go wrong.
    columns = {"like": ["name", "c"], "fraction": ["id", "k"]}.get(kind, [*PROPERTY_SCHEMA.names, *DATA_COLUMNS])
    column = draw(st.sampled_from(columns))
    ident = draw(st.sampled_from([column, column.upper(), f"`{column}`", f'"{column}"']))
    literal = _literals(column, pool[column])
    if kind == "compare":
        op = draw(st.sampled_from(sorted(_PY_OPS)))
        value = draw(st.one_of(literal, st.none()) if draw(st.integers(0, 9)) == 0 else literal)
        if draw(st.booleans()):
            return f"{ident} {op} {_sql_literal(column, value)}", lambda r: _compare3(r[column], op, value)
        return f"{_sql_literal(column, value)} {_FLIP[op]} {ident}", lambda r: _compare3(r[column], op, value)
    if kind == "in":
        values = draw(st.lists(st.one_of(st.none(), literal), min_size=1, max_size=4))

        def in3(r: dict[str, Any]) -> bool | None:
            v = r[column]
            if v is None:
                return None
            if v in [x for x in values if x is not None]:
                return True
            return None if None in values else False

        text = ", ".join(_sql_literal(column, v) for v in values)
        if draw(st.booleans()):
            return f"{ident} NOT IN ({text})", lambda r: _not3(in3(r))
        return f"{ident} IN ({text})", in3
    if kind == "null":
        if draw(st.booleans()):
            return f"{ident} IS NOT NULL", lambda r: r[column] is not None
        return f"{ident} IS NULL", lambda r: r[column] is None
    if kind == "between":
        low, high = draw(literal), draw(literal)
        between = lambda r: _and3(_compare3(r[column], ">=", low), _compare3(r[column], "<=", high))  # noqa: E731
        sql = f"{ident} BETWEEN {_sql_literal(column, low)} AND {_sql_literal(column, high)}"
        if draw(st.booleans()):
            return f"{ident} NOT BETWEEN {_sql_literal(column, low)} AND {_sql_literal(column, high)}", lambda r: _not3(between(r))
        return sql, between
    if kind == "like":
        prefix = draw(st.one_of(st.text(ALPHABET, max_size=3), literal))
        return f"{ident} LIKE '{prefix}%'", lambda r: None if r[column] is None else r[column].startswith(prefix)
    op = draw(st.sampled_from(sorted(_PY_OPS)))
    value = draw(st.one_of(st.integers(-3, 8), st.sampled_from(pool[column]) if pool[column] else st.integers(0, 1)))
    value += draw(st.sampled_from([-0.5, 0.5]))
    return f"{ident} {op} {value}", lambda r: _compare3(r[column], op, value)


def _combine(children: st.SearchStrategy[Pred]) -> st.SearchStrategy[Pred]:
    def both(op: str) -> st.SearchStrategy[Pred]:
        f3 = _and3 if op == "AND" else _or3
        return st.tuples(children, children).map(
            lambda ab: (f"({ab[0][0]}) {op} ({ab[1][0]})", lambda r: f3(ab[0][1](r), ab[1][1](r)))
        )

    negation = children.map(lambda a: (f"NOT ({a[0]})", lambda r: _not3(a[1](r))))
    return st.one_of(both("AND"), both("OR"), negation)


FileCase = tuple[dict[str, Any], list[dict[str, Any]], "str | None"]


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[FileCase], list[Pred]]:
    """Random files, then predicates whose literals often come from (or brush) their data."""
    files = draw(_files())
    pool = {c: sorted({r[c] for _, rows, _ in files for r in rows if r[c] is not None}) for c in PROPERTY_SCHEMA.names}
    return files, draw(st.lists(st.recursive(_leaf(pool), _combine, max_leaves=4), min_size=4, max_size=10))


def _skipping_never_drops_a_matching_file(case: tuple[list[FileCase], list[Pred]], partitioned: set[str]) -> None:
    files, predicates = case
    listing = files_table(
        [({c: _serialize_partition(c, v) for c, v in part.items() if c in partitioned}, text) for part, _, text in files]
    )
    rows = [r for _, file_rows, _ in files for r in file_rows]
    data = pa.Table.from_pylist(rows, schema=PROPERTY_SCHEMA)
    for sql, evaluate in predicates:
        # Columns not chosen as partition columns are data columns (without stats when they
        # are k, c or pd: still correct, just less selective).
        p = FilePredicate(sql, PROPERTY_SCHEMA, sorted(partitioned))

        # The row filter is exactly "the predicate is TRUE" under SQL's NULL semantics.
        assert matching_rows(p, data) == [i for i, r in enumerate(rows) if evaluate(r) is True], sql

        may = p.may_match(listing).to_pylist()
        for i, (_, file_rows, _) in enumerate(files):
            if any(evaluate(r) is True for r in file_rows):
                assert may[i], f"{sql}: file {i} holds a matching row but was skipped: {files[i]}"
            elif p.matches_partition_only() and file_rows:
                assert not may[i], f"{sql}: partition values are exact, yet file {i} was kept"


#: Each example parses up to ten predicates: the default suite takes 60 (4 s on a quiet machine), ``soak`` 500.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), partitioned=st.sets(st.sampled_from(sorted(PARTITION_COLUMNS))))
def test_skipping_never_drops_a_matching_file(case: tuple[list[FileCase], list[Pred]], partitioned: set[str]) -> None:
    _skipping_never_drops_a_matching_file(case, partitioned)


@pytest.mark.soak
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), partitioned=st.sets(st.sampled_from(sorted(PARTITION_COLUMNS))))
def test_skipping_never_drops_a_matching_file_long(case: tuple[list[FileCase], list[Pred]], partitioned: set[str]) -> None:
    _skipping_never_drops_a_matching_file(case, partitioned)


# --- against deltalake and the conformance corpus ---------------------------------------------------


def test_end_to_end_with_deltalake(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for batch in range(3):
        ids = list(range(batch * 10, batch * 10 + 10))
        deltalake.write_deltalake(
            uri,
            pa.table({"region": [["EU", "US", "APAC"][i % 3] for i in ids], "id": pa.array(ids, pa.int64()),
                      "name": [f"n{i:02d}" for i in ids]}),
            partition_by=["region"],
            mode="append",
        )
    dt_table = deltalake.DeltaTable(uri)
    snap = txnlog.Table(uri).snapshot()
    max_id = max(pa.table(dt_table.get_add_actions(flatten=True)).column("max.id").to_pylist())

    def theirs(sql: str) -> list[str]:
        return sorted(str(Path(u).relative_to(uri)) for u in dt_table.file_uris(file_pruning_predicate=sql))

    def ours(sql: str) -> list[str]:
        return sorted(snap.files(sql).column("path").to_pylist())

    assert len(ours("region = 'EU'")) == 3
    assert all(path.startswith("region=EU/") for path in ours("region = 'EU'"))
    assert ours(f"id > {max_id}") == []
    for sql in ["region = 'EU'", "region = 'EU' AND id > 10", "id > 10", f"id > {max_id}", "id BETWEEN 12 AND 14",
                "region IN ('US', 'APAC') OR id < 3", "region <> 'EU' AND id >= 25", "id IN (5, 27)",
                "name > 'n15'", "id IS NULL"]:
        assert ours(sql) == theirs(sql), sql

    # No false negatives on the real data: rows matching in the kept files are all the matching rows.
    everything = dt_table.to_pyarrow_table()
    for sql in ["region = 'EU' AND id > 10", "NOT (id < 25) OR region = 'US'", "name LIKE 'n1%'"]:
        p = snap.predicate(sql)
        kept_rows = 0
        for row in snap.files(sql).select(["path", "partition_values"]).to_pylist():
            part = pq.read_table(str(Path(uri) / row["path"]))
            region = dict(row["partition_values"])["region"]
            part = part.append_column("region", pa.array([region] * part.num_rows))
            kept_rows += part.filter(p.row_filter()).num_rows
        assert kept_rows == everything.filter(p.row_filter()).num_rows > 0, sql


CORPUS_TABLES = ["delta-2.2.0-partitioned-types", "delta-0.8.0-numeric-partition", "delta-0.8.0-null-partition",
                 "partition-type-primitives"]


@pytest.mark.parametrize("name", CORPUS_TABLES)
def test_corpus_partition_values(conformance_dir: Path, name: str) -> None:
    """For each partition column and each of its values, ``col = value`` keeps exactly the files
    whose serialized partition value is that value (``IS NULL`` for NULL)."""
    snap = txnlog.Table(str(conformance_dir / "tables" / name)).snapshot()
    files = snap.files()
    paths = files.column("path").to_pylist()
    assert snap.partition_columns
    for column in snap.partition_columns:
        raw = pc.map_lookup(files.column("partition_values"), column, "first").to_pylist()
        column_type = snap.schema.field(column).type
        assert len(set(raw)) > 1, f"{name}.{column} has a single value: a weak test"
        for value in set(raw):
            if value is None:
                sql = f"`{column}` IS NULL"
            elif pa.types.is_string(column_type):
                sql = f"`{column}` = '{value}'"
            else:
                sql = f"`{column}` = {value}"
            got = sorted(snap.files(sql).column("path").to_pylist())
            assert got == sorted(p for p, v in zip(paths, raw) if v == value), sql
            # NOT keeps the files with another, non-null value: NULL = x is not FALSE but NULL.
            negated = sorted(snap.files(f"NOT ({sql})").column("path").to_pylist())
            assert negated == sorted(p for p, v in zip(paths, raw) if v is not None and v != value), f"NOT ({sql})"


def test_snapshot_accepts_a_built_predicate(conformance_dir: Path) -> None:
    snap = txnlog.Table(str(conformance_dir / "tables" / "delta-2.2.0-partitioned-types")).snapshot()
    p = snap.predicate("c2 IN ('a', 'b')")
    assert snap.predicate(p) is p
    values = pc.map_lookup(snap.files(p).column("partition_values"), "c2", "first").to_pylist()
    assert sorted(values) == ["a", "b"]
