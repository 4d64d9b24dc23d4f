"""The data-file writer, checked by committing its files by hand and reading them with delta-rs."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")

from txnlog.errors import SchemaError  # noqa: E402
from txnlog.log.actions import AddFile, Metadata, Protocol  # noqa: E402
from txnlog.log.codec import encode_commit  # noqa: E402
from txnlog.schema import FIELD_METADATA_KEY, arrow_to_delta_schema  # noqa: E402
from txnlog.storage import open_store  # noqa: E402
from txnlog.table_configuration import TableConfiguration  # noqa: E402
from txnlog.write import write_data_files  # noqa: E402

UTC = dt.timezone.utc


def configuration_of(schema: pa.Schema, partition_columns: Sequence[str] = (), configuration: Mapping[str, str] | None = None) -> TableConfiguration:
    """The facts of a table of ``schema`` with these properties, as a writer takes them."""
    metadata = Metadata("t", arrow_to_delta_schema(schema), tuple(partition_columns), dict(configuration or {}))
    return TableConfiguration.from_actions(Protocol(1, 2), metadata)


def write(root: Path | str, data: Any, schema: pa.Schema, partition_columns: Sequence[str] = (), **kwargs: Any) -> list[AddFile]:
    config = configuration_of(schema, partition_columns, kwargs.pop("configuration", {}))
    return write_data_files(open_store(str(root)), data, table_configuration=config, table_schema=schema, **kwargs)


def commit(
    root: Path | str,
    schema: pa.Schema,
    adds: Sequence[AddFile],
    partition_columns: Sequence[str] = (),
    configuration: Mapping[str, str] | None = None,
    protocol: Protocol = Protocol(1, 2),  # noqa: B008 (a frozen record)
) -> Any:
    """Make the written files a real Delta table (version 0) and open it with delta-rs."""
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schema_string=arrow_to_delta_schema(schema),
        partition_columns=tuple(partition_columns),
        configuration=dict(configuration or {}),
        created_time=1_700_000_000_000,
    )
    open_store(str(root)).put_if_absent("_delta_log/00000000000000000000.json", encode_commit([protocol, metadata, *adds]))
    return deltalake.DeltaTable(str(root))


def read_sorted(table: Any, by: str = "id") -> pa.Table:
    return table.to_pyarrow_table().sort_by(by)


def add_actions(table: Any) -> list[dict[str, Any]]:
    return pa.table(table.get_add_actions(flatten=True)).to_pylist()


def data_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.parquet") if "_delta_log" not in p.parts]


# --- round trips ---------------------------------------------------------------------------------

TYPES = pa.schema(
    [
        ("id", pa.int64()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec", pa.decimal128(12, 4)),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("bin", pa.binary()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])),
        ("tags", pa.list_(pa.string())),
        ("m", pa.map_(pa.string(), pa.int32())),
    ]
)


def typed_rows(n: int) -> pa.Table:
    base = dt.datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "i8": pa.array([i % 100 - 50 if i % 7 else None for i in range(n)], pa.int8()),
            "i16": pa.array([i * 3 - 1000 for i in range(n)], pa.int16()),
            "i32": pa.array([i * 1_000_003 % 2_000_000 for i in range(n)], pa.int32()),
            "f32": pa.array([i / 8 for i in range(n)], pa.float32()),
            "f64": pa.array([(i - n / 2) * 1.5 if i % 5 else None for i in range(n)], pa.float64()),
            "dec": pa.array([Decimal(i * 37 - 500) / Decimal(100) for i in range(n)], pa.decimal128(12, 4)),
            "s": pa.array([f"name-{i:04d}" if i % 3 else None for i in range(n)], pa.string()),
            "b": pa.array([i % 2 == 0 for i in range(n)], pa.bool_()),
            "bin": pa.array([bytes([i % 256]) for i in range(n)], pa.binary()),
            "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(n)], pa.date32()),
            # Sub-millisecond digits: the max must round up to stay a bound.
            "ts": pa.array([base + dt.timedelta(microseconds=i * 1_234_567) for i in range(n)], pa.timestamp("us", tz="UTC")),
            "ntz": pa.array([(base + dt.timedelta(seconds=i)).replace(tzinfo=None) for i in range(n)], pa.timestamp("us")),
            "st": pa.array([{"x": i, "y": str(i)} if i % 4 else None for i in range(n)], TYPES.field("st").type),
            "tags": pa.array([[str(i)] * (i % 3) for i in range(n)], pa.list_(pa.string())),
            "m": pa.array([[("k", i)] if i % 2 else None for i in range(n)], pa.map_(pa.string(), pa.int32())),
        }
    )


_STAT_COLUMNS = ["i8", "i16", "i32", "f32", "f64", "dec", "s", "d", "ts", "ntz", "st.x", "st.y"]


def _leaf(t: pa.Table, dotted: str) -> pa.ChunkedArray:
    parts = dotted.split(".")
    column = t.column(parts[0])
    for name in parts[1:]:
        column = pc.struct_field(column, name)
    return column


def test_round_trip_of_many_types_with_stats_matching_pyarrow(tmp_path: Path) -> None:
    data = typed_rows(200)
    adds = write(tmp_path, data, TYPES, target_file_size=8 * 1024)
    assert len(adds) > 1, "small target: several files"
    table = commit(tmp_path, TYPES, adds, protocol=Protocol(3, 7, ("timestampNtz",), ("timestampNtz",)))
    assert read_sorted(table).equals(data)
    assert sum(orjson.loads(a.stats)["numRecords"] for a in adds) == data.num_rows

    for action in add_actions(table):
        rows = pq.read_table(tmp_path / unquote(action["path"]))
        assert action["num_records"] == rows.num_rows
        for name in _STAT_COLUMNS:
            column = _leaf(rows, name)
            assert action[f"null_count.{name}"] == column.null_count, name
            low, high = pc.min(column).as_py(), pc.max(column).as_py()
            if name == "ts":  # millisecond bounds, rounded outward
                assert action[f"min.{name}"] <= low and low - action[f"min.{name}"] < dt.timedelta(milliseconds=1)
                assert action[f"max.{name}"] >= high and action[f"max.{name}"] - high < dt.timedelta(milliseconds=1)
            elif name == "f32":  # delta-rs parses the float32 bound as a double
                assert action[f"min.{name}"] == pytest.approx(low) and action[f"max.{name}"] == pytest.approx(high)
            else:
                assert (action[f"min.{name}"], action[f"max.{name}"]) == (low, high), name
        for name in ("b", "bin", "tags", "m"):  # nullCount only
            assert action[f"null_count.{name}"] == rows.column(name).null_count
            assert action.get(f"min.{name}") is None and action.get(f"max.{name}") is None


def test_files_use_table_types_and_delta_naming(tmp_path: Path) -> None:
    data = pa.table({"id": pa.array([1, 2], pa.int32()), "ts": pa.array([0, 1000], pa.timestamp("ns", tz="Europe/Paris"))})
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    adds = write(tmp_path, data, schema, file_prefix="part")
    assert len(adds) == 1
    assert adds[0].path.startswith("part-00000-") and adds[0].path.endswith("-c000.snappy.parquet")
    uuid.UUID(adds[0].path[len("part-00000-") : -len("-c000.snappy.parquet")])
    path = tmp_path / adds[0].path
    assert adds[0].size == path.stat().st_size
    metadata = pq.read_metadata(path)
    assert metadata.schema.to_arrow_schema().remove_metadata() == schema
    assert metadata.row_group(0).column(0).compression == "SNAPPY"
    ts_type = orjson.loads(metadata.schema.column(1).logical_type.to_json())
    assert ts_type["isAdjustedToUTC"] is True and ts_type["timeUnit"] == "microseconds"
    assert adds[0].data_change is True
    assert abs(adds[0].modification_time - dt.datetime.now().timestamp() * 1000) < 60_000


def test_data_change_false_is_recorded(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    adds = write(tmp_path, pa.table({"id": [1]}), schema, data_change=False)
    assert [a.data_change for a in adds] == [False]


def test_empty_input_writes_no_files(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    assert write(tmp_path, schema.empty_table(), schema, ["p"]) == []
    assert data_files(tmp_path) == []


# --- partitions ------------------------------------------------------------------------------------

_SPECIAL = ["A/A", "B B", "x=1", "50%", "100%2F", "a+b&c~(1)", "a:b", "q'\"#?*", "[^]{}", "back\\slash", "tab\tnew\nline", "ünï€😀", "plain", None]

PARTITION_CASES: list[tuple[str, pa.DataType, list[Any]]] = [
    ("string", pa.string(), _SPECIAL),
    ("long", pa.int64(), [-(2**63), -1, 0, 42, 2**63 - 1, None]),
    ("byte", pa.int8(), [-128, 0, 127, None]),
    ("double", pa.float64(), [-1.5, 0.1, 1e300, 3.0, None]),
    ("float", pa.float32(), [0.1, -2.5, None]),
    # Not negative: delta-rs 1.6.6 itself mangles "-5.670" into "-5.-670" when reading it back.
    ("decimal", pa.decimal128(10, 3), [Decimal("5.670"), Decimal("0.001"), Decimal("1234567.000"), None]),
    ("date", pa.date32(), [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31), None]),
    (
        "timestamp",
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(2021, 1, 1, tzinfo=UTC), dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC), None],
    ),
    ("timestamp_ntz", pa.timestamp("us"), [dt.datetime(2021, 1, 1, 23, 59, 59, 999999), dt.datetime(2000, 2, 29), None]),
    ("boolean", pa.bool_(), [True, False, None]),
]


@pytest.mark.parametrize("kind,arrow_type,values", PARTITION_CASES, ids=[c[0] for c in PARTITION_CASES])
def test_partition_values_round_trip(tmp_path: Path, kind: str, arrow_type: pa.DataType, values: list[Any]) -> None:
    rows = [v for v in values for _ in range(2)]  # two rows per partition: one file each
    data = pa.table({"id": pa.array(range(len(rows)), pa.int64()), "p": pa.array(rows, arrow_type), "v": [f"v{i}" for i in range(len(rows))]})
    adds = write(tmp_path, data, data.schema, ["p"])
    assert len(adds) == len(values)
    assert all(orjson.loads(a.stats)["numRecords"] == 2 for a in adds)
    assert all("p" not in orjson.loads(a.stats)["nullCount"] for a in adds), "no stats for partition columns"
    for a in adds:  # partition columns are not stored in the files
        assert pq.read_schema(tmp_path / unquote(a.path)).names == ["id", "v"]
    features = ("timestampNtz",) if kind == "timestamp_ntz" else None
    protocol = Protocol(3, 7, features, features) if features else Protocol(1, 2)
    table = commit(tmp_path, data.schema, adds, ["p"], protocol=protocol)
    assert read_sorted(table).equals(data)


def test_null_and_empty_string_partitions_use_the_hive_default_directory(tmp_path: Path) -> None:
    data = pa.table({"id": [1, 2, 3], "p": [None, "", "x"]})
    adds = write(tmp_path, data, data.schema, ["p"])
    by_value = {a.partition_values["p"]: a for a in adds}
    assert set(by_value) == {None, "x"}  # the protocol reads an empty partition value as null
    assert by_value[None].path.startswith("p=__HIVE_DEFAULT_PARTITION__/")
    assert orjson.loads(by_value[None].stats)["numRecords"] == 2
    table = commit(tmp_path, data.schema, adds, ["p"])
    assert read_sorted(table).column("p").to_pylist() == [None, None, "x"]


def test_directory_escaping_matches_spark(tmp_path: Path) -> None:
    """The corpus table delta-0.8.0-special-partition: directory ``x=A%2FA``, log ``x=A%252FA``."""
    data = pa.table({"x": ["A/A", "a:b=c"], "y": [1, 2]})
    adds = write(tmp_path, data, data.schema, ["x"])
    paths = sorted(a.path for a in adds)
    assert paths[0].startswith("x=A%252FA/") and paths[1].startswith("x=a%253Ab%253Dc/")
    assert (tmp_path / "x=A%2FA").is_dir() and (tmp_path / "x=a%3Ab%3Dc").is_dir()


def test_multiple_partition_columns_nest_in_order(tmp_path: Path) -> None:
    data = pa.table({"id": range(8), "a": [1, 1, 2, 2, 1, 1, 2, None], "b": ["x", "y"] * 4})
    schema = pa.schema([("b", pa.string()), ("id", pa.int64()), ("a", pa.int64())])
    adds = write(tmp_path, data, schema, ["a", "b"])
    for a in adds:
        first, second, _ = a.path.split("/")
        assert first.startswith("a=") and second.startswith("b=")
    assert len(adds) == len({(r["a"], r["b"]) for r in data.to_pylist()})
    table = commit(tmp_path, schema, adds, ["a", "b"])
    assert read_sorted(table).equals(data.select(schema.names).cast(schema).sort_by("id"))


# --- schema matching -----------------------------------------------------------------------------

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("Name", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("when", pa.timestamp("us", tz="UTC")),
        pa.field("st", pa.struct([pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.string())])),
    ]
)


def test_columns_in_another_order_and_case_are_written_with_the_tables_names(tmp_path: Path) -> None:
    data = pa.table(
        {
            "st": pa.array([{"V": "a", "k": 1}, None], pa.struct([("V", pa.string()), ("k", pa.int8())])),
            "SCORE": pa.array([1, 2], pa.int32()),  # int32 data into a double column
            "name": pa.array(["a", "b"], pa.large_string()),
            "when": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("ms", tz="UTC")),
            "id": pa.array([2, 1], pa.int32()),
        }
    )
    adds = write(tmp_path, data, SCHEMA)
    assert pq.read_schema(tmp_path / adds[0].path).names == SCHEMA.names
    table = commit(tmp_path, SCHEMA, adds)
    got = read_sorted(table)
    assert got.column_names == SCHEMA.names
    assert got.to_pylist() == [
        {"id": 1, "Name": "b", "score": 2.0, "when": dt.datetime(2024, 1, 1, tzinfo=UTC), "st": None},
        {"id": 2, "Name": "a", "score": 1.0, "when": dt.datetime(2024, 1, 1, tzinfo=UTC), "st": {"k": 1, "v": "a"}},
    ]
    stats = orjson.loads(adds[0].stats)
    assert stats["minValues"]["Name"] == "a" and stats["nullCount"]["st"] == {"k": 1, "v": 1}


def test_missing_nullable_columns_are_filled_with_nulls(tmp_path: Path) -> None:
    adds = write(tmp_path, pa.table({"id": [1, 2]}), SCHEMA)
    table = commit(tmp_path, SCHEMA, adds)
    got = read_sorted(table)
    assert got.column("Name").null_count == 2 and got.column("st").null_count == 2
    assert orjson.loads(adds[0].stats)["nullCount"]["score"] == 2


_BAD_CASES = [
    ("extra column", pa.table({"id": [1], "extra": [1]}), "extra"),
    ("missing non-nullable", pa.table({"Name": ["a"]}), "id"),
    ("null in non-nullable", pa.table({"id": [1, None]}), "id"),
    ("incompatible type", pa.table({"id": [1], "score": ["high"]}), "score"),
    ("lossy cast", pa.table({"id": [1], "st": pa.array([{"k": 2**40}], pa.struct([("k", pa.int64())]))}), "st.k"),
    ("naive timestamp into UTC column", pa.table({"id": [1], "when": pa.array([0], pa.timestamp("us"))}), "when"),
    ("null in non-nullable nested field", pa.table({"id": [1], "st": pa.array([{"k": None, "v": "x"}], pa.struct([("k", pa.int32()), ("v", pa.string())]))}), "st.k"),
    ("extra nested field", pa.table({"id": [1], "st": pa.array([{"k": 1, "zz": 1}])}), "st.zz"),
    ("two columns differing in case", pa.table({"id": [1], "name": ["a"], "NAME": ["b"]}), "NAME"),
]


@pytest.mark.parametrize("data,field", [c[1:] for c in _BAD_CASES], ids=[c[0] for c in _BAD_CASES])
def test_schema_errors_name_the_field(tmp_path: Path, data: pa.Table, field: str) -> None:
    with pytest.raises(SchemaError) as e:
        write(tmp_path, data, SCHEMA)
    assert e.value.field == field and field in str(e.value)
    assert data_files(tmp_path) == []


def test_aware_data_into_timestamp_ntz_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("t", pa.timestamp("us"))])
    with pytest.raises(SchemaError, match="timestamp_ntz"):
        write(tmp_path, pa.table({"t": pa.array([0], pa.timestamp("us", tz="UTC"))}), schema)


def test_null_in_nested_non_nullable_field_under_a_null_parent_is_fine(tmp_path: Path) -> None:
    # k is null in row 2 only where its parent struct is null (as Spark and pc.struct_field produce).
    k, v = pa.array([1, None], pa.int32()), pa.array(["a", None])
    st = pa.StructArray.from_arrays([k, v], names=["k", "v"], mask=pa.array([False, True]))
    adds = write(tmp_path, pa.table({"id": [1, 2], "st": st}), SCHEMA)
    assert orjson.loads(adds[0].stats)["nullCount"]["st"]["k"] == 1
    table = commit(tmp_path, SCHEMA, adds)
    assert read_sorted(table).column("st").to_pylist() == [{"k": 1, "v": "a"}, None]


def test_columns_whose_values_repeat_over_the_file_are_dictionary_encoded(tmp_path: Path) -> None:
    """A unique key stays plain (a dictionary attempt on it only costs); a column of 16,384
    values, most of them distinct in any short run of rows, and one of few values get a
    dictionary, which makes the file smaller."""
    n = 200_000
    keys = pa.array(range(n), pa.int64())
    prices = np.random.default_rng(7).integers(0, 16_384, n) / 100.0  # most of any 8,192 rows distinct
    data = pa.table({"key": keys, "spread": prices, "few": pc.cast(pc.bit_wise_and(keys, 7), pa.string())})
    (add,) = write(tmp_path, data, data.schema)
    metadata = pq.ParquetFile(tmp_path / unquote(add.path)).metadata
    dictionary = {metadata.row_group(0).column(i).path_in_schema: metadata.row_group(0).column(i).has_dictionary_page for i in range(3)}
    assert dictionary == {"key": False, "spread": True, "few": True}
    assert read_sorted(commit(tmp_path, data.schema, [add]), "key").equals(data)


# --- file sizes and streaming ---------------------------------------------------------------------


def test_target_file_size_splits_rows_into_files_near_the_target(tmp_path: Path) -> None:
    n = 30_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"row-{i * 7919 % n:08d}" for i in range(n)]})
    target = 64 * 1024
    adds = write(tmp_path, data, data.schema, target_file_size=target)
    assert len(adds) >= 4
    assert sum(orjson.loads(a.stats)["numRecords"] for a in adds) == n
    # After the first file calibrates Parquet against Arrow sizes, files land near the target.
    assert all(a.size < 2 * target for a in adds)
    assert all(a.size > target / 3 for a in adds[1:-1])
    table = commit(tmp_path, data.schema, adds)
    assert read_sorted(table).equals(data)


def test_target_file_size_defaults_to_the_table_property(tmp_path: Path) -> None:
    # Scattered ids: sequential ones are delta-encoded, 20,000 of them in a few hundred bytes.
    data = pa.table({"id": pa.array([i * 0x9E3779B97F4A7C15 % 2**63 for i in range(20_000)], pa.int64())})
    adds = write(tmp_path, data, data.schema, configuration={"delta.targetFileSize": "20000"})
    assert len(adds) > 3
    assert sum(orjson.loads(a.stats)["numRecords"] for a in adds) == 20_000


def test_record_batch_reader_is_consumed_while_files_are_written(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("pad", pa.string())])
    seen_files: list[int] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for b in range(20):
            seen_files.append(len(data_files(tmp_path)))
            ids = range(b * 1000, (b + 1) * 1000)
            yield pa.record_batch(
                [pa.array(ids, pa.int64()), pa.array(["even" if i % 2 == 0 else "odd" for i in ids]), pa.array(["x" * 50] * 1000)],
                schema=schema,
            )

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    adds = write(tmp_path, reader, schema, ["p"], target_file_size=100_000)
    assert seen_files[-1] > 0, "files were completed before the input ended: no whole-input buffering"
    assert sum(orjson.loads(a.stats)["numRecords"] for a in adds) == 20_000
    table = commit(tmp_path, schema, adds, ["p"])
    assert read_sorted(table).num_rows == 20_000
    for a in adds:
        stats = orjson.loads(a.stats)
        ids = pq.read_table(tmp_path / unquote(a.path)).column("id")
        assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (pc.min(ids).as_py(), pc.max(ids).as_py())


def test_failure_mid_stream_deletes_the_files_already_written(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])

    def batches() -> Iterator[pa.RecordBatch]:
        for b in range(5):
            yield pa.record_batch([pa.array(range(b * 1000, (b + 1) * 1000), pa.int64())], names=["id"])
        yield pa.record_batch([pa.array([1, None], pa.int64())], names=["id"])

    reader = pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]), batches())
    with pytest.raises(SchemaError) as e:
        write(tmp_path, reader, schema, target_file_size=4000)
    assert e.value.field == "id"
    assert data_files(tmp_path) == []


def test_memory_store(memory_table_uri: str) -> None:
    store = open_store(memory_table_uri)
    data = pa.table({"id": [1, 2, 3], "p": ["a", "b", "a"]})
    adds = write_data_files(store, data, table_configuration=configuration_of(data.schema, ["p"]))
    assert sorted(a.partition_values["p"] for a in adds) == ["a", "b"]
    for a in adds:
        info = store.info(unquote(a.path))
        assert info.size == a.size
        assert pq.read_table(store.open_input(unquote(a.path))).num_rows == orjson.loads(a.stats)["numRecords"]


# --- column mapping ------------------------------------------------------------------------------


def _mapped(name: str, arrow_type: pa.DataType, column_id: int) -> pa.Field:
    meta = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": f"col-{column_id}-{name}"}
    return pa.field(name, arrow_type, metadata={FIELD_METADATA_KEY: orjson.dumps(meta)})


def test_column_mapping_writes_physical_names_field_ids_and_physical_stats(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            _mapped("id", pa.int64(), 1),
            _mapped("Part", pa.string(), 2),
            _mapped("st", pa.struct([_mapped("x", pa.int32(), 4), _mapped("y", pa.string(), 5)]), 3),
        ]
    )
    configuration = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "5"}
    data = pa.table({"id": [1, 2, 3], "Part": ["a", "b", "a"], "st": [{"x": 1, "y": "q"}, None, {"x": 3, "y": None}]})
    adds = write(tmp_path, data, schema, ["Part"], configuration=configuration)

    for a in adds:
        assert set(a.partition_values) == {"col-2-Part"}
        assert "Part=" not in a.path  # no logical name in paths: random prefix directories
        file_schema = pq.read_schema(tmp_path / a.path)
        assert file_schema.names == ["col-1-id", "col-3-st"]
        assert file_schema.field("col-1-id").metadata[b"PARQUET:field_id"] == b"1"
        assert file_schema.field("col-3-st").type.field("col-4-x").metadata[b"PARQUET:field_id"] == b"4"
    stats = orjson.loads(next(a for a in adds if a.partition_values["col-2-Part"] == "a").stats)
    assert stats["minValues"] == {"col-1-id": 1, "col-3-st": {"col-4-x": 1, "col-5-y": "q"}}
    assert stats["nullCount"] == {"col-1-id": 0, "col-3-st": {"col-4-x": 0, "col-5-y": 1}}

    table = commit(tmp_path, schema, adds, ["Part"], configuration, protocol=Protocol(2, 5))
    # delta-rs's DataFusion reader resolves physical names (its pyarrow dataset path does not).
    got = pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t order by id"))
    assert got.to_pylist() == data.to_pylist()


def test_column_mapping_requires_physical_names(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(SchemaError) as e:
        write(tmp_path, pa.table({"id": [1]}), schema, configuration={"delta.columnMapping.mode": "id"})
    assert e.value.field == "id"


# --- Spark, when it is around ------------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.spark
def test_spark_reads_the_written_files(spark: Any, tmp_path: Path) -> None:
    """Spark's own Parquet reader (no Delta) reads the files with the table's types. The shared
    session: a second one started in this process would keep delta-spark's jars off its JVM."""
    data = typed_rows(20).drop_columns(["m"])
    schema = pa.schema([f for f in TYPES if f.name != "m"])
    adds = write(tmp_path, data, schema)
    rows = spark.read.parquet(*[str(tmp_path / a.path) for a in adds]).orderBy("id").collect()
    assert [r["id"] for r in rows] == list(range(20))
    assert rows[3]["ts"] == data.column("ts")[3].as_py().replace(tzinfo=None)
    assert rows[3]["ntz"] == data.column("ntz")[3].as_py()
    assert rows[3]["dec"] == data.column("dec")[3].as_py()
