"""Commit files read and parsed: each ``N.json`` as its actions in file order, with large
commits' add and remove actions parsed column-wise (for replay)."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from txnlog.log import codec
from txnlog.log.actions import CommitInfo
from txnlog.log.file_actions import ColumnarFileActions, parse_file_actions
from txnlog.log.segment import CommitFile
from txnlog.storage.base import LogStore


@dataclass(frozen=True)
class Commit:
    """One parsed commit file: its raw actions (``{kind: body}``) in file order."""

    version: int
    path: str
    modification_time: int
    actions: list[dict[str, Any]]
    #: For a large commit read for replay: its add and remove actions, parsed column-wise
    #: (and then absent from ``actions``).
    columnar: ColumnarFileActions | None = None
    #: Its file actions were already held to the protocol's rules (a commit this process wrote).
    checked: bool = False

    def commit_info(self) -> CommitInfo | None:
        for obj in self.actions:
            if "commitInfo" in obj:
                info = codec.decode_action("commitInfo", obj["commitInfo"], path=self.path, version=self.version)
                return info  # type: ignore[return-value]
        return None

    @property
    def timestamp(self) -> int:
        """In-commit timestamp when present, else the file's modification time."""
        info = self.commit_info()
        if info is not None and info.in_commit_timestamp is not None:
            return int(info.in_commit_timestamp)
        return self.modification_time


# Above this size a commit's file actions are parsed by pyarrow's JSON reader, not row by row.
COLUMNAR_COMMIT_BYTES = 1 << 20


# Large commits are parsed on this many threads (pyarrow's JSON reader releases the GIL; each
# parse is single-threaded, which leaves less memory cached in the allocator's thread heaps).
_PARSE_THREADS = max(1, min(4, os.cpu_count() or 1))


def read_commits(store: LogStore, files: Iterable[CommitFile], *, columnar: bool = False) -> list[Commit]:
    """Parse commit files. With ``columnar``, large commits keep their file actions as Arrow and
    are parsed in parallel, and each commit's bytes are dropped once it is parsed."""
    files = list(files)
    blobs = store.iter_read([f.path for f in files])
    if not columnar or _PARSE_THREADS == 1:
        return [_parse_commit(f, data, columnar) for f, data in zip(files, blobs)]
    out: list[Commit | Future[Commit]] = []
    in_flight: deque[Future[Commit]] = deque()
    with ThreadPoolExecutor(_PARSE_THREADS) as pool:
        for f, data in zip(files, blobs):
            if len(data) <= COLUMNAR_COMMIT_BYTES:
                out.append(_parse_commit(f, data, columnar))  # a thread hand-off costs more
                continue
            if len(in_flight) >= _PARSE_THREADS:
                in_flight.popleft().result()  # at most that many commits' bytes held
            in_flight.append(pool.submit(_parse_commit, f, data, columnar))
            out.append(in_flight[-1])
    return [c.result() if isinstance(c, Future) else c for c in out]


def _parse_commit(f: CommitFile, data: bytes, columnar: bool) -> Commit:
    split = parse_file_actions(data, path=f.path, version=f.version) if columnar and len(data) > COLUMNAR_COMMIT_BYTES else None
    if split is None:
        return Commit(f.version, f.path, f.modification_time, codec.parse_lines(data, path=f.path, version=f.version))
    rest, file_actions = split
    actions = codec.parse_lines(rest, path=f.path, version=f.version)
    return Commit(f.version, f.path, f.modification_time, actions, file_actions)
