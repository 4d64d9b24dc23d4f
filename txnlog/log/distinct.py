"""Whether a column of file keys holds no repeat, without sorting or hashing the strings in Arrow.

Replay asks this of every add and remove it reads (a million keys for a large table). Arrow's
sort of a chunked string column concatenates it first (a copy of every path), and its hash
table is several times the keys' size. Here each key gets a 64-bit fingerprint computed from
the string buffers with numpy, a slice at a time; the fingerprints are sorted (8 bytes a key),
and only keys whose fingerprints collide are compared as strings.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# An odd multiplier: its powers never reach zero modulo 2**64, and it has an inverse there.
_MULTIPLIER = 0x9E3779B97F4A7C15
_INVERSE = pow(_MULTIPLIER, -1, 1 << 64)
_LENGTH_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
# Rows fingerprinted at a time: bounds the scratch space (8 bytes per key byte).
_SLICE_ROWS = 4_096


def _power_table(base: int, length: int) -> np.ndarray:
    table = np.full(length, base, np.uint64)
    table[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(table, dtype=np.uint64)  # wraps modulo 2**64, as wanted


class _Scratch(threading.local):
    """Per thread: the power tables and the product buffer, grown as needed and reused (fresh
    buffers for every slice cost more in page faults than the arithmetic)."""

    def __init__(self) -> None:
        self.powers = self.inverses = self.terms = np.empty(0, np.uint64)

    def ensure(self, size: int) -> None:
        if len(self.powers) < size:
            size = max(size, 2 * len(self.powers), 1 << 16)
            self.powers = _power_table(_MULTIPLIER, size)
            self.inverses = _power_table(_INVERSE, size)
            self.terms = np.empty(size, np.uint64)


_scratch = _Scratch()


def _fingerprint_slice(keys: pa.Array) -> np.ndarray:
    """sum(byte[j] * M**j) over each key's bytes, as a polynomial over the slice's whole byte
    buffer (one multiply, one segmented sum), each key's sum then shifted to start at M**0."""
    n = len(keys)
    offset_type = np.int64 if pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type) else np.int32
    _validity, offsets_buffer, data_buffer = keys.buffers()
    offsets = np.frombuffer(offsets_buffer, offset_type, count=n + 1, offset=keys.offset * np.dtype(offset_type).itemsize)
    first, last = int(offsets[0]), int(offsets[-1])
    lengths = np.diff(offsets)
    out = lengths.astype(np.uint64) * _LENGTH_MIX
    if last == first:
        return out
    size = last - first
    data = np.frombuffer(data_buffer, np.uint8, count=size, offset=first)
    starts = (offsets[:-1] - first).astype(np.int64)
    scratch = _scratch
    scratch.ensure(size)
    terms = scratch.terms[:size]
    nonempty = lengths > 0
    with np.errstate(over="ignore"):
        np.multiply(data, scratch.powers[:size], out=terms, dtype=np.uint64)
        sums = np.add.reduceat(terms, starts[nonempty])
        out[nonempty] += sums * scratch.inverses[starts[nonempty]]
    return out


def fingerprints(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit fingerprint per key (null keys count as empty strings): equal keys, equal prints."""
    out = np.empty(len(keys), np.uint64)
    done = 0
    for chunk in keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]:
        for start in range(0, len(chunk), _SLICE_ROWS):
            part = chunk.slice(start, _SLICE_ROWS)
            out[done : done + len(part)] = _fingerprint_slice(part)
            done += len(part)
    return out


def all_distinct(keys: pa.Array | pa.ChunkedArray) -> bool:
    """Whether no key of ``keys`` (a string column, no nulls) occurs twice."""
    n = len(keys)
    if n <= 1:
        return True
    prints = fingerprints(keys)
    prints.sort()
    if not (prints[1:] == prints[:-1]).any():
        return True
    # Keys whose prints collide: equal keys, or (rarely) a true collision. Compare them as strings.
    prints = fingerprints(keys)
    order = np.argsort(prints)
    same = prints[order[1:]] == prints[order[:-1]]
    in_group = np.zeros(n, bool)
    in_group[1:] |= same
    in_group[:-1] |= same
    candidates = keys.take(pa.array(order[in_group]))
    return bool(pc.count_distinct(candidates).as_py() == len(candidates))


__all__ = ["all_distinct", "fingerprints"]
