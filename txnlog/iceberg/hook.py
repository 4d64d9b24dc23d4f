"""The ``iceberg-export`` post-commit hook. Every process that commits loads the hook registry's
entry points, so this module imports no pyiceberg: the export is imported when a table asks for it."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from types import ModuleType

from txnlog import PostCommitContext, Table
from txnlog import properties as props
from txnlog.iceberg.errors import IcebergExportError
from txnlog.storage import TableLocation

log = logging.getLogger(__name__)


def _exporter(uri: str) -> ModuleType:
    """The export module; a table that asks for the export without pyiceberg installed gets an
    error saying so (on the commit's hook_failures)."""
    try:
        return importlib.import_module(".exporter", __package__)  # optional: pyiceberg, only when a table exports
    except ImportError as e:
        raise IcebergExportError(
            f"table {uri} asks for Iceberg metadata (txnlog.iceberg.export.enabled or delta.universalFormat.enabledFormats) "
            f"but the export cannot load: {e}; pip install 'txnlog[iceberg]'"
        ) from e


def export_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table asks for Iceberg metadata after every commit."""
    if props.ICEBERG_EXPORT_ENABLED.get(configuration):
        return True
    formats = props.UNIVERSAL_FORMAT.get(configuration)
    return "iceberg" in {f.strip().lower() for f in formats.split(",")}


class IcebergExportHook:
    """The ``iceberg-export`` post-commit hook: exports the committed version. A failure is
    raised to the hook registry, which logs it and reports it on ``CommitResult.hook_failures``
    without failing the commit; the next export catches up.

    With ``txnlog.iceberg.export.async=true`` the export runs in one background thread (one
    queued run per table: it exports every commit up to the newest, one snapshot each); a
    background failure is raised by the next commit's hook call, so it shows on that commit."""

    name = "iceberg-export"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._errors: dict[str, BaseException] = {}
        self._pending: dict[str, Future[None]] = {}

    def __call__(self, ctx: PostCommitContext) -> None:
        conf = ctx.configuration
        with self._lock:
            error = self._errors.pop(ctx.uri, None)
        if error is not None:
            raise IcebergExportError(f"background Iceberg export of {ctx.uri} after an earlier commit failed: {error}") from error
        if not export_enabled(conf):
            return
        if not props.ICEBERG_EXPORT_ASYNC.get(conf):
            result = _exporter(ctx.uri).export_snapshot(ctx.snapshot)
            log.debug("exported %s version %d to Iceberg: %s", ctx.uri, ctx.version, result)
            return
        with self._lock:
            if ctx.uri in self._pending:
                return  # the queued run reads the newest log when it starts
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="txnlog-iceberg")
            self._pending[ctx.uri] = self._executor.submit(self._run, ctx.location)

    def _run(self, table: TableLocation) -> None:
        with self._lock:
            self._pending.pop(table.uri, None)
        try:
            _exporter(table.uri).export(Table.from_location(table))
        except Exception as e:
            log.warning("background Iceberg export of %s failed", table.uri, exc_info=True)
            with self._lock:
                self._errors[table.uri] = e

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background exports queued so far (one thread: a no-op queued after them
        finishes last); True when they are done."""
        with self._lock:
            executor = self._executor
        if executor is None:
            return True
        done, _ = wait([executor.submit(lambda: None)], timeout=timeout)
        return bool(done)


def wait_for_exports(table: Table, timeout: float | None = None) -> bool:
    """Wait until the background exports ``table``'s hooks queued are done (async mode)."""
    hook = next((h for h in table.hooks if h.name == IcebergExportHook.name), None)
    return hook.wait(timeout) if isinstance(hook, IcebergExportHook) else True
