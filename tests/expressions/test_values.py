"""Value expressions (txnlog.expressions.parse_value / evaluate_value): SQL's arithmetic and NULL
rules on Arrow, and errors in the user's words."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from txnlog.errors import InvalidPredicateError
from txnlog.expressions import Reference, condition_mask, evaluate_value, parse_value

ROWS = pa.table({
    "a": pa.array([1, -7, None, 7], pa.int32()),
    "b": [2.5, None, 1.0, 3.0],
    "s": ["x", "y", None, "Z"],
    "d": pa.array([Decimal("1.50"), None, Decimal("3.00"), Decimal("-2.25")], pa.decimal128(10, 2)),
    "st": pa.array([{"k": 1}, {"k": 2}, None, {"k": 4}], pa.struct([("k", pa.int64())])),
})


def _resolve(ref: Reference) -> Any:
    column = ROWS.column(ref.path[0])
    return pa.compute.struct_field(column, [0]) if len(ref.path) > 1 else column


def _eval(sql: str) -> list[Any]:
    return evaluate_value(parse_value(sql), _resolve, ROWS.num_rows, text=sql).to_pylist()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("a + 1", [2, -6, None, 8]),
        ("a / 2", [0.5, -3.5, None, 3.5]),  # SQL's / is not integer division
        ("a % 3", [1, -1, None, 1]),  # the remainder has the dividend's sign
        ("a / 0", [None, None, None, None]),  # as Spark outside ANSI mode
        ("-a * b", [-2.5, None, None, -21.0]),
        ("d * 2", [Decimal("3.00"), None, Decimal("6.00"), Decimal("-4.50")]),
        ("b + d", [4.0, None, 4.0, 0.75]),
        ("s || '!'", ["x!", "y!", None, "Z!"]),
        ("upper(s)", ["X", "Y", None, "Z"]),
        ("lower(s) = 'z'", [False, False, None, True]),
        ("coalesce(a, 0) + st.k", [2, -5, None, 11]),
        ("CASE WHEN a > 1 THEN 'big' WHEN a IS NULL THEN 'none' ELSE 'small' END", ["small", "small", "none", "big"]),
        ("CASE a WHEN 1 THEN 10 ELSE 0 END", [10, 0, 0, 0]),
        ("CAST(a AS STRING)", ["1", "-7", None, "7"]),
        ("a IN (1, 7)", [True, False, None, True]),
        ("a IN (1, NULL)", [True, None, None, None]),  # NULL when no item is equal and one is NULL
        ("a NOT IN (1, 2)", [False, True, None, True]),
        ("NOT (a > 1)", [True, True, None, False]),
        ("a > 1 OR s IS NULL", [False, False, True, True]),
        ("a BETWEEN -7 AND 1", [True, True, None, False]),
        ("s LIKE 'x%'", [True, False, None, False]),
        ("abs(a)", [1, 7, None, 7]),
        ("a <=> NULL", [False, False, True, False]),
        ("if(a > 0, a, NULL)", [1, None, None, 7]),
        ("nullif(a, 1)", [None, -7, None, 7]),
        ("length(concat(s, a))", [2, 3, None, 2]),
    ],
)
def test_values_follow_sql(sql: str, expected: list[Any]) -> None:
    assert _eval(sql) == expected


def test_a_null_condition_does_not_match() -> None:
    sql = "a > 0 AND s <> 'y'"
    assert condition_mask(parse_value(sql), _resolve, 4, text=sql).to_pylist() == [True, False, False, True]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("a +", "expression 'a +' cannot parse: incomplete"),
        ("a + s", "expression 'a + s' cannot be computed"),
        ("frob(a)", "calls function frob(), which txnlog does not compute"),
        ("a IN (SELECT 1)", "unsupported construct: IN with a subquery"),
        ("CAST(s AS INT)", "expression 'CAST(s AS INT)' cannot be computed"),
        ("a * 9223372036854775807", "cannot be computed: overflow"),
    ],
)
def test_errors_name_the_expression(sql: str, message: str) -> None:
    with pytest.raises(InvalidPredicateError, match=re.escape(message)):
        _eval(sql)


def test_qualified_names_keep_their_alias() -> None:
    tree = parse_value("t.amount + s.`odd name` * 2")
    assert sorted(r.path for r in tree.references()) == [("s", "odd name"), ("t", "amount")]


def test_target_columns_read_takes_the_targets_columns_and_never_the_sources() -> None:
    from txnlog.expressions import parse_value
    from txnlog.expressions.values import target_columns_read

    columns = ["id", "Amount", "info", "note"]
    nodes = [parse_value("t.amount + s.amount > 0"), parse_value("info.city = 'x' AND s.note IS NULL")]
    # t.amount (any case) and the struct info are read; s.amount and s.note are the source's.
    assert target_columns_read(nodes, columns) == ["Amount", "info"]
    assert target_columns_read([parse_value("src.id = 1")], columns, source="src") == []
