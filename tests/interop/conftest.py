"""Fixtures of the delta-spark interop tests: the shared session with delta-spark, and session
settings a test needs for a while (restored after)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.conftest import session_confs

pytestmark = pytest.mark.spark


@pytest.fixture
def spark_conf(delta_spark: Any) -> Callable[..., AbstractContextManager[None]]:
    """``with spark_conf({"key": "value"}):`` sets session confs and restores them after."""

    def setting(values: dict[str, str]) -> AbstractContextManager[None]:
        return session_confs(delta_spark, values)

    return setting


#: VACUUM ... RETAIN 0 HOURS, which delta-spark refuses unless told the user means it.
VACUUM_NOW = {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}
#: delta-spark refuses to time travel to versions older than delta.deletedFileRetentionDuration
#: even when their files are there (txnlog's tags keep them); this lifts that check.
TIME_TRAVEL_ANY_AGE = {"spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false"}
