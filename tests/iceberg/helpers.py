"""Readers and writers the Iceberg export tests share: txnlog writes, deltalake, DuckDB and pyiceberg read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyiceberg.table import StaticTable

import txnlog
from tests.duckdb_delta import duckdb_delta
from txnlog.iceberg import DELTA_VERSION_KEY
from txnlog.write import delete_rows


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def canon(table: pa.Table, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Rows as sortable tuples of the named columns (order and Arrow types aside)."""
    columns = columns or table.column_names
    rows = table.select(columns).to_pylist()
    # Floats at float32 precision: a float32 partition value widened to double is the same value.
    return sorted(tuple(f"{r[c]:.6g}" if isinstance(r[c], float) else repr(r[c]) for c in columns) for r in rows)


def delta_rows(uri: str, version: int | None = None) -> pa.Table:
    return DeltaTable(local_path(uri), version=version).to_pyarrow_table()


def iceberg_table(uri: str) -> StaticTable:
    return StaticTable.from_metadata(uri)


def iceberg_rows(uri: str, snapshot_id: int | None = None, row_filter: Any = None) -> pa.Table:
    table = iceberg_table(uri)
    kwargs: dict[str, Any] = {}
    if snapshot_id is not None:
        kwargs["snapshot_id"] = snapshot_id
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    return table.scan(**kwargs).to_arrow()


def snapshots_by_delta_version(uri: str) -> dict[int, int]:
    """Delta version -> Iceberg snapshot id, from the snapshot summaries."""
    out: dict[int, int] = {}
    for s in iceberg_table(uri).metadata.snapshots:
        assert s.summary is not None
        version = int(s.summary.additional_properties[DELTA_VERSION_KEY])
        assert version not in out, f"two Iceberg snapshots for Delta version {version}"
        out[version] = s.snapshot_id
    return out


def _with_partitions(table: txnlog.Table, files: pa.Table) -> pa.Table:
    snap = table.snapshot()
    schema = snap.schema
    parts = []
    for row in files.to_pylist():
        data = pq.read_table(local_path(table.data_file_uri(row["path"])))
        pv = dict(row["partition_values"] or [])
        for name in snap.partition_columns:
            value = pv.get(name)
            data = data.append_column(name, pa.array([value] * data.num_rows, pa.string()).cast(schema.field(name).type))
        parts.append(data.select(schema.names).cast(schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def rewrite(table: txnlog.Table, predicate: str | None, keep: Callable[[pa.Table], pa.Array] | None, *, data_change: bool = True, operation: str = "DELETE") -> None:
    """Remove the files ``predicate`` selects and write back their rows ``keep`` selects (all rows
    when ``keep`` is None): a copy-on-write DELETE, or with ``data_change=False`` a compaction."""
    with table.transaction(operation) as txn:
        files = txn.filter_files(predicate)
        data = _with_partitions(table, files)
        if keep is not None:
            data = data.filter(keep(data))
        txn.remove_files(files, data_change=data_change)
        if data.num_rows:
            txn.write(data, data_change=data_change)


def overwrite(table: txnlog.Table, data: pa.Table) -> None:
    with table.transaction("WRITE", operation_parameters={"mode": "Overwrite"}) as txn:
        txn.remove_files(txn.filter_files(None))
        txn.write(data)


def keep_not(column: str, value: Any) -> Callable[[pa.Table], pa.Array]:
    return lambda t: pc.fill_null(pc.not_equal(t[column], value), True)


def _flat(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t))


def same_rows(got: pa.Table, expected: pa.Table, columns: list[str]) -> bool:
    """Whether two tables hold the same rows (as multisets) in ``columns``; column-wise with Arrow
    when every column is flat (large corpus tables), else through :func:`canon`."""
    if got.num_rows != expected.num_rows:
        return False
    if not all(_flat(expected.schema.field(c).type) for c in columns):
        return canon(got, columns) == canon(expected, columns)
    # pyiceberg 0.12 hands back a double identity-partition value at float precision (it writes
    # 9.9 as an 8-byte double and reads 9.899999618530273): compare floating columns as float32.
    def normal(t: pa.Table, c: str) -> pa.ChunkedArray:
        target = expected.schema.field(c).type
        return t[c].cast(pa.float32()) if pa.types.is_floating(target) else t[c].cast(target)

    a = pa.table({c: normal(got, c) for c in columns})
    b = pa.table({c: normal(expected, c) for c in columns})
    keys = [(c, "ascending") for c in columns]
    return a.sort_by(keys).combine_chunks().equals(b.sort_by(keys).combine_chunks())


def duckdb_rows(uri: str) -> pa.Table:
    """The table's rows as DuckDB's delta_scan (delta-kernel-rs) reads them: an independent
    reader of deletion vectors (deltalake 1.6 refuses tables with them)."""
    con = duckdb_delta()
    return con.sql(f"select * from delta_scan('{uri}')").fetch_arrow_table()


def delete_rows_where(table: txnlog.Table, gone: Callable[[pa.Table], pa.Array], *, max_inline_bytes: int = 0) -> txnlog.CommitResult:
    """A merge-on-read DELETE (as txnlog's DML does it): the rows ``gone`` selects are marked in
    deletion vectors, unioned with the vectors files already have, in one commit."""
    snapshot = table.snapshot()
    files, context = snapshot.files(), snapshot.read_context()
    positions = []
    for i in range(files.num_rows):
        rows = context.read(files.slice(i, 1), row_index="__pos")
        positions.append(rows.filter(gone(rows))["__pos"].combine_chunks())
    deletes = delete_rows(table.store, files, positions, context.deleted_rows(files), max_inline_bytes=max_inline_bytes)
    with table.transaction("DELETE") as txn:
        txn.remove_files(deletes.removed)
        txn.add_files(deletes.added)
    assert txn.result is not None
    return txn.result
