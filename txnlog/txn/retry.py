"""Bounded commit retries with exponential backoff and full jitter (Iceberg-style).

Only a lost race for a version is retried, and only after the conflict checks pass against
the winners. Logical conflicts are never retried here.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Mapping

from txnlog import properties as props


@dataclass(frozen=True)
class RetryPolicy:
    num_retries: int = 100
    min_wait_ms: int = 2
    max_wait_ms: int = 1000
    total_timeout_ms: int = 600_000

    @classmethod
    def from_configuration(cls, configuration: Mapping[str, str]) -> "RetryPolicy":
        return cls(
            num_retries=props.COMMIT_RETRIES.get(configuration),
            min_wait_ms=props.COMMIT_MIN_WAIT_MS.get(configuration),
            max_wait_ms=props.COMMIT_MAX_WAIT_MS.get(configuration),
            total_timeout_ms=props.COMMIT_TOTAL_TIMEOUT_MS.get(configuration),
        )

    def wait_seconds(self, retry: int) -> float:
        """Backoff before retry number ``retry`` (1-based): uniform in [0, min(max, min * 2^(retry-1))]."""
        ceiling = min(self.max_wait_ms, self.min_wait_ms * (2 ** min(retry - 1, 30)))
        return random.uniform(0, ceiling) / 1000.0


class RetryClock:
    """Counts retries and elapsed time against a policy."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started = time.monotonic()
        self.retries = 0

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.started) * 1000

    def exhausted(self) -> bool:
        return self.retries >= self.policy.num_retries or self.elapsed_ms() >= self.policy.total_timeout_ms

    def backoff(self) -> None:
        self.retries += 1
        time.sleep(self.policy.wait_seconds(self.retries))
