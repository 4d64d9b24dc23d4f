"""Log expiry: Paimon's ExpireSnapshotsImpl applied to Delta's files.

Deciding (``plan``):
1. bounds, over the reconstructable versions ``[earliest, latest]``: versions below
   ``latest - retain_max + 1`` go whatever their age; versions from ``latest - retain_min + 1`` on
   stay; so does every version a consumer still needs; at most ``limit`` versions go per run;
2. time: walking forward from the lower bound, the first version younger than the time retention
   (``delta.logRetentionDuration`` unless given) and everything after it stay.

Doing (in this order, each step safe to crash after):
1. drop consumers inactive for ``txnlog.consumer.expiration-time``;
2. make sure the new earliest version, and every tagged version below it, has a checkpoint
   (written if missing) and that ``_last_checkpoint`` names the new earliest one or a later one;
3. delete the checkpoints below the new earliest version (tagged ones stay);
4. delete commits (and their ``.crc``/compacted files): first, one by one, each commit that
   starts a run a reader could still replay (the oldest, and the one after each tagged version),
   then the rest in parallel windows;
5. delete the sidecars only the deleted checkpoints referenced.

Deleting the starts first means a crash inside a parallel window can leave holes only among
commits no reader can reconstruct any more: no version below the new earliest is left readable
with a hole above it (which ``validate`` reports as a gap).

A crash at any point leaves every version from the new earliest on readable by any Delta reader.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from txnlog import Table
from txnlog import properties as props
from txnlog.documents import document
from txnlog.errors import ExpiryFailedError, InvalidArgumentError
from txnlog.maintenance import arguments, consumers, core, tags
from txnlog.maintenance.deletes import Progress, delete_paths
from txnlog.maintenance.layout import LogLayout

if TYPE_CHECKING:
    from txnlog import PostCommitContext, Snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpireResult:
    """What a run removed (or, with ``dry_run``, would remove)."""

    table_uri: str
    latest_version: int
    #: The earliest reconstructable version before and after the run.
    earliest_before: int
    earliest_after: int
    #: Versions that are no longer reconstructable (tagged ones excluded).
    expired_versions: int
    #: Log files deleted (or to delete), relative to the table root.
    deleted_files: tuple[str, ...]
    #: The version a checkpoint was written at (or needs to be, in a dry run), if any.
    checkpoint_written: int | None
    #: Tags below the new earliest version, whose versions were kept.
    kept_tags: tuple[str, ...] = ()
    dropped_consumers: tuple[str, ...] = ()
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return document(self, keys={"table_uri": "table"})


@dataclass
class _Plan:
    layout: LogLayout
    earliest: int
    new_earliest: int
    tagged: dict[int, list[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def _commit_time(table: Table, layout: LogLayout, version: int, ict: bool) -> int | None:
    commit = layout.listing.commits.get(version)
    if commit is None:
        return None
    if ict:
        info = core.read_commits(table.store, [commit])[0].commit_info()
        if info is not None and info.in_commit_timestamp is not None:
            return int(info.in_commit_timestamp)
    return commit.modification_time


def _plan(
    table: Table,
    snapshot: Snapshot,
    *,
    retain_min: int | None,
    retain_max: int | None,
    older_than: int | str | None,
    limit: int | None,
    now: int,
    dry_run: bool,
) -> _Plan:
    conf = snapshot.configuration
    keep_min = props.LOG_RETAIN_MIN.get(conf) if retain_min is None else retain_min
    keep_max = props.LOG_RETAIN_MAX.get(conf) if retain_max is None else retain_max
    per_run = props.LOG_EXPIRE_LIMIT.get(conf) if limit is None else limit
    retention = arguments.duration_ms("older_than", older_than)
    retention = props.LOG_RETENTION.get(conf) if retention is None else retention
    if keep_min < 1 or (keep_max is not None and keep_max < keep_min) or per_run < 1 or retention < 0:
        raise InvalidArgumentError(
            f"expire needs retain_min >= 1, retain_max >= retain_min, limit >= 1 and a retention >= 0; got "
            f"retain_min={keep_min}, retain_max={keep_max}, limit={per_run}, retention={retention} ms"
        )

    # 1. consumers first, so an abandoned one stops pinning the log (Paimon does the same).
    inactive = props.CONSUMER_EXPIRATION.get(conf)
    readers = consumers.list_consumers(table)
    dropped = [c.consumer_id for c in readers if inactive is not None and c.last_heartbeat_ms < now - inactive]
    if dropped and not dry_run:
        consumers.expire(table, inactive, now_ms=now)  # type: ignore[arg-type]
    pinned = min((c.next_version for c in readers if c.consumer_id not in dropped), default=None)

    layout = LogLayout.of(table.store)
    earliest, latest = layout.earliest, layout.latest
    lower = max(latest - keep_max + 1, earliest) if keep_max is not None else earliest
    end = latest - keep_min + 1
    if pinned is not None:
        end = min(end, pinned)
    end = min(end, earliest + per_run)
    ict = props.ENABLE_IN_COMMIT_TIMESTAMPS.get(conf)
    for v in range(lower, end):
        stamp = _commit_time(table, layout, v, ict)
        if stamp is not None and stamp > now - retention:
            end = v
            break
    new_earliest = max(end, earliest)
    tagged: dict[int, list[str]] = {}
    for tag in tags.list_tags(table):
        if tag.version < new_earliest:
            tagged.setdefault(tag.version, []).append(tag.name)
    return _Plan(layout, earliest, new_earliest, tagged, dropped)


def _doomed_files(table: Table, plan: _Plan) -> tuple[tuple[list[str], list[str]], list[str], list[str]]:
    """((commit files that start a replayable run, the other commit files), checkpoint files,
    sidecar files) below the new earliest version, each oldest first."""
    layout, end = plan.layout, plan.new_earliest
    starts: list[str] = []
    rest: list[str] = []
    doomed_versions = [v for v in sorted(layout.listing.commits) if v < end and v not in plan.tagged]
    for v in doomed_versions:
        # A reader can replay from the oldest commit, and from a kept (tagged) checkpoint onwards.
        run_start = v == doomed_versions[0] or (v - 1) in plan.tagged
        (starts if run_start else rest).append(layout.listing.commits[v].path)
        rest.extend(layout.extras.get(v, []))
    rest.extend(p for v, paths in sorted(layout.extras.items()) if v < end and v not in plan.tagged and v not in layout.listing.commits for p in paths)
    doomed_checkpoints = {v: files for v, files in layout.listing.checkpoints.items() if v < end and v not in plan.tagged}
    checkpoint_files = [f.path for v in sorted(doomed_checkpoints) for f in doomed_checkpoints[v]]
    sidecar_files: list[str] = []
    if layout.sidecars:
        doomed_v2 = [f for files in doomed_checkpoints.values() for f in files if f.v2_format]
        kept_v2 = [f for v, files in layout.listing.checkpoints.items() if v not in doomed_checkpoints for f in files if f.v2_format]
        if doomed_v2:
            orphaned = core.sidecar_names(table.store, doomed_v2) - core.sidecar_names(table.store, kept_v2)
            sidecar_files = [f.path for f in layout.sidecars if f.name in orphaned]
    return (starts, rest), checkpoint_files, sidecar_files


@arguments.takes_table
@core.named_operation("expire")
def expire(
    table: Table,
    *,
    retain_min: int | None = None,
    retain_max: int | None = None,
    older_than: int | str | None = None,
    limit: int | None = None,
    dry_run: bool = False,
    now_ms: int | None = None,
    snapshot: Snapshot | None = None,
    max_workers: int | None = None,
    progress: Progress | None = None,
) -> ExpireResult:
    """Expire old versions of ``table``'s log (see the module docstring for the rules).

    Unset arguments come from the table properties: ``txnlog.log.retain.min`` (10),
    ``txnlog.log.retain.max`` (unbounded), ``delta.logRetentionDuration`` (30 days) for
    ``older_than`` (ms or text like ``30d``), ``txnlog.log.expire.limit`` (50). ``snapshot``: the
    latest snapshot if the caller has it (saves reading the log again).
    """
    retain_min = arguments.optional_integer("retain_min", retain_min, minimum=1)
    retain_max = arguments.optional_integer("retain_max", retain_max, minimum=1)
    limit = arguments.optional_integer("limit", limit, minimum=1)
    arguments.duration_ms("older_than", older_than)
    arguments.optional_integer("max_workers", max_workers, minimum=1)
    now = int(time.time() * 1000) if now_ms is None else arguments.integer("now_ms", now_ms)
    snapshot = snapshot if snapshot is not None else table.snapshot()
    plan = _plan(
        table, snapshot, retain_min=retain_min, retain_max=retain_max, older_than=older_than, limit=limit, now=now, dry_run=dry_run
    )
    layout = plan.layout
    commit_files, checkpoint_files, sidecar_files = _doomed_files(table, plan)
    doomed = [*commit_files[0], *commit_files[1], *checkpoint_files, *sidecar_files]
    needs_checkpoint = plan.new_earliest > 0 and plan.new_earliest > plan.earliest and layout.checkpoint(plan.new_earliest) is None
    result = ExpireResult(
        table_uri=table.uri,
        latest_version=layout.latest,
        earliest_before=plan.earliest,
        earliest_after=plan.new_earliest,
        expired_versions=sum(1 for v in range(plan.earliest, plan.new_earliest) if v not in plan.tagged),
        deleted_files=tuple(doomed),
        checkpoint_written=plan.new_earliest if needs_checkpoint else None,
        kept_tags=tuple(name for v in sorted(plan.tagged) for name in plan.tagged[v]),
        dropped_consumers=tuple(plan.dropped),
        dry_run=dry_run,
    )
    if dry_run or not doomed:
        return result

    # 2. Checkpoints first: at every tagged version that lacks one, then at the new earliest.
    for version in sorted(plan.tagged):
        if layout.checkpoint(version) is None:
            if version not in layout.reconstructable:
                log.warning("tagged version %d of %s is no longer reconstructable; keeping what is left of it", version, table.uri)
                continue
            core.write_checkpoint(table.snapshot(version))
    if progress:
        progress("checkpoint", 0, 1)
    if needs_checkpoint:
        target = snapshot if snapshot.version == plan.new_earliest else table.snapshot(plan.new_earliest)
        core.write_checkpoint(target)
    elif plan.new_earliest > 0:
        core.point_hint_at(table.store, plan.new_earliest)
    if progress:
        progress("checkpoint", 1, 1)

    # 3. to 5.: checkpoints, the commits that start a replayable run, the other commits, sidecars.
    delete_paths(table.store, checkpoint_files, stage="deleting checkpoints", max_workers=max_workers, progress=progress)
    starts, rest = commit_files
    delete_paths(table.store, starts, stage="deleting commits", max_workers=1, progress=progress)
    delete_paths(table.store, rest, stage="deleting commits", max_workers=max_workers, progress=progress)
    delete_paths(table.store, sidecar_files, stage="deleting sidecars", max_workers=max_workers, progress=progress)
    log.info(
        "expired versions %d..%d of %s (%d log files deleted)", plan.earliest, plan.new_earliest - 1, table.uri, len(doomed)
    )
    return result


class ExpiryHook:
    """The ``log-expiry`` post-commit hook: runs :func:`expire` after a commit when the table asks
    for it (``delta.enableExpiredLogCleanup=true``, or ``txnlog.log.expire.async=true`` for one
    background thread). A background failure is kept and raised by the next commit's hook call,
    so it shows on that commit's ``hook_failures``; it never fails a commit."""

    name = "log-expiry"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._errors: dict[str, BaseException] = {}
        self._pending: set[str] = set()

    def __call__(self, ctx: PostCommitContext) -> None:
        conf = ctx.configuration
        background = props.LOG_EXPIRE_ASYNC.get(conf)
        with self._lock:
            error = self._errors.pop(ctx.uri, None)
        if error is not None:
            raise ExpiryFailedError(f"log expiry of {ctx.uri} after an earlier commit failed: {error}") from error
        if not (background or props.ENABLE_EXPIRED_LOG_CLEANUP.get(conf)):
            return
        snapshot = ctx.snapshot
        if not background:
            expire(Table.from_location(ctx.location), snapshot=snapshot)
            return
        with self._lock:
            if ctx.uri in self._pending:
                return  # one queued run per table is enough: it sees the newest log
            self._pending.add(ctx.uri)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="txnlog-expire")
            self._executor.submit(self._run_in_background, Table.from_location(ctx.location), snapshot)

    def _run_in_background(self, table: Table, snapshot: Snapshot) -> None:
        with self._lock:
            self._pending.discard(table.uri)
        try:
            expire(table, snapshot=snapshot)
        except Exception as e:
            log.warning("background log expiry of %s failed", table.uri, exc_info=True)
            with self._lock:
                self._errors.setdefault(table.uri, e)

    def wait(self) -> None:
        """Block until every expiry queued so far has finished."""
        with self._lock:
            executor = self._executor
        if executor is not None:
            executor.submit(lambda: None).result()

