"""What ``_delta_log`` holds, by version: which versions can still be reconstructed, and the
other files (checksums, compacted logs, sidecars) that belong to a version."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from txnlog.errors import TableNotFoundError, VersionGapError
from txnlog.maintenance.core import LOG_DIR, SIDECAR_DIR, CheckpointFile, LogListing, commit_file
from txnlog.storage import FileInfo, LogStore

_CRC = re.compile(r"^(\d{20})\.crc$")
_COMPACTED = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")


@dataclass
class LogLayout:
    """One listing of ``_delta_log``.

    ``earliest`` is the first version of the run of reconstructable versions that ends at
    ``latest`` (a version is reconstructable from a complete checkpoint at it, or from the one
    before it plus its commit); versions below it may still exist as islands (tagged versions).
    """

    listing: LogListing
    latest: int
    reconstructable: set[int]
    #: Checksum (``N.crc``) and compacted (``A.B.compacted.json``) files, by the version they end at.
    extras: dict[int, list[str]] = field(default_factory=dict)
    sidecars: list[FileInfo] = field(default_factory=list)

    @classmethod
    def of(cls, store: LogStore) -> LogLayout:
        files = store.list_from(LOG_DIR)
        listing = LogListing.of(files)
        latest = listing.latest_version()
        if latest is None:
            raise TableNotFoundError(f"no Delta table at {store.root_uri}: {LOG_DIR}/ has no commits", uri=store.root_uri)
        extras: dict[int, list[str]] = {}
        for f in files:
            if m := _CRC.match(f.name):
                extras.setdefault(int(m.group(1)), []).append(f.path)
            elif m := _COMPACTED.match(f.name):
                extras.setdefault(int(m.group(2)), []).append(f.path)
        lowest = min([*listing.commits, *listing.checkpoints], default=latest)
        # A commit published while the directory was read can be missing from the listing
        # although later ones are in it: look each gap of the run ending at ``latest`` up
        # before it counts (as readers do), down to the first version really absent.
        v = latest
        while v >= lowest and (v in listing.commits or listing.complete_checkpoint(v) or commit_file(store, listing, v)):
            v -= 1
        reconstructable: set[int] = set()
        for v in range(lowest, latest + 1):
            if listing.complete_checkpoint(v) or (v in listing.commits and (v == 0 or v - 1 in reconstructable)):
                reconstructable.add(v)
        return cls(listing, latest, reconstructable, extras, store.list_from(SIDECAR_DIR))

    @property
    def earliest(self) -> int:
        """The first version of the reconstructable run ending at ``latest``."""
        if self.latest not in self.reconstructable:
            missing = max(v for v in range(self.latest + 1) if v not in self.listing.commits)
            raise VersionGapError(
                f"{LOG_DIR}: the latest version {self.latest} cannot be reconstructed: commit {missing} is missing "
                "and no checkpoint after it exists",
                path=f"{LOG_DIR}/{missing:020d}.json",
                version=missing,
            )
        v = self.latest
        while v - 1 in self.reconstructable:
            v -= 1
        return v

    def checkpoint(self, version: int) -> list[CheckpointFile] | None:
        return self.listing.complete_checkpoint(version)

    @property
    def checkpoint_versions(self) -> list[int]:
        return sorted(v for v in self.listing.checkpoints if self.listing.complete_checkpoint(v))

    @property
    def retained_versions(self) -> range:
        return range(self.earliest, self.latest + 1)
