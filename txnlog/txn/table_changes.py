"""Concurrent protocol and metadata changes: which ones a transaction adopts, which conflict.

The rules are delta-spark 4.4's (``ConflictChecker.checkProtocolCompatibility`` and
``attemptToResolveMetadataConflicts``), applied to each winner that carries a ``protocol`` or
``metaData`` action, oldest first:

protocol
    adopted when txnlog can write it; a conflict when this transaction changes the protocol too,
    or when the winner drops a feature the read protocol had;
metadata
    a conflict when this transaction changes metadata too; tolerated, without adopting it, when
    the winner only moved identity high-water marks; adopted when it differs from the metadata
    this transaction sees only by an allowed feature enablement (row tracking, deletion vectors,
    column mapping ``none`` -> ``name``, V2 checkpoints, in-commit timestamps); any other
    difference conflicts. Adopting a row tracking enablement marks this commit as not preserving
    row tracking (``commitInfo.tags["delta.rowTracking.preserved"] = "false"``).

What is adopted changes what the transaction commits: row ids once the protocol supports row
tracking, in-commit timestamps once they are on (:mod:`txnlog.txn.transaction` asks
:class:`TableView` at each attempt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from txnlog import properties as props
from txnlog.errors import CommitConflictError, MetadataChangedError, ProtocolChangedError, TxnLogError
from txnlog.log.actions import CommitInfo, Metadata, Protocol
from txnlog.log.features import check_writable, writer_features
from txnlog.table_configuration import TableConfiguration

#: Field metadata keys a column mapping enablement may add or change (delta-spark's list).
_COLUMN_MAPPING_FIELD_KEYS = frozenset(
    {props.COLUMN_MAPPING_ID_KEY, props.PHYSICAL_NAME_KEY, props.NESTED_IDS_KEY, "parquet.field.id", "parquet.field.nested.ids"}
)
_UC_TABLE_ID_KEY = "io.unitycatalog.tableId"


def _features(protocol: Protocol) -> frozenset[str]:
    """Every feature a protocol supports, reader and writer, listed or implied by a legacy version."""
    reader: set[str] = set(protocol.reader_features or ()) if protocol.min_reader_version >= 3 else set()
    if protocol.min_reader_version == 2:
        reader.add("columnMapping")
    return writer_features(protocol) | reader


@dataclass
class TableView:
    """The protocol and metadata a transaction commits under, as it adopts winners' changes."""

    read_protocol: Protocol
    protocol: Protocol
    metadata: Metadata
    changes_protocol: bool
    changes_metadata: bool
    #: False once a winner's row tracking enablement was adopted.
    row_tracking_preserved: bool = True
    adopted: bool = False
    _configuration: TableConfiguration | None = None

    def configuration(self) -> TableConfiguration:
        config = self._configuration
        if config is None or config.protocol != self.protocol or config.metadata is not self.metadata:
            config = self._configuration = TableConfiguration.from_actions(self.protocol, self.metadata)
        return config

    def tags(self) -> dict[str, str]:
        """commitInfo tags this commit must carry because of what it adopted."""
        return {} if self.row_tracking_preserved else {props.ROW_TRACKING_PRESERVED_TAG: "false"}


Describe = Callable[[int], str]
Facts = Callable[[int], dict[str, Any]]


def resolve(
    view: TableView,
    changes: list[tuple[int, Protocol | None, Metadata | None, CommitInfo | None]],
    who: Describe,
    facts: Facts,
) -> tuple[TableView, tuple[int, int, CommitConflictError] | None]:
    """``view`` after the winners' protocol and metadata ``changes`` (version order), and the
    first conflict among them as (version, check order, error), or None."""
    view = dataclasses.replace(view)
    for version, protocol, metadata, info in changes:
        if protocol is not None:
            reason = _protocol_conflict(view, protocol)
            if reason:
                return view, (version, 1, ProtocolChangedError(f"{who(version)} changed the table protocol: {reason}", **facts(version)))
            if protocol != view.protocol:
                view.protocol, view.adopted = protocol, True
        if metadata is not None:
            reason = _metadata_conflict(view, metadata, info)
            if reason:
                return view, (version, 2, MetadataChangedError(f"{who(version)} changed the table metadata: {reason}", **facts(version)))
    return view, None


def _protocol_conflict(view: TableView, winner: Protocol) -> str | None:
    try:
        check_writable(winner, view.metadata.schema_string, "the new protocol")
    except TxnLogError as e:
        return str(e)
    if view.changes_protocol:
        return "this transaction changes the protocol too"
    dropped = sorted(_features(view.read_protocol) - _features(winner))
    if dropped:
        return f"it dropped features {dropped}"
    return None


def _metadata_conflict(view: TableView, winner: Metadata, info: CommitInfo | None) -> str | None:
    """Why the winner's metadata conflicts, or None after adopting or tolerating it."""
    if view.changes_metadata:
        return "this transaction changes the metadata too"
    if _tag(info, props.IDENTITY_ONLY_TAG) or _identity_only(view.metadata, winner):
        return None  # only identity high-water marks moved: nothing this transaction wrote depends on them
    mine = view.metadata
    differ = {
        name
        for name, a, b in (
            ("id", mine.id, winner.id),
            ("name", mine.name, winner.name),
            ("description", mine.description, winner.description),
            ("format", mine.format, winner.format),
            ("partitionColumns", tuple(mine.partition_columns), tuple(winner.partition_columns)),
            ("createdTime", mine.created_time, winner.created_time),
        )
        if a != b
    }
    if differ:
        return f"it changed {sorted(differ)}"
    enables_row_tracking = False
    if dict(mine.configuration) != dict(winner.configuration):
        reason, enables_row_tracking = _configuration_conflict(view, mine.configuration, winner.configuration)
        if reason:
            return reason
    if mine.schema_string != winner.schema_string:
        reason = _schema_conflict(mine, winner)
        if reason:
            return reason
    view.metadata, view.adopted = winner, True
    if enables_row_tracking:
        view.row_tracking_preserved = False
    return None


def _tag(info: CommitInfo | None, key: str) -> bool:
    tags = info.other.get("tags") if info is not None else None
    return isinstance(tags, Mapping) and str(tags.get(key, "")).lower() == "true"


def _is_true(prop: props.TableProperty[Any], value: str) -> bool:
    try:
        return bool(prop.get({prop.key: value}))
    except TxnLogError:
        return False


def _configuration_conflict(view: TableView, mine: Mapping[str, str], winner: Mapping[str, str]) -> tuple[str | None, bool]:
    """(why the configuration change conflicts or None, whether it enables row tracking)."""
    removed = sorted(set(mine) - set(winner))
    if removed:
        return f"it removed table properties {removed}", False
    changed = {k: v for k, v in winner.items() if mine.get(k) != v}
    features = _features(view.protocol)

    def allowed(key: str, value: str) -> bool:
        is_new = key not in mine
        if key == props.ENABLE_ROW_TRACKING.key:
            return "rowTracking" in features and _is_true(props.ENABLE_ROW_TRACKING, value)
        if key in (props.ROW_ID_COLUMN.key, props.ROW_COMMIT_VERSION_COLUMN.key):
            return props.ENABLE_ROW_TRACKING.key in winner and _is_true(props.ENABLE_ROW_TRACKING, winner[props.ENABLE_ROW_TRACKING.key])
        if key == props.COLUMN_MAPPING_MODE.key:
            return (
                "columnMapping" in features
                and _mapping_mode(mine) == "none"
                and _mapping_mode(winner) == "name"
            )
        if key == props.COLUMN_MAPPING_MAX_ID.key:
            return True
        if key == props.ENABLE_DELETION_VECTORS.key:
            return "deletionVectors" in features and _is_true(props.ENABLE_DELETION_VECTORS, value)
        if key == props.CHECKPOINT_POLICY.key:
            return "v2Checkpoint" in features and value.strip().lower() == "v2"
        if key == props.ENABLE_IN_COMMIT_TIMESTAMPS.key:
            return "inCommitTimestamp" in features and _is_true(props.ENABLE_IN_COMMIT_TIMESTAMPS, value)
        if key in (props.ICT_ENABLEMENT_VERSION.key, props.ICT_ENABLEMENT_TIMESTAMP.key):
            return is_new
        if key == _UC_TABLE_ID_KEY:
            return is_new or "catalogOwned-preview" not in features
        return False

    refused = sorted(k for k, v in changed.items() if not allowed(k, v))
    if refused:
        return f"it changed table properties {refused}", False
    enables = props.ENABLE_ROW_TRACKING.key in changed
    return None, enables


def _mapping_mode(configuration: Mapping[str, str]) -> str:
    try:
        return str(props.COLUMN_MAPPING_MODE.get(configuration))
    except TxnLogError:
        return "?"


def _fields(schema_string: str) -> list[dict[str, Any]]:
    fields = orjson.loads(schema_string).get("fields")
    return list(fields) if isinstance(fields, list) else []


def _schema_conflict(mine: Metadata, winner: Metadata) -> str | None:
    """A schema change is allowed only as the column mapping metadata of a ``none`` ->
    ``name`` enablement: same fields, names, types and nullability."""
    try:
        before, after = _fields(mine.schema_string), _fields(winner.schema_string)
    except (orjson.JSONDecodeError, AttributeError):
        return "it changed the schema"
    if before == after:
        return None  # the same schema, written differently
    if len(before) != len(after) or not (_mapping_mode(mine.configuration) == "none" and _mapping_mode(winner.configuration) == "name"):
        return "it changed the schema"
    for a, b in zip(before, after, strict=True):
        if any(a.get(k) != b.get(k) for k in ("name", "type", "nullable")):
            return f"it changed column {a.get('name')!r}"
        meta_a, meta_b = a.get("metadata") or {}, b.get("metadata") or {}
        keys = {k for k in set(meta_a) | set(meta_b) if meta_a.get(k) != meta_b.get(k)}
        if not keys <= _COLUMN_MAPPING_FIELD_KEYS:
            return f"it changed the metadata of column {a.get('name')!r}"
    return None


def _identity_only(mine: Metadata, winner: Metadata) -> bool:
    """Whether the winner's metadata differs from ``mine`` only by identity high-water marks."""
    if mine.schema_string == winner.schema_string:
        return False
    if dataclasses.replace(mine, schema_string="") != dataclasses.replace(winner, schema_string=""):
        return False
    try:
        return bool(_without_marks(orjson.loads(mine.schema_string)) == _without_marks(orjson.loads(winner.schema_string)))
    except orjson.JSONDecodeError:
        return False


def _without_marks(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_marks(v) for k, v in node.items() if k != props.IDENTITY_HIGH_WATER_MARK_KEY}
    if isinstance(node, list):
        return [_without_marks(v) for v in node]
    return node


__all__ = ["TableView", "resolve"]
