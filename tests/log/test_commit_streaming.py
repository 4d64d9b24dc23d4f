"""Large commits: the file-action lines are parsed as one slice when they follow every other
line (the usual layout), and give the same tables and line numbers as the line-by-line split."""

from __future__ import annotations

import orjson
import pytest

import txnlog
from txnlog.errors import LogCorruptError
from txnlog.log import commits
from txnlog.log.file_actions import parse_file_actions

HEAD = [
    {"commitInfo": {"timestamp": 1, "operation": "WRITE"}},
    {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
]


def _add(i: int) -> dict[str, object]:
    return {"add": {"path": f"p={i % 3}/f{i}.parquet", "partitionValues": {"p": str(i % 3)}, "size": i, "modificationTime": 1, "dataChange": True, "stats": '{"numRecords":1}'}}


def _remove(i: int) -> dict[str, object]:
    return {"remove": {"path": f"p={i % 3}/old{i}.parquet", "deletionTimestamp": 5, "dataChange": True}}


def _lines(objs: list[dict[str, object]]) -> bytes:
    return b"\n".join(orjson.dumps(o) for o in objs) + b"\n"


def test_the_slice_and_the_split_agree() -> None:
    files = [_add(i) if i % 4 else _remove(i) for i in range(200)]
    usual = _lines(HEAD + files)
    # The same actions with the commitInfo last: only the line-by-line split handles it.
    odd = _lines(HEAD[1:] + files + HEAD[:1])
    fast = parse_file_actions(usual, path="x", version=1)
    slow = parse_file_actions(odd, path="x", version=1)
    assert fast is not None and slow is not None
    assert fast[1].adds.equals(slow[1].adds) and fast[1].removes.equals(slow[1].removes)
    # Line numbers are positions in the file: the slice's start at line 2, the split's at 1.
    assert fast[1].add_lines.to_pylist() == [i + 2 for i in range(200) if i % 4]
    assert slow[1].add_lines.to_pylist() == [i + 1 for i in range(200) if i % 4]
    assert [orjson.loads(line) for line in fast[0].splitlines()] == HEAD


@pytest.mark.parametrize("blank_line", [False, True])
def test_a_missing_size_is_named_by_its_line(log_writer: object, blank_line: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commits, "COLUMNAR_COMMIT_BYTES", 0)  # every commit takes the columnar path
    writer = log_writer()  # type: ignore[operator]
    writer.create(partition_columns=("p",))
    files = [_add(i) for i in range(50)]
    del files[30]["add"]["size"]  # type: ignore[attr-defined]
    data = _lines(HEAD[:1] + files)
    if blank_line:  # the slice does not apply: the split must count the same lines
        data = data.replace(b"\n", b"\n\n", 1)
    writer.store.put_if_absent("_delta_log/00000000000000000001.json", data)
    line = 32 + (1 if blank_line else 0)
    with pytest.raises(LogCorruptError, match=f"line {line} lacks required field 'size'"):
        txnlog.Table(writer.uri).snapshot()
