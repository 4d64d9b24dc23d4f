"""Bounded commit retries with capped exponential backoff and full jitter (Iceberg-style).

Only a lost race for a version is retried, and only after the winners passed the conflict
checks. The wait comes after those checks, and only after a real lost race (another writer's
commit is at the version): never after an outcome that was merely unknown. It is capped, so a
transaction whose footprint does not conflict keeps its turn among fast writers.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from txnlog import properties as props


@dataclass(frozen=True)
class RetryPolicy:
    num_retries: int = 100
    min_wait_ms: int = 2
    max_wait_ms: int = 200
    total_timeout_ms: int = 600_000

    @classmethod
    def from_configuration(cls, configuration: Mapping[str, str]) -> RetryPolicy:
        return cls(
            num_retries=props.COMMIT_RETRIES.get(configuration),
            min_wait_ms=props.COMMIT_MIN_WAIT_MS.get(configuration),
            max_wait_ms=props.COMMIT_MAX_WAIT_MS.get(configuration),
            total_timeout_ms=props.COMMIT_TOTAL_TIMEOUT_MS.get(configuration),
        )

    def wait_seconds(self, lost: int) -> float:
        """Backoff after the ``lost``-th lost race (1-based): uniform in
        [0, min(max, min * 2^(lost-1))]."""
        ceiling = min(self.max_wait_ms, self.min_wait_ms * (2 ** min(lost - 1, 30)))
        return random.uniform(0, ceiling) / 1000.0


class RetryClock:
    """Counts attempts, lost races and elapsed time against a policy."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started = time.monotonic()
        self.retries = 0
        self.lost = 0

    @property
    def attempts(self) -> int:
        return self.retries + 1

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.started) * 1000

    def exhausted(self) -> bool:
        return self.retries >= self.policy.num_retries or self.elapsed_ms() >= self.policy.total_timeout_ms

    def retry(self) -> None:
        """Count one more attempt (no wait)."""
        self.retries += 1

    def backoff(self) -> None:
        """Wait after a lost race."""
        self.lost += 1
        time.sleep(self.policy.wait_seconds(self.lost))
