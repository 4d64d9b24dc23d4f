"""Interoperability with delta-rs (deltalake), the independent reader and writer.

Both directions, compared file by file and row by row at every version:

- deltalake reads what txnlog writes: partitioned or not (string, int and date partitions,
  NULL partition values), copy-on-write deletes, checkpoints (also once the JSON commits they
  cover are gone), app transactions and history; and it prunes files with txnlog's stats;
- txnlog reads what deltalake writes (appends, delete, overwrite, compaction, checkpoint) and
  keeps committing to it, after which deltalake still reads it.

The rows are always checked against what the test wrote, not only against the other library.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError

from txnlog import Snapshot, Table
from txnlog.errors import VersionNotFoundError
from txnlog.log.filenames import LAST_CHECKPOINT, LOG_DIR
from txnlog.storage import TableLocation

Row = dict[str, Any]

# --- helpers (also used by test_concurrency_processes.py) ------------------------------------


def read_rows(table: Table | TableLocation, files: pa.Table, schema: pa.Schema) -> pa.Table:
    """The rows of ``files`` (rows of ``Snapshot.files()``) read with plain pyarrow.

    Partition columns are not stored in the data files: their values come from the log's
    ``partitionValues`` strings, cast to the schema's types. No column mapping.
    """
    fs, root = table.store.arrow_filesystem()
    schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])  # without Delta field metadata
    parts = []
    for f in files.select(["path", "partition_values"]).to_pylist(maps_as_pydicts="strict"):
        data = pq.read_table(f"{root}/{unquote(f['path'])}", filesystem=fs)
        columns = []
        for field in schema:
            if field.name in data.column_names:
                columns.append(data.column(field.name).cast(field.type))
            else:
                value = (f["partition_values"] or {}).get(field.name)
                columns.append(pa.array([value] * data.num_rows, pa.string()).cast(field.type))
        parts.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def live_rows(snapshot: Snapshot) -> pa.Table:
    """Every row of ``snapshot``, read with pyarrow from its live files."""
    return read_rows(snapshot.location, snapshot.files(), snapshot.schema)


def sorted_rows(rows: pa.Table | Iterable[Row], key: Sequence[str] = ("id",)) -> list[Row]:
    """Rows as dicts in ``key`` order (duplicates kept, so a duplicated row shows)."""
    as_dicts = rows.to_pylist() if isinstance(rows, pa.Table) else list(rows)
    return sorted(as_dicts, key=lambda r: tuple(r[k] for k in key))


def deltalake_rows(path: str | Path, version: int | None = None, key: Sequence[str] = ("id",)) -> list[Row]:
    return sorted_rows(DeltaTable(str(path), version=version).to_pyarrow_table(), key)


def deltalake_add_actions(path: str | Path, version: int | None = None) -> pa.Table:
    return pa.table(DeltaTable(str(path), version=version).get_add_actions(flatten=True))


def assert_deltalake_agrees(table: Table, version: int | None = None) -> list[Row]:
    """deltalake and txnlog see the same version, files (path, size, record count, partition
    values), schema, partitioning and rows; returns the rows."""
    snap = table.snapshot(version)
    root = table.store.arrow_filesystem()[1]
    theirs = DeltaTable(root, version=snap.version)
    assert theirs.version() == snap.version
    assert list(theirs.metadata().partition_columns) == list(snap.partition_columns)
    assert theirs.schema().to_arrow().names == snap.schema.names

    ours_files = {
        f["path"]: (f["size"], orjson.loads(f["stats"])["numRecords"] if f["stats"] else None, f["partition_values"])
        for f in snap.files().to_pylist(maps_as_pydicts="strict")
    }
    actions = pa.table(theirs.get_add_actions(flatten=True))
    their_files = {}
    for a in actions.to_pylist():
        partition_values = {c: _partition_text(a[f"partition.{c}"]) for c in snap.partition_columns}
        their_files[a["path"]] = (a["size_bytes"], a["num_records"], partition_values)
    assert their_files == ours_files
    assert sorted(theirs.file_uris()) == sorted(f"{root}/{unquote(p)}" for p in ours_files)

    rows = sorted_rows(live_rows(snap))
    plain_schema = pa.schema([pa.field(f.name, f.type) for f in snap.schema])
    assert sorted_rows(theirs.to_pyarrow_table().select(plain_schema.names).cast(plain_schema)) == rows
    return rows


def _partition_text(value: Any) -> str | None:
    """A typed partition value as deltalake returns it, in the log's string form."""
    if value is None:
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def assert_same_history(table: Table) -> None:
    ours = [(h.version, h.commit_info.operation if h.commit_info else None) for h in table.history()]
    theirs = [(h["version"], h.get("operation")) for h in DeltaTable(table.store.arrow_filesystem()[1]).history()]
    assert theirs == ours


def commit_json_paths(path: str | Path) -> list[Path]:
    return sorted(Path(path, LOG_DIR).glob("*.json"))


def drop_commits_through(path: str | Path, version: int) -> None:
    """Delete the JSON commits (and .crc files) up to ``version``: only the checkpoint is left."""
    for f in Path(path, LOG_DIR).iterdir():
        if f.name[:20].isdigit() and f.suffix in (".json", ".crc") and int(f.name[:20]) <= version:
            f.unlink()


# --- deltalake reads what txnlog writes -----------------------------------------------------

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("i", pa.int32()),
        ("d", pa.date32()),
        ("v", pa.float64()),
    ]
)


def _typed_batch(start: int, n: int) -> pa.Table:
    """Rows whose partition candidates hold NULLs and characters paths must escape."""
    ids = list(range(start, start + n))
    strings = ["a b", "x/y", "é=1", None, "plain"]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array([strings[i % len(strings)] for i in ids]),
            "i": pa.array([None if i % 4 == 3 else i % 3 for i in ids], pa.int32()),
            "d": pa.array([None if i % 5 == 4 else dt.date(2024, 1, 1 + i % 3) for i in ids], pa.date32()),
            "v": pa.array([None if i % 6 == 5 else i / 4 for i in ids], pa.float64()),
        },
        schema=SCHEMA,
    )


@pytest.mark.parametrize(
    "partition_by",
    [[], ["s"], ["i"], ["d"], ["s", "i", "d"]],
    ids=["unpartitioned", "string", "int", "date", "string-int-date"],
)
def test_deltalake_reads_txnlog_tables(tmp_path: Path, partition_by: list[str]) -> None:
    table = Table.create(tmp_path / "t", SCHEMA, partition_by=partition_by)
    batches = [_typed_batch(0, 20), _typed_batch(100, 12)]
    for batch in batches:
        table.append(batch)
    if partition_by:
        # Every partition column really had a NULL partition value.
        values = table.snapshot().files().column("partition_values").to_pylist(maps_as_pydicts="strict")
        for column in partition_by:
            assert any(v[column] is None for v in values)
    written: list[Row] = []
    for version, batch in enumerate([None, *batches]):
        written += batch.to_pylist() if batch is not None else []
        assert assert_deltalake_agrees(table, version) == sorted_rows(written)
    assert_same_history(table)
    assert [h["operation"] for h in DeltaTable(str(tmp_path / "t")).history()] == ["WRITE", "WRITE", "CREATE TABLE"]


REGION_SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])


def _region_rows(ids: Iterable[int]) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {"id": ids, "region": ["EU" if i % 2 else "US" for i in ids], "amount": [float(i) * 1.5 for i in ids]},
        schema=REGION_SCHEMA,
    )


def _without(rows: pa.Table, drop: Callable[[Row], bool]) -> pa.Table:
    return rows.filter(pa.array([not drop(r) for r in rows.to_pylist()], pa.bool_()))


def copy_on_write(table: Table, predicate: str, change: Callable[[pa.Table], pa.Table], operation: str) -> int:
    """Rewrite the files matching ``predicate`` with ``change`` applied to their rows."""
    with table.transaction(operation, operation_parameters={"predicate": predicate}) as txn:
        files = txn.filter_files(predicate)
        kept = change(read_rows(table, files, txn.metadata.schema))
        txn.remove_files(files)
        if kept.num_rows:
            txn.write(kept)
    assert txn.result is not None
    return txn.result.version


def test_deltalake_reads_copy_on_write_changes(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", REGION_SCHEMA, partition_by=["region"])
    table.append(_region_rows(range(1, 21)))
    table.append(_region_rows(range(21, 31)))
    before = assert_deltalake_agrees(table)
    assert before == sorted_rows(_region_rows(range(1, 31)))

    # DELETE FROM t WHERE region = 'EU' AND id % 3 = 0: EU files are rewritten without those rows.
    v_delete = copy_on_write(table, "region = 'EU'", lambda rows: _without(rows, lambda r: r["id"] % 3 == 0), "DELETE")
    expected = [r for r in before if not (r["region"] == "EU" and r["id"] % 3 == 0)]
    assert assert_deltalake_agrees(table) == expected
    # DELETE FROM t WHERE region = 'US': whole files go, nothing is rewritten.
    v_drop = copy_on_write(table, "region = 'US'", lambda rows: rows.slice(0, 0), "DELETE")
    assert table.snapshot().num_files == 1  # the rewrite of both EU files
    expected = [r for r in expected if r["region"] != "US"]
    assert assert_deltalake_agrees(table) == expected
    # The removes are in the log deltalake reads: the old versions are still there to travel to.
    assert assert_deltalake_agrees(table, v_delete - 1) == before
    assert len(table.snapshot().tombstones()) == 4
    history = DeltaTable(str(tmp_path / "t")).history()
    assert [(h["version"], h["operation"]) for h in history[:2]] == [(v_drop, "DELETE"), (v_delete, "DELETE")]
    assert_same_history(table)


def test_deltalake_reads_txnlog_checkpoints_also_without_the_json_commits(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = Table.create(path, REGION_SCHEMA, partition_by=["region"], properties={"delta.checkpointInterval": "2"})
    results = [
        table.append(_region_rows(range(1, 11)), app_id="stream-a", app_version=0),  # 1
        table.append(_region_rows(range(11, 21))),  # 2: checkpoint
    ]
    copy_on_write(table, "region = 'US'", lambda rows: _without(rows, lambda r: r["id"] > 15), "DELETE")  # 3
    with table.transaction("WRITE", operation_parameters={"mode": "Append"}) as txn:  # 4: checkpoint
        txn.set_app_transaction("stream-a", 1)
        txn.set_app_transaction("stream-b", 5)
        txn.write(_region_rows(range(21, 31)))
    results += [txn.result, table.append(_region_rows(range(31, 35)))]  # 5
    assert [r.version for r in results] == [1, 2, 4, 5]
    assert all(not r.hook_failures for r in results)
    log = path / LOG_DIR
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [
        f"{2:020d}.checkpoint.parquet",
        f"{4:020d}.checkpoint.parquet",
    ]
    assert orjson.loads((path / LAST_CHECKPOINT).read_bytes())["version"] == 4

    expected = sorted_rows(
        r for r in _region_rows(range(1, 35)).to_pylist() if not (r["region"] == "US" and 15 < r["id"] <= 20)
    )
    for version in range(6):
        assert_deltalake_agrees(table, version)
    assert assert_deltalake_agrees(table) == expected
    assert_same_history(table)

    # A copy whose JSON commits up to the checkpoint are gone: both rebuild version 4 from it.
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    drop_commits_through(copy, 4)
    assert [p.name for p in commit_json_paths(copy)] == [f"{5:020d}.json"]
    copied = Table(copy)
    assert assert_deltalake_agrees(copied) == expected
    assert sorted(copied.snapshot().files().column("path").to_pylist()) == sorted(
        table.snapshot().files().column("path").to_pylist()
    )
    theirs = DeltaTable(str(copy))
    for app_id, version in [("stream-a", 1), ("stream-b", 5), ("unknown", None)]:
        assert theirs.transaction_version(app_id) == version
        assert copied.snapshot().app_transaction_version(app_id) == version
    # Both refuse a version the log no longer holds.
    with pytest.raises(DeltaError):
        DeltaTable(str(copy), version=1)
    with pytest.raises(VersionNotFoundError):
        copied.snapshot(1)

    # txnlog keeps committing to the copy (another checkpoint at 6), and deltalake follows.
    assert copied.append(_region_rows(range(40, 44)), app_id="stream-a", app_version=2) == 6
    assert (copy / LOG_DIR / f"{6:020d}.checkpoint.parquet").exists()
    drop_commits_through(copy, 5)
    assert assert_deltalake_agrees(Table(copy)) == sorted_rows(expected + _region_rows(range(40, 44)).to_pylist())
    assert DeltaTable(str(copy)).transaction_version("stream-a") == 2


def test_app_transactions_cross_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = Table.create(path, REGION_SCHEMA)
    assert table.append(_region_rows([1, 2]), app_id="stream", app_version=0) == 1
    assert table.append(_region_rows([1, 2]), app_id="stream", app_version=0) is None  # a replay: no commit
    assert table.append(_region_rows([3]), app_id="stream", app_version=1) == 2
    assert DeltaTable(str(path)).transaction_version("stream") == 1
    assert DeltaTable(str(path), version=1).transaction_version("stream") == 0

    # An app transaction deltalake commits is one txnlog's idempotent append sees.
    write_deltalake(
        str(path),
        _region_rows([4]),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction("stream", 7)]),
    )
    assert table.snapshot().app_transaction_version("stream") == 7
    assert table.append(_region_rows([5]), app_id="stream", app_version=7) is None
    assert table.append(_region_rows([5]), app_id="stream", app_version=8) == 4
    assert DeltaTable(str(path)).transaction_version("stream") == 8
    assert [r["id"] for r in assert_deltalake_agrees(table)] == [1, 2, 3, 4, 5]


# --- txnlog reads what deltalake writes, and keeps writing ------------------------------------


def _part_batch(start: int, n: int, part: str | None) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([part] * n, pa.string()),
            "v": pa.array([None if i % 4 == 0 else i / 2 for i in ids], pa.float64()),
        }
    )


def test_txnlog_reads_and_extends_deltalake_tables(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    rows: list[Row] = []
    expected: dict[int, list[Row]] = {}

    def landed(version: int) -> None:
        assert DeltaTable(path).version() == version
        expected[version] = sorted_rows(rows)

    def keep(drop: Callable[[Row], bool]) -> None:
        rows[:] = [r for r in rows if not drop(r)]

    write_deltalake(path, batch := _part_batch(0, 6, "a"), partition_by=["part"])
    rows += batch.to_pylist()
    landed(0)
    for version, batch in [(1, _part_batch(10, 6, "b")), (2, _part_batch(20, 6, None))]:
        write_deltalake(path, batch, mode="append")
        rows += batch.to_pylist()
        landed(version)
    DeltaTable(path).delete("id = 3 OR id = 21")
    keep(lambda r: r["id"] in (3, 21))
    landed(3)
    write_deltalake(path, batch := _part_batch(100, 8, "c"), mode="overwrite")
    rows[:] = batch.to_pylist()
    landed(4)
    for version, batch in [(5, _part_batch(200, 4, "a")), (6, _part_batch(210, 4, "c"))]:
        write_deltalake(path, batch, mode="append")
        rows += batch.to_pylist()
        landed(version)
    DeltaTable(path).optimize.compact()
    landed(7)
    DeltaTable(path).create_checkpoint()
    assert (Path(path, LOG_DIR) / f"{7:020d}.checkpoint.parquet").exists()

    table = Table(path)
    assert table.snapshot().partition_columns == ("part",)
    for version, want in expected.items():
        assert assert_deltalake_agrees(table, version) == want, f"version {version}"
    assert_same_history(table)
    assert [h.commit_info.operation for h in table.history()[:5]] == ["OPTIMIZE", "WRITE", "WRITE", "WRITE", "DELETE"]

    # txnlog commits after deltalake's: an append and a copy-on-write delete.
    assert table.append(batch := _part_batch(300, 5, "b")) == 8
    rows += batch.to_pylist()
    expected[8] = sorted_rows(rows)
    assert copy_on_write(table, "part = 'c'", lambda r: _without(r, lambda x: x["id"] % 2 == 0), "DELETE") == 9
    keep(lambda r: r["part"] == "c" and r["id"] % 2 == 0)
    expected[9] = sorted_rows(rows)
    # ... and deltalake commits after txnlog's.
    write_deltalake(path, batch := _part_batch(400, 3, None), mode="append")
    rows += batch.to_pylist()
    landed(10)
    DeltaTable(path).delete("id = 301")
    keep(lambda r: r["id"] == 301)
    landed(11)

    for version, want in expected.items():
        assert assert_deltalake_agrees(table, version) == want, f"version {version}"
    assert_same_history(table)
    assert DeltaTable(path).history(1)[0]["operation"] == "DELETE"


# --- stats ------------------------------------------------------------------------------------

STATS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("small", pa.int32()),
        ("value", pa.float64()),
        ("name", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("flag", pa.bool_()),
        ("empty", pa.string()),
        ("part", pa.string()),
    ]
)


def _stats_batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "small": pa.array([(i * 7) % 11 for i in ids], pa.int32()),
            "value": [None if i % 3 == 0 else i / 3 for i in ids],
            "name": [None if 100 <= i < 200 and i % 4 == 1 else f"name-{i:04d}" for i in ids],
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids], pa.date32()),
            # Sub-millisecond parts: stats keep milliseconds, the min rounded down, the max up.
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i, microseconds=250) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
            "flag": [i % 2 == 0 for i in ids],
            "empty": pa.array([None] * n, pa.string()),
            "part": ["p0" if start < 200 else None] * n,
        },
        schema=STATS_SCHEMA,
    )


def _pyarrow_stats(column: pa.ChunkedArray) -> tuple[Any, Any, int]:
    """(min, max, null count) as Delta stats should hold them for this column of one file."""
    nulls = column.null_count
    if pa.types.is_boolean(column.type) or nulls == len(column):
        return None, None, nulls  # Delta keeps no min/max for booleans or all-null columns
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("us", tz="UTC"))
        low = pc.floor_temporal(pc.min(column), unit="millisecond")
        high = pc.ceil_temporal(pc.max(column), unit="millisecond")
        return low.as_py(), high.as_py(), nulls
    bounds = pc.min_max(column)
    return bounds["min"].as_py(), bounds["max"].as_py(), nulls


def test_deltalake_sees_txnlog_stats_and_prunes_with_them(tmp_path: Path) -> None:
    table = Table.create(tmp_path / "t", STATS_SCHEMA, partition_by=["part"])
    for start in (0, 100, 200, 300):  # one file each, with disjoint id ranges
        table.append(_stats_batch(start, 25))
    root = table.store.arrow_filesystem()[1]
    actions = {a["path"]: a for a in deltalake_add_actions(root).to_pylist()}
    assert sorted(actions) == sorted(table.snapshot().files().column("path").to_pylist())

    per_file: dict[str, dict[str, tuple[Any, Any, int]]] = {}
    for path, action in actions.items():
        data = pq.read_table(os.path.join(root, unquote(path)))
        assert action["num_records"] == data.num_rows
        per_file[path] = stats = {name: _pyarrow_stats(data.column(name)) for name in data.column_names}
        for name, (low, high, nulls) in stats.items():
            theirs = (action.get(f"min.{name}"), action.get(f"max.{name}"), action.get(f"null_count.{name}"))
            assert theirs == (low, high, nulls), f"{path} column {name}"

    # Files the stats cannot rule out are exactly the files with a matching row, for these
    # predicates; deltalake and txnlog must skip the others.
    predicates: dict[str, Callable[[dict[str, tuple[Any, Any, int]]], bool]] = {
        "id >= 150": lambda s: s["id"][1] >= 150,
        "id < 100": lambda s: s["id"][0] < 100,
        "value > 90": lambda s: s["value"][1] is not None and s["value"][1] > 90,
        "name IS NULL": lambda s: s["name"][2] > 0,
        "amount <= 30": lambda s: s["amount"][0] <= 30,
    }
    for predicate, may_match in predicates.items():
        want = sorted(p for p, s in per_file.items() if may_match(s))
        assert 0 < len(want) < len(per_file), predicate  # a predicate that prunes something
        theirs = DeltaTable(root).file_uris(file_pruning_predicate=predicate)
        assert sorted(os.path.relpath(u, root) for u in theirs) == sorted(unquote(p) for p in want), predicate
        assert sorted(table.snapshot().files(predicate).column("path").to_pylist()) == want, predicate
