"""Helpers for maintenance tests: small real tables (Parquet files deltalake can read), commit
files aged by setting their modification time, and reading a version with both libraries."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import txnlog

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
DAY_MS = 86_400_000


def build(path: Path | str, versions: int, properties: dict[str, str] | None = None) -> txnlog.Table:
    """A table at ``versions`` (CREATE at 0, then one one-row append per version)."""
    table = txnlog.Table.create(str(path), SCHEMA, partition_by=["part"], properties=properties or {})
    for i in range(1, versions + 1):
        table.append(pa.table({"id": [i], "part": ["a" if i % 2 else "b"]}))
    return table


def age(table: txnlog.Table, versions: range | list[int], days: float) -> None:
    """Date the commit files of ``versions`` ``days`` ago (how Delta dates commits without ICT)."""
    root = table.uri.removeprefix("file://")
    stamp = time.time() - days * 86_400
    for v in versions:
        os.utime(os.path.join(root, "_delta_log", f"{v:020d}.json"), (stamp, stamp))


def log_names(table: txnlog.Table) -> list[str]:
    return sorted(os.listdir(os.path.join(table.uri.removeprefix("file://"), "_delta_log")))


def commit_versions(table: txnlog.Table) -> list[int]:
    return sorted(int(n[:20]) for n in log_names(table) if n.endswith(".json") and n[:20].isdigit() and len(n) == 25)


def checkpoint_versions(table: txnlog.Table) -> list[int]:
    return sorted({int(n[:20]) for n in log_names(table) if ".checkpoint." in n})


def files_of(table: txnlog.Table, version: int) -> set[str]:
    return set(table.snapshot(version).files().column("path").to_pylist())


def read_with_both(uri: str, version: int) -> tuple[set[str], set[str], list[int], list[int]]:
    """(txnlog paths, deltalake paths, txnlog's ids from the files it lists, deltalake's rows) at ``version``."""
    import pyarrow.parquet as pq

    ours = txnlog.Table(uri).snapshot(version)
    our_paths = set(ours.files().column("path").to_pylist())
    our_ids = sorted(i for u in ours.file_uris() for i in pq.read_table(u.removeprefix("file://")).column("id").to_pylist())
    theirs = DeltaTable(uri, version=version)
    root = uri.removeprefix("file://") + "/"
    their_paths = {u.removeprefix("file://").removeprefix(root) for u in theirs.file_uris()}
    their_ids = sorted(theirs.to_pyarrow_table().column("id").to_pylist())
    return our_paths, their_paths, our_ids, their_ids


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    return tmp_path / "t"
