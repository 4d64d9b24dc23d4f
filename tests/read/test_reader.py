"""The core reader (``txnlog.read``, ``Snapshot.to_arrow``): the rows DuckDB's ``delta_scan``
reads on every corpus table, deletion vectors applied, column mapping, partition values,
column selection and predicates, and errors that name the table, data file and vector."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txnlog
from tests.duckdb_delta import duckdb_delta
from txnlog.errors import InvalidArgumentError, StorageError, TxnLogError, UnsupportedFeatureError
from txnlog.log import DeletionVectorError
from txnlog.write.deletion_vectors import write_deletion_vectors

pytest.importorskip("pyroaring")



def _same_rows_as_duckdb(uri: str, ours: pa.Table) -> None:
    """``ours`` holds exactly the rows (with multiplicity) DuckDB's delta_scan reads at ``uri``."""
    con = duckdb_delta()
    con.register("ours", ours)
    columns = ", ".join(f'"{c}"' for c in ours.column_names)
    theirs = f"(select {columns} from delta_scan('{uri}'))"
    for a, b in ((f"(select {columns} from ours)", theirs), (theirs, f"(select {columns} from ours)")):
        extra = con.sql(f"select count(*) from ({a} except all {b})").fetchone()[0]
        assert extra == 0, f"{extra} row(s) of {a[:40]} are not in the other reader's rows"


def conformance_cases(root: Path, test: str) -> Iterator[Any]:
    for table in sorted((root / "tables").iterdir()):
        if (table / "_delta_log").is_dir():
            yield pytest.param(table, id=table.name)


def test_to_arrow_reads_the_rows_duckdb_reads(conformance_case: Path | None, conformance_dir: Path) -> None:
    assert conformance_case is not None
    try:
        snapshot = txnlog.Table(str(conformance_case)).snapshot()
    except (UnsupportedFeatureError, txnlog.errors.TableNotFoundError) as e:
        pytest.skip(f"txnlog does not open this table, on purpose: {e}")
    if snapshot.num_files == 0:
        # DuckDB 1.4.4's delta_scan of a table without files can hang: nothing to compare.
        assert snapshot.to_arrow().num_rows == 0
        return
    missing = [u for u in snapshot.file_uris() if not Path(u.removeprefix("file://")).exists()]
    if missing:
        pytest.skip(f"the corpus ships this table's log without its data files ({len(missing)} missing)")
    _same_rows_as_duckdb(str(conformance_case), snapshot.to_arrow())


def test_the_corpus_deletion_vectors_hide_the_rows_duckdb_hides(conformance_dir: Path) -> None:
    uri = str(conformance_dir / "tables" / "table-with-dv-small")
    snapshot = txnlog.Table(uri).snapshot()
    assert snapshot.files().column("deletion_vector").null_count == 0
    rows = snapshot.to_arrow()
    assert rows.num_rows == 8 and sorted(rows.column("value").to_pylist()) == [1, 2, 3, 4, 5, 6, 7, 8]
    _same_rows_as_duckdb(uri, rows)


# --- deletion vectors on tables txnlog writes --------------------------------------------------


def _mark_deleted(table: txnlog.Table, rows_by_file: Mapping[str, list[int]], *, max_inline_bytes: int = 0) -> None:
    """Commit deletion vectors for the given rows (replacing any a file has), as a DV-mode DELETE
    would: remove(path, old DV) + add(path, new DV)."""
    snapshot = table.snapshot()
    files = snapshot.files()
    descriptors = write_deletion_vectors(snapshot.store, rows_by_file, max_inline_bytes=max_inline_bytes)
    paths = files.column("path").to_pylist()
    dv_type = files.schema.field("deletion_vector").type
    targets = [i for i, p in enumerate(paths) if p in descriptors]
    chosen = files.take(targets)
    dvs = [descriptors[paths[i]] for i in targets]
    column = pa.array(
        [{"storage_type": d.storage_type, "path_or_inline_dv": d.path_or_inline_dv, "offset": d.offset,
          "size_in_bytes": d.size_in_bytes, "cardinality": d.cardinality, "max_row_index": d.max_row_index} for d in dvs],
        dv_type,
    )
    with table.transaction("DELETE") as txn:
        txn.remove_files(chosen)
        txn.add_files(chosen.set_column(chosen.schema.get_field_index("deletion_vector"), "deletion_vector", column))


# The partition column comes first: DuckDB's delta extension (duckdb-ext-delta for 1.4.4) reads a
# column-mapped partition column as NULL unless it is the schema's first column (txnlog, and
# delta-rs for the partition values, read them; the corpus's column-mapped table has it first).
SCHEMA = pa.schema([("part", pa.string()), ("id", pa.int64()), ("s", pa.struct([("x", pa.int32()), ("y", pa.string())]))])


def _rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {"part": ["a" if i % 3 else "b" for i in ids], "id": ids, "s": [{"x": i, "y": str(i)} if i % 5 else None for i in ids]},
        schema=SCHEMA,
    )


@pytest.mark.parametrize("mode", ["none", "name"])
@pytest.mark.parametrize("inline", [0, 1 << 20], ids=["file", "inline"])
def test_deletion_vectors_hide_their_rows_for_txnlog_and_duckdb(tmp_path: Path, mode: str, inline: int) -> None:
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"],
                                properties={"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": mode})
    table.append(_rows(list(range(100))))
    table.append(_rows(list(range(100, 150))))
    # Delete every 7th row of each file, by position.
    snapshot = table.snapshot()
    deleted_ids: set[int] = set()
    positions: dict[str, list[int]] = {}
    for path in snapshot.files().column("path").to_pylist():
        ids = snapshot.read_context().read(snapshot.files().filter(pa.compute.equal(snapshot.files().column("path"), path)),
                                           columns=["id"]).column("id").to_pylist()
        positions[path] = list(range(0, len(ids), 7))
        deleted_ids |= {ids[p] for p in positions[path]}
    _mark_deleted(table, positions, max_inline_bytes=inline)

    expected = _rows(sorted(set(range(150)) - deleted_ids))
    got = table.snapshot().to_arrow().sort_by("id")
    assert got.equals(expected.select(got.column_names))
    _same_rows_as_duckdb(uri, got)
    # Columns and a predicate: file skipping, then the row filter, after the deletion vectors.
    some = table.snapshot().to_arrow(["part", "id"], "id >= 140 OR s.x = 7").sort_by("id")
    assert some.column_names == ["part", "id"]
    assert some.column("id").to_pylist() == [i for i in sorted(set(range(150)) - deleted_ids) if i >= 140 or (i == 7 and i % 5)]


def test_a_vector_that_is_missing_truncated_or_corrupt_is_a_txnlog_error_naming_the_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txnlog.Table.create(uri, SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    table.append(_rows(list(range(50))))
    (path,) = table.snapshot().files().column("path").to_pylist()
    _mark_deleted(table, {path: [1, 2, 3]})
    (dv_file,) = tmp_path.joinpath("t").glob("deletion_vector_*.bin")
    good = dv_file.read_bytes()
    for damage, words in ((good[:-3], "bytes"), (good[:-1] + bytes([good[-1] ^ 1]), "CRC"), (None, "cannot read")):
        if damage is None:
            dv_file.unlink()
        else:
            dv_file.write_bytes(damage)
        with pytest.raises(DeletionVectorError, match=words) as caught:
            table.snapshot().to_arrow()
        assert path in str(caught.value) and uri in str(caught.value) and caught.value.path == path


def test_a_missing_data_file_is_a_storage_error_naming_it(tmp_path: Path) -> None:
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA)
    table.append(_rows([1, 2]))
    (uri,) = table.snapshot().file_uris()
    Path(uri.removeprefix("file://")).unlink()
    with pytest.raises(StorageError, match="does not exist"):
        table.snapshot().to_arrow()


def test_unknown_columns_are_refused_by_name(tmp_path: Path) -> None:
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        table.snapshot().to_arrow(["id", "nope"])


def test_one_column_name_as_a_string_is_that_column(tmp_path: Path) -> None:
    # A str is a Sequence[str]: read as one, "id" asked for columns 'i' and 'd'.
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA, properties={"delta.enableChangeDataFeed": "true"})
    table.append(_rows([1, 2]))
    snapshot = table.snapshot()
    assert snapshot.to_arrow("id").column_names == ["id"]
    assert snapshot.to_arrow("id").column("id").to_pylist() == [1, 2]
    assert [b.schema.names for b in snapshot.to_batches("part")] == [["part"]]
    assert table.changes(1, columns="id").column_names[0:2] == ["id", "_change_type"]


# --- against a plain-Arrow model --------------------------------------------------------------

BATCHES = st.lists(st.lists(st.integers(-1_000, 1_000), min_size=0, max_size=40), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=BATCHES, mode=st.sampled_from(["none", "name", "id"]), bound=st.integers(-1_000, 1_000))
def test_rows_read_are_the_rows_written(tmp_path_factory: pytest.TempPathFactory, batches: list[list[int]], mode: str, bound: int) -> None:
    uri = str(tmp_path_factory.mktemp("t") / "t")
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["part"], properties={"delta.columnMapping.mode": mode})
    for ids in batches:
        if ids:
            table.append(_rows(ids))
    written = sorted(i for ids in batches for i in ids)
    snapshot = table.snapshot()
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == written
    assert sorted(snapshot.to_arrow(["id"], f"id < {bound} AND part = 'a'").column("id").to_pylist()) == [
        i for i in written if i < bound and i % 3
    ]
    batches_read = list(snapshot.to_batches(["s", "id"], batch_rows=7))
    assert all(b.num_rows <= 7 and b.schema.names == ["s", "id"] for b in batches_read)


def test_read_context_pickles_and_reads_the_same_elsewhere(tmp_path: Path) -> None:
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA, partition_by=["part"], properties={"delta.columnMapping.mode": "name"})
    table.append(_rows(list(range(20))))
    snapshot = table.snapshot()
    context = pickle.loads(pickle.dumps(snapshot.read_context()))
    assert context.read(snapshot.files()).sort_by("id").equals(snapshot.to_arrow().sort_by("id"))
    assert isinstance(context, txnlog.ReadContext) and context.version == snapshot.version


def test_errors_are_txnlog_errors() -> None:
    assert issubclass(DeletionVectorError, TxnLogError)


def _rows_at_equal_the_rows_read(table: txnlog.Table, positions_of: Any, **options: Any) -> int:
    """For each file: ``read(rows_at=P)`` is ``read()`` kept to row positions P (dropping the
    ones its deletion vector deletes); how many files had a row group left unread."""
    snapshot = table.snapshot()
    ctx, files = snapshot.read_context(), snapshot.files()
    for i in range(files.num_rows):
        file = files.slice(i, 1)
        every = ctx.read(file, row_index="_pos", **options)
        total = pq.ParquetFile(snapshot.file_uris()[i].removeprefix("file://")).metadata.num_rows
        wanted = positions_of(total)
        taken = ctx.read(file, row_index="_pos", rows_at=np.array(wanted, dtype=np.int64), **options)
        expected = every.filter(pa.compute.is_in(every.column("_pos"), pa.array(wanted, pa.int64())))
        assert taken.schema == every.schema
        assert taken.to_pylist() == expected.to_pylist()
    return files.num_rows


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 60), group=st.integers(1, 25), data=st.data())
def test_rows_at_read_only_those_rows_of_any_row_group(tmp_path_factory: pytest.TempPathFactory, n: int, group: int, data: Any) -> None:
    # deltalake writes row groups of `group` rows, dictionary-encoded strings and binaries.
    uri = str(tmp_path_factory.mktemp("t") / "t")
    rows = pa.table({"id": list(range(n)), "name": [f"n{i % 3}" for i in range(n)],
                     "blob": [None if i % 4 == 0 else bytes([i % 5]) for i in range(n)], "unique": [f"u{i}" * 3 for i in range(n)]},
                    schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("blob", pa.binary()), ("unique", pa.string())]))
    deltalake.write_deltalake(uri, rows, writer_properties=deltalake.WriterProperties(max_row_group_size=group))
    table = txnlog.Table(uri)
    table.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    gone = data.draw(st.sets(st.integers(0, n - 1)))
    if gone:
        table.delete(f"id IN ({', '.join(map(str, sorted(gone)))})")
    picked = sorted(data.draw(st.sets(st.integers(0, n - 1))))
    for columns in (None, ["unique", "name"], []):
        _rows_at_equal_the_rows_read(table, lambda total: [p for p in picked if p < total], columns=columns)


@pytest.mark.parametrize("mode", ["name", "id"])
def test_rows_at_carry_partitions_mapped_columns_and_row_ids(tmp_path: Path, mode: str) -> None:
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA, partition_by=["part"], properties={
        "delta.enableDeletionVectors": "true", "delta.columnMapping.mode": mode, "delta.enableRowTracking": "true"})
    table.append(_rows(list(range(40))))
    table.update("id % 7 = 0", {"id": "id + 1000"})  # materialized row ids in a new file
    table.delete("id % 5 = 1")
    n = _rows_at_equal_the_rows_read(table, lambda total: list(range(0, total, 3)), row_id="_id", row_commit_version="_version")
    assert n >= 3  # two partitions, and the updated rows' file

    file = table.snapshot().files().slice(0, 1)
    with pytest.raises(InvalidArgumentError, match=r"data file .* ascending positions below its \d+ rows"):
        table.snapshot().read_context().read(file, rows_at=np.array([3, 1]))
    with pytest.raises(InvalidArgumentError, match="one data file"):
        table.snapshot().read_context().read(table.snapshot().files(), rows_at=np.array([0]))
