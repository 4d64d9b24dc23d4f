"""Every python code block in README.md and docs/ runs, in order per file, in a fresh directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import delta_jars_dir

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("doc", [d for d in DOCS if BLOCK.search(d.read_text())], ids=lambda d: d.name)
def test_code_blocks_run(doc, tmp_path, monkeypatch):
    if "with_delta(" in doc.read_text():
        # Its examples start a session with delta-spark: offline, from the jars `make jars` fetched.
        from txnlog.spark.delta import JARS_DIR_ENV, delta_jars

        if not delta_jars(delta_jars_dir()):
            pytest.skip(f"{doc.name} needs delta-spark's jars in {delta_jars_dir()}: run `make jars`")
        monkeypatch.setenv(JARS_DIR_ENV, str(delta_jars_dir()))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, block in enumerate(BLOCK.findall(doc.read_text())):
        code = compile(block, f"{doc.name}[block {i}]", "exec")
        exec(code, namespace)
