"""The load soak of issue 7, with its figures (docs/reliability.md records them).

    .venv/bin/python benchmarks/load.py                      # the three scenarios, full size
    .venv/bin/python benchmarks/load.py --quick              # 20 commits per writer
    .venv/bin/python benchmarks/load.py --only local --json out.json

Scenarios (each with 2 readers, a checkpointer, an expirer and a vacuum running throughout):

- ``local``: 8 txnlog writer processes x 500 commits on a local table;
- ``mixed``: 4 txnlog + 2 deltalake (``write_deltalake(mode="append")``) writers x 500 commits
  on one local table. delta-rs commits on a local file system with a put-if-absent of its own
  (a temp file, then a rename that refuses to replace), so both libraries race safely;
- ``s3``: 4 txnlog writers x 500 commits on moto's S3 server on 127.0.0.1 (``--s3-commits``);
- ``partitions`` (issue 28, not in the default set): 4 txnlog appenders into partitions a0..a3, a
  copy-on-write updater of partition u and a delta-rs appender, ``--commits`` each (150 by
  default for it), readers checking per-partition ``numRecords`` sums against what was
  acknowledged, a checkpointer every 10 versions; ``--runs N`` repeats it.

The vacuum's retention (1 h, forced) must exceed the slowest commit: see tests/reliability/load.py.

Every append writes one id into two partitions (two files). The run is judged as
tests/reliability/load.py says: every reported success exactly once in the final table, read by
txnlog and deltalake; no reader saw a torn, doubled or backward snapshot; validate passes. The
figures: commits/s over all writers, p50/p99 of txnlog's commit latency (append call, data file
writes included), conflicts, retries (attempts beyond the first), failed commits.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability.load import LoadConfig, LoadResult, moto_server, new_bucket, run_load  # noqa: E402
from tests.reliability.partition_load import PartitionLoadConfig, PartitionLoadResult, run_partition_load  # noqa: E402


def _row(name: str, r: LoadResult) -> str:
    s = r.summary()
    return (
        f"| {name} | {s['writers']} x {s['commitsPerWriter']} | {s['seconds']} | {s['committed'] + s['deltalakeCommitted']} "
        f"| {s['commitsPerSecond']} | {s['p50Ms']} | {s['p99Ms']} | {s['conflicts']} | {s['retries']} | {s['failed']} "
        f"| {s['readerSnapshots']} | {', '.join(f'{k} {v}' for k, v in s['maintenanceRuns'].items())} | {s['violations']} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20 commits per writer")
    parser.add_argument("--only", choices=["local", "mixed", "s3", "partitions"], action="append")
    parser.add_argument("--runs", type=int, default=1, help="runs of the partitions scenario")
    parser.add_argument("--commits", type=int, default=None, help="commits per writer (500; 150 for partitions)")
    parser.add_argument("--s3-commits", type=int, default=None, help="commits per writer on S3 (default: --commits)")
    parser.add_argument("--json", type=Path, help="also write the summaries here")
    args = parser.parse_args()
    commits = 20 if args.quick else args.commits or 500
    s3_commits = args.s3_commits or commits
    only = set(args.only or ["local", "mixed", "s3"])
    if "partitions" in only and len(only) > 1:
        parser.error("--only partitions runs alone")
    work = Path(tempfile.mkdtemp(prefix="txnlog-load-"))
    if "partitions" in only:  # a scenario of its own, with its own table
        return _partitions(work, 20 if args.quick else args.commits or 150, args.runs, args.json)
    results: dict[str, LoadResult] = {}
    def done(name: str, result: LoadResult) -> None:
        # Printed as each scenario ends: a later one failing must not lose the earlier figures.
        results[name] = result
        print(f"{name}: {json.dumps(result.summary())}", file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps({k: v.summary() for k, v in results.items()}, indent=1))

    if "local" in only:
        done("local", run_load(LoadConfig(uri=str(work / "local"), txnlog_writers=8, commits=commits)))
    if "mixed" in only:
        # Commits are expired once 30 s old: with delta-rs writers on the table, expiring them at
        # once lets delta-rs re-create an expired commit and lose it (docs/reliability.md).
        done("mixed", run_load(LoadConfig(uri=str(work / "mixed"), txnlog_writers=4, deltalake_writers=2, commits=commits,
                                          expire_older_than="30s")))
    if "s3" in only:
        server, options = moto_server()
        try:
            uri = new_bucket(options, f"load-{uuid.uuid4().hex[:12]}")
            done("s3", run_load(LoadConfig(uri=uri, storage_options=options, txnlog_writers=4, commits=s3_commits)))
        finally:
            server.stop()

    print("| scenario | writers x commits | s | commits | commits/s | p50 ms | p99 ms | conflicts | retries | failed "
          "| reader snapshots | maintenance runs | violations |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, result in results.items():
        print(_row(name, result))
    bad = False
    for name, result in results.items():
        for line in result.violations[:10]:
            bad = True
            print(f"VIOLATION {name}: {line}")
        for line in result.maintenance_errors[:5]:
            print(f"maintenance {name}: {line}")
        for line in result.hook_failures[:5]:
            print(f"post-commit hook failure {name}: {line}")
        for line in result.failures[:5]:
            print(f"failed commit {name}: {line}")
    return 1 if bad else 0


def _partitions(work: Path, commits: int, runs: int, out: Path | None) -> int:
    """The issue 28 load, ``runs`` times: a row per run, then the violations."""
    import os

    results: list[PartitionLoadResult] = []
    print("| run | s | commits (txnlog + updater + delta-rs) | commits/s | p50 ms | p99 ms | delta-rs failed | versions | "
          "versions checked | checkpoints | load average | violations |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i in range(runs):
        r = run_partition_load(PartitionLoadConfig(uri=str(work / f"partitions-{i}"), commits=commits, readers=2))
        results.append(r)
        s = r.summary()
        print(f"| {i + 1} | {s['seconds']} | {r.committed['txnlog']} + {r.committed['updater']} + {r.committed['deltalake']} "
              f"| {s['commitsPerSecond']} | {s['p50Ms']} | {s['p99Ms']} | {r.failed['deltalake']} | {s['finalVersion']} "
              f"| {s['versionsChecked']} | {s['checkpoints']} | {os.getloadavg()[0]:.0f} | {s['violations']} |", flush=True)
        if out:
            out.write_text(json.dumps([x.summary() for x in results], indent=1))
    bad = [(i, v) for i, r in enumerate(results) for v in [*r.violations, *r.maintenance_errors, *r.hook_failures]]
    for i, line in bad[:20]:
        print(f"VIOLATION run {i + 1}: {line}")
    for i, r in enumerate(results):
        for line in sorted({f[:160] for f in r.failures})[:5]:
            print(f"failed commit, run {i + 1}: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
