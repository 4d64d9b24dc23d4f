"""Per-file statistics: which columns, and valid bounds for every type Delta keeps min/max for."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnlog.errors import InvalidTablePropertyError
from txnlog.file_facts import parse_column_path, physical_path, stats_columns
from txnlog.schema import FIELD_METADATA_KEY
from txnlog.write.stats import (
    MAX_TIE_BREAKER,
    PARQUET_STATISTICS_LIMIT,
    STRING_PREFIX_LENGTH,
    StatsCollector,
    file_stats,
    truncate_max_string,
)

UTC = dt.timezone.utc


def parse(stats: str) -> dict[str, Any]:
    """Decimals stay exact: they are JSON numbers with the column's scale."""
    return json.loads(stats, parse_float=Decimal)


# --- which columns -----------------------------------------------------------------------------

WIDE = pa.schema(
    [
        ("a", pa.int64()),
        ("s", pa.struct([("x", pa.int32()), ("inner", pa.struct([("y", pa.string()), ("z", pa.date32())]))])),
        ("tags", pa.list_(pa.string())),
        ("part", pa.string()),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("b", pa.float64()),
    ]
)
ALL_LEAVES = [("a",), ("s", "x"), ("s", "inner", "y"), ("s", "inner", "z"), ("tags",), ("m",), ("b",)]


def test_stats_columns_default_is_every_leaf_up_to_32_without_partition_columns() -> None:
    assert stats_columns(WIDE, {}, ["part"]) == ALL_LEAVES
    many = pa.schema([(f"c{i}", pa.int32()) for i in range(40)])
    assert stats_columns(many, {}, []) == [(f"c{i}",) for i in range(32)]


@pytest.mark.parametrize("n", [0, 1, 3, 6, 100])
def test_num_indexed_cols_counts_leaves_not_top_level_columns(n: int) -> None:
    assert stats_columns(WIDE, {"delta.dataSkippingNumIndexedCols": str(n)}, ["part"]) == ALL_LEAVES[:n]


def test_num_indexed_cols_minus_one_means_all() -> None:
    many = pa.schema([(f"c{i}", pa.int32()) for i in range(40)])
    assert len(stats_columns(many, {"delta.dataSkippingNumIndexedCols": "-1"}, [])) == 40


def test_num_indexed_cols_below_minus_one_is_rejected() -> None:
    with pytest.raises(InvalidTablePropertyError) as e:
        stats_columns(WIDE, {"delta.dataSkippingNumIndexedCols": "-2"}, [])
    assert e.value.key == "delta.dataSkippingNumIndexedCols"


def test_stats_columns_property_selects_exactly_those_in_schema_order() -> None:
    conf = {
        "delta.dataSkippingStatsColumns": "B, S.inner, part, nope",
        "delta.dataSkippingNumIndexedCols": "1",  # overridden by the explicit list
    }
    assert stats_columns(WIDE, conf, ["part"]) == [("s", "inner", "y"), ("s", "inner", "z"), ("b",)]


def test_parse_column_path_handles_backticks() -> None:
    assert parse_column_path("a.b") == ("a", "b")
    assert parse_column_path(" `a.b`.c ") == ("a.b", "c")
    assert parse_column_path("`we``ird`") == ("we`ird",)


# --- values --------------------------------------------------------------------------------


def test_stats_shape_and_values_for_each_type() -> None:
    t = pa.table(
        {
            "i": pa.array([3, None, -7], pa.int32()),
            "f": pa.array([1.5, 2.25, None], pa.float32()),
            "d": pa.array([dt.date(2024, 2, 29), dt.date(1969, 12, 31), None], pa.date32()),
            "dec": pa.array([Decimal("-5.670"), Decimal("12345.000"), Decimal("0.001")], pa.decimal128(10, 3)),
            "s": ["pear", "apple", None],
            "flag": [True, None, False],
            "raw": pa.array([b"\x00", None, b"\xff"]),
            "tags": [["a"], None, []],
            "m": pa.array([[("k", 1)], None, None], pa.map_(pa.string(), pa.int64())),
            "nothing": pa.nulls(3, pa.string()),
        }
    )
    stats = parse(file_stats(t, [(c,) for c in t.column_names]))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {"i": -7, "f": 1.5, "d": "1969-12-31", "dec": Decimal("-5.670"), "s": "apple"}
    assert stats["maxValues"] == {"i": 3, "f": 2.25, "d": "2024-02-29", "dec": Decimal("12345.000"), "s": "pear"}
    assert stats["nullCount"] == {
        "i": 1, "f": 1, "d": 1, "dec": 0, "s": 1, "flag": 1, "raw": 1, "tags": 1, "m": 2, "nothing": 3,
    }
    # Decimals are JSON numbers written with their scale, never through a float.
    assert '"dec":-5.670' in file_stats(t, [("dec",)])


def test_timestamps_have_millisecond_bounds_rounded_outward() -> None:
    values = [dt.datetime(2024, 1, 1, 0, 0, 0, 1_999, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 5, 123_001, tzinfo=UTC)]
    t = pa.table({"ts": pa.array(values, pa.timestamp("us", tz="UTC")), "ntz": pa.array([v.replace(tzinfo=None) for v in values], pa.timestamp("us"))})
    stats = parse(file_stats(t, [("ts",), ("ntz",)]))
    assert stats["minValues"] == {"ts": "2024-01-01T00:00:00.001Z", "ntz": "2024-01-01T00:00:00.001"}
    assert stats["maxValues"] == {"ts": "2024-01-01T00:00:05.124Z", "ntz": "2024-01-01T00:00:05.124"}


def test_timestamp_on_a_millisecond_is_not_rounded_and_other_units_work() -> None:
    t = pa.table({"ts": pa.array([1_700_000_000_123_000_000], pa.timestamp("ns", tz="UTC"))})
    stats = parse(file_stats(t, [("ts",)]))
    assert stats["minValues"]["ts"] == stats["maxValues"]["ts"] == "2023-11-14T22:13:20.123Z"


def test_nan_drops_bounds_and_infinities_drop_their_side() -> None:
    t = pa.table(
        {
            "with_nan": [1.0, float("nan"), None],
            "only_nan": [float("nan")] * 3,
            "pos_inf": [1.0, float("inf"), 2.0],
            "neg_inf": [float("-inf"), 3.0, 2.0],
        }
    )
    text = file_stats(t, [(c,) for c in t.column_names])
    stats = orjson.loads(text)  # strict JSON: no NaN/Infinity tokens
    assert "with_nan" not in stats["minValues"] and "with_nan" not in stats["maxValues"]
    assert "only_nan" not in stats["minValues"]
    assert stats["minValues"]["pos_inf"] == 1.0 and "pos_inf" not in stats["maxValues"]
    assert stats["maxValues"]["neg_inf"] == 3.0 and "neg_inf" not in stats["minValues"]
    assert stats["nullCount"] == {"with_nan": 1, "only_nan": 0, "pos_inf": 0, "neg_inf": 0}


def test_struct_leaves_nest_and_count_a_null_parent_as_null() -> None:
    t = pa.table({"s": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "b"}], pa.struct([("x", pa.int64()), ("y", pa.string())]))})
    stats = parse(file_stats(t, [("s", "x"), ("s", "y")]))
    assert stats["minValues"] == {"s": {"x": 1, "y": "a"}}
    assert stats["maxValues"] == {"s": {"x": 1, "y": "b"}}
    assert stats["nullCount"] == {"s": {"x": 2, "y": 1}}
    # A struct path stands for all its leaves.
    assert file_stats(t, [("s",)]) == file_stats(t, [("s", "x"), ("s", "y")])


def test_all_null_column_has_null_count_equal_to_records_and_no_bounds() -> None:
    t = pa.table({"a": pa.array([None, None], pa.int64()), "b": [1, 2]})
    stats = parse(file_stats(t, [("a",), ("b",)]))
    assert stats["nullCount"]["a"] == 2 == stats["numRecords"]
    assert "a" not in stats["minValues"] and "a" not in stats["maxValues"]


def test_column_missing_from_the_data_counts_as_all_null() -> None:
    t = pa.table({"b": [1, 2, 3]})
    stats = parse(file_stats(t, [("a",), ("b",)]))
    assert stats["nullCount"] == {"a": 3, "b": 0}


def test_empty_data() -> None:
    t = pa.table({"a": pa.array([], pa.int64())})
    assert parse(file_stats(t, [("a",)])) == {"numRecords": 0, "nullCount": {"a": 0}}


def test_physical_names_key_the_json() -> None:
    def meta(physical: str) -> dict[bytes, bytes]:
        return {FIELD_METADATA_KEY: orjson.dumps({"delta.columnMapping.physicalName": physical, "delta.columnMapping.id": 1})}

    schema = pa.schema(
        [pa.field("a", pa.int64(), metadata=meta("col-1")), pa.field("s", pa.struct([pa.field("x", pa.int64(), metadata=meta("col-3"))]), metadata=meta("col-2"))]
    )
    assert physical_path(schema, ("s", "x"), mapped=True) == ("col-2", "col-3")
    assert physical_path(schema, ("s", "x"), mapped=False) == ("s", "x")
    t = pa.table({"a": [1], "s": [{"x": 5}]}, schema=schema)
    stats = parse(file_stats(t, [("a",), ("s", "x")], mapped=True))
    assert stats["minValues"] == {"col-1": 1, "col-2": {"col-3": 5}}


def test_collector_over_batches_equals_stats_of_all_rows() -> None:
    t = pa.table({"a": [5, None, 1, 9, 3], "s": ["m", "z", None, "a", "q"], "f": [1.0, 2.0, None, float("nan"), 0.5]})
    columns = [("a",), ("s",), ("f",)]
    collector = StatsCollector(t.schema, columns)
    for batch in t.to_batches(max_chunksize=2):
        collector.update(batch)
    assert collector.to_json() == file_stats(t, columns)


# --- strings -------------------------------------------------------------------------------


def test_strings_keep_a_32_character_prefix_and_the_max_gets_a_tie_breaker() -> None:
    long_value = "é" * 40  # characters, not bytes, are counted
    t = pa.table({"s": [long_value, "a"]})
    stats = parse(file_stats(t, [("s",)]))
    assert stats["minValues"]["s"] == "a"
    assert stats["maxValues"]["s"] == "é" * STRING_PREFIX_LENGTH + MAX_TIE_BREAKER
    assert stats["maxValues"]["s"] > long_value
    short = pa.table({"s": ["b" * 40, "b" * 35]})
    assert parse(file_stats(short, [("s",)]))["minValues"]["s"] == "b" * 32


def test_max_truncation_extends_over_characters_the_tie_breaker_would_not_bound() -> None:
    # U+1F600 sorts above U+FFFD in UTF-8/code point order: cutting before it would be wrong.
    value = "a" * 32 + "\U0001F600\uffff" + "b" * 10
    bound = truncate_max_string(value)
    assert bound == "a" * 32 + "\U0001F600\uffff" + MAX_TIE_BREAKER
    assert bound is not None and bound >= value and bound.encode() >= value.encode()
    assert truncate_max_string("x" * 32 + "\U0001F600" * 40) is None  # no short bound: no max
    assert truncate_max_string("x" * 32 + "\U0001F600" * 5) == "x" * 32 + "\U0001F600" * 5  # kept whole


# --- property: every value lies within [min, max], null counts are exact ---------------------

_TS = st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999)  # years 1..9999
_DAYS = st.integers(min_value=-719_162, max_value=2_932_896)
_TEXT = (
    st.text(st.characters(exclude_categories=["Cs"]), max_size=70)
    # Long strings over characters around the tie-breaker U+FFFD, to exercise truncation.
    | st.text(st.sampled_from(["a", "\uffe0", "\ufffd", "\uffff", "\U0001F600", "\U0010FFFF"]), min_size=28, max_size=70)
)


@st.composite
def _tables(draw: Any) -> pa.Table:
    n = draw(st.integers(min_value=1, max_value=30))

    def column(strategy: Any) -> list[Any]:
        return draw(st.lists(st.none() | strategy, min_size=n, max_size=n))

    return pa.table(
        {
            "i": pa.array(column(st.integers(-(2**63), 2**63 - 1)), pa.int64()),
            "f": pa.array(column(st.floats(allow_nan=True, allow_infinity=True)), pa.float64()),
            "s": pa.array(column(_TEXT), pa.string()),
            "ts": pa.array(column(_TS), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "ntz": pa.array(column(_TS), pa.int64()).cast(pa.timestamp("us")),
            "d": pa.array(column(_DAYS), pa.int32()).cast(pa.date32()),
            "dec": pa.array(column(st.decimals(min_value=-10**6, max_value=10**6, places=3, allow_nan=False)), pa.decimal128(10, 3)),
        }
    )


def _as_comparable(column: str, value: Any) -> Any:
    """A JSON bound or a data value as something ordered like the column's values."""
    if column in ("ts", "ntz"):
        if isinstance(value, str):
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed.replace(tzinfo=None) if parsed.tzinfo else parsed
        return value.replace(tzinfo=None)
    if column == "d" and isinstance(value, str):
        return dt.date.fromisoformat(value)
    if column == "s":
        return value.encode()  # byte order, as Spark and Arrow compare strings
    if column == "f":
        return float(value)  # JSON text of a double parses back to the same double
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables())
def test_stats_are_valid_bounds_and_exact_counts(t: pa.Table) -> None:
    stats = parse(file_stats(t, [(c,) for c in t.column_names]))
    assert stats["numRecords"] == t.num_rows
    for name in t.column_names:
        values = t.column(name).to_pylist()
        present = [v for v in values if v is not None]
        assert stats["nullCount"][name] == len(values) - len(present)
        low, high = stats.get("minValues", {}).get(name), stats.get("maxValues", {}).get(name)
        has_nan = name == "f" and any(v != v for v in present)
        if has_nan:
            assert low is None and high is None, "a NaN row must not be excluded by a bound"
            continue
        for v in present:
            if low is not None:
                assert _as_comparable(name, low) <= _as_comparable(name, v)
            if high is not None:
                assert _as_comparable(name, v) <= _as_comparable(name, high)
        if not present:
            assert low is None and high is None
            continue
        # Bounds are only left out where they cannot be written.
        true_low = pc.min(t.column(name)).as_py()
        true_high = pc.max(t.column(name)).as_py()
        if name == "f":
            assert (low is None) == (true_low == float("inf") or true_low == float("-inf"))
            assert (high is None) == (true_high == float("inf") or true_high == float("-inf"))
        elif name == "s":
            assert low == true_low[:STRING_PREFIX_LENGTH]
            if len(true_high) <= STRING_PREFIX_LENGTH:
                assert high == true_high
            elif high is None:  # only when no short upper bound exists
                assert all(c >= MAX_TIE_BREAKER for c in true_high[STRING_PREFIX_LENGTH : 2 * STRING_PREFIX_LENGTH + 1])
            else:
                assert len(high) <= 2 * STRING_PREFIX_LENGTH + 1
        elif name in ("ts", "ntz"):
            assert low is not None
            # Rounding the max up to the next millisecond can leave year 9999: no bound then.
            assert (high is None) == (true_high.replace(tzinfo=None) > dt.datetime(9999, 12, 31, 23, 59, 59, 999_000))
        else:
            assert low is not None and high is not None
        if name in ("i", "dec", "d"):  # exact for types with no truncation
            assert _as_comparable(name, low) == true_low and _as_comparable(name, high) == true_high


# --- the writer's stats: string bounds from the Parquet footer -------------------------------


def _writer_tables() -> st.SearchStrategy[pa.Table]:
    """Rows with what string bounds from a footer could get wrong: nulls, strings past the
    32-character prefix and past the footer's size limit, code points above U+FFFD, struct
    leaves under null parents, lists, NaN."""
    text = st.one_of(
        st.none(),
        st.text(alphabet=st.sampled_from("ab\u00e9\ufffd\uffff\U0010ffff"), max_size=40),
        st.builds(lambda c, n: c * n, st.sampled_from("az\ufffd"), st.sampled_from([33, 2100, PARQUET_STATISTICS_LIMIT + 1])),
    )
    row = st.fixed_dictionaries({
        "s": text,
        "l": text,
        "st": st.one_of(st.none(), st.fixed_dictionaries({"x": text, "n": st.one_of(st.none(), st.integers(-5, 5))})),
        "tags": st.one_of(st.none(), st.lists(text, max_size=2)),
        "f": st.one_of(st.none(), st.sampled_from([0.5, -1.0, float("nan"), float("inf")])),
        "i": st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    })
    schema = pa.schema([("s", pa.string()), ("l", pa.large_string()), ("st", pa.struct([("x", pa.string()), ("n", pa.int32())])),
                        ("tags", pa.list_(pa.string())), ("f", pa.float64()), ("i", pa.int64())])
    return st.lists(row, min_size=1, max_size=30).map(lambda rows: pa.Table.from_pylist(rows, schema=schema))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_writer_tables(), st.integers(1, 7), st.sampled_from([None, "p"]))
def test_written_files_stats_equal_the_stats_computed_from_their_rows(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, t: pa.Table, chunk: int, partition: str | None,
) -> None:
    """The writer takes string bounds from the Parquet footer it writes; they must be exactly
    what Arrow compute gives on the same rows (``file_stats``), over several row groups (a
    flush every few rows) and with a partition column dropped from the files."""
    from txnlog.log.actions import Metadata, Protocol
    from txnlog.schema import arrow_to_delta_schema
    from txnlog.storage import open_store
    from txnlog.table_configuration import TableConfiguration
    from txnlog.write import parquet as parquet_writer
    from txnlog.write import write_data_files

    monkeypatch.setattr(parquet_writer, "_ROW_GROUP_BYTES", 1)  # every batch is a row group of its own
    if partition is not None:
        t = t.append_column("p", pa.array([i % 2 for i in range(t.num_rows)], pa.int64()))
    config = TableConfiguration.from_actions(
        Protocol(1, 2), Metadata("t", arrow_to_delta_schema(t.schema), (partition,) if partition else (), {}))
    root = tmp_path_factory.mktemp("stats")
    adds = write_data_files(open_store(str(root)), pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=chunk)),
                            table_configuration=config)
    columns = config.stats_columns_of(t.schema)
    for add in adds:
        rows = t if partition is None else t.filter(pc.equal(t.column("p"), int(add.partition_values["p"])))
        assert add.stats == file_stats(rows, columns), add.partition_values


# --- from a Parquet footer ---------------------------------------------------------------------


def _footer_table() -> pa.Table:
    cut = "y" * 30 + "\U0010ffff" * 3 + "c" * 10  # the cut max extends over characters above U+FFFD
    return pa.table({
        "i": pa.array([3, None, -5, 7, None], pa.int64()),
        "s": pa.array(["a" * 40, None, cut, "aé", "x" * 5000]),  # a value past the size Parquet writers keep in footers (parquet-java: 4 KiB)
        "dec": pa.array([Decimal("1.50"), Decimal("-3.25"), None, Decimal("0.00"), Decimal("99999999.99")], pa.decimal128(10, 2)),
        "big": pa.array([Decimal("12345678901234567890123456789.123456789"), None, Decimal("-1"), None, None], pa.decimal128(38, 9)),
        "day": pa.array([dt.date(2020, 1, 1), None, dt.date(1969, 5, 3), None, dt.date(9999, 12, 31)]),
        "ts": pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 1234, tzinfo=UTC), None, dt.datetime(1970, 1, 1, tzinfo=UTC), None, None],
                       pa.timestamp("us", tz="UTC")),
        "f": pa.array([0.0, -0.0, 2.5, None, 1.0]),
        "nan": pa.array([1.0, None, float("nan"), 3.0, 2.0]),
        "b": pa.array([b"x", None, b"y", b"", None]),
        "flag": pa.array([True, None, False, True, None]),
        "st": pa.array([{"x": 1, "y": {"z": "q"}}, None, {"x": None, "y": None}, {"x": 4, "y": {"z": None}}, None],
                       pa.struct([("x", pa.int32()), ("y", pa.struct([("z", pa.string())]))])),
        "l": pa.array([[1], None, [], [None], None], pa.list_(pa.int64())),
    })


@pytest.mark.parametrize("row_group_size", [2, 100])
def test_stats_from_a_parquet_footer_equal_the_writers_own(row_group_size: int) -> None:
    """The stats txnlog records for a file another writer wrote (from its footer, reading only
    what the footer cannot say) equal those its own writer records for the same rows: strings
    past the cut and past the footer's size limit, nested structs with null parents, decimals
    stored as integers and as bytes, NaN, -0.0, lists. Over one row group and several."""
    import io

    import pyarrow.parquet as pq

    from txnlog.write.stats import parquet_file_stats

    table = _footer_table()
    columns = [(n,) for n in table.column_names]
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=row_group_size, store_decimal_as_integer=True)
    expected = parse(file_stats(table, columns))
    assert "nan" not in expected["minValues"] and expected["maxValues"]["s"] == "y" * 30 + "\U0010ffff" * 3 + MAX_TIE_BREAKER
    buffer.seek(0)
    file = pq.ParquetFile(buffer)
    # Arrow's writer leaves NaN out of a footer's bounds (3.0 is the max here), so its footers are
    # not taken for floats even when the caller says NaN would show as the max (parquet-java's).
    nan_column = file.schema_arrow.get_field_index("nan")
    assert file.metadata.row_group(0).column(nan_column).statistics.max == (3.0 if row_group_size == 100 else 1.0)
    for nan_in_max in (False, True):
        assert parse(parquet_file_stats(file, table.schema, columns, nan_in_max=nan_in_max)) == expected
