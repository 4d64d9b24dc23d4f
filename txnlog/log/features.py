"""Protocol versions and table features: what this library can read and write."""

from __future__ import annotations

from txnlog.errors import UnsupportedFeatureError
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
