"""Post-commit hooks declared in the ``txnlog.post_commit_hooks`` entry-point group are found by
the default registry, so an installed engine plugs in without the core naming it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

from txnlog.txn.hooks import ENTRY_POINT_GROUP

SCRIPT = """
import json, sys
import pyarrow as pa
import txnlog

table = txnlog.Table.create(sys.argv[1], pa.schema([("id", pa.int64())]), properties={"myhook.enabled": "true"})
result = table.append(pa.table({"id": [1]}))
print(json.dumps({"hooks": [h.name for h in table.hooks], "failures": [f.hook for f in result.hook_failures]}))
"""


def _plugin(site: Path) -> None:
    (site / "demo_hooks.py").write_text(
        textwrap.dedent(
            """
            import json, pathlib

            class RecordCommits:
                name = "record-commits"

                def __call__(self, ctx):
                    if ctx.configuration.get("myhook.enabled") != "true":
                        return
                    out = pathlib.Path(ctx.location.store.root_path) / "hook-seen.json"
                    out.write_text(json.dumps({"version": ctx.version, "operation": ctx.operation,
                                               "files": ctx.snapshot.num_files}))

            class Broken:
                name = "broken"

                def __call__(self, ctx):
                    raise RuntimeError("boom")

            def not_a_hook():
                return 42
            """
        )
    )
    dist = site / "demo_hooks-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-hooks\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nrecord-commits = demo_hooks:RecordCommits\nbroken = demo_hooks:Broken\n"
        "bad = demo_hooks:not_a_hook\nmissing = demo_hooks:Nowhere\n"
    )


def test_entry_point_hooks_run_after_commits_and_failures_are_reported(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _plugin(site)
    table = tmp_path / "t"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(table)],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    import json

    report = json.loads(out.stdout.strip().splitlines()[-1])
    # txnlog's own engines (log expiry, Iceberg export) come through the same group.
    own = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.dist is not None and ep.dist.name == "txnlog"}
    assert own  # the installed package declares its hooks there too
    assert [h for h in report["hooks"] if h not in own] == ["checkpoint", "broken", "record-commits"]  # bad ones skipped
    assert report["failures"] == ["broken"]  # a failing hook never fails the commit
    seen = json.loads((table / "hook-seen.json").read_text())
    assert seen == {"version": 1, "operation": "WRITE", "files": 1}
    assert "could not load post-commit hook 'bad'" in out.stderr and "'missing'" in out.stderr
