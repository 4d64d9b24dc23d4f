"""A store SDK's own exception while a data file is written reaches the caller as a
StorageError naming the file, and nothing is committed (botocore's errors are not OSErrors:
a flaky S3 endpoint once sent EndpointConnectionError straight through Table.append)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import StorageError
from txnlog.storage import open_store
from txnlog.testing import FaultInjectingStore

botocore_exceptions = pytest.importorskip("botocore.exceptions")


def test_an_sdk_error_on_a_data_file_is_a_storage_error_and_commits_nothing(tmp_path):
    uri = str(tmp_path / "t")
    Table.create(uri, pa.schema([("x", pa.int64())]))
    store = FaultInjectingStore(open_store(uri))
    store.fail(
        "write_data",
        error=lambda operation, path: botocore_exceptions.EndpointConnectionError(endpoint_url=f"http://127.0.0.1:1/{path}"),
    )
    table = Table(uri, store=store)
    with pytest.raises(StorageError, match=r"part-.*\.parquet") as caught:
        table.append(pa.table({"x": [1, 2]}))
    assert isinstance(caught.value.__cause__, botocore_exceptions.EndpointConnectionError)
    assert Table(uri).latest_version() == 0

    table.append(pa.table({"x": [3]}))  # the rule is spent: the next append lands
    assert Table(uri).snapshot().files().num_rows == 1
