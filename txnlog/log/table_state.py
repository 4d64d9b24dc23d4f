"""The log-level table state: everything a snapshot knows, derived only from the log (see
:mod:`txnlog.log.replay` for how it is built)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.file_facts import file_keys
from txnlog.log.actions import DomainMetadata, Metadata, Protocol, Txn
from txnlog.log.checkpoint_reader import CheckpointStats
from txnlog.log.file_actions import TOMBSTONES_SCHEMA, concat


@dataclass(frozen=True)
class PendingStats:
    """Stats still in a checkpoint: those of the first ``len(rows)`` live files, which are the
    checkpoint's add rows at ``rows`` (replay keeps them first, in checkpoint order)."""

    source: CheckpointStats
    rows: pa.Array

    def kept(self, mask: pa.Array) -> PendingStats | None:
        """After the file list was filtered by ``mask``."""
        rows = self.rows.filter(mask.slice(0, len(self.rows)))
        return PendingStats(self.source, rows) if len(rows) else None


@dataclass(frozen=True)
class TableState:
    """Everything a snapshot knows, derived only from the log."""

    version: int
    protocol: Protocol
    metadata: Metadata
    app_transactions: Mapping[str, Txn]
    domains: Mapping[str, DomainMetadata]
    #: The live files (``FILES_SCHEMA``); the first ``pending_stats.rows`` have null stats
    #: until :attr:`files` or :meth:`take` reads them from the checkpoint.
    file_list: pa.Table
    _tombstone_parts: tuple[Callable[[], pa.Table], ...] = field(repr=False, default=())
    pending_stats: PendingStats | None = field(repr=False, default=None)
    _keys: list[pa.Array] = field(repr=False, default_factory=list, compare=False)
    _with_stats: list[pa.Table] = field(repr=False, default_factory=list, compare=False)

    @property
    def num_files(self) -> int:
        return int(self.file_list.num_rows)

    @property
    def files(self) -> pa.Table:
        """Every live file with its stats (read from the checkpoint once, when first asked for)."""
        pending = self.pending_stats
        if pending is None:
            return self.file_list
        if not self._with_stats:
            keys = self.file_keys().slice(0, len(pending.rows))
            self._with_stats.append(self._fill_stats(self.file_list, pending.source.load(pending.rows, keys)))
        return self._with_stats[0]

    def files_without_stats(self) -> pa.Table:
        """Every live file, without the ``stats`` column (nothing is read)."""
        return self.file_list.drop_columns(["stats"])

    def take(self, positions: pa.Array) -> pa.Table:
        """The files at ascending ``positions`` of the file list, with their stats."""
        if self._with_stats:
            return self._with_stats[0].take(positions)
        rows = self.file_list.take(positions)
        pending = self.pending_stats
        if pending is None:
            return rows
        from_checkpoint = positions.filter(pc.less(positions, len(pending.rows)))
        if not len(from_checkpoint):
            return rows
        keys = self.file_keys().take(from_checkpoint)
        return self._fill_stats(rows, pending.source.load(pending.rows.take(from_checkpoint), keys))

    @staticmethod
    def _fill_stats(files: pa.Table, first: pa.ChunkedArray) -> pa.Table:
        """``files`` with the stats of its first ``len(first)`` rows replaced by ``first``."""
        index = files.schema.get_field_index("stats")
        rest = files.column(index).slice(len(first))
        return files.set_column(index, "stats", pa.chunked_array([*first.chunks, *rest.chunks], pa.string()))

    def file_keys(self) -> pa.Array:
        """The logical-file key of every live file (computed once)."""
        if not self._keys:
            self._keys.append(file_keys(self.file_list).cast(pa.string()))
        return self._keys[0]

    def tombstones(self) -> pa.Table:
        """Latest remove per logical file that is not live again."""
        removes = concat((load() for load in self._tombstone_parts), TOMBSTONES_SCHEMA)
        if removes.num_rows == 0:
            return removes
        keys = file_keys(removes)
        live = pc.is_in(keys, value_set=file_keys(self.file_list))
        removes = removes.filter(pc.invert(live))
        keys = keys.filter(pc.invert(live))
        # Keep the last occurrence of each key: parts are in log order.
        idx = pa.table({"k": keys, "i": pa.array(range(len(keys)), pa.int64())})
        last = idx.group_by("k", use_threads=False).aggregate([("i", "max")]).column("i_max")
        return removes.take(pc.take(last, pc.sort_indices(last)))  # the row positions, in log order
