"""Versions at a time, both ways, from the history helpers (in-commit timestamps where enabled)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from txnlog import Table
from txnlog.errors import VersionNotFoundError
from txnlog.log.filenames import commit_path

SCHEMA = pa.schema([("id", pa.int64())])


def _table_with_times(tmp_path: Path, times_ms: list[int]) -> Table:
    """A table whose version v was committed at ``times_ms[v]`` (file modification times)."""
    table = Table.create(str(tmp_path / "t"), SCHEMA)
    for i in range(len(times_ms) - 1):
        table.append(pa.table({"id": [i]}, schema=SCHEMA))
    for version, ms in enumerate(times_ms):
        os.utime(tmp_path / "t" / commit_path(version), ns=(ms * 1_000_000, ms * 1_000_000))
    return table


def test_first_version_at_or_after_and_version_at_bracket_a_time(tmp_path: Path) -> None:
    table = _table_with_times(tmp_path, [1_000_000, 2_000_000, 3_000_000])
    assert table.first_version_at_or_after(2_000_000) == 1 and table.version_at(2_000_000) == 1
    assert table.first_version_at_or_after(2_000_001) == 2 and table.version_at(2_000_001) == 1
    assert table.first_version_at_or_after(0) == 0  # before the first commit: the earliest
    assert [table.commit_timestamp(v) for v in range(3)] == [1_000_000, 2_000_000, 3_000_000]
    with pytest.raises(VersionNotFoundError, match="after the latest commit"):
        table.first_version_at_or_after(3_000_001)
    with pytest.raises(VersionNotFoundError, match="before the earliest commit"):
        table.version_at(999_999)
    with pytest.raises(VersionNotFoundError, match="version 7"):
        table.commit_timestamp(7)


def test_in_commit_timestamps_decide_over_file_times(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, properties={"delta.enableInCommitTimestamps": "true"})
    table.append(pa.table({"id": [1]}, schema=SCHEMA))
    stamps = [e.timestamp for e in reversed(table.history())]
    for version in range(2):  # file times far in the future change nothing
        os.utime(tmp_path / "t" / commit_path(version), ns=(4_000_000_000 * 10**9, 4_000_000_000 * 10**9))
    assert [table.commit_timestamp(v) for v in range(2)] == stamps
    assert table.first_version_at_or_after(stamps[1]) == 1 and table.version_at(stamps[1] - 1) == 0
