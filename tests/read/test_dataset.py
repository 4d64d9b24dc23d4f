"""``Snapshot.to_pyarrow_dataset()`` and the reads built on it: a lazy pyarrow Dataset with
partition values, column mapping and deletion vectors applied, that DuckDB, Polars and pyarrow
push projections and filters into; ``to_pandas``/``to_polars`` with columns and a filter in SQL,
pyarrow or DNF form; streaming that reads files as it goes. deltalake and DuckDB's delta_scan
are the oracles."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import deltalake
import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import txnlog
from tests.duckdb_delta import duckdb_delta
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPredicateError, StorageError
from txnlog.read import TableDataset
from txnlog.read import dataset as dataset_module

pytest.importorskip("pyroaring")

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64()), ("day", pa.date32())])


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": ids, "region": ["EU" if i % 3 else "US" for i in ids], "amount": [i * 1.5 if i % 7 else None for i in ids],
         "day": [dt.date(2024, 1, i % 28 + 1) for i in ids]},
        schema=SCHEMA,
    )


def _table(path: Path, properties: dict[str, str] | None = None, files: int = 6, rows: int = 20) -> txnlog.Table:
    table = txnlog.Table.create(str(path), SCHEMA, partition_by=["region"], properties=properties or {})
    for f in range(files):
        table.append(_rows(f * rows, rows))
    return table


KINDS = {
    "plain": {},
    "deletion-vectors": {"delta.enableDeletionVectors": "true"},
    "column-mapping": {"delta.columnMapping.mode": "name"},
    "both": {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "id"},
}


def _by_id(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


@pytest.fixture(params=list(KINDS))
def table(request: pytest.FixtureRequest, tmp_path: Path) -> txnlog.Table:
    table = _table(tmp_path / "t", KINDS[request.param])
    table.delete("id % 5 = 0")  # deletion vectors where enabled, rewritten files elsewhere
    return table


def test_the_dataset_holds_the_rows_the_table_holds(table: txnlog.Table) -> None:
    snapshot = table.snapshot()
    dataset = snapshot.to_pyarrow_dataset()
    assert isinstance(dataset, ds.Dataset) and isinstance(dataset, TableDataset)
    assert dataset.schema == snapshot.to_arrow().schema == pa.schema([f.remove_metadata() for f in SCHEMA])
    rows = dataset.to_table()
    assert _by_id(rows) == _by_id(snapshot.to_arrow()) and rows.num_rows == 96
    # DuckDB 1.4.4's delta_scan reads partition columns of column-mapped tables as NULL: compare the rest there.
    columns = "id, amount, day" if snapshot.table_configuration.is_column_mapped else "*"
    con = duckdb_delta()
    theirs = con.sql(f"select {columns} from delta_scan('{table.uri}')").fetch_arrow_table()
    assert _by_id(rows.select(theirs.column_names)) == _by_id(theirs.cast(rows.select(theirs.column_names).schema))
    assert dataset.count_rows() == 96 and dataset.count_rows(filter=pc.field("region") == "US") == 32


def test_duckdb_and_polars_push_projections_and_filters_into_it(table: txnlog.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = table.snapshot()
    listed: list[int] = []
    scan = dataset_module.scan

    def counting(context: Any, files: pa.Table, **options: Any) -> ds.Scanner:
        listed.append(files.num_rows)
        return scan(context, files, **options)

    monkeypatch.setattr(dataset_module, "scan", counting)
    scans: list[dict[str, Any]] = []
    scanner = TableDataset.scanner

    def recording(self: TableDataset, columns: Any = None, filter: Any = None, **options: Any) -> ds.Scanner:  # noqa: A002
        scans.append({"columns": columns, "filter": filter})
        return scanner(self, columns=columns, filter=filter, **options)

    monkeypatch.setattr(TableDataset, "scanner", recording)
    dataset = snapshot.to_pyarrow_dataset()
    expected = sorted((r["id"], r["amount"]) for r in snapshot.to_arrow().to_pylist() if r["region"] == "US" and r["id"] >= 100)

    got = duckdb.sql("select id, amount from dataset where region = 'US' and id >= 100 order by id").fetchall()
    assert got == expected
    assert set(scans[-1]["columns"]) <= {"id", "amount", "region"} and scans[-1]["filter"] is not None
    assert listed[-1] < snapshot.num_files  # files were skipped by partition values and stats

    frame = pl.scan_pyarrow_dataset(dataset).filter((pl.col("region") == "US") & (pl.col("id") >= 100)).select("id", "amount").collect()
    assert sorted(frame.iter_rows()) == expected
    assert scans[-1]["filter"] is not None and listed[-1] < snapshot.num_files


def test_filters_in_sql_pyarrow_and_dnf_forms_read_the_same_rows_as_deltalake(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    table.delete("id % 5 = 0")
    snapshot = table.snapshot()
    theirs = deltalake.DeltaTable(table.uri)
    dnf = [[("region", "=", "US"), ("id", "<", 50)], [("amount", ">", 150.0)]]
    expected = theirs.to_pandas(filters=dnf, columns=["id", "amount"]).sort_values("id").reset_index(drop=True)
    for predicate in (dnf, "(region = 'US' AND id < 50) OR amount > 150", ((pc.field("region") == "US") & (pc.field("id") < 50)) | (pc.field("amount") > 150)):
        ours = snapshot.to_pandas(["id", "amount"], predicate).sort_values("id").reset_index(drop=True)
        assert ours.equals(expected), predicate
        assert sorted(snapshot.to_polars(["id", "amount"], predicate)["id"].to_list()) == expected["id"].tolist()
        dataset_rows = snapshot.to_pyarrow_dataset().to_table(["id", "amount"], filter=snapshot.predicate(predicate).row_filter())
        assert _by_id(dataset_rows) == _by_id(pa.Table.from_pandas(expected))
    not_in = [("amount", "not in", [1.5, 3.0])]  # pyarrow's and deltalake's not in: the nulls are in
    assert sorted(snapshot.to_arrow("id", not_in).column("id").to_pylist()) == sorted(theirs.to_pyarrow_table(filters=not_in).column("id").to_pylist())
    pyarrow_filter = pc.field("day") >= pa.scalar(dt.date(2024, 1, 20))
    assert _by_id(snapshot.to_arrow(None, pyarrow_filter)) == _by_id(theirs.to_pyarrow_table(filters=pyarrow_filter))


def test_a_filter_only_pyarrow_computes_still_filters_the_dataset_but_not_to_arrow(table: txnlog.Table) -> None:
    snapshot = table.snapshot()
    reversed_is_ue = pc.utf8_reverse(pc.field("region")) == "UE"
    rows = snapshot.to_pyarrow_dataset().to_table(filter=reversed_is_ue)
    assert rows.num_rows == 64 and set(rows.column("region").to_pylist()) == {"EU"}
    with pytest.raises(InvalidPredicateError, match=r"utf8_reverse\(\)"):
        snapshot.to_arrow(None, reversed_is_ue)
    with pytest.raises(InvalidPredicateError, match="unknown column 'nope'"):
        snapshot.to_pyarrow_dataset().to_table(filter=pc.field("nope") > 1)
    with pytest.raises(InvalidArgumentError, match="nope"):
        snapshot.to_pyarrow_dataset().to_table(columns=["nope"])


def test_the_dataset_is_lazy_and_streaming_reads_files_as_it_goes(tmp_path: Path) -> None:
    table = txnlog.Table.create(str(tmp_path / "t"), SCHEMA)
    for f in range(30):
        table.append(_rows(f * 10, 10))
    snapshot = table.snapshot()
    dataset = snapshot.to_pyarrow_dataset()  # reads no data file
    last = snapshot.files().column("path").to_pylist()[-1]
    os.unlink(tmp_path / "t" / last)
    seen = 0
    with pytest.raises(StorageError) as caught:
        for batch in snapshot.to_batches(batch_rows=5):
            seen += batch.num_rows
    assert last in str(caught.value) and "does not exist" in str(caught.value) and caught.value.path == last
    assert seen >= 200  # rows of the files before it came out before the last file was opened
    with pytest.raises(StorageError, match="does not exist"):
        dataset.to_table()
    assert dataset.count_rows() == 300  # from the log's numRecords: no data read
    assert dataset.head(3).num_rows == 3


def test_other_dataset_calls(table: txnlog.Table) -> None:
    snapshot = table.snapshot()
    dataset = snapshot.to_pyarrow_dataset()
    eu = dataset.filter(pc.field("region") == "EU")
    assert isinstance(eu, TableDataset) and eu.count_rows() == 64 and eu.count_rows(filter=pc.field("id") < 20) == 11
    assert eu.to_table(columns=["id"]).num_rows == 64
    assert dataset.take([0, 1]).num_rows == 2
    assert dataset.sort_by("id").to_table(columns=["id"]).column("id").to_pylist()[:3] == [1, 2, 3]
    joined = dataset.join(snapshot.to_pyarrow_dataset(), keys="id", right_suffix="_r").to_table()
    assert joined.num_rows == 96
    assert dataset.scanner(columns={"twice": pc.field("id") * 2}, filter=pc.field("id") == 3).to_table().to_pylist() == [{"twice": 6}]


def test_cxx_consumers_are_refused_with_a_txnlog_error(table: txnlog.Table) -> None:
    dataset = table.snapshot().to_pyarrow_dataset()
    for consume in (
        lambda: ds.dataset([dataset]).to_table(),
        lambda: ds.Scanner.from_dataset(dataset).to_table(),
        lambda: acero.Declaration("scan", acero.ScanNodeOptions(dataset)).to_table(),
    ):
        with pytest.raises(InvalidArgumentTypeError, match="scanner"):
            consume()
    scanner = dataset.scanner(columns=["id"], filter=pc.field("id") < 10)
    assert isinstance(scanner, ds.Scanner) == (not table.snapshot().table_configuration.is_column_mapped and table.snapshot().files().column("deletion_vector").null_count == table.snapshot().num_files)
    assert scanner.projected_schema.names == ["id"] and scanner.count_rows() == scanner.to_table().num_rows == scanner.to_reader().read_all().num_rows
    assert scanner.head(2).num_rows == 2 and sum(b.num_rows for b in scanner.to_batches()) == scanner.count_rows()
    with pytest.raises(InvalidArgumentTypeError, match="no fragments"):
        dataset.get_fragments()
    ds.write_dataset(dataset.scanner().to_reader(), table.uri.removeprefix("file://") + "-copy", format="parquet")  # the way round
    assert ds.dataset(table.uri.removeprefix("file://") + "-copy").count_rows() == 96


def test_to_pandas_and_to_polars_without_arguments(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", files=2)
    snapshot = table.snapshot()
    frame = snapshot.to_pandas()
    assert list(frame.columns) == ["id", "region", "amount", "day"] and len(frame) == 40
    polars_frame = snapshot.to_polars()
    assert polars_frame.columns == ["id", "region", "amount", "day"] and polars_frame.height == 40
    assert sorted(deltalake.DeltaTable(table.uri).to_pandas()["id"]) == sorted(frame["id"])


EXIT_SCRIPT = """
import sys
import time
import duckdb
import txnlog
from txnlog.storage import LocalLogStore, normalize_uri


class SlowStore(LocalLogStore):  # data files open slowly: scans are still reading at exit
    def open_input(self, path):
        if path.endswith(".parquet"):
            time.sleep(0.2)
        return super().open_input(path)


uri = normalize_uri(sys.argv[1])
snapshot = txnlog.Table(uri, store=SlowStore(uri, uri.removeprefix("file://"))).snapshot()
dataset = snapshot.to_pyarrow_dataset()
first = duckdb.sql("select * from dataset limit 5").fetchall()   # DuckDB keeps the stream open
pending = dataset.scanner().to_batches()                        # a scan left half read
next(iter(pending))
head = dataset.head(3)
reader = snapshot.to_batches(batch_rows=10)
next(iter(reader))
print(len(first), head.num_rows, flush=True)
"""


@pytest.mark.parametrize("kind", ["plain", "deletion-vectors", "column-mapping"])
def test_scans_left_unfinished_do_not_hang_or_abort_the_interpreter_at_exit(tmp_path: Path, kind: str) -> None:
    # pyarrow pulls a Python-fed scanner on its own threads; one still pulling when the
    # interpreter finalizes hangs or aborts the process (deltalake's datasets do).
    table = _table(tmp_path / "t", KINDS[kind], files=20)
    table.delete("id % 5 = 0")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, table.uri], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["5", "3"], proc.stderr[-2000:]
