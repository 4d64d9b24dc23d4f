"""Tables with deletion vectors for tests: rows deleted through ``txnlog.write.delete_rows``
in a DELETE commit (as the DML layers do), the vector files they leave, and the rows txnlog and
DuckDB's ``delta_scan`` (delta-kernel-rs, an independent reader that applies deletion vectors)
read from them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import txnlog
from tests.duckdb_delta import duckdb_delta

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])

DV_PROPERTIES = {"delta.enableDeletionVectors": "true"}


def build_dv(path: Path | str, rows: int = 40, files: int = 2) -> txnlog.Table:
    """A table with deletion vectors enabled (CREATE at 0), ``files`` appends of ``rows // files``
    rows each, ids 0..rows-1, all in partition 'a'; no row deleted yet."""
    table = txnlog.Table.create(str(path), SCHEMA, partition_by=["part"], properties=DV_PROPERTIES)
    per_file = rows // files
    for start in range(0, rows, per_file):
        table.append(pa.table({"id": list(range(start, start + per_file)), "part": ["a"] * per_file}))
    return table


def delete_where(table: txnlog.Table, gone: Callable[[int], bool], **delete_options: Any) -> txnlog.write.RowDeletes:
    """Delete (by deletion vector, one DELETE commit) the rows whose ``id`` satisfies ``gone``.
    Vectors go to a ``deletion_vector_<uuid>.bin`` file unless ``max_inline_bytes`` says otherwise."""
    delete_options.setdefault("max_inline_bytes", 0)
    snapshot = table.snapshot()
    files, ctx = snapshot.files(), snapshot.read_context()
    positions = []
    for i in range(files.num_rows):
        rows = ctx.read(files.slice(i, 1), columns=["id"], row_index="__pos")
        doomed = pa.array([gone(v) for v in rows["id"].to_pylist()], pa.bool_())
        positions.append(rows.filter(doomed)["__pos"].combine_chunks())
    deletes = txnlog.write.delete_rows(table.store, files, positions, ctx.deleted_rows(files), **delete_options)
    with table.transaction("DELETE") as txn:
        txn.remove_files(deletes.removed)
        txn.add_files(deletes.added)
        txn.set_operation_metrics(**deletes.metrics())
    return deletes


def dv_files(table: txnlog.Table) -> set[str]:
    """The deletion vector files under the table root."""
    return {f.path for f in table.store.walk_files("") if f.name.startswith("deletion_vector_")}


def live_dv_files(snapshot: txnlog.Snapshot) -> set[str]:
    """The deletion vector files the live files of ``snapshot`` name."""
    from txnlog.log import dv_file_path

    dvs = snapshot.files().column("deletion_vector").to_pylist()
    return {p for d in dvs if d for p in [dv_file_path(d["storage_type"], d["path_or_inline_dv"])] if p}



def duckdb_ids(uri: str) -> list[int]:
    """The sorted ids DuckDB's ``delta_scan`` reads at the latest version of ``uri``."""
    con = duckdb_delta()
    return sorted(row[0] for row in con.sql(f"select id from delta_scan('{uri}')").fetchall())


def duckdb_rows(uri: str, columns: list[str]) -> list[str]:
    """The rows (as sorted texts of their dicts, for comparing with :func:`txnlog_rows`) DuckDB
    reads at the latest version of ``uri``."""
    selected = ", ".join(f'"{c}"' for c in columns)
    con = duckdb_delta()
    rows = con.sql(f"select {selected} from delta_scan('{uri}')").fetchall()
    return sorted(str(dict(zip(columns, row))) for row in rows)


def txnlog_rows(table: txnlog.Table, columns: list[str]) -> list[str]:
    return sorted(map(str, table.snapshot().to_arrow(columns=columns).to_pylist()))


def txnlog_ids(table: txnlog.Table, version: int | None = None) -> list[int]:
    return sorted(table.snapshot(version).to_arrow(columns=["id"])["id"].to_pylist())
