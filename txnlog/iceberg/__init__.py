"""Iceberg metadata export: the same Delta table readable as an Iceberg table, no data copied.

An engine layer (it imports the core; the core never imports it). Entry points:

- :func:`export` from Python (``txnlog export-iceberg URI`` from the shell);
- the ``iceberg-export`` post-commit hook, on when ``txnlog.iceberg.export.enabled=true`` or
  ``delta.universalFormat.enabledFormats`` names ``iceberg``; with
  ``txnlog.iceberg.export.async=true`` it runs in a background thread.

Importing this package does not import pyiceberg (the hook registry imports it in every process
that commits); :func:`export` and :class:`ExportResult` load it on first use. See docs/iceberg.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from txnlog.iceberg.errors import IcebergExportError
from txnlog.iceberg.hook import IcebergExportHook, export_enabled, wait_for_exports

if TYPE_CHECKING:
    from txnlog.iceberg.exporter import DELTA_VERSION_KEY, ExportResult, export, export_snapshot

_FROM_EXPORT = frozenset({"DELTA_VERSION_KEY", "ExportResult", "export", "export_snapshot"})


def __getattr__(name: str) -> Any:
    if name in _FROM_EXPORT:
        module = importlib.import_module(".exporter", __name__)  # optional: pyiceberg, loaded on first use
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DELTA_VERSION_KEY",
    "ExportResult",
    "IcebergExportError",
    "IcebergExportHook",
    "export",
    "export_enabled",
    "export_snapshot",
    "wait_for_exports",
]
