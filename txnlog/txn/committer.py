"""The committer: publish a prepared commit with put-if-absent, and resolve lost races.

    attempt at version N ── put-if-absent N.json ──▶ published
            │ N exists (a lost race)
            ▼
    read N directly (a listing may lag), then the commits after it
            ▼
    check all winners at once (a conflict raises, never retried)
            ▼
    back off (capped, jittered), catch up with commits that landed meanwhile, retry at the next version

An outcome that is unknown (a timeout after the write was sent, or any error the store did not
classify) is resolved by reading N: if it holds this transaction's txnId, that is the commit.

A store error (``StorageError``: the store says the write failed, e.g. a throttled or refused
request) is taken as transient a few times: after checking that the commit did not land anyway,
the same version is tried again after a capped, jittered wait, at most ``STORE_ERROR_RETRIES``
times in a row and within the policy's retry count and total time. Then ``CommitFailedError``
names the commit file, version and attempts, with the store's error as ``__cause__``. An
unsupported put-if-absent is never retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from txnlog import properties as props
from txnlog.errors import (
    AmbiguousWriteError,
    CommitConflictError,
    CommitFailedError,
    FileAlreadyExistsError,
    LogCorruptError,
    ObjectNotFoundError,
    PutIfAbsentUnsupportedError,
    StorageError,
    TableAlreadyExistsError,
    TxnLogError,
)
from txnlog.log import codec
from txnlog.log.commits import Commit, read_commits
from txnlog.log.filenames import commit_path
from txnlog.log.segment import CommitFile, commit_file, list_log
from txnlog.storage.base import LogStore
from txnlog.txn.conflicts import Resolved, TransactionFootprint, Winners, adopt_table_changes, check_conflicts
from txnlog.txn.retry import RetryClock, RetryPolicy

log = logging.getLogger(__name__)

#: Store errors in a row on one commit before it gives up (each after a backoff wait).
STORE_ERROR_RETRIES = 4


@dataclass
class Published:
    """Where a commit landed: its version, the winners it was checked against (oldest first)
    and the number of attempts."""

    version: int
    winners: list[Commit]
    attempts: int


class Committer:
    """Publishes one transaction's commit. ``prepare(version, winners)`` returns the commit's
    bytes for an attempt at ``version`` (commitInfo and in-commit timestamps depend on it)."""

    def __init__(
        self,
        store: LogStore,
        *,
        read_version: int,
        footprint: TransactionFootprint,
        policy: RetryPolicy,
        txn_id: str,
        prepare: Callable[[int, list[Commit]], bytes],
        orphan_files: Callable[[], tuple[str, ...]],
        rebase: Callable[[Winners], tuple[Resolved, dict[str, str]]] | None = None,
    ) -> None:
        self.store = store
        self.read_version = read_version
        self.footprint = footprint
        self.policy = policy
        self.txn_id = txn_id
        self.prepare = prepare
        self.orphan_files = orphan_files
        self.rebase = rebase
        self.clock = RetryClock(policy)
        self.winners: list[Commit] = []

    def publish(self) -> Published:
        version = self.read_version + 1
        store_errors = 0
        while True:
            data = self.prepare(version, self.winners)
            try:
                self._check_not_expired(version)
                self.store.put_if_absent(commit_path(version), data)
                return Published(version, self.winners, self.clock.attempts)
            except CommitFailedError:
                raise
            except FileAlreadyExistsError:
                if self.read_version < 0:
                    raise TableAlreadyExistsError(
                        f"a table was created at {self.store.root_uri} concurrently", uri=self.store.root_uri
                    ) from None
                lost = True
            except AmbiguousWriteError as e:
                log.warning("commit of version %d to %s has an unknown outcome (%s); checking the log", version, self.store.root_uri, e)
                if self._landed(version):
                    return Published(version, self.winners, self.clock.attempts)
                lost = self.store.exists(commit_path(version))
            except PutIfAbsentUnsupportedError:
                raise
            except StorageError as e:
                store_errors += 1
                if self._landed_despite(version, e):
                    return Published(version, self.winners, self.clock.attempts)
                if store_errors > STORE_ERROR_RETRIES or self.clock.exhausted():
                    raise CommitFailedError(
                        f"commit of version {version} to {self.store.root_uri} failed: writing {commit_path(version)} "
                        f"raised a store error {store_errors} times in a row (last: {e})",
                        attempts=self.clock.attempts,
                        version=version,
                        orphan_files=self.orphan_files(),
                    ) from e
                log.warning("commit of version %d to %s: store error (%s); retrying", version, self.store.root_uri, e)
                self.clock.retry()
                time.sleep(self.policy.wait_seconds(store_errors))
                continue
            except Exception as e:  # the store did not classify it: the write may have landed
                log.warning("commit of version %d to %s raised %r; checking the log before reporting", version, self.store.root_uri, e)
                if self._landed(version):
                    return Published(version, self.winners, self.clock.attempts)
                raise CommitFailedError(
                    f"commit of version {version} to {self.store.root_uri} failed and did not land: {e!r}",
                    attempts=self.clock.attempts,
                    version=version,
                    orphan_files=self.orphan_files(),
                ) from e
            if self.clock.exhausted():
                raise self._gave_up(version)
            self.clock.retry()
            if lost:
                # 3. refresh and 4. validate: version N is there, whatever a listing says.
                mine = self._absorb(self._read_from(version, known=version))
                if mine is None:
                    self.clock.backoff()
                    # Catch up with what landed while waiting, so the next attempt is fresh.
                    mine = self._absorb(self._read_from(self.winners[-1].version + 1))
                if mine is not None:
                    return Published(mine, self.winners, self.clock.attempts)
                version = self.winners[-1].version + 1

    def _check_not_expired(self, version: int) -> None:
        """Refuse an attempt at ``version`` when the version before it is no longer in the log.

        The attempt builds on ``version - 1`` (the read version, or the last winner read). If
        log expiry removed it meanwhile (a retention shorter than this transaction), it may
        have removed ``version`` too: a put-if-absent would then re-create that commit file
        below the earliest checkpoint, where no reader looks, and the commit would be
        acknowledged and lost (issue 28). Nothing can be checked against the expired commits,
        so the commit fails instead, with nothing written.
        """
        previous = version - 1
        if previous < 0 or self.store.exists(commit_path(previous)):
            return
        if list_log(self.store, previous).complete_checkpoint(previous):
            return  # the read version comes from a checkpoint whose commit was expired
        raise CommitFailedError(
            f"commit to {self.store.root_uri} refused: version {previous}, which this transaction read or last "
            f"checked, was removed by log expiry while it ran, so version {version} may have been expired too "
            "and writing it could re-create a commit no reader sees. Nothing was committed; run the transaction "
            "again, and keep log expiry's retention (older_than) longer than the longest transaction",
            attempts=self.clock.attempts,
            version=version,
            orphan_files=self.orphan_files(),
        )

    def _landed_despite(self, version: int, error: StorageError) -> bool:
        """Whether ``version`` holds this commit although the store reported ``error`` (a store
        that misclassified an unknown outcome). A failing read counts as "not landed": the
        error is reported in the end, and a later retry finds the commit by its txnId."""
        try:
            return self._landed(version)
        except TxnLogError as e:
            log.warning("cannot check whether commit %d landed after %s: %s", version, error, e)
            return False

    def _landed(self, version: int) -> bool:
        """Whether ``version`` holds this transaction's commit (an earlier attempt that landed)."""
        try:
            data = self.store.read(commit_path(version))
        except ObjectNotFoundError:
            return False
        commit = Commit(version, commit_path(version), 0, codec.parse_lines(data, path=commit_path(version), version=version))
        info = commit.commit_info()
        return info is not None and info.txn_id == self.txn_id

    def _absorb(self, commits: list[Commit]) -> int | None:
        """Check ``commits`` and add them to the winners; the version of this transaction's own
        commit instead, if one of them is it (an earlier attempt whose outcome was unknown)."""
        for i, commit in enumerate(commits):
            info = commit.commit_info()
            if info is not None and info.txn_id == self.txn_id:
                self._absorb(commits[:i])
                return commit.version
        if not commits:
            return None
        winners = Winners.of(commits)
        try:
            # Protocol and metadata first, as delta-spark checks them; a conflict there still
            # comes after any conflict with an earlier winner's files.
            table_conflict = adopt_table_changes(self.footprint, winners)
            if table_conflict is not None:
                earlier = [c for c in commits if c.version < table_conflict.winning_version]
                if earlier:
                    self._check_files(Winners.of(earlier))
                raise table_conflict
            self._check_files(winners)
        except CommitConflictError as e:
            e.attempts = self.clock.attempts
            e.orphan_files = self.orphan_files()
            raise
        self.winners.extend(commits)
        return None

    def _check_files(self, winners: Winners) -> None:
        """Checks 3 to 7, after the row-level rebase: what it accounts for is no conflict."""
        hints: dict[str, str] = {}
        try:
            if self.rebase is not None:
                resolved, hints = self.rebase(winners)
                winners = winners.without(resolved)
            check_conflicts(self.footprint, winners)
        except CommitConflictError as e:
            hint = hints.get(e.conflicting_file or "")
            if hint and e.args:
                e.args = (f"{e.args[0]}{hint}", *e.args[1:])
            raise

    def _read_from(self, start: int, *, known: int | None = None) -> list[Commit]:
        """The commits from ``start`` on, in order. ``known`` is a version certain to exist (the
        one a put-if-absent collided with): it is read directly, not looked for in a listing."""
        listing = list_log(self.store, start)
        last = max((v for v in listing.commits if v >= start), default=start - 1)
        if known is not None:
            last = max(last, known)
        files: list[CommitFile] = []
        for v in range(start, last + 1):
            found = commit_file(self.store, listing, v)
            if found is None:
                if v == start:
                    raise LogCorruptError(
                        f"cannot check conflicts on {self.store.root_uri}: commit {start} is gone (log cleaned up?)",
                        version=start,
                    )
                raise LogCorruptError(f"{self.store.root_uri}: commit {v} is missing between winning commits", version=v)
            files.append(found)
        return read_commits(self.store, files)

    def _gave_up(self, version: int) -> TxnLogError:
        clock, policy = self.clock, self.policy
        return CommitFailedError(
            f"gave up committing to {self.store.root_uri} after {clock.attempts} attempts in "
            f"{clock.elapsed_ms():.0f} ms ({props.COMMIT_RETRIES.key}={policy.num_retries}, "
            f"{props.COMMIT_TOTAL_TIMEOUT_MS.key}={policy.total_timeout_ms}); last version tried {version}",
            attempts=clock.attempts,
            version=version,
            orphan_files=self.orphan_files(),
        )
