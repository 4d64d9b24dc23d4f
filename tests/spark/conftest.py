"""Fixtures of the Spark tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(params=["driver", "spark"])
def dml_regime(request: pytest.FixtureRequest, spark: Any) -> Iterator[str]:
    """Each test once with small statements finding their rows on the driver (the default
    bound) and once with every statement in Spark (the bound at 0), restored after."""
    from txnlog.spark.driver import DEFAULT_DRIVER_SCAN_CELLS, DRIVER_SCAN_CELLS_CONF

    before = spark.conf.get(DRIVER_SCAN_CELLS_CONF, None)
    spark.conf.set(DRIVER_SCAN_CELLS_CONF, str(DEFAULT_DRIVER_SCAN_CELLS if request.param == "driver" else 0))
    try:
        yield str(request.param)
    finally:
        if before is None:
            spark.conf.unset(DRIVER_SCAN_CELLS_CONF)
        else:
            spark.conf.set(DRIVER_SCAN_CELLS_CONF, before)


@pytest.fixture
def own_scan(spark: Any) -> Iterator[Any]:
    """The shared session with txnlog's reads on txnlog's own Spark scan, not handed to
    delta-spark's reader (for tests of that scan's plan), restored after."""
    from txnlog.spark.delta import DELTA_READER_CONF

    spark.conf.set(DELTA_READER_CONF, "false")
    try:
        yield spark
    finally:
        spark.conf.unset(DELTA_READER_CONF)
