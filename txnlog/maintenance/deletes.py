"""Deleting many objects with a bounded thread pool.

Sequential unlinks were measured at about 4x slower than delta-rs's parallel cleanup, so
deletes run in parallel. They go in windows: every delete of one window finishes before the next
window starts, so a crash leaves at most one window's worth of out-of-order deletes (for log
expiry, the remaining commits stay a contiguous range apart from that window).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from txnlog.errors import StorageError
from txnlog.storage import LogStore

#: ``progress(stage, done, total)``: how far a long step is; the CLI draws it as a bar.
Progress = Callable[[str, int, int], None]

DEFAULT_WORKERS = 16


def delete_paths(
    store: LogStore,
    paths: Sequence[str],
    *,
    stage: str,
    max_workers: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Delete ``paths`` (store paths, in the order given, window by window); returns how many.

    The first failure stops the run after its window and is raised as a StorageError naming the
    object; what was deleted before it stays deleted (every caller's order is safe to stop in).
    """
    workers = max(1, max_workers or DEFAULT_WORKERS)
    total = len(paths)
    if progress:
        progress(stage, 0, total)
    if not total:
        return 0
    if workers == 1:
        for i, path in enumerate(paths, 1):
            store.delete(path)
            if progress:
                progress(stage, i, total)
        return total
    window = workers * 8
    done = 0
    with ThreadPoolExecutor(workers, thread_name_prefix="txnlog-delete") as pool:
        for start in range(0, total, window):
            chunk = paths[start : start + window]
            errors = [e for e in pool.map(_delete_one(store), chunk) if e is not None]
            if errors:
                raise errors[0]
            done += len(chunk)
            if progress:
                progress(stage, done, total)
    return done


def _delete_one(store: LogStore) -> Callable[[str], StorageError | None]:
    def run(path: str) -> StorageError | None:
        try:
            store.delete(path)
        except StorageError as e:
            return e
        return None

    return run
