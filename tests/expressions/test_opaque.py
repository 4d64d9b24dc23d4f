"""Opaque conditions: boolean SQL the tree cannot reason about (``key % 10 = 3``, ``upper(name)
= 'A'``, CASE) is accepted, computed on rows with SQL's NULL semantics, and never skips a file by
itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnlog.errors import InvalidPredicateError
from txnlog.expressions import And, FilePredicate, Opaque, Or, not_equal, parse

from .helpers import BASIC, kept, pred

# --- parsing and negation normal form ---------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "id % 10 = 3",
        "upper(name) = 'A'",
        "id = s.a + 1",
        "CASE WHEN flag THEN id > 1 ELSE FALSE END",
        "IF(flag, id > 1, name IS NULL)",
        "coalesce(flag, FALSE)",
        "CAST(id AS BOOLEAN)",
        "upper(name) LIKE 'A%'",
        "lower(name) NOT LIKE 'a%'",
        "id * 2 IN (2, 4)",
        "id IN (s.a, 3)",
        "upper(name) IS NULL",
        "id + 1 BETWEEN 2 AND 4",
        "name <=> region",
        "id IS DISTINCT FROM s.a",
        "length(name) > 3",
    ],
)
def test_conditions_the_tree_cannot_express_are_opaque_leaves(sql: str) -> None:
    tree = parse(sql)
    assert isinstance(tree, Opaque), tree
    assert parse(str(tree)) == tree  # the SQL text it keeps parses back to the same leaf
    pred(sql)  # binds and computes on the schema


def test_not_flips_an_opaque_leaf_and_de_morgan_reaches_it() -> None:
    leaf = parse("id % 10 = 3")
    assert isinstance(leaf, Opaque) and not leaf.negated
    negated = parse("NOT (id % 10 = 3)")
    assert negated == leaf.negate() and isinstance(negated, Opaque) and negated.negated
    assert parse("NOT NOT (id % 10 = 3)") == leaf
    tree = parse("NOT (id % 10 = 3 OR region = 'EU')")
    assert isinstance(tree, And)
    assert tree.children == (leaf.negate(), not_equal("region", "EU"))
    assert str(parse("NOT (upper(name) = 'A')")) == "NOT (UPPER(name) = 'A')"
    # Columns and literals still make the tree's own nodes.
    assert isinstance(parse("id + 0 = 1 OR id = 2"), Or)
    assert not any(isinstance(leaf, Opaque) for leaf in parse("id BETWEEN 1 AND 2 AND name LIKE 'a%'").leaves())


def test_opaque_leaves_bind_their_columns_like_the_rest() -> None:
    p = pred("ID % 2 = 0 AND upper(S.B) = 'X'")  # case-insensitive, nested fields
    assert p.columns == {"id", "s"}
    data = pa.table({"id": [1, 2, 4], "s": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "X"}]})
    schema = pa.schema([("id", pa.int64()), ("s", pa.struct([("a", pa.int64()), ("b", pa.string())]))])
    assert FilePredicate("ID % 2 = 0 AND upper(S.B) = 'X'", schema, []).rows().mask(data.cast(schema)).to_pylist() == [False, False, True]
    with pytest.raises(InvalidPredicateError, match="unknown column 'nope'"):
        pred("nope % 2 = 0")
    with pytest.raises(InvalidPredicateError, match="unknown field 'c' of struct column 's'"):
        pred("s.c * 2 = 0")


def test_column_mapping_reads_opaque_columns_by_their_physical_names() -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    p = FilePredicate("id % 2 = 0 AND upper(name) = 'A'", schema, [], physical_names={"id": "col-1", "name": "col-2"})
    physical = pa.table({"col-1": [2, 2, 3], "col-2": ["a", "b", "a"]})
    assert p.rows(physical=True).mask(physical).to_pylist() == [True, False, False]


def test_only_row_filtering_needs_what_the_tree_cannot_hold() -> None:
    p = pred("id % 2 = 0")
    with pytest.raises(InvalidPredicateError, match=r"computes '.*' on rows.*FilePredicate.rows\(\)"):
        p.row_filter()
    plain = pred("id > 1")
    assert plain.rows().expression is not None  # a plain tree keeps its one Arrow expression
    data = pa.table({"id": [1, 2, None]})
    assert plain.rows().mask(data).to_pylist() == [False, True, False]
    assert (~plain.rows()).mask(data).to_pylist() == [True, False, True]


# --- file skipping ---------------------------------------------------------------------------------

# BASIC: f0 EU ids 1..5 (names apple..cherry), f1 US ids 11..20 (kiwi..plum), f2 EU ids 8..12 (names all NULL).


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("id % 2 = 0", ["f0", "f1", "f2"]),  # alone: may match anywhere
        ("NOT (id % 2 = 0)", ["f0", "f1", "f2"]),
        ("id > 15 AND id % 2 = 0", ["f1"]),  # the sibling skips
        ("id % 2 = 0 AND region = 'US'", ["f1"]),  # a partition sibling too
        ("id > 15 OR id % 2 = 0", ["f0", "f1", "f2"]),  # OR with it skips nothing
        ("(id > 15 OR id % 2 = 0) AND id < 3", ["f0"]),
        ("NOT (id % 2 = 0 OR id > 7)", ["f0"]),  # De Morgan: NOT (id > 7) still skips
        ("upper(region) = 'EU'", ["f0", "f1", "f2"]),  # over a partition column: kept, not decided
        ("name IS NOT NULL AND upper(name) = 'KIWI'", ["f0", "f1"]),
    ],
)
def test_opaque_leaves_never_skip_but_their_siblings_do(sql: str, expected: list[str]) -> None:
    assert kept(pred(sql), BASIC) == expected


def test_partition_only_means_no_opaque_leaf() -> None:
    assert pred("region = 'EU'").matches_partition_only()
    assert not pred("upper(region) = 'EU'").matches_partition_only()
    assert not pred("region = 'EU' AND id % 2 = 0").matches_partition_only()


# --- rows, with SQL's three-valued logic ------------------------------------------------------------

ROW_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("s", pa.string())])
Value = bool | None


def _and(x: Value, y: Value) -> Value:
    return False if x is False or y is False else (None if x is None or y is None else True)


def _or(x: Value, y: Value) -> Value:
    return True if x is True or y is True else (None if x is None or y is None else False)


def _not(x: Value) -> Value:
    return None if x is None else not x


def _cmp(f: Callable[[Any, Any], bool], *operands: Any) -> Value:
    return None if any(o is None for o in operands) else f(*operands)


def _mod(x: int, y: int) -> int:  # SQL's remainder takes the dividend's sign
    return abs(x) % y * (1 if x >= 0 else -1)


# Atoms: SQL and its three-valued meaning on a row (opaque ones and the tree's own).
ATOMS: list[tuple[str, Callable[[dict[str, Any]], Value]]] = [
    ("a % 3 = 1", lambda r: _cmp(lambda a: _mod(a, 3) == 1, r["a"])),
    ("a + b > 2", lambda r: _cmp(lambda a, b: a + b > 2, r["a"], r["b"])),
    ("upper(s) = 'X'", lambda r: _cmp(lambda s: s.upper() == "X", r["s"])),
    ("coalesce(a, b) < 1", lambda r: _cmp(lambda v: v < 1, r["a"] if r["a"] is not None else r["b"])),
    ("CASE WHEN a > 0 THEN b > 0 END", lambda r: _cmp(lambda b: b > 0, r["b"]) if r["a"] is not None and r["a"] > 0 else None),
    ("a * 2 IN (b, 4)", lambda r: _or(_cmp(lambda a, b: 2 * a == b, r["a"], r["b"]), _cmp(lambda a: 2 * a == 4, r["a"]))),
    ("lower(s) NOT LIKE 'x%'", lambda r: _cmp(lambda s: not s.lower().startswith("x"), r["s"])),
    ("a > 1", lambda r: _cmp(lambda a: a > 1, r["a"])),
    ("s IS NULL", lambda r: r["s"] is None),
    ("b IN (1, 2)", lambda r: _cmp(lambda b: b in (1, 2), r["b"])),
]


@st.composite
def _conditions(draw: st.DrawFn, depth: int = 0) -> tuple[str, Callable[[dict[str, Any]], Value]]:
    kind = draw(st.sampled_from(["atom", "atom", "not", "and", "or"] if depth < 3 else ["atom"]))
    if kind == "atom":
        return draw(st.sampled_from(ATOMS))
    left = draw(_conditions(depth + 1))
    if kind == "not":
        return f"NOT ({left[0]})", lambda r, f=left[1]: _not(f(r))
    right = draw(_conditions(depth + 1))
    combine = _and if kind == "and" else _or
    return f"({left[0]}) {kind.upper()} ({right[0]})", lambda r, f=left[1], g=right[1]: combine(f(r), g(r))


rows = st.lists(
    st.fixed_dictionaries({"a": st.none() | st.integers(-5, 5), "b": st.none() | st.integers(-5, 5), "s": st.none() | st.sampled_from(["x", "X", "y"])}),
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(condition=_conditions(), data=rows)
def test_rows_match_a_python_evaluation_with_nulls(condition: tuple[str, Callable[[dict[str, Any]], Value]], data: list[dict[str, Any]]) -> None:
    sql, meaning = condition
    table = pa.Table.from_pylist(data, schema=ROW_SCHEMA)
    p = FilePredicate(sql, ROW_SCHEMA, [])
    expected = [meaning(r) is True for r in data]
    assert p.rows().mask(table).to_pylist() == expected, sql
    # ~ selects what a DELETE keeps: FALSE and NULL rows.
    assert (~p.rows()).mask(table).to_pylist() == [not e for e in expected], sql
