"""The action parser, fuzzed: whatever a commit file holds, reading the table either works or
raises a ``TxnLogError`` naming the commit; versions before the bad commit stay readable.

Commits are built from valid actions with fields replaced by values of other types, removed,
or set to extremes, and from random bytes (non-UTF-8, truncated JSON).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txnlog
from txnlog.errors import LogCorruptError, TxnLogError
from txnlog.log.filenames import commit_path
from txnlog.storage import open_store

from ..conftest import LogWriter

T0 = 1_700_000_000_000
VALID: dict[str, dict[str, Any]] = {
    "add": {
        "path": "part=a/f.parquet",
        "partitionValues": {"part": "a"},
        "size": 10,
        "modificationTime": T0,
        "dataChange": True,
        "stats": '{"numRecords":3,"minValues":{"id":1},"maxValues":{"id":3},"nullCount":{"id":0}}',
        "tags": {"k": "v"},
    },
    "remove": {"path": "part=a/old.parquet", "deletionTimestamp": T0, "dataChange": True, "partitionValues": {"part": "a"}, "size": 5},
    "txn": {"appId": "app", "version": 3, "lastUpdated": T0},
    "domainMetadata": {"domain": "my.domain", "configuration": "{}", "removed": False},
    "commitInfo": {"timestamp": T0, "operation": "WRITE", "operationParameters": {"mode": "Append"}},
    "protocol": {"minReaderVersion": 1, "minWriterVersion": 2},
    "metaData": {
        "id": "x",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},'
        '{"name":"part","type":"string","nullable":true,"metadata":{}}]}',
        "partitionColumns": ["part"],
        "configuration": {},
        "createdTime": T0,
    },
    "cdc": {"path": "_change_data/c.parquet", "partitionValues": {}, "size": 3, "dataChange": False},
}

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["abc", "../../etc/passwd", "/etc/passwd", "", "\x00", "1e999"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
)


@st.composite
def mutated_action(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(VALID)))
    body = dict(VALID[kind])
    for field in draw(st.lists(st.sampled_from(sorted(body)), max_size=3, unique=True)):
        if draw(st.booleans()):
            body[field] = draw(ODD_VALUES)
        else:
            del body[field]
    return {kind: body if draw(st.integers(0, 9)) else draw(ODD_VALUES)}


@st.composite
def commit_bytes(draw: st.DrawFn) -> bytes:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return draw(st.binary(max_size=200))
    lines = [json.dumps(a).encode() for a in  # json: ints beyond 64 bits too
             draw(st.lists(mutated_action(), min_size=1, max_size=5))]
    data = b"\n".join(lines) + b"\n"
    if choice == 1:
        return data[: draw(st.integers(0, len(data)))]
    if choice == 2:
        return data.replace(b'"', b"\xff", 1)
    return data


def _base_table() -> Path:
    root = Path(tempfile.mkdtemp(prefix="fuzz-")) / "t"
    writer = LogWriter(str(root))
    writer.create(partition_columns=("part",))
    writer.commit(1, {"add": VALID["add"]})
    return root


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commit_bytes())
def test_fuzzed_commits_raise_only_txnlog_errors(data: bytes) -> None:
    root = _base_table()
    try:
        open_store(root).put_if_absent(commit_path(2), data)
        table = txnlog.Table(root)
        try:
            snap = table.snapshot()
            snap.files()
            snap.tombstones()
            _ = snap.app_transactions, snap.domains, snap.schema
            table.history()
        except TxnLogError as e:
            if isinstance(e, LogCorruptError) and e.version is not None:
                assert e.version == 2, e  # the error names the bad commit
        # Whatever version 2 holds, version 1 is still readable.
        assert txnlog.Table(root).snapshot(1).num_files == 1
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
