"""Log segment: the newest usable checkpoint at or below a version, then the JSON commits after it.

The ``_last_checkpoint`` hint narrows the listing; when it is missing, stale, or points at a
checkpoint that is not there, the whole log is listed instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from txnlog.errors import LogCorruptError, ObjectNotFoundError, TableNotFoundError, VersionGapError, VersionNotFoundError
from txnlog.log.filenames import (
    LOG_DIR,
    MAX_VERSION,
    CheckpointFile,
    commit_path,
    is_out_of_range_version_file,
    parse_checkpoint,
    parse_commit_version,
    version_prefix,
)
from txnlog.log.last_checkpoint import read_hint
from txnlog.storage.base import FileInfo, LogStore


@dataclass(frozen=True)
class CommitFile:
    version: int
    path: str
    modification_time: int


@dataclass(frozen=True)
class LogSegment:
    version: int
    checkpoint: list[CheckpointFile] = field(default_factory=list)
    commits: list[CommitFile] = field(default_factory=list)

    @property
    def checkpoint_version(self) -> int | None:
        return self.checkpoint[0].version if self.checkpoint else None


@dataclass
class LogListing:
    """What one listing of ``_delta_log`` found, by version."""

    commits: dict[int, CommitFile] = field(default_factory=dict)
    checkpoints: dict[int, list[CheckpointFile]] = field(default_factory=dict)
    #: Paths named like commits or checkpoints whose version is out of range (see filenames).
    out_of_range: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, files: list[FileInfo]) -> LogListing:
        listing = cls()
        for f in files:
            name = f.name
            if is_out_of_range_version_file(name):
                listing.out_of_range.append(f.path)
                continue
            v = parse_commit_version(name)
            if v is not None:
                listing.commits[v] = CommitFile(v, f.path, f.modification_time)
                continue
            cp = parse_checkpoint(f.path, f.size)
            if cp is not None:
                listing.checkpoints.setdefault(cp.version, []).append(cp)
        return listing

    def complete_checkpoint(self, version: int) -> list[CheckpointFile] | None:
        """The files of a complete checkpoint at ``version``, preferring V2, then classic, then multi-part."""
        files = self.checkpoints.get(version, [])
        v2 = sorted((f for f in files if f.v2_format), key=lambda f: f.path)
        if v2:
            return [v2[0]]
        classic = [f for f in files if f.num_parts == 1 and not f.v2_format]
        if classic:
            return classic[:1]
        by_parts: dict[int, dict[int, CheckpointFile]] = {}
        for f in files:
            if f.num_parts > 1:
                by_parts.setdefault(f.num_parts, {})[f.part] = f
        for n, parts in sorted(by_parts.items()):
            if len(parts) == n:
                return [parts[i] for i in range(1, n + 1)]
        return None

    def latest_version(self) -> int | None:
        versions = list(self.commits) + [v for v in self.checkpoints if self.complete_checkpoint(v)]
        return max(versions) if versions else None


def commit_file(store: LogStore, listing: LogListing, version: int) -> CommitFile | None:
    """The commit file of ``version``, or None if it does not exist.

    A listing is not a snapshot: a commit published while the directory was being read can be
    left out although later ones are in (ext4's hash-ordered readdir, paged object listings).
    Commits are published in version order, so a gap is looked up directly before it counts.
    """
    found = listing.commits.get(version)
    if found is not None:
        return found
    try:
        info = store.info(commit_path(version))
    except ObjectNotFoundError:
        return None
    found = CommitFile(version, info.path, info.modification_time)
    listing.commits[version] = found
    return found


def list_log(store: LogStore, start_version: int = 0) -> LogListing:
    return LogListing.of(store.list_from(LOG_DIR, version_prefix(start_version) if start_version else ""))


def build_segment(store: LogStore, version: int | None = None, *, skip_checkpoints: frozenset[int] = frozenset()) -> LogSegment:
    """The segment for ``version`` (the latest when None).

    ``skip_checkpoints``: versions whose checkpoints turned out unreadable; the segment is built
    from an older checkpoint or the commits instead (see :func:`txnlog.snapshot.load_state`).
    """
    hint = read_hint(store)
    if hint is not None and not 0 <= hint.version <= MAX_VERSION:
        hint = None  # a hint no writer produces: list the log
    listing = None
    if hint is not None and hint.version not in skip_checkpoints and (version is None or version >= hint.version):
        listing = list_log(store, hint.version)
        for skipped in skip_checkpoints:
            listing.checkpoints.pop(skipped, None)
        usable = (v for v in listing.checkpoints if version is None or v <= version)
        if not any(listing.complete_checkpoint(v) for v in usable):
            listing = None  # nothing complete from the hint on (missing, or parts lost): list it all
    if listing is None:
        listing = list_log(store)
        for skipped in skip_checkpoints:
            listing.checkpoints.pop(skipped, None)
    return segment_from_listing(store, listing, version)


def segment_from_listing(store: LogStore, listing: LogListing, version: int | None) -> LogSegment:
    if listing.out_of_range and version is None:
        # The latest version is unknowable while such a file is there; a given version is not.
        bad = listing.out_of_range[0]
        raise LogCorruptError(
            f"{store.root_uri}: log file {bad} has a version that is not 20 digits or exceeds {MAX_VERSION}; "
            f"remove it or read an explicit version",
            path=bad,
        )
    latest = listing.latest_version()
    if latest is None:
        raise TableNotFoundError(f"no Delta table at {store.root_uri}: {LOG_DIR}/ has no commits", uri=store.root_uri)
    if version is None:
        version = latest
    elif version > latest:
        raise VersionNotFoundError(f"version {version} of {store.root_uri} does not exist; latest is {latest}", version=version)
    elif version < 0:
        raise VersionNotFoundError(f"version must be >= 0, got {version}", version=version)

    checkpoint: list[CheckpointFile] = []
    for cp_version in sorted(listing.checkpoints, reverse=True):
        if cp_version <= version:
            found = listing.complete_checkpoint(cp_version)
            if found:
                checkpoint = found
                break
    start = checkpoint[0].version + 1 if checkpoint else 0
    commits = []
    for v in range(start, version + 1):
        commit = commit_file(store, listing, v)
        if commit is None:
            if v == 0 or (not checkpoint and v == start):
                earliest = min(listing.commits) if listing.commits else None
                raise VersionNotFoundError(
                    f"cannot reconstruct version {version} of {store.root_uri}: no checkpoint at or below it and "
                    f"the log starts at version {earliest}",
                    version=version,
                )
            raise VersionGapError(
                f"{store.root_uri}/{LOG_DIR}: commit {version_prefix(v)}.json is missing between "
                f"{'checkpoint ' + str(start - 1) if checkpoint else 'version 0'} and version {version}",
                path=f"{LOG_DIR}/{version_prefix(v)}.json",
                version=v,
            )
        commits.append(commit)
    if not checkpoint and not commits:
        raise LogCorruptError(f"no commits or checkpoint for version {version} of {store.root_uri}", version=version)
    return LogSegment(version, checkpoint, commits)
