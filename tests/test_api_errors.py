"""The public API's own bad arguments raise TxnLogError subclasses that name the problem (and are
also ValueError/TypeError, so Python habits keep working)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, TableNotFoundError, TxnLogError

SCHEMA = pa.schema([("id", pa.int64())])


def test_unknown_uri_scheme() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown URI scheme 'nosuch'") as err:
        Table("nosuch://bucket/t")
    assert isinstance(err.value, ValueError) and isinstance(err.value, TxnLogError)


def test_unparseable_timestamp(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA)
    with pytest.raises(InvalidArgumentError, match="'yesterday'"):
        table.snapshot(timestamp="yesterday")
    with pytest.raises(InvalidArgumentTypeError):
        table.version_at([2024])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="version must be an int"):
        table.snapshot(version="3")  # type: ignore[arg-type]


@pytest.mark.parametrize("data", [{"id": [1]}, [1, 2], "id"])
def test_non_arrow_data(tmp_path: Path, data: object) -> None:
    table = Table.create(tmp_path / "t", SCHEMA)
    with pytest.raises(InvalidArgumentTypeError, match="pyarrow") as err:
        table.append(data)  # type: ignore[arg-type]
    assert isinstance(err.value, TypeError)
    with table.transaction() as txn:
        with pytest.raises(InvalidArgumentTypeError):
            txn.add_files(data)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentTypeError):
            txn.remove_files(data)  # type: ignore[arg-type]
        txn.abort()
    assert table.latest_version() == 0


def test_history_of_a_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError) as err:
        Table(tmp_path / "nothing").history()
    assert err.value.uri.endswith("nothing")
    with pytest.raises(TableNotFoundError):
        Table(tmp_path / "nothing").version_at(0)


def test_bad_create_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="mode"):
        Table.create(tmp_path / "t", SCHEMA, mode="replace")
    with pytest.raises(InvalidArgumentTypeError, match="schema"):
        Table.create(tmp_path / "t", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="app_version"):
        Table.create(tmp_path / "u", SCHEMA).append(pa.table({"id": [1]}), app_id="x")
