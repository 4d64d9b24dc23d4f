"""Application-level retries: run a whole read-modify-write again after it lost a race.

The commit path already retries a lost race by itself when the winners do not conflict. A
:class:`~txnlog.errors.CommitConflictError` means the winner changed something the transaction
depended on, so only the application can decide whether running it again is right:

- **safe**: the work is re-planned from the new snapshot each time, and what it writes does not
  depend on what it read. A streaming append racing a compaction (ConcurrentDeleteReadError on
  an idempotent ``app_id``/``app_version`` write), a compaction racing a data change (it re-plans
  from the files that are live now), a blind insert of new rows;
- **not safe**: the new rows were computed from values the winner changed (a balance read,
  then written back): re-running silently replaces the winner's change with a decision made on
  stale data. Re-read and re-decide inside ``fn``, or surface the conflict.

``fn`` is therefore the whole unit of work, reading the table itself on each call.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from txnlog.errors import ConcurrentAppendError, InvalidArgumentError

T = TypeVar("T")
log = logging.getLogger(__name__)


def retry(
    fn: Callable[[], T],
    on: tuple[type[BaseException], ...] = (ConcurrentAppendError,),
    attempts: int = 5,
    backoff: float = 0.1,
    max_backoff: float = 5.0,
) -> T:
    """Call ``fn()``; when it raises one of ``on``, wait and call it again, at most ``attempts``
    calls in all, then let the last error through (with a note counting the attempts).

    The wait before the n-th retry is uniform in [0, min(max_backoff, backoff * 2**(n-1))]
    seconds (full jitter, so racing writers spread out).
    """
    if isinstance(on, type):
        on = (on,)
    if not on or not all(isinstance(c, type) and issubclass(c, BaseException) for c in on):
        raise InvalidArgumentError(f"on must be a tuple of exception classes, got {on!r}")
    if attempts < 1:
        raise InvalidArgumentError(f"attempts must be at least 1, got {attempts}")
    if backoff < 0 or max_backoff < 0:
        raise InvalidArgumentError("backoff and max_backoff must not be negative")
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except on as e:
            if attempt == attempts:
                e.add_note(f"gave up after {attempts} attempt(s) of txnlog.retry")
                raise
            wait = random.uniform(0, min(max_backoff, backoff * 2 ** (attempt - 1)))
            log.info("attempt %d of %d failed with %s; retrying in %.3f s", attempt, attempts, type(e).__name__, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["retry"]
