"""Vacuum and expiry treat a deletion vector file like a data file: it stays while a retained
version's live files or a tombstone younger than the retention names it (also when other data
files' vectors in it are gone), and goes once none does and it is older than the retention;
a vector file no commit ever named (a crashed DELETE) goes after the retention. Locally, with
DuckDB reading what txnlog reads afterwards, and on an object store (memory://)."""

from __future__ import annotations

import os
import time

import pytest

import txnlog
from tests.dv_tables import build_dv, delete_where, duckdb_ids, dv_files, live_dv_files, txnlog_ids
from txnlog.log import dv_file_path
from txnlog.maintenance import expire, vacuum
from txnlog.write import write_deletion_vectors

from .conftest import DAY_MS, age

pytest.importorskip("pyroaring")


def _orphan_vector(table: txnlog.Table) -> str:
    """A vector file written as a DELETE would, whose commit never happened."""
    (descriptor,) = write_deletion_vectors(table.store, {"f": [1, 2, 3]}, max_inline_bytes=0).values()
    path = dv_file_path(descriptor.storage_type, descriptor.path_or_inline_dv)
    assert path is not None and table.store.exists(path)
    return path


def _superseded_vectors(table: txnlog.Table) -> tuple[str, str, str]:
    """Versions 3-5 of a :func:`build_dv` table: vector file ``first`` holds the vectors of both
    data files (3); the second file's vector moves to ``second`` (4), the first file's to
    ``third`` (5). Returns (first, second, third); only ``first`` is no longer live."""
    delete_where(table, lambda v: v % 7 == 0)
    (first,) = dv_files(table)
    delete_where(table, lambda v: v == 22)
    (second,) = dv_files(table) - {first}
    assert live_dv_files(table.snapshot()) == {first, second}  # the first data file still uses `first`
    delete_where(table, lambda v: v == 2)
    (third,) = dv_files(table) - {first, second}
    assert live_dv_files(table.snapshot()) == {second, third}
    return first, second, third


EXPECTED_IDS = [v for v in range(40) if v % 7 and v not in (2, 22)]


def test_vector_files_stay_while_a_retained_version_or_tombstone_names_them(tmp_path):
    table = build_dv(tmp_path / "t")
    first, second, third = _superseded_vectors(table)
    root = tmp_path / "t"
    month_ago = time.time() - 30 * 86_400
    for f in table.store.walk_files(""):
        os.utime(root / f.path, (month_ago, month_ago))
    orphan_old = _orphan_vector(table)
    os.utime(root / orphan_old, (month_ago, month_ago))
    orphan_young = _orphan_vector(table)

    # Every version is retained: versions 3 and 4 still read `first`.
    done = vacuum(table)
    assert done.files == (orphan_old,)
    assert dv_files(table) == {first, second, third, orphan_young}

    # Expire versions 0..5 (the checkpoint at 5 keeps the removes as tombstones): no retained
    # version reads `first` now, but its tombstones are younger than the 7-day retention.
    age(table, range(table.latest_version() + 1), days=60)
    assert expire(table, retain_min=1, limit=100).earliest_after == table.latest_version()
    assert not vacuum(table, dry_run=True).files

    # Eight days on, the tombstones have passed the retention: `first` goes, nothing else does.
    later = int(time.time() * 1000) + 8 * DAY_MS
    dry = vacuum(table, dry_run=True, now_ms=later)
    assert set(dry.files) == {first, orphan_young}
    vacuum(table, now_ms=later)
    assert dv_files(table) == {second, third}
    assert txnlog_ids(table) == duckdb_ids(table.uri) == EXPECTED_IDS


def test_expiry_alone_deletes_no_vector_file(tmp_path):
    table = build_dv(tmp_path / "t")
    vectors = set(_superseded_vectors(table))
    age(table, range(table.latest_version() + 1), days=60)
    result = expire(table, retain_min=1, limit=100)
    assert not [p for p in result.deleted_files if "deletion_vector" in p]
    assert dv_files(table) == vectors
    assert txnlog_ids(table) == duckdb_ids(table.uri) == EXPECTED_IDS


def test_a_vector_file_of_a_tagged_version_stays(tmp_path):
    from txnlog.maintenance import tags

    table = build_dv(tmp_path / "t")
    first, second, third = _superseded_vectors(table)
    tags.create(table, "before-second-delete", 3)
    age(table, range(table.latest_version() + 1), days=60)
    expire(table, retain_min=1, limit=100)
    later = int(time.time() * 1000) + 8 * DAY_MS
    vacuum(table, now_ms=later)
    assert dv_files(table) == {first, second, third}
    assert txnlog_ids(table, 3) == [v for v in range(40) if v % 7]


def test_on_an_object_store(memory_table_uri):
    table = build_dv(memory_table_uri)
    first, second, third = _superseded_vectors(table)
    orphan = _orphan_vector(table)
    now = int(time.time() * 1000)

    # All versions retained: only the orphan goes (once older than the retention).
    assert vacuum(table, dry_run=True, now_ms=now + 8 * DAY_MS).files == (orphan,)
    assert not vacuum(table, dry_run=True, now_ms=now).files

    later = now + 40 * DAY_MS  # past the 30-day log retention and the 7-day file retention
    assert expire(table, retain_min=1, limit=100, now_ms=later).earliest_after == table.latest_version()
    done = vacuum(table, now_ms=later)
    assert set(done.files) == {first, orphan}
    assert dv_files(table) == {second, third}
    assert txnlog_ids(txnlog.Table(memory_table_uri)) == EXPECTED_IDS
