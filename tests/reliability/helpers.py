"""Shared checks of the reliability tests: a table whose rows name the append that wrote them,
and the invariants every fault, crash and load test ends with."""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

import txnlog
import txnlog.errors
from txnlog.maintenance import validate

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


def rows(ids: list[int], writer: str = "main") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "writer": [writer] * len(ids)}, schema=SCHEMA)


def create(root: Path | str, appends: int = 0, properties: dict[str, str] | None = None) -> txnlog.Table:
    """A table with ``appends`` one-row appends of ids 1..appends."""
    table = txnlog.Table.create(str(root), SCHEMA, properties=properties or {})
    for i in range(1, appends + 1):
        table.append(rows([i]))
    return table


def ids_by_txnlog(uri: str, version: int | None = None) -> list[int]:
    snap = txnlog.Table(uri).snapshot(version)
    out: list[int] = []
    for u in snap.file_uris():
        out += pq.read_table(u.removeprefix("file://")).column("id").to_pylist()
    return sorted(out)


def ids_by_deltalake(uri: str, version: int | None = None) -> list[int]:
    dt = DeltaTable(uri) if version is None else DeltaTable(uri, version=version)
    return sorted(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def check_table(
    uri: str, *, acknowledged: set[int], attempted: set[int] | None = None, run_validate: bool = True
) -> list[int]:
    """The invariants after a fault, a crash or a load run: txnlog and deltalake read the same
    rows; validate finds no problem; every acknowledged id is there exactly once; nothing that
    was never attempted is there. Returns the ids."""
    ours = ids_by_txnlog(uri)
    theirs = ids_by_deltalake(uri)
    assert ours == theirs, "txnlog and deltalake disagree"
    doubled = [i for i, n in collections.Counter(ours).items() if n > 1]
    assert not doubled, f"ids committed twice: {doubled[:10]}"
    lost = acknowledged - set(ours)
    assert not lost, f"acknowledged commits lost: {sorted(lost)[:10]}"
    if attempted is not None:
        assert set(ours) <= attempted, f"rows nobody wrote: {sorted(set(ours) - attempted)[:10]}"
    if not run_validate:
        return ours
    report = validate(txnlog.Table(uri))
    assert report.ok, [p.to_dict() for p in report.problems]
    return ours


# --- the operations the fault and crash tests interrupt ----------------------------------------
# A table of versions 0 CREATE, 1..4 appends of ids 1..4, 5 a DELETE of id 1's file.

NEW_ID = 100
BEFORE = [2, 3, 4]
#: What each operation leaves when it completes.
DONE = {"commit": [*BEFORE, NEW_ID], "checkpoint": BEFORE, "expire": BEFORE, "vacuum": BEFORE, "restore": [1, 2]}
#: Stale leftovers of crashed writers that vacuum must remove (planted by prepare_vacuum).
LEFTOVERS = ["part-00000-aborted-c000.snappy.parquet", f"_delta_log/.{6:020d}.json.{'ab' * 16}.tmp"]


def base_table(root: Path) -> txnlog.Table:
    table = create(root, 4)
    with table.transaction("DELETE") as txn:
        files = txn.snapshot.files()
        paths = files.column("path").to_pylist()
        first = [i for i, p in enumerate(paths) if pq.read_table(root / p).column("id").to_pylist() == [1]]
        txn.remove_files(files.take(first))
    assert ids_by_txnlog(str(root)) == BEFORE
    return table


def prepare_vacuum(root: Path) -> None:
    """Give vacuum work: expire versions 0..4 (so id 1's removed file is referenced no more),
    plus an orphan data file of an aborted write and a stale temp file in _delta_log."""
    from txnlog.maintenance import expire

    expire(txnlog.Table(str(root)), retain_min=1, older_than=0)
    stamp = time.time() - 3600
    for name in LEFTOVERS:
        (root / name).write_bytes(b"left by a crashed writer")
        os.utime(root / name, (stamp, stamp))


def run_operation(operation: str, table: txnlog.Table) -> Any:
    from txnlog.maintenance import checkpoint, expire, restore

    if operation == "commit":
        # Idempotent by app id, so that re-running after a crash cannot apply it twice.
        return table.append(rows([NEW_ID]), app_id="reliability", app_version=1)
    if operation == "checkpoint":
        return checkpoint(table)
    if operation == "expire":
        return expire(table, retain_min=2, older_than=0)
    if operation == "vacuum":
        return clean(table)
    if operation == "restore":
        return restore(table, version=2)
    raise AssertionError(operation)


def clean(table: txnlog.Table) -> Any:
    """VACUUM with a zero retention and a clock a minute ahead: every unreferenced file goes."""
    from txnlog.maintenance import vacuum

    return vacuum(table, retention=0, force=True, now_ms=int(time.time() * 1000) + 60_000)


def leftovers(root: Path) -> list[str]:
    """Temp files anywhere, and data files no version the log still holds references."""
    table = txnlog.Table(str(root))
    latest = table.latest_version()
    referenced: set[str] = set()
    for version in range(latest, -1, -1):
        try:
            referenced |= set(table.snapshot(version).files().column("path").to_pylist())
        except txnlog.errors.VersionNotFoundError:
            break
    found = []
    for path in root.rglob("*"):
        relative = str(path.relative_to(root))
        if path.name.endswith(".tmp") or (path.suffix == ".parquet" and "_delta_log" not in relative and relative not in referenced):
            found.append(relative)
    return sorted(found)
