"""Deletion vectors: which rows of a data file a table no longer shows.

A deletion vector descriptor (PROTOCOL.md, "Deletion Vectors") names a RoaringBitmapArray of
deleted row indexes, stored one of three ways:

- ``i``: inline, the serialized bitmap Z85-encoded in ``pathOrInlineDv``;
- ``u``: in a file under the table root named from a UUID: ``pathOrInlineDv`` is an optional
  random prefix followed by the Z85-encoded UUID (20 characters), the file is
  ``<prefix>/deletion_vector_<uuid>.bin``;
- ``p``: an absolute path, followed only through :func:`txnlog.storage.paths.locate` (so only
  inside the table root unless the table was opened with ``allow_absolute_paths``).

A DV file starts with a format version byte; at ``offset`` each vector is a 4-byte big-endian
length, the serialized bitmap, and a 4-byte big-endian CRC-32 of the bitmap. A serialized bitmap
is a 4-byte little-endian magic number followed by Roaring's portable 64-bit layout, which
``pyroaring`` reads.
"""

from __future__ import annotations

import array
import uuid
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from txnlog.errors import TxnLogError, UnsafePathError, UnsupportedFeatureError
from txnlog.log.actions import DeletionVectorDescriptor
from txnlog.storage.paths import locate

if TYPE_CHECKING:
    from txnlog.storage.base import LogStore

# Z85 (ZeroMQ's base85), the encoding of inline vectors and of the UUID of 'u' vectors.
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}
_MAGIC = 1681511377
_UUID_CHARS = 20


class DeletionVectorError(TxnLogError):
    """A deletion vector cannot be read: malformed descriptor, missing or corrupt file, or an
    unknown storage type. ``path`` names the data file it belongs to, when known."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def z85_decode(text: str) -> bytes:
    """Z85-decode ``text`` (its length a multiple of 5)."""
    if len(text) % 5:
        raise ValueError(f"Z85 text has length {len(text)}, not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i : i + 5]:
            try:
                value = value * 85 + _Z85_VALUE[c]
            except KeyError:
                raise ValueError(f"{c!r} is not a Z85 character") from None
        if value >= 1 << 32:
            raise ValueError(f"Z85 group {text[i:i + 5]!r} is out of range")
        out += value.to_bytes(4, "big")
    return bytes(out)


def z85_encode(data: bytes) -> str:
    """Z85-encode ``data``, zero-padded to a multiple of 4 bytes (the descriptor's
    ``sizeInBytes`` says how many of the decoded bytes are the vector)."""
    data = data + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        group = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            group.append(_Z85[digit])
        out.append("".join(reversed(group)))
    return "".join(out)


def dv_file_name(dv_id: uuid.UUID, prefix: str = "") -> tuple[str, str]:
    """(``pathOrInlineDv``, the file's path under the table root) of a 'u' vector file."""
    encoded = prefix + z85_encode(dv_id.bytes)
    name = f"deletion_vector_{dv_id}.bin"
    return encoded, f"{prefix}/{name}" if prefix else name


def serialize_bitmap(rows: pa.Array | Iterable[int]) -> tuple[bytes, int, int]:
    """(serialized RoaringBitmapArray with its magic number, cardinality, largest row index) of
    a set of row indexes. Duplicates collapse; an empty set is allowed."""
    from pyroaring import BitMap64  # optional dependency: txnlog[spark] installs it

    values = rows.to_numpy(zero_copy_only=False) if isinstance(rows, (pa.Array, pa.ChunkedArray)) else rows
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "i" and values.size and values.min() < 0:
            raise DeletionVectorError(f"a deletion vector cannot name row index {values.min()}: row indexes are not negative")
        # pyroaring reads an array.array('Q') as one buffer and a NumPy array value by value (4x slower).
        values = array.array("Q", np.ascontiguousarray(values, dtype=np.uint64).tobytes())
    bitmap = BitMap64(values)
    bitmap.run_optimize()
    largest = bitmap.max() if len(bitmap) else 0
    return _MAGIC.to_bytes(4, "little") + bitmap.serialize(), len(bitmap), largest


def inline_descriptor(data: bytes, cardinality: int, max_row_index: int) -> DeletionVectorDescriptor:
    """An inline ('i') descriptor of a vector :func:`serialize_bitmap` produced."""
    return DeletionVectorDescriptor("i", z85_encode(data), len(data), cardinality, max_row_index=max_row_index)


def dv_file_path(storage_type: str | None, path_or_inline_dv: str | None) -> str | None:
    """The file of an on-disk deletion vector as the log names it ('u': derived from its UUID,
    'p': the path itself); None for an inline one. UnsafePathError for a 'u' whose UUID does not
    decode (its file cannot be named)."""
    if not path_or_inline_dv or storage_type not in ("u", "p"):
        return None
    if storage_type == "p":
        return path_or_inline_dv
    if len(path_or_inline_dv) < _UUID_CHARS:
        raise UnsafePathError(f"deletion vector {path_or_inline_dv!r} is too short to hold a UUID", path=path_or_inline_dv)
    prefix, encoded = path_or_inline_dv[:-_UUID_CHARS], path_or_inline_dv[-_UUID_CHARS:]
    try:
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    except ValueError as e:
        raise UnsafePathError(f"deletion vector {path_or_inline_dv!r} has no valid UUID: {e}", path=path_or_inline_dv) from None
    return f"{prefix}/{name}" if prefix else name


def parse_bitmap(data: bytes, *, where: str) -> pa.Array:
    """The row indexes (uint64, ascending) of a serialized RoaringBitmapArray."""
    try:
        from pyroaring import BitMap64  # optional dependency: txnlog[spark] installs it
    except ImportError:
        raise UnsupportedFeatureError(
            f"reading the deletion vector of {where} needs pyroaring: pip install 'txnlog[spark]' or pyroaring",
            features=("deletionVectors",),
        ) from None

    if len(data) < 4 or int.from_bytes(data[:4], "little") != _MAGIC:
        raise DeletionVectorError(f"deletion vector of {where} does not start with the RoaringBitmapArray magic number")
    try:
        bitmap = BitMap64.deserialize(data[4:])
    except Exception as e:  # pyroaring raises ValueError/OverflowError on malformed input
        raise DeletionVectorError(f"deletion vector of {where} is malformed: {e}") from None
    # pyarrow walks an array.array element by element (40 ms per 200k rows); a NumPy view of
    # its buffer converts without a copy.
    return pa.array(np.frombuffer(bitmap.to_array(), dtype=np.uint64)) if len(bitmap) else pa.array([], pa.uint64())


def read_deletion_vector(
    store: LogStore,
    dv: DeletionVectorDescriptor,
    *,
    table_uri: str,
    data_file: str,
    allow_absolute_paths: bool = False,
    version: int | None = None,
) -> pa.Array:
    """The deleted row indexes (uint64, ascending) of ``data_file``'s deletion vector.

    Errors name the table and the data file: DeletionVectorError for a malformed or corrupt
    vector (checksum, cardinality), UnsafePathError for a vector file outside the table root.
    """
    where = f"data file {data_file} of table {table_uri}"
    if dv.storage_type == "i":
        try:
            raw = z85_decode(dv.path_or_inline_dv)[: dv.size_in_bytes]
        except ValueError as e:
            raise DeletionVectorError(f"inline deletion vector of {where} is not valid Z85: {e}", path=data_file) from None
    elif dv.storage_type in ("u", "p"):
        raw = _read_from_file(store, dv, where, table_uri, data_file, allow_absolute_paths, version)
    else:
        raise DeletionVectorError(f"deletion vector of {where} has unknown storage type {dv.storage_type!r}", path=data_file)
    rows = parse_bitmap(raw, where=where)
    if len(rows) != dv.cardinality:
        raise DeletionVectorError(
            f"deletion vector of {where} holds {len(rows)} row(s) but its descriptor says {dv.cardinality}", path=data_file
        )
    return rows


def _read_from_file(
    store: LogStore,
    dv: DeletionVectorDescriptor,
    where: str,
    table_uri: str,
    data_file: str,
    allow_absolute: bool,
    version: int | None,
) -> bytes:
    log_path = dv_file_path(dv.storage_type, dv.path_or_inline_dv)
    assert log_path is not None
    location = locate(table_uri, log_path, allow_absolute=allow_absolute, version=version)
    try:
        if location.relative is not None:
            blob = store.read(location.relative)
        else:  # an absolute path the user allowed: read it with fsspec
            import fsspec  # deferred: fsspec

            with fsspec.open(location.uri, "rb") as f:
                blob = f.read()
    except TxnLogError as e:
        raise DeletionVectorError(f"cannot read the deletion vector file {location.uri} of {where}: {e}", path=data_file) from e
    except OSError as e:
        raise DeletionVectorError(f"cannot read the deletion vector file {location.uri} of {where}: {e}", path=data_file) from None
    offset = dv.offset if dv.offset is not None else 1
    end = offset + 4 + dv.size_in_bytes + 4
    if len(blob) < end:
        raise DeletionVectorError(
            f"deletion vector file {location.uri} of {where} is {len(blob)} bytes; the vector needs {end}", path=data_file
        )
    size = int.from_bytes(blob[offset : offset + 4], "big")
    if size != dv.size_in_bytes:
        raise DeletionVectorError(
            f"deletion vector in {location.uri} of {where} is {size} bytes; its descriptor says {dv.size_in_bytes}", path=data_file
        )
    data = blob[offset + 4 : offset + 4 + size]
    checksum = int.from_bytes(blob[offset + 4 + size : end], "big")
    if zlib.crc32(data) != checksum:
        raise DeletionVectorError(f"deletion vector in {location.uri} of {where} fails its CRC-32 check", path=data_file)
    return data


__all__ = [
    "DeletionVectorError",
    "dv_file_name",
    "dv_file_path",
    "inline_descriptor",
    "parse_bitmap",
    "read_deletion_vector",
    "serialize_bitmap",
    "z85_decode",
    "z85_encode",
]
