"""Writing deletion vectors: the bytes delta-spark writes, round trips through the reader, one
file per call, and unions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyroaring")

from txnlog.log.deletion_vectors import (  # noqa: E402
    DeletionVectorError,
    dv_file_path,
    parse_bitmap,
    read_deletion_vector,
    serialize_bitmap,
    z85_decode,
    z85_encode,
)
from txnlog.storage import open_store  # noqa: E402
from txnlog.write.deletion_vectors import union_rows, write_deletion_vectors  # noqa: E402

ROW_SETS = st.lists(
    st.one_of(st.integers(0, 70_000), st.integers(0, (1 << 40))),  # within and across 32-bit buckets
    max_size=300,
)


def test_serialization_matches_the_bytes_delta_spark_wrote(conformance_dir: Path) -> None:
    table = conformance_dir / "tables" / "table-with-dv-small"
    blob = (table / "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin").read_bytes()
    size = int.from_bytes(blob[1:5], "big")
    theirs = blob[5 : 5 + size]
    rows = parse_bitmap(theirs, where="corpus")
    assert rows.to_pylist() == [0, 9]
    ours, cardinality, largest = serialize_bitmap(rows)
    assert ours == theirs and (cardinality, largest) == (2, 9)


@given(st.binary(max_size=200))
def test_z85_round_trip(data: bytes) -> None:
    encoded = z85_encode(data)
    assert len(encoded) % 5 == 0
    assert z85_decode(encoded)[: len(data)] == data


@settings(max_examples=60, deadline=None)
@given(st.lists(ROW_SETS, min_size=1, max_size=4), st.sampled_from([0, 64, 1 << 20]), st.sampled_from(["list", "arrow", "numpy int32"]))
def test_written_vectors_read_back_as_the_same_rows(tmp_path_factory: pytest.TempPathFactory, row_sets: list[list[int]], max_inline: int, given_as: str) -> None:
    """Row sets given as Python ints, an Arrow array (what the DML passes) or a NumPy array of
    another width: each reads back as the same rows."""
    root = tmp_path_factory.mktemp("dv")
    store = open_store(str(root))
    wanted = {f"part-{i}.parquet": rows for i, rows in enumerate(row_sets)}
    if given_as == "numpy int32":
        wanted = {k: v for k, v in wanted.items() if all(r < 1 << 31 for r in v)}
        assume(wanted)
    form = {"list": list, "arrow": lambda rows: pa.array(rows, pa.int64()), "numpy int32": lambda rows: np.array(rows, np.int32)}[given_as]
    descriptors = write_deletion_vectors(store, {k: form(v) for k, v in wanted.items()}, max_inline_bytes=max_inline)
    files = {dv_file_path(d.storage_type, d.path_or_inline_dv) for d in descriptors.values()} - {None}
    assert len(files) <= 1, "one vector file per call"
    for name, rows in wanted.items():
        dv = descriptors[name]
        assert dv.cardinality == len(set(rows))
        if max_inline in (0, 1 << 20):
            assert dv.storage_type == ("u" if max_inline == 0 else "i")
        read = read_deletion_vector(store, dv, table_uri=str(root), data_file=name)
        assert read.to_pylist() == sorted(set(rows))
        if rows:
            assert dv.max_row_index == max(rows)


def test_vectors_share_one_file_and_small_ones_go_inline_only_when_asked(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "default"))
    descriptors = write_deletion_vectors(store, {"a": [1, 2], "b": [3]})
    assert descriptors["a"].storage_type == descriptors["b"].storage_type == "u"  # delta-spark's VACUUM needs files
    assert descriptors["a"].path_or_inline_dv == descriptors["b"].path_or_inline_dv

    store = open_store(str(tmp_path))
    descriptors = write_deletion_vectors(store, {"a": [1, 2], "b": range(0, 200_000, 3), "c": range(5, 100_000, 7)}, max_inline_bytes=64)
    assert descriptors["a"].storage_type == "i"
    assert descriptors["b"].storage_type == descriptors["c"].storage_type == "u"
    assert descriptors["b"].path_or_inline_dv == descriptors["c"].path_or_inline_dv
    assert descriptors["b"].offset == 1 and descriptors["c"].offset > descriptors["b"].offset
    written = [p.name for p in tmp_path.iterdir() if p.name != "default"]
    assert len(written) == 1 and written[0].startswith("deletion_vector_") and written[0].endswith(".bin")


def test_a_corrupted_written_file_fails_its_crc(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    dv = write_deletion_vectors(store, {"a": range(0, 100_000, 2)}, max_inline_bytes=0)["a"]
    (path,) = tmp_path.iterdir()
    blob = bytearray(path.read_bytes())
    blob[dv.offset + 10] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(DeletionVectorError, match="CRC"):
        read_deletion_vector(store, dv, table_uri=str(tmp_path), data_file="a")


def test_a_negative_row_index_is_refused_by_name() -> None:
    with pytest.raises(DeletionVectorError, match="row index -3"):
        serialize_bitmap(pa.array([4, -3], pa.int64()))


def test_union_is_sorted_and_distinct() -> None:
    assert union_rows(pa.array([5, 1], pa.int64()), None, pa.array([1, 9], pa.uint64())).to_pylist() == [1, 5, 9]
    assert union_rows().to_pylist() == []
