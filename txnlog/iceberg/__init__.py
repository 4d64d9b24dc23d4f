"""Iceberg metadata export: the same Delta table readable as an Iceberg table, no data copied.

An engine layer (it imports the core; the core never imports it). Entry points:

- :func:`export` from Python (``txnlog export-iceberg URI`` from the shell);
- the ``iceberg-export`` post-commit hook, on when ``txnlog.iceberg.export.enabled=true`` or
  ``delta.universalFormat.enabledFormats`` names ``iceberg``.

See docs/iceberg.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from txnlog import properties as props
from txnlog.iceberg._datafiles import IcebergExportError
from txnlog.iceberg._export import DELTA_VERSION_KEY, ExportResult, export, export_snapshot
from txnlog.txn.hooks import PostCommitContext

log = logging.getLogger(__name__)


def export_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table asks for Iceberg metadata after every commit."""
    if props.ICEBERG_EXPORT_ENABLED.get(configuration):
        return True
    formats = props.UNIVERSAL_FORMAT.get(configuration)
    return "iceberg" in {f.strip().lower() for f in formats.split(",")}


class IcebergExportHook:
    """The ``iceberg-export`` post-commit hook: exports the committed version. A failure is
    raised to the hook registry, which logs it and reports it on ``CommitResult.hook_failures``
    without failing the commit; the next export catches up."""

    name = "iceberg-export"

    def __call__(self, ctx: PostCommitContext) -> None:
        if not export_enabled(ctx.configuration):
            return
        result = export_snapshot(ctx.snapshot)
        log.debug("exported %s version %d to Iceberg: %s", ctx.table.uri, ctx.version, result)


__all__ = ["DELTA_VERSION_KEY", "ExportResult", "IcebergExportError", "IcebergExportHook", "export", "export_enabled"]
