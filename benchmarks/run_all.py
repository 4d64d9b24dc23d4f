"""Run every benchmark, one process each, and print their markdown tables (``make bench``).

    .venv/bin/python benchmarks/run_all.py            # full runs (tens of minutes)
    .venv/bin/python benchmarks/run_all.py --quick    # smoke runs

Each benchmark runs alone, one after the other: they would otherwise compete for the same cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (script, arguments for a smoke run when the script has no --quick flag of its own)
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("bench_open.py", []),
    ("bench_commit.py", []),
    ("bench_contention.py", []),
    ("bench_checkpoint.py", ["--commits", "5", "--files-per-commit", "2000"]),
]


def _smoke_args(script: Path, fallback: list[str]) -> list[str]:
    usage = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, check=True).stdout
    return ["--quick"] if "--quick" in usage else fallback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="pass --quick (a smoke run) to every benchmark")
    args = parser.parse_args()

    failed = []
    for name, fallback in BENCHMARKS:
        script = HERE / name
        extra = _smoke_args(script, fallback) if args.quick else []
        print(f"\n## {name} {' '.join(extra)}\n", flush=True)
        started = time.perf_counter()
        code = subprocess.run([sys.executable, str(script), *extra]).returncode
        print(f"\n({name}: {time.perf_counter() - started:.0f}s, exit code {code})", flush=True)
        if code:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
