"""Staged file actions: what a transaction will add and remove, kept as Arrow tables.

Rows arrive as ``AddFile`` records or as Arrow tables in the ``Snapshot.files()`` layout, are
checked as the protocol asks (paths inside the table, sizes, partition values for exactly the
partition columns; removes only of live files), and are reconciled at commit: one action per
logical file, the later one winning.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import FileNotLiveError, InvalidArgumentTypeError, SchemaError, TransactionError
from txnlog.file_facts import decode_stats, file_keys, num_records, partition_value_keys
from txnlog.log import codec
from txnlog.log.actions import AddFile
from txnlog.log.commits import Commit
from txnlog.log.file_actions import (
    FILES_SCHEMA,
    TOMBSTONES_SCHEMA,
    ColumnarFileActions,
    concat,
    empty_table,
    file_action_lines,
    table_from_log_dicts,
)
from txnlog.storage.paths import check_new_file_path

# Paths that cannot leave the root: relative, no "..", no escapes, no scheme.
_PLAIN_PATH = r"^[^/%\\:][^%\\:]*$"


# Up to this many files, checks run in plain Python: quicker than a dozen Arrow kernels.
_FEW = 16


def _records(files: Iterable[Any], what: str) -> list[AddFile]:
    if isinstance(files, (str, bytes, dict)) or not hasattr(files, "__iter__"):
        raise InvalidArgumentTypeError(f"{what} takes txnlog.AddFile records or a pyarrow Table, got {type(files).__name__}")
    records = list(files)
    for r in records:
        if not isinstance(r, AddFile):
            raise InvalidArgumentTypeError(f"{what} takes txnlog.AddFile records or a pyarrow Table, got {type(r).__name__}")
    return records


def _records_table(records: list[AddFile]) -> pa.Table:
    """AddFile records as a file table in the ``Snapshot.files()`` layout."""
    return table_from_log_dicts([codec.encode_action(r)["add"] for r in records], "add")


def _unknown_partition(key: str, expected: set[str], uri: str) -> SchemaError:
    return SchemaError(
        f"add_files: partition value for {key!r}, which is not a partition column of {uri} (partition columns: {sorted(expected)})",
        field=key,
    )


def _missing_partition(path: str, expected: set[str]) -> SchemaError:
    return SchemaError(f"add_files: file {path} lacks a value for some of the partition columns {sorted(expected)}", field=None)


def _check_new_file(row: Mapping[str, Any], expected: set[str], uri: str, allow_absolute: bool) -> None:
    """The checks of :meth:`StagedFiles._check_new_files` for one file."""
    path, size, values = row["path"], row["size"], row["partition_values"] or {}
    if path is None or size is None:
        raise TransactionError(f"add_files: a file has no {'path' if path is None else 'size'}")
    if size < 0:
        raise TransactionError(f"add_files: file {path} has a negative size")
    check_new_file_path(uri, path, allow_absolute=allow_absolute)
    unknown = [k for k in values if k not in expected]
    if unknown:
        raise _unknown_partition(unknown[0], expected, uri)
    if len(values) != len(expected):
        raise _missing_partition(path, expected)


def _conform(files: pa.Table, schema: pa.Schema, defaults: Mapping[str, pa.Scalar], what: str) -> pa.Table:
    """``files`` with exactly the columns of ``schema``: missing ones from ``defaults`` or null."""
    n = files.num_rows
    columns = []
    for f in schema:
        if f.name in defaults:
            columns.append(pa.repeat(defaults[f.name], n) if f.name not in files.column_names or f.name == "data_change" else files.column(f.name))
        elif f.name in files.column_names:
            try:
                columns.append(files.column(f.name).cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise InvalidArgumentTypeError(f"{what}: column '{f.name}' cannot be read as {f.type}: {e}") from None
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns], schema=schema)



def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FileActions:
    """What a transaction commits: its removes, and its adds as a table or, for a few new
    files staged as records, as log bodies."""

    removes: pa.Table
    adds: pa.Table | None = None
    add_bodies: list[dict[str, Any]] | None = None

    @property
    def num_adds(self) -> int:
        return len(self.add_bodies) if self.add_bodies is not None else int(self.adds.num_rows if self.adds is not None else 0)

    def added_bytes(self) -> int:
        if self.add_bodies is not None:
            return sum(int(b["size"]) for b in self.add_bodies)
        return int(pc.sum(self.adds.column("size")).as_py() or 0) if self.adds is not None and self.adds.num_rows else 0

    def added_rows(self) -> int:
        if self.add_bodies is not None:
            counts = ((decode_stats(b.get("stats")) or {}).get("numRecords") for b in self.add_bodies)
            return sum(n for n in counts if isinstance(n, int) and not isinstance(n, bool))
        return num_records(self.adds) if self.adds is not None and self.adds.num_rows else 0

    def changes_data(self) -> bool | None:
        """Whether any file action has dataChange=true; None when there is no file action."""
        if not self.num_adds and not self.removes.num_rows:
            return None
        if self.add_bodies is not None:
            adds_change = any(b.get("dataChange", True) for b in self.add_bodies)
        else:
            adds_change = _any_change(self.adds)
        return adds_change or _any_change(self.removes)

    def lines(self) -> list[bytes]:
        """The removes, then the adds, as log lines."""
        if self.add_bodies is not None:
            return [*file_action_lines(self.removes, "remove"), *(orjson.dumps({"add": b}) for b in self.add_bodies)]
        adds = self.adds if self.adds is not None else FILES_SCHEMA.empty_table()
        return [*file_action_lines(self.removes, "remove"), *file_action_lines(adds, "add")]

    def commit(self, version: int, path: str, modification_time: int, rows: list[dict[str, Any]]) -> Commit:
        """The commit these actions make after ``rows`` (its other actions), as replay reads it:
        already held to the protocol's rules, the file actions as they are (Arrow stays Arrow)."""
        if self.add_bodies is not None:
            return Commit(version, path, modification_time, [*rows, *({"add": b} for b in self.add_bodies)], checked=True)
        adds = self.adds if self.adds is not None else FILES_SCHEMA.empty_table()
        first = len(rows)
        removes = self.removes.num_rows
        remove_lines = pa.array(range(first, first + removes), pa.int64())
        add_lines = pa.array(range(first + removes, first + removes + adds.num_rows), pa.int64())
        return Commit(version, path, modification_time, rows, ColumnarFileActions(adds, add_lines, self.removes, remove_lines), checked=True)


def tombstones(files: pa.Table, data_change: bool) -> pa.Table:
    """Removes (``TOMBSTONES_SCHEMA``) of ``files`` (the ``Snapshot.files()`` layout), now."""
    n = files.num_rows
    return pa.Table.from_arrays(
        [
            files.column("path"),
            pa.repeat(pa.scalar(_now_ms(), pa.int64()), n),
            pa.repeat(pa.scalar(data_change), n),
            pa.repeat(pa.scalar(True), n),
            files.column("partition_values"),
            files.column("size"),
            files.column("stats"),
            files.column("tags"),
            files.column("deletion_vector"),
            files.column("base_row_id"),
            files.column("default_row_commit_version"),
        ],
        schema=TOMBSTONES_SCHEMA,
    )


def _any_change(files: pa.Table | None) -> bool:
    return bool(files is not None and files.num_rows and pc.any(pc.fill_null(files.column("data_change"), True)).as_py())


class StagedFiles:
    """The file actions of one transaction, in call order.

    ``uri``: the table root paths must stay in; ``partition_keys``: the keys every added file's
    partition values must have; ``live_keys``: gives the file keys live at the read version.
    """

    def __init__(
        self, uri: str, partition_keys: set[str], live_keys: Callable[[], pa.Array], *, allow_absolute_paths: bool = False
    ) -> None:
        self.uri = uri
        self.partition_keys = partition_keys
        self.live_keys = live_keys  # asked only when something is removed: a blind append never pays for it
        self.allow_absolute_paths = allow_absolute_paths
        # (kind, rows): rows of a few AddFile records stay log bodies until they must be a
        # table (a commit of a few new files never needs one); everything else is a table.
        self._parts: list[tuple[str, pa.Table | list[dict[str, Any]]]] = []

    def added_paths(self) -> list[str]:
        paths: list[str] = []
        for kind, rows in self._parts:
            if kind == "add":
                paths.extend(rows.column("path").to_pylist() if isinstance(rows, pa.Table) else [b["path"] for b in rows])
        return paths

    def _tables(self, kind: str) -> list[tuple[int, pa.Table]]:
        """(call index, rows as a table) of each non-empty part of ``kind``."""
        out = []
        for i, (k, rows) in enumerate(self._parts):
            if k == kind:
                table = rows if isinstance(rows, pa.Table) else table_from_log_dicts(rows, kind)
                if table.num_rows:
                    out.append((i, table))
        return out

    def add(self, files: Iterable[AddFile] | pa.Table, *, data_change: bool = True) -> None:
        """Stage data files (already written under the table root) to be added: ``AddFile``
        records, or a pyarrow Table in the ``Snapshot.files()`` layout (missing columns allowed)."""
        if isinstance(files, pa.Table):
            defaults = {"data_change": pa.scalar(data_change), "modification_time": pa.scalar(_now_ms(), pa.int64())}
            if "path" not in files.column_names or "size" not in files.column_names:
                raise InvalidArgumentTypeError("add_files needs 'path' and 'size' columns")
            table = _conform(files, FILES_SCHEMA, defaults, "add_files")
        else:
            records = [f if f.data_change == data_change else dataclasses.replace(f, data_change=data_change) for f in _records(files, "add_files")]
            if len(records) <= _FEW:
                for r in records:
                    _check_new_file({"path": r.path, "size": r.size, "partition_values": r.partition_values}, self.partition_keys, self.uri, self.allow_absolute_paths)
                self._parts.append(("add", [codec.encode_action(r)["add"] for r in records]))
                return
            table = _records_table(records)
        self._check_new_files(table)
        self._parts.append(("add", table))

    def _check_new_files(self, files: pa.Table) -> None:
        """What the protocol asks of every added file: a path in the table, a size, partition
        values for exactly the partition columns."""
        expected = self.partition_keys
        allow_absolute = self.allow_absolute_paths
        if files.num_rows <= _FEW:  # a few files: plain Python is quicker than a dozen kernels
            for row in files.select(["path", "size", "partition_values"]).to_pylist(maps_as_pydicts="lossy"):
                _check_new_file(row, expected, self.uri, allow_absolute)
            return
        for name in ("path", "size"):
            if files.column(name).null_count:
                raise TransactionError(f"add_files: a file has no {name}")
        negative = pc.less(files.column("size"), 0)
        if pc.any(negative).as_py():
            path = files.filter(negative).column("path")[0].as_py()
            raise TransactionError(f"add_files: file {path} has a negative size")
        paths = files.column("path")
        odd = pc.invert(pc.match_substring_regex(paths, _PLAIN_PATH))
        dotted = pc.match_substring(paths, "..")
        for path in paths.filter(pc.or_(odd, dotted)).to_pylist():
            check_new_file_path(self.uri, path, allow_absolute=allow_absolute)
        keys, counts = partition_value_keys(files.column("partition_values"))
        unknown = pc.invert(pc.is_in(keys, value_set=pa.array(sorted(expected), pa.string())))
        if pc.any(unknown).as_py():
            raise _unknown_partition(keys.filter(unknown)[0].as_py(), expected, self.uri)
        short = pc.not_equal(counts, len(expected))
        if pc.any(short).as_py():
            raise _missing_partition(files.filter(short).column("path")[0].as_py(), expected)

    def remove(self, files: Iterable[AddFile] | pa.Table, *, data_change: bool = True) -> None:
        """Stage live files (rows of ``filter_files()``, or ``AddFile`` records) to be removed.
        A file that is not live at the read version (nor added by this transaction) is refused,
        naming it: a remove of nothing is a bug in the caller."""
        if isinstance(files, pa.Table):
            if "path" not in files.column_names:
                raise InvalidArgumentTypeError("remove_files needs a 'path' column")
            table = _conform(files, FILES_SCHEMA, {}, "remove_files")
        else:
            table = _records_table(_records(files, "remove_files"))
        keys = file_keys(table)
        live = pc.is_in(keys, value_set=self._live_keys())
        if pc.any(pc.invert(live)).as_py():
            path = table.filter(pc.invert(live)).column("path")[0].as_py()
            raise FileNotLiveError(
                f"remove_files: {path} is not a live file of {self.uri} at the transaction's read version", path=path
            )
        self._parts.append(("remove", tombstones(table, data_change)))

    def _live_keys(self) -> pa.Array:
        keys = [self.live_keys(), *(file_keys(t) for _, t in self._tables("add"))]
        return pa.concat_arrays([k.cast(pa.string()) for k in keys]) if keys else pa.array([], pa.string())

    def few_new_files(self) -> list[dict[str, Any]] | None:
        """The add bodies to commit when this is a blind append of a few distinct new files
        given as records (the common streaming commit): no table needed. None otherwise."""
        bodies: list[dict[str, Any]] = []
        for kind, rows in self._parts:
            if kind != "add" or isinstance(rows, pa.Table):
                return None
            bodies += rows
        keys = {(b["path"], orjson.dumps(b.get("deletionVector"))) for b in bodies}
        return bodies if len(keys) == len(bodies) else None

    def to_commit(self) -> FileActions:
        few = self.few_new_files()
        if few is not None:
            return FileActions(empty_table(TOMBSTONES_SCHEMA), add_bodies=few)
        adds, removes = self.reconciled()
        return FileActions(removes, adds=adds)

    def reconciled(self) -> tuple[pa.Table, pa.Table]:
        """The adds and removes to commit: one action per logical file, the later one winning.
        A file this transaction added and then removed again leaves no action at all."""
        adds = self._tables("add")
        removes = self._tables("remove")
        add_table = concat((t for _, t in adds), FILES_SCHEMA)
        remove_table = concat((t for _, t in removes), TOMBSTONES_SCHEMA)
        if not remove_table.num_rows and add_table.num_rows <= 1:
            return add_table, remove_table
        add_keys = file_keys(add_table).cast(pa.string())
        if not remove_table.num_rows and pc.count_distinct(add_keys).as_py() == len(add_keys):
            return add_table, remove_table  # distinct new files: nothing to reconcile
        remove_keys = file_keys(remove_table).cast(pa.string())
        all_keys = pa.concat_arrays([add_keys, remove_keys])
        if pc.count_distinct(all_keys).as_py() == len(all_keys):
            return add_table, remove_table  # every file touched once: nothing to reconcile

        def seqs(parts: list[tuple[int, pa.Table]]) -> pa.Array:
            arrays = [pc.add(pa.array(range(t.num_rows), pa.int64()), i << 32) for i, t in parts]
            return pa.concat_arrays(arrays) if arrays else pa.array([], pa.int64())

        add_seq, remove_seq = seqs(adds), seqs(removes)
        latest = (
            pa.table({"key": pa.concat_arrays([add_keys, remove_keys]), "seq": pa.concat_arrays([add_seq, remove_seq])})
            .group_by("key")
            .aggregate([("seq", "max")])
            .column("seq_max")
        )
        add_table = add_table.filter(pc.is_in(add_seq, value_set=latest))
        keep = pc.is_in(remove_seq, value_set=latest)
        keep = pc.and_(keep, pc.is_in(remove_keys, value_set=self.live_keys()))
        return add_table, remove_table.filter(keep)

