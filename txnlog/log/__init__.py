"""The Delta protocol's log: actions and their JSON codec, the columnar layout of file actions,
log listings and segments, commit files, replay into a :class:`TableState`, checkpoints read and
written, deletion vectors, history, and what each commit did to the rows (its change data).

This ``__all__`` is what engines (``txnlog.spark``, ``txnlog.iceberg``, ``txnlog.maintenance``,
the CLI) may use; the modules behind it are the core's own (``tests/test_layers.py`` checks).
"""

from txnlog.log.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
)
from txnlog.log.changes import VersionChanges, changes_in_range, classify_commit, commit_changes
from txnlog.log.checkpoint_reader import checkpoint_sources, sidecar_path
from txnlog.log.checkpoint_writer import (
    CheckpointResult,
    advance_last_checkpoint,
    checkpoint_from_log,
    existing_checkpoint,
    write_checkpoint,
)
from txnlog.log.codec import decode_action, decode_dv, encode_action, parse_lines
from txnlog.log.commits import Commit, read_commits
from txnlog.log.deletion_vectors import DeletionVectorError, dv_file_path, read_deletion_vector
from txnlog.log.features import check_readable
from txnlog.log.file_actions import FILES_SCHEMA, TOMBSTONES_SCHEMA, table_from_log_dicts
from txnlog.log.filenames import LAST_CHECKPOINT, LOG_DIR, SIDECAR_DIR, CheckpointFile
from txnlog.log.history import HistoryEntry, commit_timestamp, first_version_at_or_after, version_at
from txnlog.log.last_checkpoint import LastCheckpointHint, read_hint
from txnlog.log.replay import advance, replay
from txnlog.log.segment import CommitFile, LogListing, LogSegment, build_segment, commit_file, list_log
from txnlog.log.table_state import TableState

__all__ = [
    # actions
    "Action",
    "AddCDCFile",
    "AddFile",
    "CommitInfo",
    "DeletionVectorDescriptor",
    "DomainMetadata",
    "Metadata",
    "Protocol",
    "RemoveFile",
    "Sidecar",
    "Txn",
    "check_readable",
    # the JSON codec
    "decode_action",
    "decode_dv",
    "encode_action",
    "parse_lines",
    # file actions as Arrow (the Snapshot.files() layout)
    "FILES_SCHEMA",
    "TOMBSTONES_SCHEMA",
    "table_from_log_dicts",
    # the log directory: listings, segments, commits
    "LAST_CHECKPOINT",
    "LOG_DIR",
    "SIDECAR_DIR",
    "CheckpointFile",
    "Commit",
    "CommitFile",
    "LogListing",
    "LogSegment",
    "build_segment",
    "commit_file",
    "list_log",
    "read_commits",
    # replay
    "TableState",
    "advance",
    "replay",
    # checkpoints
    "CheckpointResult",
    "LastCheckpointHint",
    "advance_last_checkpoint",
    "checkpoint_from_log",
    "checkpoint_sources",
    "existing_checkpoint",
    "read_hint",
    "sidecar_path",
    "write_checkpoint",
    # deletion vectors
    "DeletionVectorError",
    "dv_file_path",
    "read_deletion_vector",
    # history
    "HistoryEntry",
    "commit_timestamp",
    "first_version_at_or_after",
    "version_at",
    # the change data feed: which files hold each version's changes
    "VersionChanges",
    "changes_in_range",
    "classify_commit",
    "commit_changes",
]
