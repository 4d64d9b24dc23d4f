"""Row tracking at commit: fresh row ids and row commit versions for the adds of one attempt.

Per the protocol, when the table's protocol has the ``rowTracking`` writer feature (and
``delta.rowTrackingSuspended`` is not true):

- an add of a file the table already holds (a re-commit: a new deletion vector, a backfill)
  keeps the ``baseRowId`` and ``defaultRowCommitVersion`` of the live add of that path; removes
  carry them the same way;
- every other add gets a fresh range above the row id high-water mark, ``numRecords`` (from its
  stats) ids long, in commit order, and ``defaultRowCommitVersion`` = the attempted version;
- the ``delta.rowTracking`` domain's ``rowIdHighWaterMark`` is raised in the same commit.

The high-water mark is the read snapshot's, or the highest any winning commit wrote: the
assignment runs once per attempt, so a commit that lost the race re-assigns above the winners'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txnlog import properties as props
from txnlog.errors import LogCorruptError, ProtocolViolationError, StorageError, TxnLogError
from txnlog.file_facts import decode_stats, with_new_stat
from txnlog.log.actions import DomainMetadata
from txnlog.log.commits import Commit
from txnlog.log.file_actions import FILES_SCHEMA, concat, table_from_log_dicts
from txnlog.storage.base import LogStore
from txnlog.storage.paths import locate
from txnlog.txn.staging import FileActions

#: The high-water mark of a table that never assigned a row id: the first id is 0.
NO_ROW_IDS = -1

_ROW_FIELDS = ("base_row_id", "default_row_commit_version")


def high_water_mark(domains: Mapping[str, DomainMetadata], where: str) -> int:
    """The ``rowIdHighWaterMark`` of the ``delta.rowTracking`` domain (-1 when absent)."""
    domain = domains.get(props.ROW_TRACKING_DOMAIN)
    if domain is None or domain.removed:
        return NO_ROW_IDS
    return _parse_mark(domain.configuration, where)


def _parse_mark(configuration: str, where: str) -> int:
    try:
        value = orjson.loads(configuration).get(props.ROW_ID_HIGH_WATER_MARK_KEY)
    except (orjson.JSONDecodeError, AttributeError):
        value = None
    if not isinstance(value, int) or isinstance(value, bool):
        raise LogCorruptError(
            f"{where}: the {props.ROW_TRACKING_DOMAIN} domain has no integer {props.ROW_ID_HIGH_WATER_MARK_KEY} "
            f"(configuration {configuration!r})"
        )
    return value


def winners_high_water_mark(winners: Iterable[Commit], current: int, where: str) -> int:
    """The highest mark among ``current`` and what the winning commits wrote."""
    mark = current
    for commit in winners:
        for action in commit.actions:
            body = action.get("domainMetadata")
            if body is not None and body.get("domain") == props.ROW_TRACKING_DOMAIN and not body.get("removed"):
                mark = max(mark, _parse_mark(str(body.get("configuration") or ""), f"{where} version {commit.version}"))
    return mark


def recommitted(winners: Iterable[Commit], live: pa.Table) -> pa.Table:
    """``live`` (path and row tracking fields of the files live at the read version) with the
    ids that winning commits gave files they re-added (a backfill, delta-spark's or the
    enablement commit's): a file this commit re-adds or removes keeps the ids it has now."""
    latest: dict[str, tuple[int | None, int | None]] = {}
    for commit in winners:
        if commit.columnar is not None and commit.columnar.adds.num_rows:
            adds = commit.columnar.adds.select(["path", *_ROW_FIELDS]).to_pylist()
            latest.update({a["path"]: (a["base_row_id"], a["default_row_commit_version"]) for a in adds if a["base_row_id"] is not None})
        for action in commit.actions:
            body = action.get("add")
            if body is not None and body.get("baseRowId") is not None:
                latest[str(body.get("path"))] = (body.get("baseRowId"), body.get("defaultRowCommitVersion"))
    live = live.select(["path", *_ROW_FIELDS])
    if not latest:
        return live
    kept = live.filter(pc.invert(pc.is_in(live.column("path"), value_set=pa.array(list(latest), pa.string()))))
    ids = pa.table(
        {
            "path": pa.array(list(latest), pa.string()),
            "base_row_id": pa.array([v[0] for v in latest.values()], pa.int64()),
            "default_row_commit_version": pa.array([v[1] for v in latest.values()], pa.int64()),
        }
    )
    return pa.concat_tables([kept, ids.cast(kept.schema)])


def domain_action(mark: int) -> DomainMetadata:
    return DomainMetadata(props.ROW_TRACKING_DOMAIN, orjson.dumps({props.ROW_ID_HIGH_WATER_MARK_KEY: mark}).decode(), False)


@dataclass(frozen=True)
class Assigned:
    """One attempt's file actions with row ids, and the new mark (None when no id was assigned)."""

    files: FileActions
    high_water_mark: int | None


def _row_counts(adds: pa.Table, where: str) -> list[int]:
    counts = []
    for path, stats in zip(adds.column("path").to_pylist(), adds.column("stats").to_pylist()):
        n = (decode_stats(stats) or {}).get("numRecords")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ProtocolViolationError(
                f"{where}: the add of {path} has no numRecords in its stats, which row tracking needs to give its rows ids",
                rule="rowTracking",
            )
        counts.append(n)
    return counts


def _fill_from(files: pa.Table, live: pa.Table) -> pa.Table:
    """``files`` with missing row tracking fields taken from the live add of the same path."""
    if not files.num_rows or not live.num_rows:
        return files
    at = pc.index_in(files.column("path"), value_set=live.column("path"))
    for name in _ROW_FIELDS:
        column = files.column(name)
        if column.null_count:
            index = files.schema.get_field_index(name)
            files = files.set_column(index, name, pc.coalesce(column, live.column(name).take(at)))
    return files


def assign(
    files: FileActions,
    *,
    live: pa.Table,
    backfill: pa.Table | None,
    mark: int,
    version: int,
    where: str,
) -> Assigned:
    """Row ids for the adds of ``files`` committed at ``version`` above ``mark``.

    ``live``: the ``path``, ``base_row_id`` and ``default_row_commit_version`` of the files
    live at the read version (re-commits keep theirs). ``backfill``: live files to re-add with
    ``dataChange=false`` so that they get ids (the commit that enables row tracking).
    """
    if files.add_bodies is not None:
        adds = table_from_log_dicts(files.add_bodies, "add")
    else:
        adds = files.adds if files.adds is not None else FILES_SCHEMA.empty_table()
    if backfill is not None and backfill.num_rows:
        adds = concat([adds, backfill.select(FILES_SCHEMA.names)], FILES_SCHEMA)
    live = live.filter(pc.is_in(live.column("path"), value_set=pa.concat_arrays(
        [adds.column("path").combine_chunks(), files.removes.column("path").combine_chunks()]
    )))
    adds = _fill_from(adds, live)
    removes = _fill_from(files.removes, live)
    fresh = adds.column("base_row_id").is_null().combine_chunks()
    new_mark = None
    if pc.any(fresh).as_py():
        counts = _row_counts(adds.filter(fresh), where)
        bases, next_id = [], mark + 1
        for n in counts:
            bases.append(next_id)
            next_id += n
        ids = iter(bases)
        base_row_id = [next(ids) if new else old for new, old in zip(fresh.to_pylist(), adds.column("base_row_id").to_pylist())]
        adds = adds.set_column(adds.schema.get_field_index("base_row_id"), "base_row_id", pa.array(base_row_id, pa.int64()))
        if next_id - 1 > mark:
            new_mark = next_id - 1
    versions = adds.column("default_row_commit_version")
    if versions.null_count:
        filled = pc.coalesce(versions, pa.scalar(version, pa.int64()))
        adds = adds.set_column(adds.schema.get_field_index("default_row_commit_version"), "default_row_commit_version", filled)
    return Assigned(FileActions(removes, adds=adds), new_mark)


def backfill_files(live: pa.Table, exclude_paths: pa.Array, store: LogStore, table_uri: str, *, allow_absolute_paths: bool) -> pa.Table:
    """The live files without a ``baseRowId`` (except ``exclude_paths``, which this commit
    adds or removes itself), as ``dataChange=false`` re-adds. A file whose stats lack
    ``numRecords`` gets it from its Parquet footer."""
    missing = pc.and_(live.column("base_row_id").is_null(), pc.invert(pc.is_in(live.column("path"), value_set=exclude_paths)))
    files = live.filter(missing)
    if not files.num_rows:
        return files
    stats = files.column("stats").to_pylist()
    changed = False
    for i, (path, text) in enumerate(zip(files.column("path").to_pylist(), stats)):
        decoded = decode_stats(text)
        if decoded is None or not isinstance(decoded.get("numRecords"), int):
            rows = _footer_rows(store, table_uri, path, allow_absolute_paths)
            if text is not None and decoded is not None and "numRecords" not in decoded:
                stats[i] = with_new_stat(text, decoded, "numRecords", rows)  # the other stats as written
            else:
                stats[i] = orjson.dumps({**(decoded or {}), "numRecords": rows}).decode()
            changed = True
    if changed:
        files = files.set_column(files.schema.get_field_index("stats"), "stats", pa.array(stats, pa.string()))
    return files.set_column(files.schema.get_field_index("data_change"), "data_change", pa.repeat(pa.scalar(False), files.num_rows))


def _footer_rows(store: LogStore, table_uri: str, path: str, allow_absolute_paths: bool) -> int:
    location = locate(table_uri, path, allow_absolute=allow_absolute_paths)
    try:
        if location.relative is None:
            raise TxnLogError(f"data file {location.uri} is outside table {table_uri}")
        with store.open_input(location.relative) as source:
            return int(pq.ParquetFile(source).metadata.num_rows)
    except TxnLogError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot count the rows of data file {location.uri} of table {table_uri}: {e}", path=path) from e
