"""The public API's own bad arguments raise TxnLogError subclasses that name the problem (and are
also ValueError/TypeError, so Python habits keep working)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table, maintenance
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, TableNotFoundError, TxnLogError
from txnlog.properties import parse_duration_ms

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


def test_history_refuses_a_negative_or_non_int_limit(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", SCHEMA)
    with pytest.raises(InvalidArgumentError, match="limit must be >= 0, got -1"):
        table.history(limit=-1)
    with pytest.raises(InvalidArgumentTypeError, match="limit must be an int"):
        table.history(limit="2")  # type: ignore[arg-type]
    assert [h.version for h in table.history(limit=0)] == []


@pytest.mark.parametrize("text", ["abc", "-5s", "", "7 fortnights"])
def test_unparseable_duration(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="expected a duration") as err:
        parse_duration_ms(text)
    assert repr(text) in str(err.value) and isinstance(err.value, ValueError)
    with pytest.raises(InvalidArgumentTypeError, match="duration"):
        parse_duration_ms(30)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "call, error, words",
    [
        pytest.param(lambda t: maintenance.expire(t, retain_min="3"), InvalidArgumentTypeError, "retain_min must be an int, got str '3'", id="expire-retain_min-str"),
        pytest.param(lambda t: maintenance.expire(t, retain_max=0), InvalidArgumentError, "retain_max must be >= 1, got 0", id="expire-retain_max-0"),
        pytest.param(lambda t: maintenance.expire(t, limit=2.5), InvalidArgumentTypeError, "limit must be an int, got float 2.5", id="expire-limit-float"),
        pytest.param(lambda t: maintenance.expire(t, older_than="abc"), InvalidArgumentError, "older_than: expected a duration", id="expire-older_than-text"),
        pytest.param(lambda t: maintenance.expire(t, older_than=-1), InvalidArgumentError, "older_than must be >= 0, got -1", id="expire-older_than-negative"),
        pytest.param(lambda t: maintenance.expire(t, older_than=[1]), InvalidArgumentTypeError, "older_than must be ms", id="expire-older_than-list"),
        pytest.param(lambda t: maintenance.vacuum(t, retention="soon"), InvalidArgumentError, "retention: expected a duration", id="vacuum-retention-text"),
        pytest.param(lambda t: maintenance.vacuum(t, retention=-1, force=True), InvalidArgumentError, "retention must be >= 0", id="vacuum-retention-negative"),
        pytest.param(lambda t: maintenance.vacuum(t, max_workers=0), InvalidArgumentError, "max_workers must be >= 1", id="vacuum-max_workers"),
        pytest.param(lambda t: maintenance.checkpoint(t, "0"), InvalidArgumentTypeError, "version must be an int, got str '0'", id="checkpoint-version-str"),
        pytest.param(lambda t: maintenance.checkpoint(t, -1), InvalidArgumentError, "version must be >= 0, got -1", id="checkpoint-version-negative"),
        pytest.param(lambda t: maintenance.describe(t, -2), InvalidArgumentError, "version must be >= 0", id="describe-version-negative"),
        pytest.param(lambda t: maintenance.history(t, -1), InvalidArgumentError, "limit must be >= 0", id="history-limit-negative"),
        pytest.param(lambda t: maintenance.restore(t, version=-1), InvalidArgumentError, "version must be >= 0", id="restore-version-negative"),
        pytest.param(lambda t: maintenance.restore(t, version=True), InvalidArgumentTypeError, "version must be an int, got bool", id="restore-version-bool"),
        pytest.param(lambda t: maintenance.tags.create(t, "gold", "1"), InvalidArgumentTypeError, "version must be an int", id="tag-version-str"),
        pytest.param(lambda t: maintenance.consumers.record(t, "r1", "1"), InvalidArgumentTypeError, "next_version must be an int", id="consumer-next_version-str"),
        pytest.param(lambda t: maintenance.consumers.reset(t, "r1", -1), InvalidArgumentError, "next_version must be >= 0", id="consumer-reset-negative"),
        pytest.param(lambda t: maintenance.consumers.expire(t, "1d"), InvalidArgumentTypeError, "inactive_ms must be an int", id="consumer-expire-str"),
    ],
)
def test_maintenance_arguments_are_checked_by_name(tmp_path: Path, call: Callable[[Table], object], error: type[TxnLogError], words: str) -> None:
    table = Table.create(tmp_path / "t", SCHEMA)
    table.append(pa.table({"id": [1]}))
    with pytest.raises(error) as err:
        call(table)
    assert words in str(err.value)
    assert table.latest_version() == 1  # refused before anything was written
    assert not (tmp_path / "t" / "_txnlog").exists()


def test_maintenance_takes_a_table_or_its_uri(tmp_path: Path) -> None:
    Table.create(tmp_path / "t", SCHEMA).append(pa.table({"id": [1, 2]}))
    for given in (str(tmp_path / "t"), tmp_path / "t", Table(tmp_path / "t")):
        assert maintenance.describe(given).num_rows == 2
        assert maintenance.validate(given).ok
        assert [h.version for h in maintenance.history(given)] == [1, 0]
        assert maintenance.list_files(given).num_rows == 1
    maintenance.tags.create(str(tmp_path / "t"), "gold", 1)
    assert [t.name for t in maintenance.tags.list_tags(tmp_path / "t")] == ["gold"]
    maintenance.consumers.record(str(tmp_path / "t"), "r1", 1)
    assert maintenance.consumers.get(str(tmp_path / "t"), "r1").next_version == 1
    assert maintenance.checkpoint(str(tmp_path / "t")).version == 1
    assert maintenance.expire(str(tmp_path / "t"), dry_run=True).latest_version == 1
    assert maintenance.vacuum(str(tmp_path / "t"), dry_run=True).files == ()
    with pytest.raises(TableNotFoundError):
        maintenance.describe(str(tmp_path / "nothing"))


@pytest.mark.parametrize("given", [42, None, b"t", {"uri": "t"}])
def test_maintenance_refuses_other_tables_by_parameter_name(given: object) -> None:
    for call in (maintenance.describe, maintenance.validate, maintenance.tags.list_tags, maintenance.consumers.list_consumers):
        with pytest.raises(InvalidArgumentTypeError, match="table must be a txnlog.Table or a table URI") as err:
            call(given)  # type: ignore[arg-type]
        assert isinstance(err.value, TypeError)


def test_maintenance_refuses_an_empty_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Table.create(tmp_path, SCHEMA)  # a table in the current directory, which '' must not reach
    monkeypatch.chdir(tmp_path)
    for given in ("", "  "):
        with pytest.raises(InvalidArgumentError, match="table is an empty URI"):
            maintenance.describe(given)
