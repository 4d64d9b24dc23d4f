"""txnlog.log.deletion_vectors: inline, UUID-named and absolute-path vectors, and the errors
that name the table and data file."""

from __future__ import annotations

import uuid
import zlib
from pathlib import Path

import pytest

pyroaring = pytest.importorskip("pyroaring")

from txnlog.errors import TxnLogError, UnsafePathError  # noqa: E402
from txnlog.log.actions import DeletionVectorDescriptor  # noqa: E402
from txnlog.log.deletion_vectors import (  # noqa: E402
    DeletionVectorError,
    dv_file_path,
    read_deletion_vector,
    z85_decode,
)
from txnlog.storage import open_store  # noqa: E402

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
ROWS = [0, 3, 4, 1 << 33]


def z85_encode(data: bytes) -> str:
    data = data + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        out.append("".join(_Z85[(value // 85**k) % 85] for k in range(4, -1, -1)))
    return "".join(out)


def bitmap(rows: list[int]) -> bytes:
    return (1681511377).to_bytes(4, "little") + pyroaring.BitMap64(rows).serialize()


def test_z85_round_trip_and_the_protocols_uuid_example() -> None:
    data = bytes(range(40))
    assert z85_decode(z85_encode(data)) == data
    # The corpus's table-with-dv-small names its vector file by this encoded UUID.
    assert dv_file_path("u", "vBn[lx{q8@P<9BNH/isA") == "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    assert dv_file_path("u", "ab" + "vBn[lx{q8@P<9BNH/isA") == "ab/deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    assert dv_file_path("i", "whatever") is None


def test_inline_vector(tmp_path: Path) -> None:
    raw = bitmap(ROWS)
    dv = DeletionVectorDescriptor("i", z85_encode(raw), len(raw), len(ROWS))
    rows = read_deletion_vector(open_store(str(tmp_path)), dv, table_uri=str(tmp_path), data_file="a.parquet")
    assert rows.to_pylist() == ROWS


def _dv_file(root: Path, rows: list[int], *, corrupt: bool = False) -> tuple[DeletionVectorDescriptor, Path]:
    raw = bitmap(rows)
    ident = uuid.uuid4()
    crc = zlib.crc32(raw) ^ (1 if corrupt else 0)
    body = b"\x01" + len(raw).to_bytes(4, "big") + raw + crc.to_bytes(4, "big")
    path = root / f"deletion_vector_{ident}.bin"
    path.write_bytes(body)
    return DeletionVectorDescriptor("u", z85_encode(ident.bytes), len(raw), len(rows), offset=1), path


def test_uuid_named_vector_file_and_its_checks(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    dv, _ = _dv_file(tmp_path, ROWS)
    assert read_deletion_vector(store, dv, table_uri=str(tmp_path), data_file="a.parquet").to_pylist() == ROWS

    bad, _ = _dv_file(tmp_path, ROWS, corrupt=True)
    with pytest.raises(DeletionVectorError, match="CRC") as info:
        read_deletion_vector(store, bad, table_uri=str(tmp_path), data_file="a.parquet")
    assert info.value.path == "a.parquet" and str(tmp_path) in str(info.value)

    lying = DeletionVectorDescriptor(dv.storage_type, dv.path_or_inline_dv, dv.size_in_bytes, 99, offset=1)
    with pytest.raises(DeletionVectorError, match="99"):
        read_deletion_vector(store, lying, table_uri=str(tmp_path), data_file="a.parquet")

    missing = DeletionVectorDescriptor("u", z85_encode(uuid.uuid4().bytes), 10, 1, offset=1)
    with pytest.raises(DeletionVectorError, match="a.parquet"):
        read_deletion_vector(store, missing, table_uri=str(tmp_path), data_file="a.parquet")


def test_absolute_path_vector_only_inside_the_root_or_with_the_opt_in(tmp_path: Path) -> None:
    root = tmp_path / "table"
    root.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    store = open_store(str(root))
    inside_dv, inside_path = _dv_file(root, [1, 2])
    as_p = DeletionVectorDescriptor("p", f"file://{inside_path}", inside_dv.size_in_bytes, 2, offset=1)
    assert read_deletion_vector(store, as_p, table_uri=store.root_uri, data_file="a.parquet").to_pylist() == [1, 2]

    far_dv, far_path = _dv_file(outside, [5])
    escaping = DeletionVectorDescriptor("p", f"file://{far_path}", far_dv.size_in_bytes, 1, offset=1)
    with pytest.raises(UnsafePathError):
        read_deletion_vector(store, escaping, table_uri=store.root_uri, data_file="a.parquet")
    rows = read_deletion_vector(store, escaping, table_uri=store.root_uri, data_file="a.parquet", allow_absolute_paths=True)
    assert rows.to_pylist() == [5]


def test_malformed_descriptors_are_txnlog_errors(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    for dv in (
        DeletionVectorDescriptor("i", "not z85!", 4, 1),
        DeletionVectorDescriptor("x", "abc", 4, 1),
        DeletionVectorDescriptor("i", z85_encode(b"\0\0\0\0garbage!"), 12, 1),
    ):
        with pytest.raises(TxnLogError):
            read_deletion_vector(store, dv, table_uri=str(tmp_path), data_file="f.parquet")
