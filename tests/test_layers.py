"""The core's layers, enforced: storage -> file facts -> log -> table configuration -> expressions -> snapshot -> write
-> txn -> table -> the package's public names -> engines. A module imports only from its own
layer or below; no import circles; a lazy import (inside a function) only for an optional
dependency, with a comment saying so. And the engine boundary: no module imports another
package's private (underscore) names, and engines import the core only through its declared
surfaces, each name in the surface's ``__all__``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "txnlog"

# Layer of each module, by its dotted name's longest matching prefix.
LAYERS: dict[str, float] = {
    "txnlog._version": 0,
    "txnlog.errors": 0,
    "txnlog.documents": 0,
    "txnlog.properties": 0,
    "txnlog.schema": 0,
    "txnlog.storage": 1,
    "txnlog.file_facts": 2,
    "txnlog.log": 3,
    "txnlog.table_configuration": 3.5,
    "txnlog.expressions": 4,
    "txnlog.read": 4.5,
    "txnlog.snapshot": 5,
    "txnlog.write": 6,
    "txnlog.txn": 7,
    "txnlog.dml": 7.5,  # row-level DELETE/UPDATE/MERGE over Arrow: reads, writes, stages in a transaction
    "txnlog.optimize": 7.5,  # OPTIMIZE: plans compaction on a snapshot, stages it in a transaction
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


def layer(module: str) -> float:
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


def imports(path: Path, *, typing_too: bool = False) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) of every runtime import in ``path`` (and,
    with ``typing_too``, of those under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(), str(path))
    skip = set() if typing_too else _type_checking_blocks(tree)
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


def test_snapshot_txn_and_write_never_name_the_table_even_for_typing() -> None:
    # They hold a TableLocation; a Table is what sits above them all.
    offenders = [
        f"{module_name(path)}:{line} imports {target}"
        for path in core_modules()
        if module_name(path).startswith(("txnlog.snapshot", "txnlog.txn", "txnlog.write"))
        for line, target, _ in imports(path, typing_too=True)
        if target == "txnlog.table" or target.startswith("txnlog.table.")
    ]
    assert not offenders, "\n".join(offenders)


def test_no_type_level_circle_through_table_or_snapshot() -> None:
    graph = {
        module_name(p): {t for _, t, _ in imports(p, typing_too=True) if t.startswith("txnlog.") and t != module_name(p)}
        for p in core_modules()
    }

    def reaches(start: str, goal: str) -> list[str] | None:
        seen, stack = {start}, [[start]]
        while stack:
            path = stack.pop()
            for nxt in sorted(graph.get(path[-1], ())):
                if nxt == goal:
                    return [*path, nxt]
                if nxt not in seen and not nxt.startswith(path[-1] + "."):
                    seen.add(nxt)
                    stack.append([*path, nxt])
        return None

    circles = [c for m in ("txnlog.table", "txnlog.snapshot") if (c := reaches(m, m)) is not None]
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


# --- the engine boundary -------------------------------------------------------------------------

# What an engine may import from the core: these modules and packages, each name in its
# ``__all__`` (public names, for a module without one). A package here means its ``__init__``,
# never its submodules. Entries whose module does not exist yet are ignored.
SURFACES = (
    "txnlog",
    "txnlog.errors",
    "txnlog.documents",
    "txnlog.properties",
    "txnlog.schema",
    "txnlog.file_facts",
    "txnlog.table_configuration",
    "txnlog.expressions",
    "txnlog.read",
    "txnlog.storage",
    "txnlog.log",
    "txnlog.txn",
    "txnlog.write",
    "txnlog.dml",
    "txnlog.optimize",
)


def module_path(module: str) -> Path | None:
    base = PACKAGE.parent / module.replace(".", "/")
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.exists():
            return path
    return None


def package_of(module: str) -> str:
    """The package a module belongs to: ``txnlog.log`` for ``txnlog.log.replay``, ``txnlog``
    for a module directly under it (``txnlog.table``, ``txnlog._version``)."""
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGE / parts[1]).is_dir():
        return ".".join(parts[:2])
    return "txnlog"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def all_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, imported name or None) of every import of a txnlog module in ``path``,
    at run time or for type checking. ``from m import name`` gives ``(m, name)``, or
    ``(m.name, None)`` when ``m.name`` is a module."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "txnlog"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "txnlog":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                # As Python resolves it: a name the package binds wins over its submodule.
                is_module = module_path(sub) is not None and a.name not in bound_names(node.module)
                out.append((node.lineno, sub, None) if is_module else (node.lineno, node.module, a.name))
    return out


def bound_names(module: str) -> set[str]:
    """Every name ``module`` binds at top level (by definition, assignment or import)."""
    path = module_path(module)
    if path is None:
        return set()
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def public_names(module: str) -> set[str]:
    """The names ``module`` declares public: its ``__all__``, or every name it binds at top
    level that does not start with an underscore."""
    path = module_path(module)
    assert path is not None, module
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    return {n for n in bound_names(module) if not n.startswith("_")}


def engine_modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if layer(module_name(p)) == 10]


def test_no_module_imports_another_packages_private_names() -> None:
    # A leading underscore (module or name) is private to its package: visible to the modules in
    # it, its subpackages included (so the whole core may read ``txnlog._version``).
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        for line, target, name in all_imports(path):
            owner = package_of(target)
            if me == owner or me.startswith(owner + "."):
                continue
            inner = target[len(owner) + 1:].split(".") if target != owner else []
            private = [part for part in inner if is_private(part)] + ([name] if name and is_private(name) else [])
            if private:
                offenders.append(f"{me}:{line} imports {private[0]} from {target}")
    assert not offenders, "\n".join(offenders)


def test_engines_import_the_core_only_through_its_surfaces() -> None:
    offenders = []
    for path in engine_modules():
        me = module_name(path)
        for line, target, name in all_imports(path):
            if layer(target) == 10:
                continue  # an engine (another engine's private names: the test above)
            if target not in SURFACES:
                offenders.append(f"{me}:{line} imports {target}, not one of the core's surfaces")
            elif name is not None and name not in public_names(target):
                offenders.append(f"{me}:{line} imports {name} from {target}, which does not declare it public")
    assert not offenders, "\n".join(offenders)


def test_the_core_packages_declare_their_surfaces() -> None:
    for package in ("txnlog.storage", "txnlog.log", "txnlog.txn", "txnlog.write"):
        path = module_path(package)
        assert path is not None and "__all__" in path.read_text(), f"{package} has no __all__"
        module = __import__(package, fromlist=["__all__"])
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{package}.__all__ names what it does not define: {missing}"


def test_pyiceberg_private_names_are_used_in_one_adapter_module_only() -> None:
    # They may change in any pyiceberg release: one module to re-read when upgrading it.
    offenders = []
    for path in sorted((PACKAGE / "iceberg").glob("*.py")):
        if path.name == "pyiceberg_adapter.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyiceberg":
                offenders += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if is_private(a.name)]
                offenders += [f"{path.name}:{node.lineno} imports {node.module}" for part in node.module.split(".") if is_private(part)]  # type: ignore[union-attr]
    assert not offenders, "\n".join(offenders)


# What an engine may take from ``txnlog.dml``: the plans it executes, the parts of the Python
# executor it hands a small statement to (on Spark's driver), the write planner, and the values
# they return. Nothing that exists only for an engine to reach: each name below serves the
# core's own executors too.
DML_FOR_ENGINES = {
    # plans, decided before any row is read
    "MergePlan", "MergeClause", "RowChangePlan", "SqlExpression", "WritePlan", "WriteOptions",
    # schema evolution on write, staged in the engine's transaction (the one place that evolves a schema)
    "evolve_schema",
    # the MERGE builder every engine returns, and the clauses it collects for a plan
    "MergeBuilder", "MergeAliases", "ClauseSpec",
    # executors and their parts
    "run_merge", "find_rows", "KeyMatcher", "SOURCE_ROW", "merge_candidates", "stage_write", "ArrowRemoval", "ChangeData",
    "rows_matching", "replace_where_violation",  # replaceWhere's row rule and its error, for engines that count rows themselves
    # what they return
    "MergeMetrics", "RowChangeMetrics", "FileCounts", "Timing", "live_rows", "files_table",
}


def test_spark_imports_from_dml_only_its_plan_and_executor_surfaces() -> None:
    offenders = []
    for path in engine_modules():
        me = module_name(path)
        if not me.startswith("txnlog.spark"):
            continue
        for line, target, name in all_imports(path):
            if target == "txnlog.dml" and name not in DML_FOR_ENGINES:
                offenders.append(f"{me}:{line} imports {name or target} from txnlog.dml, which is no plan or executor surface")
            elif target.startswith("txnlog.dml."):
                offenders.append(f"{me}:{line} imports {target}: engines take txnlog.dml's surface only")
    assert not offenders, "\n".join(offenders)
    declared = public_names("txnlog.dml")
    assert DML_FOR_ENGINES <= declared, f"not in txnlog.dml.__all__: {sorted(DML_FOR_ENGINES - declared)}"
