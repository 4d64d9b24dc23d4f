"""Writing deletion vectors: the deleted rows of many data files, as descriptors for their adds.

Vectors share one ``deletion_vector_<uuid>.bin`` file per call (inline vectors in the log only
when asked, see MAX_INLINE_BYTES), as delta-spark writes them: a version byte, then for each vector its size (4 bytes, big
endian), the serialized bitmap and its CRC-32 (big endian). The file is written before the
commit that names it; if the commit never happens it is an orphan that vacuum removes.
"""

from __future__ import annotations

import re
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidArgumentError
from txnlog.file_facts import decode_stats, with_new_stat
from txnlog.log.actions import DeletionVectorDescriptor
from txnlog.log.deletion_vectors import dv_file_name, inline_descriptor, serialize_bitmap
from txnlog.log.file_actions import DV_TYPE

if TYPE_CHECKING:
    from txnlog.storage.base import LogStore

DV_FILE_FORMAT_VERSION = 1
_TIGHT_BOUNDS = re.compile(r'"tightBounds"\s*:\s*true')
# Serialized vectors up to this size go inline in the log. None by default: delta-spark 4.4
# writes only vector files, and its VACUUM fails (a MatchError) on a table holding an inline one.
MAX_INLINE_BYTES = 0


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


@dataclass(frozen=True)
class RowDeletes:
    """The file actions that delete rows by deletion vector, and what they did.

    Stage ``removed`` (the files as they were, old vector included) as removes and ``added``
    (the same files with their new vectors) as adds, in one commit. A file whose every row is
    now deleted is only removed."""

    removed: pa.Table
    added: pa.Table
    deleted_rows: int  # rows newly deleted (not counting rows the old vectors already deleted)
    vectors_added: int  # files that had no vector and now have one
    vectors_updated: int  # files whose vector grew
    vectors_removed: int  # old vectors dropped with their file (every row deleted)

    def metrics(self) -> dict[str, int]:
        """The operation metrics delta-spark records for these actions."""
        return {
            "numDeletedRows": self.deleted_rows,
            "numDeletionVectorsAdded": self.vectors_added,
            "numDeletionVectorsUpdated": self.vectors_updated,
            "numDeletionVectorsRemoved": self.vectors_removed,
        }


def delete_rows(
    store: LogStore,
    files: pa.Table,
    positions: Sequence[pa.Array | None],
    old_rows: Sequence[pa.Array | None],
    *,
    prefix: str = "",
    max_inline_bytes: int = MAX_INLINE_BYTES,
) -> RowDeletes:
    """Delete rows ``positions[i]`` (physical row indexes) of data file ``files[i]`` (rows of
    ``Snapshot.files()``), whose current vector deletes ``old_rows[i]`` (from
    ``ReadContext.deleted_rows``): each file gets the union as its new vector (one vector file
    is written for all of them), its stats keep ``numRecords`` and say ``tightBounds: false``.
    Files with nothing new to delete are left out of both tables."""
    if not (len(positions) == len(old_rows) == files.num_rows):
        raise InvalidArgumentError(f"delete_rows: {files.num_rows} files but {len(positions)} position sets and {len(old_rows)} old vectors")
    changed: list[int] = []
    unions: dict[str, pa.Array] = {}
    newly = 0
    for i, (new, old) in enumerate(zip(positions, old_rows, strict=True)):
        if new is None or not len(new):
            continue
        union = union_rows(old, new)
        before = len(old) if old is not None else 0
        if len(union) == before:
            continue  # every row asked for was already deleted
        newly += len(union) - before
        changed.append(i)
        unions[str(i)] = union
    chosen = files.take(pa.array(changed, pa.int64()))
    stats = chosen.column("stats").to_pylist()
    had_vector = chosen.column("deletion_vector").is_valid().to_pylist()
    full: list[bool] = []
    for k, i in enumerate(changed):
        records = (decode_stats(stats[k]) or {}).get("numRecords")
        full.append(isinstance(records, int) and len(unions[str(i)]) >= records)
    keep = [str(i) for k, i in enumerate(changed) if not full[k]]
    descriptors = write_deletion_vectors(store, {key: unions[key] for key in keep}, prefix=prefix, max_inline_bytes=max_inline_bytes)
    kept = [k for k in range(len(changed)) if not full[k]]
    added = chosen.take(pa.array(kept, pa.int64()))
    dv_rows = [_descriptor_row(descriptors[str(changed[k])]) for k in kept]
    added = added.set_column(added.schema.get_field_index("deletion_vector"), "deletion_vector", pa.array(dv_rows, DV_TYPE))
    added = added.set_column(added.schema.get_field_index("stats"), "stats", pa.array([_loose_stats(stats[k]) for k in kept], pa.string()))
    added = added.set_column(added.schema.get_field_index("data_change"), "data_change", pa.array([True] * len(kept), pa.bool_()))
    return RowDeletes(
        removed=chosen,
        added=added,
        deleted_rows=newly,
        vectors_added=sum(1 for k in kept if not had_vector[k]),
        vectors_updated=sum(1 for k in kept if had_vector[k]),
        vectors_removed=sum(1 for k in range(len(changed)) if full[k] and had_vector[k]),
    )


def _descriptor_row(d: DeletionVectorDescriptor) -> dict[str, object]:
    return {
        "storage_type": d.storage_type,
        "path_or_inline_dv": d.path_or_inline_dv,
        "offset": d.offset,
        "size_in_bytes": d.size_in_bytes,
        "cardinality": d.cardinality,
        "max_row_index": d.max_row_index,
    }


def _loose_stats(text: str | None) -> str | None:
    """A file's stats once some of its rows are deleted: the same numbers (``numRecords`` still
    counts every physical row; min, max and null counts still bound the live rows), marked as no
    longer tight."""
    stats = decode_stats(text)
    if stats is None or text is None:
        return text
    if "tightBounds" in stats:
        if stats["tightBounds"] is False:
            return text
        # Re-encoding would turn decimals into floats: change only this one value.
        return _TIGHT_BOUNDS.sub('"tightBounds":false', text, count=1)
    return with_new_stat(text, stats, "tightBounds", False)


__all__ = ["DV_FILE_FORMAT_VERSION", "MAX_INLINE_BYTES", "RowDeletes", "delete_rows", "union_rows", "write_deletion_vectors"]
