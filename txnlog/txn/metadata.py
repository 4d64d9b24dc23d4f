"""Metadata and protocol updates: what ``update_metadata`` turns into a new ``metaData`` action,
and the protocol it needs."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import InvalidArgumentTypeError, InvalidTablePropertyError, SchemaError, TransactionError
from txnlog.file_facts import physical_names
from txnlog.log.actions import Format, Metadata, Protocol
from txnlog.log.features import merge_protocols, protocol_for, writer_features
from txnlog.schema import arrow_to_delta_schema, assign_column_mapping
from txnlog.txn.schema_changes import SchemaChange, highest_column_id, inherit_column_mapping, plan_change


def schema_string_of(schema: pa.Schema | str | Mapping[str, Any]) -> str:
    """A Delta schemaString from a pyarrow schema, a Delta schema as JSON text, or as a dict."""
    if isinstance(schema, pa.Schema):
        return arrow_to_delta_schema(schema)
    if isinstance(schema, str):
        return schema
    if isinstance(schema, Mapping):
        return orjson.dumps(schema).decode()
    raise InvalidArgumentTypeError(
        f"schema must be a pyarrow Schema or a Delta schema (JSON text or dict), got {type(schema).__name__}"
    )


def _is_protocol_directive(key: str) -> bool:
    """Keys that ask for a protocol rather than describe the table; they are not stored."""
    lowered = key.lower()
    return lowered.startswith(props.FEATURES.prefix.lower()) or lowered in (
        props.MIN_READER_VERSION.key.lower(),
        props.MIN_WRITER_VERSION.key.lower(),
    )


def _configuration(base: Mapping[str, str], requested: Mapping[str, str]) -> dict[str, str]:
    """``requested`` checked through the registry. Keys the table already carries unchanged
    (another engine's, perhaps unknown here) pass as they are; new or changed ones must be known."""
    changed = {k: v for k, v in requested.items() if base.get(k) != v}
    normalized = props.normalize(changed)
    return {**{k: v for k, v in requested.items() if k not in changed}, **normalized}


def updated_metadata(
    base: Metadata | None,
    base_protocol: Protocol | None,
    *,
    schema: pa.Schema | str | Mapping[str, Any] | None = None,
    partition_columns: Sequence[str] | None = None,
    configuration: Mapping[str, str] | None = None,
    unset_properties: Sequence[str] = (),
    replace_table: bool = False,
    name: str | None = None,
    description: str | None = None,
    now_ms: int,
    automatic_widening_only: bool = False,
    clustering: str | None = None,
) -> tuple[SchemaChange, Protocol | None]:
    """The new metaData (in a :class:`SchemaChange` saying what it needs of the rows, decided
    by :func:`~txnlog.txn.schema_changes.plan_change`), and the protocol to write with it (None
    when the current one serves). ``configuration`` is merged into the table's properties;
    ``unset_properties`` are removed. ``replace_table``: the metadata replaces the table's
    wholesale (CREATE OR REPLACE, RESTORE, whose files are all written for it): properties are
    not merged and the change rules do not apply."""
    if schema is not None:
        schema_string = schema_string_of(schema)
    elif base is not None:
        schema_string = base.schema_string
    else:
        raise TransactionError("a new table needs a schema")
    if configuration is not None and not isinstance(configuration, Mapping):
        raise InvalidArgumentTypeError(f"configuration must be a mapping of strings, got {type(configuration).__name__}")
    base_conf = dict(base.configuration) if base else {}
    requested = dict(configuration or {})
    if not replace_table:
        requested = {**base_conf, **requested}
    unset = {k.lower() for k in unset_properties}
    requested = {k: v for k, v in requested.items() if k.lower() not in unset}
    conf = _configuration(base_conf, requested)
    directives = {k: v for k, v in conf.items() if _is_protocol_directive(k)}
    conf = {k: v for k, v in conf.items() if k not in directives}
    if props.COLUMN_MAPPING_MODE.get(conf) == "id" and base is not None and props.COLUMN_MAPPING_MODE.get(base_conf) == "none":
        # The existing data files name their columns and carry no field ids (delta-spark refuses it too).
        raise InvalidTablePropertyError(
            f"{props.COLUMN_MAPPING_MODE.key}=id cannot be turned on for an existing table, whose data files have no "
            "field ids; use 'name'",
            key=props.COLUMN_MAPPING_MODE.key,
        )
    if props.COLUMN_MAPPING_MODE.get(conf) != "none":
        if not replace_table:
            schema_string = inherit_column_mapping(base, schema_string, conf)
        start = max(props.COLUMN_MAPPING_MAX_ID.get(conf), highest_column_id(schema_string))
        schema_string, max_id = assign_column_mapping(schema_string, start)
        conf[props.COLUMN_MAPPING_MAX_ID.key] = str(max_id)
    metadata = Metadata(
        id=base.id if base else str(uuid.uuid4()),
        schema_string=schema_string,
        partition_columns=tuple(partition_columns) if partition_columns is not None else (base.partition_columns if base else ()),
        configuration=conf,
        created_time=base.created_time if base else now_ms,
        name=name if name is not None else (base.name if base else None),
        description=description if description is not None else (base.description if base else None),
        format=base.format if base else Format(),
    )
    table_schema = metadata.schema  # validates the schema string, raising SchemaError naming the field
    for column in metadata.partition_columns:
        if column not in table_schema.names:
            raise SchemaError(f"partition column {column!r} is not in the schema", field=column)
    change = plan_change(None if replace_table else base, metadata, automatic_widening_only=automatic_widening_only,
                         clustering=None if replace_table else clustering)
    metadata = change.metadata
    conf, schema_string = dict(metadata.configuration), metadata.schema_string
    required = protocol_for({**conf, **directives}, schema_string)
    new_protocol = merge_protocols(base_protocol, required) if base_protocol is not None else required
    if "rowTracking" in writer_features(new_protocol):
        names = _materialized_column_names(base_conf, conf, metadata)
        if names != {k: conf.get(k) for k in names}:
            change.metadata = dataclasses.replace(metadata, configuration={**conf, **names})
    return change, (new_protocol if new_protocol != base_protocol else None)


def _materialized_column_names(base_conf: Mapping[str, str], conf: Mapping[str, str], metadata: Metadata) -> dict[str, str]:
    """The names of the hidden row id and row commit version columns: kept once assigned (the
    protocol wants them stable for the table's life, even when a new configuration omits
    them), else new ones named as delta-spark names them. None may equal a column's name,
    logical or physical."""
    taken = {name.lower() for name in _column_names(metadata)}
    names: dict[str, str] = {}
    for prop, prefix in ((props.ROW_ID_COLUMN, "_row-id-col-"), (props.ROW_COMMIT_VERSION_COLUMN, "_row-commit-version-col-")):
        name = conf.get(prop.key) or base_conf.get(prop.key) or f"{prefix}{uuid.uuid4()}"
        if name.lower() in taken:
            raise SchemaError(f"{prop.key}={name!r} is also the name of a column of the table", field=name)
        taken.add(name.lower())
        names[prop.key] = name
    return names


def _column_names(metadata: Metadata) -> set[str]:
    """Every top-level column name, logical and, under column mapping, physical."""
    logical = {str(f.name) for f in metadata.schema}
    physical = physical_names(metadata.schema, metadata.configuration) or {}
    return logical | set(physical.values())
