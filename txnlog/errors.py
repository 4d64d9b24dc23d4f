"""Every error txnlog raises derives from :class:`TxnLogError`.

Each error carries the facts as attributes (path, version, winning commit, predicate...) so that
callers can act on them without parsing the message.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Iterator
from typing import Any


class TxnLogError(Exception):
    """Base of every error the library raises."""

    #: The operation that failed ("checkpoint", "expire", "vacuum", "restore"), when it is known.
    operation: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickles as cls(*args), which drops the keyword-only facts (and fails for
        # the required ones, e.g. winning_version): rebuild from args and attributes instead,
        # so an error raised in a worker process reaches its parent intact.
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls: type[TxnLogError], args: tuple[Any, ...], state: dict[str, Any]) -> TxnLogError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


@contextlib.contextmanager
def operation_context(operation: str, uri: str, *, version: int | None = None) -> Iterator[None]:
    """Set ``operation`` (and ``version``) on any TxnLogError raised inside (the innermost
    operation wins), and name them with the table in the message of a store or log error, so
    that a failure deep in a maintenance run says what it was part of. The error keeps its
    class and its other facts."""
    try:
        yield
    except TxnLogError as e:
        if e.operation is None:
            e.operation = operation
            if version is not None and getattr(e, "version", None) is None:
                setattr(e, "version", version)  # noqa: B010  (not every error class declares it)
            # Errors from the layers below (a store, the log) do not know what they were part
            # of; the operation's own errors (a refused retention...) already say it.
            if isinstance(e, (StorageError, LogCorruptError, VersionNotFoundError)) and e.args and isinstance(e.args[0], str):
                at = f" at version {version}" if version is not None else ""
                e.args = (f"{operation} of {uri}{at}: {e.args[0]}", *e.args[1:])
        raise


def timestamp_text(ms: int) -> str:
    """A time in an error message: ISO 8601 in UTC, with the epoch milliseconds it was given as
    beside it, e.g. ``2024-05-01T12:00:00.000Z (epoch ms 1714564800000)``."""
    try:
        moment = _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)
    except (OverflowError, OSError, ValueError):  # beyond what a datetime holds
        return f"epoch ms {ms}"
    return f"{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} (epoch ms {ms})"


# --- the caller's arguments ----------------------------------------------------------------


class InvalidArgumentError(TxnLogError, ValueError):
    """An argument of a public call has a bad value (an unknown URI scheme, an unparseable
    timestamp...). Also a ValueError, so Python habits keep working."""


class InvalidArgumentTypeError(TxnLogError, TypeError):
    """An argument of a public call has the wrong type (a dict where an Arrow table is
    expected...). Also a TypeError."""


# --- storage ---------------------------------------------------------------------------------


class StorageError(TxnLogError):
    """A store operation failed. ``path`` names the object."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class FileAlreadyExistsError(StorageError):
    """Put-if-absent found the object already there: another writer won that name."""


class ObjectNotFoundError(StorageError):
    """The object does not exist."""


class PutIfAbsentUnsupportedError(StorageError):
    """The store has no atomic put-if-absent, so committing to it could silently lose commits."""


class AmbiguousWriteError(StorageError):
    """A write failed after it was sent (timeout, broken connection): it may or may not have landed."""


# --- tables and the log ----------------------------------------------------------------------


class TableNotFoundError(TxnLogError):
    """No Delta table (no ``_delta_log`` commits or checkpoints) at ``uri``."""

    def __init__(self, message: str, *, uri: str) -> None:
        super().__init__(message)
        self.uri = uri


class TablePathIsFileError(TableNotFoundError, InvalidArgumentError):
    """The table URI names a file, not a directory: no table is there, and none can be created
    there (so it is both a TableNotFoundError and an InvalidArgumentError)."""


class TableAlreadyExistsError(TxnLogError):
    """``Table.create`` found a table already at ``uri``."""

    def __init__(self, message: str, *, uri: str) -> None:
        super().__init__(message)
        self.uri = uri


class VersionNotFoundError(TxnLogError):
    """The requested version or timestamp is outside what the log still holds."""

    def __init__(self, message: str, *, version: int | None = None) -> None:
        super().__init__(message)
        self.version = version


class ChangeDataNotRecordedError(VersionNotFoundError):
    """A change-data read covers ``version``, at which the table did not record change data
    (``delta.enableChangeDataFeed`` was not true)."""


class LogCorruptError(TxnLogError):
    """The log is malformed: ``path`` and ``version`` name where."""

    def __init__(self, message: str, *, path: str | None = None, version: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.version = version


class VersionGapError(LogCorruptError):
    """The commits of a log segment are not contiguous."""


class CorruptCheckpointError(LogCorruptError):
    """A checkpoint file cannot be read or does not match the protocol's layout.

    ``vanished``: the file was not there when read, though the log listed it a moment before
    (a concurrent log expiry deleted it): nothing is damaged, and listing the log again reads
    around it."""

    def __init__(self, message: str, *, path: str | None = None, version: int | None = None, vanished: bool = False) -> None:
        super().__init__(message, path=path, version=version)
        self.vanished = vanished


class UnsafePathError(TxnLogError):
    """A data file path leaves the table root (``../``, an absolute path or URI elsewhere,
    another bucket). ``path`` is the path as the log holds it; ``version`` the commit, if known."""

    def __init__(self, message: str, *, path: str, version: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.version = version


class UnsupportedFeatureError(TxnLogError):
    """The table needs a reader or writer version or feature this library does not implement."""

    def __init__(self, message: str, *, features: tuple[str, ...] = (), version: int | None = None) -> None:
        super().__init__(message)
        self.features = features
        self.version = version


class SchemaError(TxnLogError):
    """A schema is invalid or does not match the data, ``field`` names the column."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SchemaChangeError(SchemaError):
    """A schema, partitioning or property change the table cannot take: ``field`` names the
    column (or property), ``rule`` the protocol rule it breaks."""

    def __init__(self, message: str, *, field: str | None = None, rule: str) -> None:
        super().__init__(message, field=field)
        self.rule = rule


class InvalidTablePropertyError(TxnLogError):
    """A table property has a value of the wrong type or range."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class InvalidPredicateError(TxnLogError):
    """A predicate string cannot be parsed or refers to an unknown column."""

    def __init__(self, message: str, *, predicate: str) -> None:
        super().__init__(message)
        self.predicate = predicate


# --- writing ---------------------------------------------------------------------------------


class TransactionError(TxnLogError):
    """A transaction was used in a way the protocol forbids (two metadata updates, reuse...)."""


class FileNotLiveError(TransactionError):
    """A transaction removes a file that is not live at its read version (Iceberg's "fail missing
    delete paths"); ``path`` names it."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class ProtocolViolationError(TransactionError):
    """The write breaks a rule the table's protocol enforces (appendOnly, invariants, CHECK)."""

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


class CommitFailedError(TxnLogError):
    """A commit could not be written: retries or total time ran out, or the store failed.

    ``orphan_files`` lists data files the transaction wrote that no commit references: they are
    left in place for vacuum.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        version: int | None = None,
        orphan_files: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.version = version
        self.orphan_files = orphan_files


class CommitConflictError(CommitFailedError):
    """A concurrent commit changed what this transaction read or wrote: a logical conflict.

    Never retried automatically: only the application can decide whether re-running is safe.
    """

    def __init__(
        self,
        message: str,
        *,
        winning_version: int,
        winning_operation: str | None = None,
        conflicting_file: str | None = None,
        predicate: str | None = None,
        detail: Any = None,
        attempts: int = 0,
        orphan_files: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, attempts=attempts, version=winning_version, orphan_files=orphan_files)
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        self.conflicting_file = conflicting_file
        self.predicate = predicate
        self.detail = detail


class ProtocolChangedError(CommitConflictError):
    """The winner changed the table's protocol."""


class MetadataChangedError(CommitConflictError):
    """The winner changed the table's metadata (schema, partitioning, properties)."""


class ConcurrentTransactionError(CommitConflictError):
    """The winner touched an app transaction id or a domain this transaction also uses."""


class ConcurrentAppendError(CommitConflictError):
    """The winner added files this transaction's reads should have seen."""


class ConcurrentDeleteReadError(CommitConflictError):
    """The winner removed a file this transaction read."""


class ConcurrentRowsError(ConcurrentDeleteReadError):
    """The winner deleted or updated rows of a file that this merge-on-read transaction also
    matched: ``conflicting_file`` names the file, ``detail`` the row positions (up to 100)."""


class ConcurrentDeleteDeleteError(CommitConflictError):
    """The winner removed a file this transaction also removes."""


class DuplicateMatchError(TxnLogError):
    """A MERGE found a target row matched by more than one source row, so which source row
    updates or deletes it is ambiguous (Delta refuses the same). ``uri`` names the table,
    ``key`` one ambiguous key (column -> value) and ``source_rows`` how many source rows match it."""

    def __init__(self, message: str, *, uri: str, key: dict[str, Any], source_rows: int) -> None:
        super().__init__(message)
        self.uri = uri
        self.key = key
        self.source_rows = source_rows


# --- maintenance -----------------------------------------------------------------------------


class RetentionCheckError(TxnLogError):
    """VACUUM was asked for a retention below the table's safety threshold without ``force``."""

    def __init__(self, message: str, *, retention_ms: int, minimum_ms: int) -> None:
        super().__init__(message)
        self.retention_ms = retention_ms
        self.minimum_ms = minimum_ms


class MissingFilesError(TxnLogError):
    """RESTORE would re-add data files that no longer exist: ``paths`` names them, nothing was
    committed."""

    def __init__(self, message: str, *, paths: tuple[str, ...], version: int | None = None) -> None:
        super().__init__(message)
        self.paths = paths
        self.version = version


class TagNotFoundError(TxnLogError):
    """No tag ``name`` on the table."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class TagAlreadyExistsError(TxnLogError):
    """A tag ``name`` already exists (tags are immutable: delete it first)."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class ConsumerNotFoundError(TxnLogError):
    """No consumer ``consumer_id`` on the table."""

    def __init__(self, message: str, *, consumer_id: str) -> None:
        super().__init__(message)
        self.consumer_id = consumer_id


class ExpiryFailedError(TxnLogError):
    """The background log expiry started after an earlier commit failed; ``__cause__`` is its
    error. Reported on the next commit's ``hook_failures``, never failing a commit."""
