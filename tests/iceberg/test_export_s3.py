"""The export on moto's S3 server: metadata goes through the table's store (conditional PUT for the
metadata file), and pyiceberg reads the table through its own S3 FileIO."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

import txnlog
from txnlog.errors import FileAlreadyExistsError
from txnlog.iceberg import export

from .helpers import canon

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def test_export_on_s3_reads_back_through_pyiceberg(s3_bucket, moto_s3):
    uri = f"{s3_bucket}/tables/events"
    table = txnlog.Table.create(uri, SCHEMA, partition_by=["region"], storage_options=moto_s3)
    table.append(pa.table({"id": [1, 2], "region": ["EU", "US"]}, schema=SCHEMA))
    first = export(uri, storage_options=moto_s3)
    table.append(pa.table({"id": [3], "region": ["EU"]}, schema=SCHEMA))
    second = export(uri, storage_options=moto_s3)
    assert first.rebuilt and not second.rebuilt and len(second.snapshot_ids) == 1
    assert second.metadata_location == f"{uri}/metadata/v2.metadata.json"
    # The metadata file is put-if-absent on S3 too: a racing exporter cannot overwrite it.
    with pytest.raises(FileAlreadyExistsError):
        table.store.put_if_absent("metadata/v2.metadata.json", b"{}")
    io_props = {
        "s3.endpoint": moto_s3["AWS_ENDPOINT_URL"],
        "s3.access-key-id": moto_s3["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": moto_s3["AWS_SECRET_ACCESS_KEY"],
        "s3.region": moto_s3["AWS_REGION"],
    }
    iceberg = StaticTable.from_metadata(second.metadata_location, properties=io_props)
    rows = iceberg.scan().to_arrow()
    assert canon(rows, ["id", "region"]) == canon(pa.table({"id": [1, 2, 3], "region": ["EU", "US", "EU"]}), ["id", "region"])
    assert iceberg.scan(row_filter="region = 'US'").to_arrow().column("id").to_pylist() == [2]
