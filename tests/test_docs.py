"""Every python code block in README.md and docs/ runs, in order per file, in a fresh directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("doc", [d for d in DOCS if BLOCK.search(d.read_text())], ids=lambda d: d.name)
def test_code_blocks_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, block in enumerate(BLOCK.findall(doc.read_text())):
        code = compile(block, f"{doc.name}[block {i}]", "exec")
        exec(code, namespace)
