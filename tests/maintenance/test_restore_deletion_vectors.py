"""RESTORE across deletes by deletion vector: the restored adds carry the vectors the target
version had (none before the first delete), the removes carry the current ones, and the table
then reads the target version's rows in txnlog and DuckDB. Vacuum keeps the vector files a
retained version needs; one that is gone anyway makes restore refuse, naming it."""

from __future__ import annotations

import time

import orjson
import pytest

import txnlog
from tests.dv_tables import build_dv, delete_where, duckdb_ids, dv_files, txnlog_ids
from txnlog.errors import MissingFilesError
from txnlog.maintenance import restore, vacuum

from .conftest import DAY_MS

pytest.importorskip("pyroaring")


def _three_deletes(table: txnlog.Table) -> None:
    delete_where(table, lambda v: v % 7 == 0)  # 3: both files get vectors in one file
    delete_where(table, lambda v: v == 22)  # 4: the second file's vector grows
    delete_where(table, lambda v: v == 2)  # 5: the first file's vector grows


def _actions(table: txnlog.Table, version: int, kind: str) -> dict[str, dict | None]:
    """path -> deletionVector of the ``kind`` actions (add/remove) of commit ``version``."""
    text = table.store.read(f"_delta_log/{version:020d}.json")
    bodies = [obj[kind] for obj in map(orjson.loads, text.splitlines()) if kind in obj]
    return {b["path"]: b.get("deletionVector") for b in bodies}


def _vectors_at(table: txnlog.Table, version: int) -> dict[str, str | None]:
    files = table.snapshot(version).files()
    return {
        p: None if d is None else d["path_or_inline_dv"] + "@" + str(d["offset"])
        for p, d in zip(files.column("path").to_pylist(), files.column("deletion_vector").to_pylist())
    }


def _unique(dv: dict | None) -> str | None:
    return None if dv is None else dv["pathOrInlineDv"] + "@" + str(dv["offset"])


@pytest.mark.parametrize("target", [2, 3, 4])
def test_restore_brings_back_the_vectors_of_the_target_version(tmp_path, target):
    table = build_dv(tmp_path / "t")
    _three_deletes(table)
    current = _vectors_at(table, 5)
    wanted = _vectors_at(table, target)
    result = restore(table, version=target)
    assert result.version == 6

    adds, removes = _actions(table, 6, "add"), _actions(table, 6, "remove")
    assert {p: _unique(d) for p, d in adds.items()} == {p: v for p, v in wanted.items() if current.get(p) != v}
    assert {p: _unique(d) for p, d in removes.items()} == {p: v for p, v in current.items() if wanted.get(p) != v}
    assert _vectors_at(table, 6) == wanted
    assert txnlog_ids(table) == duckdb_ids(table.uri) == txnlog_ids(table, target)


def test_restore_then_delete_again_unions_with_the_restored_vector(tmp_path):
    table = build_dv(tmp_path / "t")
    _three_deletes(table)
    restore(table, version=3)
    delete_where(table, lambda v: v == 30)
    expected = [v for v in range(40) if v % 7 and v != 30]
    assert txnlog_ids(table) == duckdb_ids(table.uri) == expected


def test_vacuum_keeps_what_restoring_a_retained_version_needs(tmp_path):
    table = build_dv(tmp_path / "t")
    _three_deletes(table)
    expected = txnlog_ids(table, 3)
    vacuum(table, retention="0s", force=True, now_ms=int(time.time() * 1000) + DAY_MS)
    restore(table, version=3)
    assert txnlog_ids(table) == duckdb_ids(table.uri) == expected


def test_restore_refuses_when_a_vector_file_is_missing(tmp_path):
    table = build_dv(tmp_path / "t")
    delete_where(table, lambda v: v % 7 == 0)
    (first,) = dv_files(table)
    delete_where(table, lambda v: v in (2, 22))
    (tmp_path / "t" / first).unlink()
    with pytest.raises(MissingFilesError) as err:
        restore(table, version=3)
    assert set(err.value.paths) == {first}
    assert first in str(err.value) and table.latest_version() == 4
