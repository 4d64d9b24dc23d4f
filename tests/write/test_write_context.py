"""WriteContext: picklable, opens the table's store itself, writes in the table's layout and
returns file actions ready for a transaction, in this process or another."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import txnlog
from txnlog import Table, WriteContext
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, ProtocolViolationError, SchemaError, TxnLogError
from txnlog.log.actions import Metadata
from txnlog.log.file_actions import FILES_SCHEMA
from txnlog.schema import arrow_to_delta_schema

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.float64())])


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "part": ["a", "b"] * (n // 2), "value": [1.5] * n})


def _write_in_child(context: WriteContext, start: int) -> list[dict[str, Any]]:
    # An executor has only the context: it opens the store from the URI and options itself.
    written = context.write(_rows(10, start))
    return written.files.to_pylist()


def test_context_pickles_and_writes_from_another_process(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, partition_by=["part"], properties={"delta.constraints.positive": "id >= 0"})
    context = WriteContext.for_snapshot(table.snapshot())
    assert pickle.loads(pickle.dumps(context)) == context
    with mp.get_context("spawn").Pool(2) as pool:
        rows = [r for part in pool.starmap(_write_in_child, [(context, 0), (context, 100)]) for r in part]
    files = pa.Table.from_pylist(rows, schema=FILES_SCHEMA)
    assert files.num_rows == 4 and len(set(files.column("path").to_pylist())) == 4
    with table.transaction() as txn:
        txn.add_files(files)
    assert table.snapshot().num_files == 4
    assert DeltaTable(table.uri).to_pyarrow_table().num_rows == 20


def test_written_files_follow_the_table_layout(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, partition_by=["part"], properties={"delta.columnMapping.mode": "name"})
    context = WriteContext.for_snapshot(table.snapshot(), compression="zstd")
    written = context.write(iter(_rows(6).to_batches()))
    assert written.num_files == 2
    assert written.files.schema == FILES_SCHEMA
    add = written.add_files[0]
    assert add.partition_values and next(iter(add.partition_values)).startswith("col-")
    parquet = pq.ParquetFile(tmp_path / "t" / add.path)
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"
    assert all(name.startswith("col-") for name in parquet.schema_arrow.names)
    assert parquet.schema_arrow.names == context.file_schema.names


def test_checks_happen_before_any_file_is_written(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, partition_by=["part"], properties={"delta.constraints.positive": "id >= 0"})
    context = WriteContext.for_snapshot(table.snapshot())

    def data_files() -> list[Path]:
        return [p for p in (tmp_path / "t").rglob("*.parquet")]

    with pytest.raises(SchemaError, match="'value'") as err:
        context.write(pa.table({"id": [1], "part": ["a"], "value": ["not a number"]}))
    assert err.value.field == "value"
    with pytest.raises(SchemaError, match="'extra'"):
        table.append(pa.table({"id": [1], "part": ["a"], "value": [1.0], "extra": [1]}))
    with pytest.raises(ProtocolViolationError, match="positive"):
        context.write(pa.table({"id": [-1], "part": ["a"], "value": [1.0]}))
    with pytest.raises(InvalidArgumentTypeError):
        context.write({"id": [1]})  # type: ignore[arg-type]
    assert data_files() == []
    assert table.latest_version() == 0


def test_a_check_constraint_computing_values_is_enforced(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, properties={"delta.constraints.even": "id % 2 = 0 OR value IS NULL"})
    table.append(pa.table({"id": [2, 3], "part": ["a", "a"], "value": [1.0, None]}))
    with pytest.raises(ProtocolViolationError, match=r"even .* violated by 1 row\(s\), e.g. \{'id': 5"):
        table.append(pa.table({"id": [4, 5], "part": ["a", "a"], "value": [1.0, 1.0]}))
    assert table.snapshot().to_arrow(["id"]).column("id").to_pylist() == [2, 3]


def test_table_append_and_transaction_write_use_it(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, partition_by=["part"])
    table.append(_rows(4))
    with table.transaction() as txn:
        assert txn.write_context() == WriteContext.for_snapshot(table.snapshot())
        txn.write(_rows(2, 10))
    assert txnlog.Table(table.uri).snapshot().num_files == 4


# --- check_schema: a write's schema checks without the write ---------------------------------

_NESTED = pa.schema([("id", pa.int64()), ("s", pa.struct([("x", pa.int32())]))])
_REQUIRED = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _context(schema: pa.Schema, partition_columns: tuple[str, ...] = (), uri: str = "memory://unused/t", **configuration: str) -> WriteContext:
    return WriteContext.for_metadata(uri, Metadata("id", arrow_to_delta_schema(schema), partition_columns, configuration))


# (case, context, data schema): each a schema error a write raises before its first row.
_BAD_SCHEMAS = [
    ("extra column", _context(SCHEMA), pa.schema([("id", pa.int64()), ("extra", pa.int64())])),
    ("uncastable type", _context(SCHEMA), pa.schema([("id", pa.int64()), ("value", pa.string())])),
    ("missing non-nullable column", _context(_REQUIRED), pa.schema([("v", pa.string())])),
    ("columns differing in case", _context(SCHEMA), pa.schema([("id", pa.int64()), ("ID", pa.int64())])),
    ("uncastable nested field", _context(_NESTED), pa.schema([("s", pa.struct([("x", pa.string())]))])),
    ("partition column not in the schema", _context(SCHEMA, ("nope",)), SCHEMA),
    ("nested partition column", _context(_NESTED, ("s",)), _NESTED),
    ("every column a partition column", _context(pa.schema([("p", pa.string())]), ("p",)), pa.schema([("p", pa.string())])),
    ("column mapping without physical names", _context(SCHEMA, **{"delta.columnMapping.mode": "name"}), SCHEMA),
    ("constraint on a missing column", _context(SCHEMA, **{"delta.constraints.c": "nope > 0"}), SCHEMA),
    ("constraint that does not parse", _context(SCHEMA, **{"delta.constraints.c": "id >"}), SCHEMA),
    ("target file size not positive", _context(SCHEMA, **{"delta.targetFileSize": "0"}), SCHEMA),
]


def _raised(call: Any) -> tuple[type[BaseException], str, Any]:
    with pytest.raises(TxnLogError) as e:
        call()
    return type(e.value), str(e.value), getattr(e.value, "field", None)


@pytest.mark.parametrize("context,data_schema", [c[1:] for c in _BAD_SCHEMAS], ids=[c[0] for c in _BAD_SCHEMAS])
def test_check_schema_raises_exactly_what_a_write_raises(context: WriteContext, data_schema: pa.Schema) -> None:
    assert _raised(lambda: context.check_schema(data_schema)) == _raised(lambda: context.write(data_schema.empty_table()))


def test_check_schema_writes_nothing_and_never_opens_the_store(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, partition_by=["part"], properties={"delta.constraints.positive": "id >= 0"})
    context = WriteContext.for_snapshot(table.snapshot())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    context.check_schema(pa.schema([("value", pa.float32()), ("ID", pa.int32()), ("part", pa.large_string())]))
    with pytest.raises(SchemaError, match="'extra'"):
        context.check_schema(pa.schema([("id", pa.int64()), ("extra", pa.int64())]))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    # A store that cannot even be opened: a write fails on it, the check does not need it.
    elsewhere = _context(SCHEMA, uri="nosuch://bucket/t")
    elsewhere.check_schema(SCHEMA)
    with pytest.raises(InvalidArgumentError, match="nosuch"):
        elsewhere.write(SCHEMA.empty_table())


def test_check_schema_takes_a_schema() -> None:
    with pytest.raises(InvalidArgumentTypeError):
        _context(SCHEMA).check_schema(_rows(2))  # type: ignore[arg-type]
