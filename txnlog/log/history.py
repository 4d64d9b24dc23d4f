"""A table's history: each version's commit time and commitInfo, and the version at a time.

Commit times are in-commit timestamps from the version they were enabled at, file modification
times before, made monotonic as Delta does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from txnlog.errors import TableNotFoundError, VersionNotFoundError, timestamp_text
from txnlog.log.actions import CommitInfo
from txnlog.log.codec import encode_action
from txnlog.log.commits import Commit, read_commits
from txnlog.log.filenames import LOG_DIR
from txnlog.log.segment import LogListing, list_log
from txnlog.storage.base import LogStore


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp: int
    commit_info: CommitInfo | None

    def to_dict(self) -> dict[str, Any]:
        body = encode_action(self.commit_info)["commitInfo"] if self.commit_info else {}
        return {**body, "version": self.version, "timestamp": self.timestamp}


def _listing(store: LogStore) -> LogListing:
    listing = list_log(store)
    if listing.latest_version() is None:
        raise TableNotFoundError(f"no Delta table at {store.root_uri}: {LOG_DIR}/ has no commits", uri=store.root_uri)
    return listing


def commit_timestamps(
    store: LogStore, listing: LogListing, commits: dict[int, Commit], *, first: int | None = None, last: int | None = None
) -> list[tuple[int, int]]:
    """(version, commit time) for every commit still in the log, oldest first (only those in
    ``[first, last]`` when given: later commits are then not read). The commits it had to read
    are left in ``commits`` for the caller."""
    versions = sorted(listing.commits)

    def has_ict(v: int) -> bool:
        if v not in commits:
            commits[v] = read_commits(store, [listing.commits[v]])[0]
        info = commits[v].commit_info()
        return info is not None and info.in_commit_timestamp is not None

    # In-commit timestamps, once enabled, are on every later commit: find where they start.
    ict_from = len(versions)
    if versions and has_ict(versions[-1]):
        lo, hi = 0, len(versions) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if has_ict(versions[mid]):
                hi = mid
            else:
                lo = mid + 1
        ict_from = lo
    ict = set(versions[ict_from:])  # a suffix: no commit without one comes after them

    def wanted(v: int) -> bool:
        return (first is None or v >= first) and (last is None or v <= last)

    missing = [listing.commits[v] for v in versions if wanted(v) and v in ict and v not in commits]
    commits.update({c.version: c for c in read_commits(store, missing)})
    out: list[tuple[int, int]] = []
    previous = None
    for v in versions:
        if v in ict:
            if wanted(v):
                out.append((v, commits[v].timestamp))
            continue
        ts = listing.commits[v].modification_time
        if previous is not None and ts <= previous:
            ts = previous + 1
        if wanted(v):
            out.append((v, ts))
        previous = ts
    return out


def last_at_or_before(stamps: Sequence[tuple[int, int]], timestamp_ms: int, *, where: str, what: str = "timestamp") -> int:
    """Of ``stamps`` ((version, commit time), oldest first), the last version committed at or
    before ``timestamp_ms``; VersionNotFoundError (naming ``where`` and ``what``) when every
    commit is later."""
    earlier = [v for v, t in stamps if t <= timestamp_ms]
    if not earlier:
        raise VersionNotFoundError(
            f"{where}: {what} {timestamp_text(timestamp_ms)} is before the earliest commit still in the log "
            f"(version {stamps[0][0]} at {timestamp_text(stamps[0][1])})"
        )
    return earlier[-1]


def first_at_or_after(stamps: Sequence[tuple[int, int]], timestamp_ms: int, *, where: str, what: str = "timestamp") -> int:
    """Of ``stamps``, the first version committed at or after ``timestamp_ms``;
    VersionNotFoundError when every commit is earlier."""
    later = next((v for v, t in stamps if t >= timestamp_ms), None)
    if later is None:
        raise VersionNotFoundError(
            f"{where}: {what} {timestamp_text(timestamp_ms)} is after the latest commit (version {stamps[-1][0]} at {timestamp_text(stamps[-1][1])})"
        )
    return later


def version_at(store: LogStore, timestamp_ms: int, *, listing: LogListing | None = None) -> int:
    """The last version committed at or before ``timestamp_ms``."""
    return last_at_or_before(commit_timestamps(store, listing or _listing(store), {}), timestamp_ms, where=store.root_uri)


def first_version_at_or_after(store: LogStore, timestamp_ms: int, *, listing: LogListing | None = None) -> int:
    """The first version committed at or after ``timestamp_ms`` (the earliest still in the log
    for a time before it, as delta-spark starts a stream); VersionNotFoundError when every
    commit is earlier."""
    return first_at_or_after(commit_timestamps(store, listing or _listing(store), {}), timestamp_ms, where=store.root_uri)


def commit_timestamp(store: LogStore, version: int, *, listing: LogListing | None = None) -> int:
    """The commit time of ``version`` (ms), as :func:`history` reports it; VersionNotFoundError
    when its commit file is gone."""
    stamps = commit_timestamps(store, listing or _listing(store), {}, first=version, last=version)
    if stamps:
        return stamps[0][1]
    raise VersionNotFoundError(f"{store.root_uri}: version {version} has no commit file in the log", version=version)


def history(store: LogStore, limit: int | None = None) -> list[HistoryEntry]:
    """The commitInfo of each version still in the log, newest first."""
    listing = _listing(store)
    commits: dict[int, Commit] = {}
    stamps = commit_timestamps(store, listing, commits)
    if limit is not None:
        stamps = stamps[-limit:] if limit > 0 else []
    stamps.reverse()
    missing = [listing.commits[v] for v, _ in stamps if v not in commits]
    commits.update({c.version: c for c in read_commits(store, missing)})
    return [HistoryEntry(v, t, commits[v].commit_info()) for v, t in stamps]
