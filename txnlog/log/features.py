"""Protocol versions and table features: what this library can read and write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from txnlog import properties as props
from txnlog.errors import InvalidTablePropertyError, UnsupportedFeatureError
from txnlog.log.actions import Protocol

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

# Reader features that change nothing in file-level log replay, or that replay handles:
# deletion vectors are part of the file key, column mapping is carried in the schema, and
# V2 checkpoints are read. The rest only matter to whoever decodes the data files.
READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
        "variantShredding-preview",
        "typeWidening",
        "typeWidening-preview",
    }
)


def check_readable(protocol: Protocol, where: str) -> None:
    """Refuse a table whose reader version or features are beyond this library."""
    if protocol.min_reader_version > MAX_READER_VERSION:
        unknown = tuple(sorted(set(protocol.reader_features or ()) - READER_FEATURES))
        extra = f" and reader features {list(unknown)}" if unknown else ""
        raise UnsupportedFeatureError(
            f"{where} needs reader version {protocol.min_reader_version}{extra}; txnlog reads up to "
            f"version {MAX_READER_VERSION}",
            features=unknown,
            version=protocol.min_reader_version,
        )
    if protocol.min_reader_version == 3:
        unknown = tuple(sorted(set(protocol.reader_features or ()) - READER_FEATURES))
        if unknown:
            raise UnsupportedFeatureError(
                f"{where} needs reader features {list(unknown)} that txnlog does not support",
                features=unknown,
                version=3,
            )


# Writer features this library honours when it commits. Legacy writer versions imply the
# features of their era: 2 appendOnly+invariants, 3 checkConstraints, 4 changeDataFeed+
# generatedColumns, 5 columnMapping, 6 identityColumns.
WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "inCommitTimestamp",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "clustering",
        "rowTracking",
    }
)
# Features whose rules only bite when the schema uses them (a generation expression, an
# identity column): listed but unused, they ask nothing of a writer.
_WRITER_FEATURES_IF_UNUSED = frozenset({"generatedColumns", "identityColumns"})
_LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}


def writer_features(protocol: Protocol) -> frozenset[str]:
    """The writer features in force, whether listed (v7) or implied by a legacy version."""
    if protocol.min_writer_version >= 7:
        return frozenset(protocol.writer_features or ())
    implied: set[str] = set()
    for version, names in _LEGACY_WRITER_FEATURES.items():
        if protocol.min_writer_version >= version:
            implied.update(names)
    return frozenset(implied)


def features_in_use(schema_string: str) -> set[str]:
    """Schema-level features a table actually uses: generated and identity columns."""
    used = set()
    if props.GENERATION_EXPRESSION_KEY in schema_string:
        used.add("generatedColumns")
    if props.IDENTITY_START_KEY in schema_string:
        used.add("identityColumns")
    return used


def check_writable(protocol: Protocol, schema_string: str, where: str) -> None:
    """Refuse to commit to a table whose writer version or features this library does not implement."""
    check_readable(protocol, where)
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        raise UnsupportedFeatureError(
            f"{where} needs writer version {protocol.min_writer_version}; txnlog writes up to {MAX_WRITER_VERSION}",
            version=protocol.min_writer_version,
        )
    active = writer_features(protocol)
    used = features_in_use(schema_string)
    unsupported = {f for f in active if f not in WRITER_FEATURES and (f not in _WRITER_FEATURES_IF_UNUSED or f in used)}
    if unsupported:
        names = tuple(sorted(unsupported))
        raise UnsupportedFeatureError(
            f"{where} needs writer features {list(names)} that txnlog cannot honour; refusing to commit",
            features=names,
            version=protocol.min_writer_version,
        )


# Column types that need a reader and writer feature wherever they occur in the schema.
_TYPE_FEATURES = {"timestamp_ntz": "timestampNtz", "variant": "variantType"}


def type_names(schema_string: str) -> set[str]:
    """The primitive type names a Delta schema uses, at any depth (empty for malformed JSON,
    which is refused where the schema is parsed)."""
    names: set[str] = set()

    def walk(t: Any) -> None:
        if isinstance(t, str):
            names.add(t)
        elif isinstance(t, dict):
            for field in t.get("fields") or ():
                walk(field.get("type") if isinstance(field, dict) else None)
            for key in ("elementType", "keyType", "valueType"):
                walk(t.get(key))

    try:
        walk(orjson.loads(schema_string))
    except orjson.JSONDecodeError:
        pass
    return names


def protocol_for(configuration: Mapping[str, str], schema_string: str) -> Protocol:
    """The lowest protocol that supports what a table's properties and schema ask for.

    (1, 2) unless a property or a column type needs more; a table that needs any table feature
    moves to (3, 7) or (1, 7) and lists every feature explicitly, legacy ones included. Every
    property is read through the registry, so ``Name``, ``V2`` or ``TRUE`` count as delta-spark
    counts them.
    """
    used_types = type_names(schema_string)
    reader: set[str] = set()
    writer: set[str] = {"appendOnly", "invariants"}
    legacy_writer = 2
    legacy_reader = 1
    if any(True for _ in props.CONSTRAINTS.items(configuration)):
        writer.add("checkConstraints")
        legacy_writer = max(legacy_writer, 3)
    if props.ENABLE_CHANGE_DATA_FEED.get(configuration):
        writer.add("changeDataFeed")
        legacy_writer = max(legacy_writer, 4)
    if props.COLUMN_MAPPING_MODE.get(configuration) != "none":
        reader.add("columnMapping")
        writer.add("columnMapping")
        legacy_writer, legacy_reader = max(legacy_writer, 5), 2
    needs_features = False
    if props.ENABLE_ROW_TRACKING.get(configuration):
        if props.ROW_TRACKING_SUSPENDED.get(configuration):
            raise InvalidTablePropertyError(
                f"{props.ENABLE_ROW_TRACKING.key}=true and {props.ROW_TRACKING_SUSPENDED.key}=true contradict each other",
                key=props.ROW_TRACKING_SUSPENDED.key,
            )
        writer.update(("rowTracking", "domainMetadata"))
        needs_features = True
    if props.ENABLE_DELETION_VECTORS.get(configuration):
        reader.add("deletionVectors")
        writer.add("deletionVectors")
        needs_features = True
    if props.ENABLE_IN_COMMIT_TIMESTAMPS.get(configuration):
        writer.add("inCommitTimestamp")
        needs_features = True
    if props.CHECKPOINT_POLICY.get(configuration) == "v2":
        reader.add("v2Checkpoint")
        writer.add("v2Checkpoint")
        needs_features = True
    for type_name, feature in _TYPE_FEATURES.items():
        if type_name in used_types:
            reader.add(feature)
            writer.add(feature)
            needs_features = True
    for name, value in props.FEATURES.items(configuration):
        if value.strip().lower() not in ("supported", "enabled"):
            raise InvalidTablePropertyError(
                f"table property {props.FEATURES.key(name)}={value!r} is invalid: expected 'supported'",
                key=props.FEATURES.key(name),
            )
        writer.add(name)
        if name == "rowTracking":  # the high-water mark lives in a domain
            writer.add("domainMetadata")
        if name in READER_FEATURES:
            reader.add(name)
        needs_features = True
    if not needs_features:
        legacy_reader = max(legacy_reader, props.MIN_READER_VERSION.get(configuration))
        legacy_writer = max(legacy_writer, props.MIN_WRITER_VERSION.get(configuration))
        if legacy_reader > 2 or legacy_writer > 6:
            raise UnsupportedFeatureError(
                f"{props.MIN_READER_VERSION.key} 3 / {props.MIN_WRITER_VERSION.key} 7 need table features: "
                f"set {props.FEATURES.prefix}<name>"
            )
        return Protocol(legacy_reader, legacy_writer)
    if reader:
        return Protocol(3, 7, tuple(sorted(reader)), tuple(sorted(writer)))
    return Protocol(1, 7, None, tuple(sorted(writer)))


def merge_protocols(current: Protocol, required: Protocol) -> Protocol:
    """The smallest protocol that satisfies both (an upgrade never drops a feature)."""
    if current.min_writer_version < 7 and required.min_writer_version < 7 and max(
        current.min_reader_version, required.min_reader_version
    ) < 3:
        return Protocol(
            max(current.min_reader_version, required.min_reader_version),
            max(current.min_writer_version, required.min_writer_version),
        )
    writer = writer_features(current) | writer_features(required)
    reader = set(current.reader_features or ()) | set(required.reader_features or ())
    if max(current.min_reader_version, required.min_reader_version) == 2:
        reader.add("columnMapping")
    if reader:
        return Protocol(3, 7, tuple(sorted(reader)), tuple(sorted(writer)))
    return Protocol(max(current.min_reader_version, required.min_reader_version), 7, None, tuple(sorted(writer)))
