"""Property-based: random sequences of ALTERs and writes against a model of the schema and the
rows. After every step the table reads back exactly the model's columns, types and rows; a step
the rules refuse (a NOT NULL over NULLs, a narrowing, a constraint existing rows break) leaves
the table as the model says it was."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnlog import Table
from txnlog.errors import ProtocolViolationError, SchemaChangeError

NAMES = ["a", "b", "c", "d"]
TYPES = {"integer": pa.int32(), "long": pa.int64()}

step = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(NAMES), st.sampled_from(list(TYPES))),
    st.tuples(st.just("drop"), st.sampled_from(NAMES)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("widen"), st.sampled_from(NAMES)),
    st.tuples(st.just("narrow"), st.sampled_from(NAMES)),
    st.tuples(st.just("not_null"), st.sampled_from(NAMES)),
    st.tuples(st.just("check"), st.sampled_from(NAMES)),
    st.tuples(st.just("append"), st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=1, max_size=3)),
    st.tuples(st.just("merge_append"), st.sampled_from(NAMES), st.integers(-5, 5)),
)


class Model:
    """The schema (name -> Delta type, nullable) and the rows, as the rules say they become."""

    def __init__(self) -> None:
        self.columns: dict[str, tuple[str, bool]] = {"id": ("long", True)}
        self.rows: list[dict[str, Any]] = []
        self.next_id = 0
        self.constraints: dict[str, str] = {}

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, TYPES[t], nullable) for n, (t, nullable) in self.columns.items()])

    def satisfies(self, row: dict[str, Any]) -> bool:
        for column in self.constraints.values():
            if row.get(column) is None or row[column] < -3:
                return False
        return all(row.get(n) is not None for n, (_, nullable) in self.columns.items() if not nullable)


def _apply(t: Table, m: Model, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "add" and op[1] not in m.columns:
        t.alter.add_columns(pa.field(op[1], TYPES[op[2]]))
        m.columns[op[1]] = (op[2], True)
    elif kind == "drop" and op[1] in m.columns and op[1] not in m.constraints.values():
        t.alter.drop_columns(op[1])
        del m.columns[op[1]]
        m.rows = [{k: v for k, v in r.items() if k != op[1]} for r in m.rows]  # a re-added column starts empty
    elif kind == "rename" and op[1] in m.columns and op[2] not in m.columns and op[1] not in m.constraints.values():
        t.alter.rename_column(op[1], op[2])
        m.columns = {(op[2] if n == op[1] else n): v for n, v in m.columns.items()}
        m.rows = [{(op[2] if k == op[1] else k): v for k, v in r.items()} for r in m.rows]
    elif kind == "widen" and op[1] in m.columns and m.columns[op[1]][0] == "integer":
        t.alter.set_column_type(op[1], "long")
        m.columns[op[1]] = ("long", m.columns[op[1]][1])
    elif kind == "narrow" and op[1] in m.columns and m.columns[op[1]][0] == "long" and op[1] != "id":
        try:
            t.alter.set_column_type(op[1], "integer")
        except SchemaChangeError as e:
            assert e.rule == "type widening" and e.field == op[1]
        else:
            raise AssertionError("a narrowing was accepted")
    elif kind == "not_null" and op[1] in m.columns:
        if all(r.get(op[1]) is not None for r in m.rows):
            t.alter.set_not_null(op[1])
            m.columns[op[1]] = (m.columns[op[1]][0], False)
        else:
            try:
                t.alter.set_not_null(op[1])
            except SchemaChangeError as e:
                assert e.rule == "NOT NULL" and e.field == op[1]
            else:
                raise AssertionError("NOT NULL over NULLs was accepted")
    elif kind == "check" and op[1] in m.columns and f"c_{op[1]}" not in m.constraints:
        name = f"c_{op[1]}"
        ok = all(r.get(op[1]) is not None and r[op[1]] >= -3 for r in m.rows)
        try:
            t.alter.add_constraint({name: f"{op[1]} >= -3"})
        except SchemaChangeError as e:
            assert not ok and e.rule == "CHECK constraint"
        else:
            assert ok, "a constraint existing rows break was accepted"
            m.constraints[name] = op[1]
    elif kind == "append":
        rows = []
        for value in op[1]:
            row = {n: value for n in m.columns if n != "id"}
            row["id"] = m.next_id
            m.next_id += 1
            rows.append(row)
        _append(t, m, rows, m.arrow_schema())
    elif kind == "merge_append" and op[1] not in m.columns:
        row = {n: op[2] for n in m.columns if n != "id"} | {"id": m.next_id, op[1]: op[2]}
        m.next_id += 1
        schema = m.arrow_schema().append(pa.field(op[1], pa.int64()))
        if _append(t, m, [row], schema, schema_mode="merge"):
            m.columns[op[1]] = ("long", True)


def _append(t: Table, m: Model, rows: list[dict[str, Any]], schema: pa.Schema, **options: Any) -> bool:
    data = pa.Table.from_pylist(rows, schema=pa.schema([f.with_nullable(True) for f in schema]))
    if all(m.satisfies(r) for r in rows):
        t.append(data, **options)
        m.rows.extend(rows)
        return True
    try:
        t.append(data, **options)
    except (ProtocolViolationError, SchemaChangeError) as e:
        assert e is not None
    except Exception as e:  # a NULL in a NOT NULL column is refused by the writer's own check
        assert "null" in str(e).lower(), e
    else:
        raise AssertionError(f"rows breaking a rule were written: {rows}")
    return False


def _check(t: Table, m: Model) -> None:
    snap = t.snapshot()
    assert [(f.name, f.type, f.nullable) for f in snap.schema] == [(f.name, f.type, f.nullable) for f in m.arrow_schema()]
    got = sorted(snap.to_arrow().to_pylist(), key=lambda r: r["id"])
    want = [{n: r.get(n) for n in m.columns} for r in sorted(m.rows, key=lambda r: r["id"])]
    assert got == want


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(step, min_size=1, max_size=10))
def test_random_alters_and_writes_match_the_model(steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        m = Model()
        t = Table.create(root, m.arrow_schema())
        for op in steps:
            version = t.latest_version()
            try:
                _apply(t, m, op)
            finally:
                assert t.latest_version() in (version, version + 1)  # one commit per step at most
            _check(t, m)
