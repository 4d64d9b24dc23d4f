"""The public tree: constructors build what the parser builds, NOT is pushed to the leaves under
SQL's three-valued rules, and a built tree answers as the parsed one does."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from txnlog.errors import InvalidArgumentError, InvalidPredicateError, TxnLogError
from txnlog.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    Expression,
    FilePredicate,
    and_,
    bind,
    column,
    conjunction,
    contains,
    ends_with,
    equal,
    equal_null_safe,
    greater_than,
    greater_than_or_equal,
    is_in,
    is_not_null,
    is_null,
    less_than,
    less_than_or_equal,
    like,
    not_,
    not_equal,
    not_in,
    or_,
    parse,
    starts_with,
)

from .helpers import BASIC, SCHEMA, files_table, matching_rows, stats

ROWS = pa.table(
    {
        "region": ["EU", "US", None, "EU", "APAC"],
        "id": pa.array([1, 11, None, 8, 3], pa.int64()),
        "name": ["apple", "kiwi", None, "a_b%", "cherry"],
        "day": pa.array([dt.date(2020, 1, d) for d in (1, 2, 3, 4, 5)]),
        "flag": [True, False, None, True, False],
        "s": pa.array([{"a": 1, "b": "x"}, {"a": 5, "b": None}, None, {"a": None, "b": "y"}, {"a": 2, "b": "z"}],
                      SCHEMA.field("s").type),
    }
)
BUILT: list[tuple[str, Expression]] = [
    ("region = 'EU' AND id > 10", and_(equal("region", "EU"), greater_than("id", 10))),
    ("region = 'US' OR id < 2", or_(equal("region", "US"), less_than("id", 2))),
    ("NOT (region = 'EU' AND id >= 8)", not_(and_(equal("region", "EU"), greater_than_or_equal("id", 8)))),
    ("id <= 5 AND id <> 3", and_(less_than_or_equal("id", 5), not_equal("id", 3))),
    ("id IN (3, 30)", is_in("id", [3, 30])),
    ("region NOT IN ('US', NULL)", not_in("region", ["US", None])),
    ("NOT (id IN (1, NULL))", not_(is_in("id", [1, None]))),
    ("name IS NULL OR s.a IS NOT NULL", or_(is_null("name"), is_not_null(column("s", "a")))),
    ("name LIKE 'k%'", like("name", "k%")),
    ("NOT (name LIKE 'a%')", not_(like("name", "a%"))),
    ("region <=> NULL", equal_null_safe("region", None)),
    ("NOT (id <=> 8)", not_(equal_null_safe("id", 8))),
    ("day > DATE '2020-01-02'", greater_than("day", dt.date(2020, 1, 2))),
    ("S.A > 1", greater_than(column("S", "A"), 1)),
    ("flag", equal("flag", True)),
    ("NOT flag", not_(equal("flag", True))),
    ("TRUE", ALWAYS_TRUE),
    ("NOT TRUE OR FALSE", ALWAYS_FALSE),
    ("id > 2.5", greater_than("id", decimal.Decimal("2.5"))),
]


@pytest.mark.parametrize(("sql", "built"), BUILT, ids=[sql for sql, _ in BUILT])
def test_constructors_build_the_parsers_tree(sql: str, built: Expression) -> None:
    assert parse(sql) == built
    parsed, made = FilePredicate(sql, SCHEMA, ["region"]), FilePredicate(built, SCHEMA, ["region"])
    assert made.bound == parsed.bound
    assert made.may_match(BASIC).to_pylist() == parsed.may_match(BASIC).to_pylist()
    assert matching_rows(made, ROWS) == matching_rows(parsed, ROWS)
    assert made.columns == parsed.columns


def test_string_matching_constructors_escape_the_pattern() -> None:
    # Spark's StringStartsWith / EndsWith / Contains: their text is literal, wildcards included.
    rows = lambda e: matching_rows(FilePredicate(e, SCHEMA, []), ROWS)  # noqa: E731
    assert rows(starts_with("name", "a_")) == [3]
    assert rows(starts_with("name", "a")) == [0, 3]
    assert rows(ends_with("name", "b%")) == [3]
    assert rows(contains("name", "_b%")) == [3]
    assert rows(contains("name", "i")) == [1]
    files = files_table([({}, stats(1, {"name": "pear"}, {"name": "plum"}, {"name": 0})),
                         ({}, stats(1, {"name": "apple"}, {"name": "avocado"}, {"name": 0}))])
    assert FilePredicate(starts_with("name", "ap"), SCHEMA, []).may_match(files).to_pylist() == [False, True]


def test_not_follows_three_valued_logic() -> None:
    # NOT (id = NULL) is NULL, never TRUE; NOT (id NOT IN (1, NULL)) is TRUE where id = 1.
    assert matching_rows(FilePredicate(not_(equal("id", None)), SCHEMA, []), ROWS) == []
    assert matching_rows(FilePredicate(not_(not_in("id", [1, None])), SCHEMA, []), ROWS) == [0]
    # The NULL row holds in neither id > 5 nor its negation.
    over = matching_rows(FilePredicate(greater_than("id", 5), SCHEMA, []), ROWS)
    under = matching_rows(FilePredicate(not_(greater_than("id", 5)), SCHEMA, []), ROWS)
    assert sorted(over + under) == [0, 1, 3, 4]
    assert not_(not_(and_(equal("id", 1), like("name", "a%")))) == and_(equal("id", 1), like("name", "a%"))


def test_conjunction_of_pushed_filters() -> None:
    filters = [equal("region", "EU"), greater_than("id", 5), ALWAYS_TRUE]
    assert conjunction(filters) == and_(equal("region", "EU"), greater_than("id", 5))
    assert conjunction([]) == ALWAYS_TRUE
    assert conjunction([equal("id", 1)]) == equal("id", 1)
    assert conjunction([equal("id", 1), ALWAYS_FALSE]) == ALWAYS_FALSE
    p = FilePredicate(conjunction(filters), SCHEMA, ["region"])
    assert p.filter(BASIC).column("path").to_pylist() == ["f2"]
    assert p.sql == "region = 'EU' AND id > 5"


def test_names_with_dots_and_nested_paths() -> None:
    schema = pa.schema([("a.b", pa.int64()), ("a", pa.struct([("b", pa.string())]))])
    data = pa.table({"a.b": [1, 2], "a": [{"b": "x"}, {"b": "y"}]}, schema=schema)
    top, nested = equal(column("a.b"), 2), equal(column("a", "b"), "x")
    assert parse("`a.b` = 2") == top and parse("a.b = 'x'") == nested
    assert str(top) == "`a.b` = 2"
    assert matching_rows(FilePredicate(top, schema, []), data) == [1]
    assert matching_rows(FilePredicate(nested, schema, []), data) == [0]


def test_binding_errors_name_the_built_expression() -> None:
    with pytest.raises(InvalidPredicateError, match="unknown column 'nope'") as info:
        bind(and_(equal("nope", 1), equal("id", 2)), SCHEMA)
    assert info.value.predicate == "nope = 1 AND id = 2"
    with pytest.raises(InvalidPredicateError, match="'id'"):
        FilePredicate(equal("id", "abc"), SCHEMA, [])
    with pytest.raises(InvalidPredicateError, match="non-string column 'id'"):
        FilePredicate(like("id", "1%"), SCHEMA, [])
    with pytest.raises(InvalidPredicateError, match="an empty IN list"):
        FilePredicate(is_in("id", []), SCHEMA, [])


def test_constructors_refuse_bad_arguments_with_txnlog_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        column()
    with pytest.raises(InvalidArgumentError):
        column("s", "")
    with pytest.raises(TxnLogError):
        equal("id", object())
    with pytest.raises(TxnLogError):
        and_(equal("id", 1), "id = 2")  # type: ignore[arg-type]
    with pytest.raises(TxnLogError):
        equal("id", 10**80)
