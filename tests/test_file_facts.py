"""txnlog.file_facts: partition values both ways, typed stats, stats columns, physical names."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pyarrow as pa
import pytest

from txnlog import file_facts
from txnlog.errors import SchemaError
from txnlog.log.file_actions import table_from_log_dicts
from txnlog.schema import FIELD_METADATA_KEY

UTC = dt.timezone.utc
TYPES = {
    "d": (pa.date32(), [dt.date(2024, 2, 29), None]),
    "ts": (pa.timestamp("us", tz="UTC"), [dt.datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=UTC), None]),
    "ntz": (pa.timestamp("us"), [dt.datetime(1999, 12, 31, 23, 59, 59), None]),
    "dec": (pa.decimal128(10, 3), [Decimal("-12.340"), None]),
    "bin": (pa.binary(), [b"\x00\x01\xc3\xa9\xe2\x82\xac", None]),
    "b": (pa.bool_(), [True, None]),
    "i": (pa.int32(), [-7, None]),
    "f": (pa.float64(), [float("inf"), None]),
    "s": (pa.string(), ["a/b=c", None]),
}


def _files(values: list[dict[str, str | None]]) -> pa.Table:
    return table_from_log_dicts([{"path": f"f{i}", "partitionValues": v, "size": 1} for i, v in enumerate(values)], "add")


def test_partition_values_round_trip_through_their_text_form() -> None:
    schema = pa.schema([(name, t) for name, (t, _) in TYPES.items()])
    texts = {name: [value for value, _dir in file_facts.partition_value_texts(pa.array(vals, t))] for name, (t, vals) in TYPES.items()}
    assert texts["ts"][0] == "2024-01-02T03:04:05.600000Z" and texts["ntz"][0] == "1999-12-31 23:59:59.000000"
    assert texts["dec"][0] == "-12.340" and texts["b"][0] == "true" and texts["f"][0] == "Infinity"
    assert texts["bin"][0] == "\x00\x01é€"  # the text whose UTF-8 bytes the value is, as delta-spark and delta-rs read it
    rows = [{name: texts[name][i] for name in TYPES} for i in range(2)]
    parsed = file_facts.parse_partition_values(_files(rows), schema, list(TYPES))
    assert parsed.schema == schema
    for name, (_t, vals) in TYPES.items():
        assert parsed.column(name).to_pylist() == vals, name


def test_a_binary_partition_value_that_is_not_utf8_is_refused_naming_the_column_and_value() -> None:
    # delta-spark and delta-rs read a binary partition value as its text's UTF-8 bytes: 0xFF has no text.
    with pytest.raises(SchemaError, match=r"binary partition value b'a\\xff' of column 'key' is not UTF-8") as caught:
        file_facts.partition_value_texts(pa.array([b"ok", b"a\xff"], pa.binary()), "key")
    assert caught.value.field == "key"


def test_partition_value_text_forms_other_writers_use() -> None:
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("s", pa.string()), ("i", pa.int64())])
    files = _files([{"ts": "2021-01-01 00:00:00", "s": "", "i": " 5"}, {"ts": "2021-01-01T00:00:00.000Z", "s": None, "i": "x"}])
    parsed = file_facts.parse_partition_values(files, schema, ["ts", "s", "i"])
    assert parsed.column("ts").to_pylist() == [dt.datetime(2021, 1, 1, tzinfo=UTC)] * 2
    assert parsed.column("s").to_pylist() == [None, None]  # "" is NULL, as the protocol says
    assert parsed.column("i").to_pylist() == [5, None]  # unparseable: null (and logged)


def test_parse_stats_types_every_leaf_as_its_column() -> None:
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("dec", pa.decimal128(6, 2)), ("s", pa.struct([("x", pa.float32())])), ("p", pa.string())])
    stats = [
        {"numRecords": 3, "minValues": {"id": 1, "d": "2024-01-01", "ts": "2024-01-01T00:00:00.000Z", "dec": 1.25, "s": {"x": 0.5}},
         "maxValues": {"id": 9, "d": "2024-01-03", "ts": "2024-01-02T00:00:00.000Z", "dec": 9.99, "s": {"x": 1.5}},
         "nullCount": {"id": 0, "d": 1, "ts": 0, "dec": 0, "s": {"x": 2}}},
        None,
        {"numRecords": "many"},
    ]
    files = table_from_log_dicts(
        [{"path": f"f{i}", "partitionValues": {"p": "a"}, "size": 1, **({"stats": orjson.dumps(s).decode()} if s else {})} for i, s in enumerate(stats)],
        "add",
    )
    target = file_facts.table_stats_type(schema, ["p"], {})
    parsed = file_facts.parse_stats(files, target)
    assert target.field("minValues").type == pa.struct([("id", pa.int64()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
                                                       ("dec", pa.decimal128(6, 2)), ("s", pa.struct([("x", pa.float32())]))])
    first = parsed[0].as_py()
    assert first["minValues"]["d"] == dt.date(2024, 1, 1) and first["maxValues"]["dec"] == Decimal("9.99")
    assert first["nullCount"]["s"]["x"] == 2 and first["numRecords"] == 3
    assert parsed[1].as_py() is None and parsed[2].as_py() is None  # missing, and unparseable: unknown
    assert file_facts.num_records(files) == 3


def test_stats_columns_take_quoted_names_and_physical_names_follow_column_mapping() -> None:
    def meta(name: str, i: int) -> dict[bytes, bytes]:
        return {FIELD_METADATA_KEY: orjson.dumps({"delta.columnMapping.physicalName": name, "delta.columnMapping.id": i})}

    schema = pa.schema([pa.field("a.b", pa.int64(), metadata=meta("col-1", 1)),
                        pa.field("s", pa.struct([pa.field("x", pa.int64(), metadata=meta("col-3", 3))]), metadata=meta("col-2", 2))])
    conf = {"delta.dataSkippingStatsColumns": "`a.b`, s.x", "delta.columnMapping.mode": "id"}
    assert file_facts.stats_columns(schema, conf, []) == [("a.b",), ("s", "x")]
    assert file_facts.physical_path(schema, ("s", "x"), mapped=True) == ("col-2", "col-3")
    assert file_facts.physical_names(schema, conf) == {"a.b": "col-1", "s": "col-2"}
    assert file_facts.physical_schema(schema, True).field("col-2").type.field(0).metadata == {b"PARQUET:field_id": b"3"}
    stats_type = file_facts.table_stats_type(schema, [], conf)
    assert stats_type.field("maxValues").type.names == ["col-1", "col-2"]


def test_file_keys_add_the_deletion_vector_id() -> None:
    dv = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 4, "sizeInBytes": 1, "cardinality": 1}
    files = table_from_log_dicts([{"path": "a", "size": 1}, {"path": "a", "size": 1, "deletionVector": dv}], "add")
    assert file_facts.file_keys(files).to_pylist() == ["a", "a\x00uab@4"]
