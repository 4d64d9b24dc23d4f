"""Names of the files in ``_delta_log`` and how to tell them apart."""

from __future__ import annotations

import re
from dataclasses import dataclass

LOG_DIR = "_delta_log"
SIDECAR_DIR = f"{LOG_DIR}/_sidecars"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"

_COMMIT = re.compile(r"^(\d{20})\.json$")
# Any all-digit name with a log file's suffix: a version file whose number is not a valid one
# (not 20 digits, or beyond a signed 64-bit long) is reported, not silently skipped.
_VERSION_LIKE = re.compile(r"^(\d+)\.(?:json|checkpoint\..*parquet|checkpoint\..*json)$")

#: The largest version the protocol allows (versions are Java longs).
MAX_VERSION = 2**63 - 1
_CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")


def version_prefix(version: int) -> str:
    return f"{version:020d}"


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


def classic_checkpoint_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.checkpoint.parquet"


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    """One file of a checkpoint: classic, one part of a multi-part one, or a V2 top-level file."""

    path: str
    version: int
    part: int = 1
    num_parts: int = 1
    v2_format: str | None = None  # "json" | "parquet" for V2 (UUID-named) checkpoints
    size: int = 0


def parse_commit_version(name: str) -> int | None:
    m = _COMMIT.match(name)
    return int(m.group(1)) if m else None


def is_out_of_range_version_file(name: str) -> bool:
    """Whether ``name`` looks like a commit or checkpoint but its version is not 20 digits or
    exceeds :data:`MAX_VERSION` (a hand-made or corrupted name no writer produces)."""
    m = _VERSION_LIKE.match(name)
    return m is not None and (len(m.group(1)) != 20 or int(m.group(1)) > MAX_VERSION)


def parse_checkpoint(path: str, size: int = 0) -> CheckpointFile | None:
    name = path.rsplit("/", 1)[-1]
    if m := _CLASSIC_CHECKPOINT.match(name):
        return CheckpointFile(path, int(m.group(1)), size=size)
    if m := _MULTIPART_CHECKPOINT.match(name):
        return CheckpointFile(path, int(m.group(1)), int(m.group(2)), int(m.group(3)), size=size)
    if m := _V2_CHECKPOINT.match(name):
        return CheckpointFile(path, int(m.group(1)), v2_format=m.group(3), size=size)
    return None
