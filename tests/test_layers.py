"""The core's layers, enforced: storage -> file facts -> log -> expressions -> snapshot -> write
-> txn -> table -> the package's public names -> engines. A module imports only from its own
layer or below; no import circles; a lazy import (inside a function) only for an optional
dependency, with a comment saying so."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "txnlog"

# Layer of each module, by its dotted name's longest matching prefix.
LAYERS = {
    "txnlog._version": 0,
    "txnlog.errors": 0,
    "txnlog.properties": 0,
    "txnlog.schema": 0,
    "txnlog.storage": 1,
    "txnlog.file_facts": 2,
    "txnlog.log": 3,
    "txnlog.expressions": 4,
    "txnlog.snapshot": 5,
    "txnlog.write": 6,
    "txnlog.txn": 7,
    "txnlog.table": 8,
    "txnlog": 9,  # the package's __init__: the public names
    # Engines: above everything in the core, never imported by it.
    "txnlog.maintenance": 10,
    "txnlog.iceberg": 10,
    "txnlog.spark": 10,
    "txnlog.cli": 10,
    "txnlog.__main__": 10,
    "txnlog.testing": 10,
}


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            ids.update(id(sub) for child in node.body for sub in ast.walk(child))
    return ids


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) of every runtime import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_blocks(tree)
    in_function = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for sub in ast.walk(node)
    }
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, id(node) in in_function) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            # "from txnlog import x" imports the submodule x when there is one.
            targets = [n for n in names if (PACKAGE.parent / n.replace(".", "/")).with_suffix(".py").exists()
                       or (PACKAGE.parent / n.replace(".", "/")).is_dir()] or [node.module]
            out += [(node.lineno, t, id(node) in in_function) for t in targets]
    return out


def core_modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if layer(module_name(p)) < 10]


def test_no_module_imports_from_a_layer_above_it() -> None:
    offenders = []
    for path in core_modules():
        me = module_name(path)
        for line, target, _ in imports(path):
            if target.startswith("txnlog") and layer(target) > layer(me):
                offenders.append(f"{me}:{line} imports {target} (layer {layer(target)} above {layer(me)})")
    assert not offenders, "\n".join(offenders)


def test_no_import_circles() -> None:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        graph[me] = {t for _, t, _ in imports(path) if t.startswith("txnlog.") and t != me}
    # A package's __init__ importing its own submodules is how packages work, not a circle.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt in graph and state.get(nxt) is None:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if state.get(node) is None:
            visit(node, [node])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_lazy_imports_are_only_for_optional_dependencies_and_say_so() -> None:
    # Or, marked "deferred", for a heavy dependency most processes never use (a parser, a
    # filesystem layer): never to hide an import cycle.
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for line, target, lazy in imports(path):
            if not lazy:
                continue
            text = lines[line - 1] + " " + (lines[line - 2] if line > 1 else "")
            if "optional" not in text and "deferred" not in text:
                offenders.append(f"{module_name(path)}:{line} imports {target} inside a function without saying which optional dependency")
    assert not offenders, "\n".join(offenders)


def test_the_core_never_names_an_engine() -> None:
    for path in core_modules():
        for line, target, _ in imports(path):
            assert not target.startswith("txnlog") or layer(target) < 10, f"{module_name(path)}:{line} imports engine {target}"
