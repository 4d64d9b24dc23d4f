"""The JSON boundary of the log: newline-delimited actions in, records out, and back.

This is the only module that knows the camelCase names. Unknown actions and unknown fields are
ignored on read, as the protocol requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from txnlog.errors import LogCorruptError
from txnlog.log.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
)
from txnlog.log.file_actions import ADD_LOG_COLUMNS, REMOVE_LOG_COLUMNS, log_body


class _MissingField(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _req(d: Mapping[str, Any], name: str) -> Any:
    value = d.get(name)
    if value is None:
        raise _MissingField(name)
    return value


def _tuple_or_none(v: Any) -> tuple[str, ...] | None:
    return tuple(v) if v is not None else None


def decode_dv(d: Mapping[str, Any] | None) -> DeletionVectorDescriptor | None:
    if not d:
        return None
    return DeletionVectorDescriptor(
        storage_type=_req(d, "storageType"),
        path_or_inline_dv=_req(d, "pathOrInlineDv"),
        size_in_bytes=int(_req(d, "sizeInBytes")),
        cardinality=int(_req(d, "cardinality")),
        offset=d.get("offset"),
        max_row_index=d.get("maxRowIndex"),
    )


def _plain(value: Any) -> Any:
    """A deletion vector descriptor as the dict of its (snake_case) fields; anything else as is."""
    return dataclasses.asdict(value) if isinstance(value, DeletionVectorDescriptor) else value


def _protocol(d: Mapping[str, Any]) -> Protocol:
    return Protocol(
        min_reader_version=int(_req(d, "minReaderVersion")),
        min_writer_version=int(_req(d, "minWriterVersion")),
        reader_features=_tuple_or_none(d.get("readerFeatures")),
        writer_features=_tuple_or_none(d.get("writerFeatures")),
    )


def _metadata(d: Mapping[str, Any]) -> Metadata:
    fmt = d.get("format") or {}
    return Metadata(
        id=_req(d, "id"),
        schema_string=_req(d, "schemaString"),
        partition_columns=tuple(d.get("partitionColumns") or ()),
        configuration=dict(d.get("configuration") or {}),
        created_time=d.get("createdTime"),
        name=d.get("name"),
        description=d.get("description"),
        format=Format(provider=fmt.get("provider", "parquet"), options=dict(fmt.get("options") or {})),
    )


def _add(d: Mapping[str, Any]) -> AddFile:
    return AddFile(
        path=_req(d, "path"),
        partition_values=dict(d.get("partitionValues") or {}),
        size=int(_req(d, "size")),
        modification_time=int(d.get("modificationTime") or 0),
        data_change=bool(d.get("dataChange", True)),
        stats=d.get("stats"),
        tags=d.get("tags"),
        deletion_vector=decode_dv(d.get("deletionVector")),
        base_row_id=d.get("baseRowId"),
        default_row_commit_version=d.get("defaultRowCommitVersion"),
        clustering_provider=d.get("clusteringProvider"),
    )


def _remove(d: Mapping[str, Any]) -> RemoveFile:
    return RemoveFile(
        path=_req(d, "path"),
        deletion_timestamp=d.get("deletionTimestamp"),
        data_change=bool(d.get("dataChange", True)),
        extended_file_metadata=d.get("extendedFileMetadata"),
        partition_values=d.get("partitionValues"),
        size=d.get("size"),
        stats=d.get("stats"),
        tags=d.get("tags"),
        deletion_vector=decode_dv(d.get("deletionVector")),
        base_row_id=d.get("baseRowId"),
        default_row_commit_version=d.get("defaultRowCommitVersion"),
    )


def _cdc(d: Mapping[str, Any]) -> AddCDCFile:
    return AddCDCFile(
        path=_req(d, "path"),
        partition_values=dict(d.get("partitionValues") or {}),
        size=int(_req(d, "size")),
        data_change=bool(d.get("dataChange", False)),
        tags=d.get("tags"),
    )


def _txn(d: Mapping[str, Any]) -> Txn:
    return Txn(app_id=_req(d, "appId"), version=int(_req(d, "version")), last_updated=d.get("lastUpdated"))


def _domain(d: Mapping[str, Any]) -> DomainMetadata:
    return DomainMetadata(
        domain=_req(d, "domain"), configuration=d.get("configuration") or "", removed=bool(d.get("removed", False))
    )


def _checkpoint_metadata(d: Mapping[str, Any]) -> CheckpointMetadata:
    return CheckpointMetadata(version=int(_req(d, "version")), tags=d.get("tags"))


def _sidecar(d: Mapping[str, Any]) -> Sidecar:
    return Sidecar(
        path=_req(d, "path"),
        size_in_bytes=int(_req(d, "sizeInBytes")),
        modification_time=int(d.get("modificationTime") or 0),
        tags=d.get("tags"),
    )


_COMMIT_INFO_FIELDS = {
    "timestamp": "timestamp",
    "operation": "operation",
    "operationParameters": "operation_parameters",
    "readVersion": "read_version",
    "isolationLevel": "isolation_level",
    "isBlindAppend": "is_blind_append",
    "engineInfo": "engine_info",
    "txnId": "txn_id",
    "operationMetrics": "operation_metrics",
    "inCommitTimestamp": "in_commit_timestamp",
    "userMetadata": "user_metadata",
}


def _commit_info(d: Mapping[str, Any]) -> CommitInfo:
    known = {py: d[js] for js, py in _COMMIT_INFO_FIELDS.items() if js in d}
    other = {k: v for k, v in d.items() if k not in _COMMIT_INFO_FIELDS}
    return CommitInfo(**known, other=other)


DECODERS: dict[str, Callable[[Mapping[str, Any]], Action]] = {
    "protocol": _protocol,
    "metaData": _metadata,
    "add": _add,
    "remove": _remove,
    "cdc": _cdc,
    "txn": _txn,
    "domainMetadata": _domain,
    "checkpointMetadata": _checkpoint_metadata,
    "sidecar": _sidecar,
    "commitInfo": _commit_info,
}


def decode_action(kind: str, body: Mapping[str, Any], *, path: str = "?", version: int | None = None) -> Action | None:
    """One action from its JSON key and body; None for an action kind the protocol added later."""
    decoder = DECODERS.get(kind)
    if decoder is None:
        return None
    if not isinstance(body, Mapping):
        raise LogCorruptError(f"{path}: '{kind}' action is not an object (version {version})", path=path, version=version)
    try:
        return decoder(body)
    except _MissingField as e:
        raise LogCorruptError(
            f"{path}: '{kind}' action lacks required field '{e.name}' (version {version})", path=path, version=version
        ) from None
    except (TypeError, ValueError) as e:
        raise LogCorruptError(f"{path}: malformed '{kind}' action (version {version}): {e}", path=path, version=version) from e


def parse_lines(data: bytes, *, path: str, version: int | None = None) -> list[dict[str, Any]]:
    """The raw action objects of a newline-delimited JSON log file, each ``{kind: body}``."""
    out = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise LogCorruptError(
                f"{path}: corrupt or truncated JSON at line {lineno} (version {version}): {e}", path=path, version=version
            ) from None
        if not isinstance(obj, dict):
            raise LogCorruptError(f"{path}: line {lineno} is not a JSON object (version {version})", path=path, version=version)
        out.append(obj)
    return out


def decode_commit(data: bytes, *, path: str, version: int | None = None) -> list[Action]:
    """All known actions of a commit file, in file order."""
    actions: list[Action] = []
    for obj in parse_lines(data, path=path, version=version):
        for kind, body in obj.items():
            action = decode_action(kind, body, path=path, version=version)
            if action is not None:
                actions.append(action)
    return actions


# --- encoding --------------------------------------------------------------------------------


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def encode_action(action: Action) -> dict[str, Any]:
    """``{kind: body}`` ready for the log."""
    if isinstance(action, (AddFile, RemoveFile)):
        kind, columns = ("add", ADD_LOG_COLUMNS) if isinstance(action, AddFile) else ("remove", REMOVE_LOG_COLUMNS)
        return {kind: log_body((log_name, _plain(getattr(action, col))) for log_name, col in columns)}
    if isinstance(action, Metadata):
        return {
            "metaData": _drop_none(
                {
                    "id": action.id,
                    "name": action.name,
                    "description": action.description,
                    "format": {"provider": action.format.provider, "options": dict(action.format.options)},
                    "schemaString": action.schema_string,
                    "partitionColumns": list(action.partition_columns),
                    "configuration": dict(action.configuration),
                    "createdTime": action.created_time,
                }
            )
        }
    if isinstance(action, Protocol):
        body: dict[str, Any] = {
            "minReaderVersion": action.min_reader_version,
            "minWriterVersion": action.min_writer_version,
        }
        if action.reader_features is not None:
            body["readerFeatures"] = list(action.reader_features)
        if action.writer_features is not None:
            body["writerFeatures"] = list(action.writer_features)
        return {"protocol": body}
    if isinstance(action, Txn):
        return {"txn": _drop_none({"appId": action.app_id, "version": action.version, "lastUpdated": action.last_updated})}
    if isinstance(action, CommitInfo):
        known = {js: getattr(action, py) for js, py in _COMMIT_INFO_FIELDS.items()}
        return {"commitInfo": {**dict(action.other), **_drop_none(known)}}
    if isinstance(action, DomainMetadata):
        return {"domainMetadata": {"domain": action.domain, "configuration": action.configuration, "removed": action.removed}}
    if isinstance(action, AddCDCFile):
        return {
            "cdc": _drop_none(
                {
                    "path": action.path,
                    "partitionValues": dict(action.partition_values),
                    "size": action.size,
                    "dataChange": action.data_change,
                    "tags": dict(action.tags) if action.tags else None,
                }
            )
        }
    if isinstance(action, CheckpointMetadata):
        return {"checkpointMetadata": _drop_none({"version": action.version, "tags": action.tags})}
    if isinstance(action, Sidecar):
        return {
            "sidecar": _drop_none(
                {
                    "path": action.path,
                    "sizeInBytes": action.size_in_bytes,
                    "modificationTime": action.modification_time,
                    "tags": action.tags,
                }
            )
        }
    raise TypeError(f"not a Delta action: {action!r}")


def dump_lines(objects: Iterable[Mapping[str, Any]]) -> bytes:
    """Newline-delimited JSON of already-encoded actions."""
    return b"\n".join(orjson.dumps(o) for o in objects) + b"\n"


def encode_commit(actions: Iterable[Action]) -> bytes:
    """Newline-delimited JSON for a commit file."""
    return dump_lines(encode_action(a) for a in actions)
