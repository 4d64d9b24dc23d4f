"""The export's error (a module of its own: importing it must not import pyiceberg)."""

from __future__ import annotations

from txnlog.errors import TxnLogError


class IcebergExportError(TxnLogError):
    """The Iceberg export could not be written (names the table, and the file or operation)."""
