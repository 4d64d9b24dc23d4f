"""Shared helpers of the benchmarks: interleaved timing, summary statistics, markdown output.

The machine is shared and noisy, so every figure is measured next to its peer in the same run:
the contenders take turns (A, B, C, then B, C, A, ...) and results are given as medians and as
ratios of paired runs, which drift in machine load affects far less than absolute times.
"""

from __future__ import annotations

import datetime as dt
import gc
import itertools
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: Where benchmark tables are built (gitignored).
WORK_DIR = Path(__file__).resolve().parent / "_work"

log = logging.getLogger("benchmarks")


def setup_logging() -> None:
    """Progress goes to stderr, so stdout holds only the markdown results."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    log.setLevel(logging.INFO)  # the libraries' own INFO lines (each checkpoint written) would drown it


def interleaved(
    runners: Mapping[str, Callable[[], Any]], rounds: int, *, warmup: int = 1
) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Run each runner once per round, rotating the order every round.

    Returns the seconds of every timed call per runner, and what each call returned. The
    ``warmup`` rounds (imports, first-touch caches) are not recorded.
    """
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    results: dict[str, list[Any]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            started = time.perf_counter()
            out = runners[name]()
            elapsed = time.perf_counter() - started
            if r >= warmup:
                times[name].append(elapsed)
                results[name].append(out)
    return times, results


def fresh_paths(base: Path, suffix: str) -> Callable[[str], str]:
    """A function giving, per call, a new empty path ``base / "{name}-{suffix}-{n}"``: each
    timed write gets a directory of its own."""
    counter = itertools.count(1)

    def fresh(name: str) -> str:
        path = base / f"{name}-{suffix}-{next(counter)}"
        shutil.rmtree(path, ignore_errors=True)
        return str(path)

    return fresh


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linearly interpolated between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of a[i] / b[i] over runs taken in the same round."""
    return statistics.median(x / y for x, y in zip(a, b))


def ms(seconds: float) -> str:
    """Milliseconds with a precision that suits the magnitude."""
    value = seconds * 1000
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.2f} ms"
    return f"{value * 1000:.0f} µs"


def ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def verdict(value: float, limit: float) -> str:
    return "met" if value <= limit else "not met"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line() -> str:
    """One line naming the machine and versions, printed above every result table."""
    import deltalake
    import pyarrow

    import txnlog

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{dt.date.today().isoformat()}, {os.cpu_count()} CPUs, load {load:.1f}, "
        f"Python {platform.python_version()}, pyarrow {pyarrow.__version__}, "
        f"deltalake {deltalake.__version__}, txnlog {txnlog.__version__}"
    )


def is_built(path: Path, params: Mapping[str, Any]) -> bool:
    """Whether ``path`` holds a table built earlier with exactly ``params``."""
    marker = path / ".bench-built.json"
    try:
        return json.loads(marker.read_text()) == dict(params)
    except (OSError, ValueError):
        return False


def mark_built(path: Path, params: Mapping[str, Any]) -> None:
    (path / ".bench-built.json").write_text(json.dumps(dict(params)))


def spark_with_delta(app: str, *, connect: bool = False) -> Any:
    """A local[2] SparkSession with delta-spark in it (jars from ``TXNLOG_DELTA_JARS_DIR``).
    ``connect``: Spark 4's Connect API mode, a local Connect server the session talks to over
    gRPC, as a Connect client would."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import txnlog.spark as ts

    builder = (
        SparkSession.builder.master("local[2]").appName(app).config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "3g").config("spark.driver.host", "127.0.0.1").config("spark.log.level", "ERROR")
    )
    if connect:
        builder = builder.config("spark.api.mode", "connect")
    return ts.with_delta(builder).getOrCreate()
