"""Delta deletion vectors as Iceberg v2 position delete files.

One position delete file per data file with a deletion vector (file-scoped, as Iceberg's own
writers default to): a Delta commit changes one data file's vector at a time, so the export swaps
exactly that file's deletes, and a reader opens only the deletes of the data files it scans
(both bounds of ``file_path`` are the data file's URI, which pyiceberg and Iceberg Java take as
"this delete file references that one data file"). Grouping per partition would make every vector
change rewrite the deletes of its neighbours.

The files live under ``metadata/deletes/`` (vacuum never touches ``metadata/``), named by a hash
of the data file URI and the vector's unique id, so a rebuild writes the same file again instead
of a new one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from io import BytesIO
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.types import LongType, StringType

from txnlog.iceberg.errors import IcebergExportError
from txnlog.iceberg.file_io import StoreFileIO
from txnlog.iceberg.metadata import METADATA_DIR
from txnlog.log import DeletionVectorDescriptor

#: Iceberg's reserved field ids of a position delete file's columns.
FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
DELETES_DIR = f"{METADATA_DIR}/deletes"

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_FIELD_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_FIELD_ID).encode()}),
    ]
)


def _vector_id(raw: Mapping[str, Any]) -> str:
    descriptor = DeletionVectorDescriptor(raw["storage_type"], raw["path_or_inline_dv"], raw["size_in_bytes"], raw["cardinality"], offset=raw["offset"])
    return descriptor.unique_id


def delete_file_location(io: StoreFileIO, data_uri: str, vector_id: str) -> str:
    digest = hashlib.sha256(f"{data_uri}\n{vector_id}".encode()).hexdigest()[:40]
    return io.location(f"{DELETES_DIR}/{digest}-deletes.parquet")


def referenced_data_file(delete_file: DataFile) -> str:
    """The data file URI a delete file written here applies to (its ``file_path`` bounds)."""
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_FIELD_ID)
    if lower is None or lower != upper:
        raise IcebergExportError(f"position delete file {delete_file.file_path} does not name one data file in its file_path bounds")
    return bytes(lower).decode("utf-8")


def _write(io: StoreFileIO, location: str, data_uri: str, positions: pa.Array) -> int:
    table = pa.table({"file_path": pa.repeat(data_uri, len(positions)), "pos": positions.cast(pa.int64())}, schema=POSITION_DELETE_SCHEMA)
    buffer = BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    payload = buffer.getvalue()
    with io.new_output(location).create(overwrite=True) as out:
        out.write(payload)
    return len(payload)


def position_delete_files(io: StoreFileIO, files: pa.Table, data: Sequence[DataFile], vectors: Sequence[pa.Array | None]) -> list[DataFile]:
    """A position delete file for each row of ``files`` (Delta adds) whose deletion vector
    deletes rows; ``data`` are the same rows as Iceberg data files, ``vectors`` their deleted
    positions (ascending, as ``ReadContext.deleted_rows`` gives them)."""
    raw_vectors = files.column("deletion_vector").to_pylist()
    out = []
    for df, raw, positions in zip(data, raw_vectors, vectors):
        if raw is None or positions is None or len(positions) == 0:
            continue
        location = delete_file_location(io, df.file_path, _vector_id(raw))
        size = _write(io, location, df.file_path, positions)
        count = len(positions)
        path_bound = to_bytes(StringType(), df.file_path)
        delete = DataFile.from_args(
            _table_format_version=2,
            content=DataFileContent.POSITION_DELETES,
            file_path=location,
            file_format=FileFormat.PARQUET,
            partition=df.partition,
            record_count=count,
            file_size_in_bytes=size,
            column_sizes=None,
            value_counts={FILE_PATH_FIELD_ID: count, POS_FIELD_ID: count},
            null_value_counts={FILE_PATH_FIELD_ID: 0, POS_FIELD_ID: 0},
            nan_value_counts=None,
            lower_bounds={FILE_PATH_FIELD_ID: path_bound, POS_FIELD_ID: to_bytes(LongType(), int(positions[0].as_py()))},
            upper_bounds={FILE_PATH_FIELD_ID: path_bound, POS_FIELD_ID: to_bytes(LongType(), int(positions[-1].as_py()))},
            key_metadata=None,
            split_offsets=None,
            equality_ids=None,
            sort_order_id=None,
        )
        delete.spec_id = df.spec_id
        out.append(delete)
    return out
