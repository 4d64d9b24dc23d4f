"""A whole table on moto's S3 server: commits go through conditional PUTs, a second writer's
PUT of the same version is refused, races resolve, and delta-rs reads the result."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import ConcurrentAppendError, FileAlreadyExistsError
from txnlog.log.filenames import commit_path

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def rows(ids, region="EU"):
    return pa.table({"id": list(ids), "region": [region] * len(ids)}, schema=SCHEMA)


def test_table_on_s3_commits_put_if_absent(s3_bucket, moto_s3):
    uri = f"{s3_bucket}/tables/events"
    table = Table.create(uri, SCHEMA, partition_by=["region"], storage_options=moto_s3)
    assert table.append(rows([1, 2])) == 1
    assert table.append(rows([3], "US")) == 2

    # A second writer putting the same version is refused by the conditional PUT.
    original = table.store.read(commit_path(2))
    with pytest.raises(FileAlreadyExistsError):
        Table(uri, storage_options=moto_s3).store.put_if_absent(commit_path(2), b'{"commitInfo":{}}\n')
    assert table.store.read(commit_path(2)) == original

    # Two transactions from the same snapshot: the blind append retries at the next version,
    # the reader of EU loses to it with a precise conflict.
    other = Table(uri, storage_options=moto_s3)
    blind = other.transaction()
    blind.write(rows([10]))
    reader = table.transaction("UPDATE")
    reader.remove_files(reader.filter_files("region = 'EU'"))
    table.append(rows([4]))
    assert blind.commit() == 4 and blind.result.attempts == 2
    with pytest.raises(ConcurrentAppendError):
        reader.commit()

    snap = Table(uri, storage_options=moto_s3).snapshot()
    assert snap.version == 4 and snap.num_files == 4

    deltalake = pytest.importorskip("deltalake")
    dt = deltalake.DeltaTable(uri, storage_options=moto_s3)
    assert dt.version() == 4
    their_paths = pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()
    assert sorted(their_paths) == sorted(snap.files().column("path").to_pylist())
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4, 10]


def test_expiry_races(s3_bucket, moto_s3, expiry_race):
    expiry_race(f"{s3_bucket}/tables/racing", moto_s3)
