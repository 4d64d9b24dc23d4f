"""Writing deletion vectors: the deleted rows of many data files, as descriptors for their adds.

Small vectors go inline in the log; the rest share one ``deletion_vector_<uuid>.bin`` file per
call, as delta-spark writes them: a version byte, then for each vector its size (4 bytes, big
endian), the serialized bitmap and its CRC-32 (big endian). The file is written before the
commit that names it; if the commit never happens it is an orphan that vacuum removes.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.log.actions import DeletionVectorDescriptor
from txnlog.log.deletion_vectors import dv_file_name, inline_descriptor, serialize_bitmap

if TYPE_CHECKING:
    from txnlog.storage.base import LogStore

DV_FILE_FORMAT_VERSION = 1
# Serialized vectors up to this size go inline: a few rows, where a file read would cost more
# than the extra bytes in every log replay.
MAX_INLINE_BYTES = 64


def write_deletion_vectors(
    store: LogStore,
    rows_by_file: Mapping[str, pa.Array | Iterable[int]],
    *,
    prefix: str = "",
    max_inline_bytes: int = MAX_INLINE_BYTES,
) -> dict[str, DeletionVectorDescriptor]:
    """Descriptors for the deleted rows of each data file (keyed as ``rows_by_file`` is),
    writing at most one vector file. ``rows_by_file`` holds the whole deleted set of each file
    (union it with the file's old vector first: see :func:`union_rows`)."""
    descriptors: dict[str, DeletionVectorDescriptor] = {}
    blob = bytearray([DV_FILE_FORMAT_VERSION])
    pending: list[tuple[str, int, int, int, int]] = []  # key, offset, size, cardinality, max row
    for key, rows in rows_by_file.items():
        data, cardinality, largest = serialize_bitmap(rows)
        if len(data) <= max_inline_bytes:
            descriptors[key] = inline_descriptor(data, cardinality, largest)
            continue
        pending.append((key, len(blob), len(data), cardinality, largest))
        blob += len(data).to_bytes(4, "big") + data + zlib.crc32(data).to_bytes(4, "big")
    if pending:
        encoded, path = dv_file_name(uuid.uuid4(), prefix)
        store.put_if_absent(path, bytes(blob))
        for key, offset, size, cardinality, largest in pending:
            descriptors[key] = DeletionVectorDescriptor("u", encoded, size, cardinality, offset=offset, max_row_index=largest)
    return descriptors


def union_rows(*row_sets: pa.Array | None) -> pa.Array:
    """The sorted, distinct union (uint64) of several sets of row indexes; None counts as empty."""
    arrays = [a.cast(pa.uint64()) for a in row_sets if a is not None and len(a)]
    if not arrays:
        return pa.array([], pa.uint64())
    merged = pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
    return pc.unique(merged).sort()


__all__ = ["DV_FILE_FORMAT_VERSION", "MAX_INLINE_BYTES", "union_rows", "write_deletion_vectors"]
