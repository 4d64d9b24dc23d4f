"""Random sequences of append, DELETE, UPDATE and MERGE against a plain-Python model of the rows:
after every operation ``Snapshot.to_arrow`` (and, on fewer examples, DuckDB's delta_scan) reads
exactly the model's rows, on tables with and without deletion vectors, partitioned or not, and
column-mapped."""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txnlog
from tests.dml.conftest import duckdb_rows, sorted_rows, table_rows

pytest.importorskip("pyroaring")

# The partition column first: DuckDB reads a column-mapped partition column only there.
SCHEMA = pa.schema([("part", pa.string()), ("id", pa.int64()), ("v", pa.int32())])
COLUMNS = SCHEMA.names
Row = dict[str, Any]

values = st.one_of(st.none(), st.integers(-5, 99))
parts = st.sampled_from(["a", "b", "c"])


@dataclass(frozen=True)
class Condition:
    sql: str
    holds: Callable[[Row], bool]  # TRUE in SQL (NULL counts as not)


def _conditions(k: int, m: int, part: str) -> list[Condition]:
    return [
        Condition(f"id < {k}", lambda r: r["id"] < k),
        Condition(f"id >= {k} AND v < {m}", lambda r: r["id"] >= k and r["v"] is not None and r["v"] < m),
        Condition(f"part = '{part}'", lambda r: r["part"] == part),
        Condition("v IS NULL", lambda r: r["v"] is None),
        Condition(f"v = {m} OR id IN ({k}, {k + 3})", lambda r: (r["v"] == m) or r["id"] in (k, k + 3)),
        # Conditions only rows compute (NOT of NULL is NULL: a NULL v matches neither way).
        Condition(f"v % 3 = {k % 3}", lambda r: r["v"] is not None and math.fmod(r["v"], 3) == k % 3),
        Condition(f"NOT (v * 2 > {m}) AND id % 4 <> {k % 4}", lambda r: r["v"] is not None and not r["v"] * 2 > m and r["id"] % 4 != k % 4),
        Condition(f"upper(part) = '{part.upper()}' OR NOT (v % 2 = 0)", lambda r: r["part"] == part or (r["v"] is not None and r["v"] % 2 != 0)),
    ]


conditions = st.builds(lambda k, m, p, i: _conditions(k, m, p)[i], st.integers(0, 60), st.integers(-5, 99), parts, st.integers(0, 7))

# SET clauses: the SQL and the new row they make.
SETS: list[tuple[dict[str, str], Callable[[Row], Row]]] = [
    ({"v": "v + 1"}, lambda r: {**r, "v": None if r["v"] is None else r["v"] + 1}),
    ({"v": "CASE WHEN v IS NULL THEN 0 ELSE v * 2 END"}, lambda r: {**r, "v": 0 if r["v"] is None else r["v"] * 2}),
    ({"part": "'c'", "v": "NULL"}, lambda r: {**r, "part": "c", "v": None}),
    ({"v": "coalesce(v, id) % 7"}, lambda r: {**r, "v": int(math.fmod(r["v"] if r["v"] is not None else r["id"], 7))}),  # SQL's % truncates
]


def _append(ids: list[int], draw_part: list[str], draw_v: list[Any]) -> list[Row]:
    return [{"part": p, "id": i, "v": v} for i, p, v in zip(ids, draw_part, draw_v, strict=True)]


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, Any]]:
    ops: list[tuple[str, Any]] = []
    next_id = itertools.count()
    for _ in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["append", "delete", "update", "merge", "delete", "merge"]))
        if kind == "append" or not ops:
            n = draw(st.integers(1, 25))
            ids = [next(next_id) for _ in range(n)]
            ops.append(("append", _append(ids, draw(st.lists(parts, min_size=n, max_size=n)), draw(st.lists(values, min_size=n, max_size=n)))))
        elif kind == "delete":
            ops.append(("delete", draw(conditions)))
        elif kind == "update":
            ops.append(("update", (draw(conditions), draw(st.integers(0, len(SETS) - 1)))))
        else:
            existing = draw(st.lists(st.integers(0, 60), max_size=8, unique=True))
            new = [next(next_id) + 1000 for _ in range(draw(st.integers(0, 4)))]
            ids = existing + new
            rows = _append(ids, draw(st.lists(parts, min_size=len(ids), max_size=len(ids))), draw(st.lists(values, min_size=len(ids), max_size=len(ids))))
            ops.append(("merge", (rows, draw(st.integers(0, 3)))))
    return ops


# MERGE variants: (on, when_matched_update, when_matched_delete, model of matching, of the update, of the delete)
MERGES: list[dict[str, Any]] = [
    {"on": "id", "update": "*", "delete": False, "match": lambda t, s: t["id"] == s["id"], "new": lambda t, s: dict(s), "drop": lambda t, s: False},
    {"on": "t.id = s.id AND s.v IS NOT NULL", "update": {"v": "t.v + s.v"}, "delete": False,
     "match": lambda t, s: t["id"] == s["id"] and s["v"] is not None,
     "new": lambda t, s: {**t, "v": None if t["v"] is None else t["v"] + s["v"]}, "drop": lambda t, s: False},
    {"on": ["id"], "update": {"v": "s.v"}, "delete": "s.v > 50", "match": lambda t, s: t["id"] == s["id"],
     "new": lambda t, s: {**t, "v": s["v"]}, "drop": lambda t, s: s["v"] is not None and s["v"] > 50},
    {"on": "id", "update": None, "delete": True, "match": lambda t, s: t["id"] == s["id"], "new": None, "drop": lambda t, s: True},
]


def _apply(model: list[Row], op: tuple[str, Any]) -> list[Row]:
    kind, arg = op
    if kind == "append":
        return model + arg
    if kind == "delete":
        return [r for r in model if not arg.holds(r)]
    if kind == "update":
        condition, which = arg
        return [SETS[which][1](r) if condition.holds(r) else r for r in model]
    rows, which = arg
    spec = MERGES[which]
    out, matched_sources = [], set()
    for target in model:
        source = next((s for s in rows if spec["match"](target, s)), None)
        if source is None:
            out.append(target)
            continue
        matched_sources.add(source["id"])
        if spec["drop"](target, source):
            continue
        out.append(spec["new"](target, source) if spec["new"] is not None else target)
    return out + [s for s in rows if s["id"] not in matched_sources]


def _run(table: txnlog.Table, op: tuple[str, Any]) -> None:
    kind, arg = op
    if kind == "append":
        table.append(pa.Table.from_pylist(arg, schema=SCHEMA))
    elif kind == "delete":
        table.delete(arg.sql)
    elif kind == "update":
        condition, which = arg
        table.update(condition.sql, set=SETS[which][0])
    else:
        rows, which = arg
        spec = MERGES[which]
        source = pa.Table.from_pylist(rows, schema=SCHEMA)
        # Half the time as a stream: the source may be a RecordBatchReader.
        data = source if which % 2 else pa.RecordBatchReader.from_batches(SCHEMA, source.to_batches(max_chunksize=3))
        table.merge(data, spec["on"], when_matched_update=spec["update"], when_matched_delete=spec["delete"], when_not_matched_insert="*")


LAYOUTS = {
    "cow": ({"delta.enableDeletionVectors": "false"}, []),
    "cow-partitioned": ({}, ["part"]),
    "dv": ({"delta.enableDeletionVectors": "true"}, []),
    "dv-partitioned": ({"delta.enableDeletionVectors": "true"}, ["part"]),
    "dv-column-mapped": ({"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"}, ["part"]),
}


def _check_sequence(layout: str, ops: list[tuple[str, Any]], *, with_duckdb: bool) -> None:
    properties, partition_by = LAYOUTS[layout]
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "t")
        table = txnlog.Table.create(uri, SCHEMA, partition_by=partition_by, properties=properties)
        model: list[Row] = []
        for op in ops:
            _run(table, op)
            model = _apply(model, op)
            expected = sorted_rows([tuple(r[c] for c in COLUMNS) for r in model])
            assert table_rows(table.snapshot().to_arrow(), COLUMNS) == expected, f"after {op[0]}"
            if with_duckdb and model:
                assert sorted_rows(duckdb_rows(uri, COLUMNS)) == expected, f"DuckDB after {op[0]}"
        if properties.get("delta.enableDeletionVectors") == "true" and any(k in ("delete", "update", "merge") for k, _ in ops):
            # Merge-on-read: the table's files were never rewritten, only marked.
            assert all(h.commit_info.operation_metrics.get("numCopiedRows", "0") == "0" for h in table.history())


@pytest.mark.parametrize("layout", list(LAYOUTS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
def test_dml_matches_the_model(layout: str, ops: list[tuple[str, Any]]) -> None:
    _check_sequence(layout, ops, with_duckdb=False)


@pytest.mark.parametrize("layout", ["cow-partitioned", "dv", "dv-column-mapped"])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
def test_duckdb_reads_the_model_after_every_operation(layout: str, ops: list[tuple[str, Any]]) -> None:
    _check_sequence(layout, ops, with_duckdb=True)
