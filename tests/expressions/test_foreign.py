"""pyarrow expressions and DNF tuples translated into the tree: the tree selects exactly the rows
pyarrow's expression selects (nulls, ``~isin``, NULL literals included), checked against
pyarrow's own evaluation on random expressions; what txnlog cannot compute is refused by name,
or widened to "may match" for file skipping."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txnlog.errors import InvalidPredicateError
from txnlog.expressions import FilePredicate, approximate_arrow, arrow_columns, from_arrow, from_dnf

ROWS = pa.table({
    "i": pa.array([1, 2, None, 4, -3, 0], pa.int32()),
    "f": [1.5, None, 2.0, -1.0, 0.0, 3.25],
    "s": ["a", "ab", None, "abc", "B", ""],
    "b": [True, False, None, True, False, None],
    "d": pa.array([dt.date(2024, 1, d) for d in (1, 2, 3, 4, 5, 6)]),
    "t": pa.array([dt.datetime(2024, 1, 1, 0, 0, s) for s in range(6)], pa.timestamp("us", "UTC")),
    "st": pa.array([{"x": 1}, {"x": None}, None, {"x": 4}, {"x": 5}, {"x": 6}], pa.struct([("x", pa.int64())])),
})


def selected(tree: Any) -> list[int]:
    mask = FilePredicate(tree, ROWS.schema, []).rows().mask(ROWS)
    return [i for i, keep in enumerate(mask.to_pylist()) if keep]


def pyarrow_selects(expression: pc.Expression) -> list[int]:
    indexed = ROWS.append_column("__row", pa.array(range(ROWS.num_rows)))
    return indexed.filter(expression).column("__row").to_pylist()


@pytest.mark.parametrize(
    "expression",
    [
        pc.field("i") > 1,
        pc.field("i") == pa.scalar(None, pa.int32()),
        ~(pc.field("i") == pa.scalar(None, pa.int32())),
        pc.field("i").isin([1, 4]),
        ~pc.field("i").isin([1, 4]),  # pyarrow's is_in is never null: the null row is selected
        pc.field("s").isin(["a", None]),
        ~pc.field("s").isin(["a", None]),
        pc.is_in(pc.field("i"), value_set=pa.array([1, None], pa.int32()), skip_nulls=True),
        ~pc.is_in(pc.field("i"), value_set=pa.array([1, None], pa.int32()), skip_nulls=True),
        pc.field("s").is_null() | pc.field("i").is_valid(),
        ~(pc.field("b") & (pc.field("i") < 3)),
        pc.field("b"),
        ~pc.field("b"),
        pc.starts_with(pc.field("s"), "ab") | pc.ends_with(pc.field("s"), "c"),
        ~pc.match_substring(pc.field("s"), "b", ignore_case=True),
        pc.match_like(pc.field("s"), "a_%"),
        pc.field("d") >= pa.scalar(dt.date(2024, 1, 3)),
        pc.field("t") < pa.scalar(dt.datetime(2024, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc), pa.timestamp("us", "UTC")),
        pc.field("st", "x") > 4,
        pc.field("i") < pc.field("f"),
        (pc.field("i") + 1) * 2 > 3,
        ~((pc.field("i") - pc.field("f")) < 0),
        pc.field("i").cast(pa.float64()) > 1.5,
        pc.utf8_upper(pc.field("s")) == "AB",
        pc.abs(pc.field("i")) >= 3,
        pc.coalesce(pc.field("i"), pc.scalar(9).cast(pa.int32())) > 3,
        pc.scalar(True),
        pc.scalar(False) | (pc.field("i") == 2),
        pc.and_not_kleene(pc.field("b"), pc.field("i") > 3),
    ],
    ids=str,
)
def test_the_tree_selects_the_rows_pyarrow_selects(expression: pc.Expression) -> None:
    assert selected(from_arrow(expression)) == pyarrow_selects(expression)


LEAVES = st.sampled_from([
    pc.field("i") > 0, pc.field("i") <= 2, pc.field("i") == 4, pc.field("i").isin([0, 1]), pc.field("f") != 2.0,
    pc.field("s") == "ab", pc.field("s") < "b", pc.field("s").isin(["", None]), pc.field("s").is_null(), pc.field("b"),
    pc.field("i").is_valid(), pc.field("d") > pa.scalar(dt.date(2024, 1, 2)), pc.field("i") < pc.field("f"),
    pc.field("i") == pa.scalar(None, pa.int32()), pc.starts_with(pc.field("s"), "a"),
])
EXPRESSIONS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] & ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] | ab[1]),
        inner.map(lambda a: ~a),
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(EXPRESSIONS)
def test_random_expressions_select_what_pyarrow_selects(expression: pc.Expression) -> None:
    assert selected(from_arrow(expression)) == pyarrow_selects(expression)


@settings(max_examples=100, deadline=None)
@given(EXPRESSIONS)
def test_the_approximation_selects_at_least_those_rows(expression: pc.Expression) -> None:
    widened = pc.utf8_reverse(pc.field("s")) == "ba"  # no translation: may match anything
    for whole in (expression | widened, expression & ~widened, ~(expression & widened)):
        assert set(pyarrow_selects(whole)) <= set(selected(approximate_arrow(whole)))


def test_what_txnlog_does_not_compute_is_refused_by_name() -> None:
    with pytest.raises(InvalidPredicateError, match=r"utf8_reverse\(\), which txnlog does not compute"):
        from_arrow(pc.utf8_reverse(pc.field("s")) == "ba")
    with pytest.raises(InvalidPredicateError, match="& and |"):
        from_arrow(pc.and_(pc.field("b"), pc.field("i") > 1))
    with pytest.raises(InvalidPredicateError, match="unknown column 'nope'"):
        FilePredicate(from_arrow(pc.field("nope") > 1), ROWS.schema, [])


def test_columns_read() -> None:
    assert arrow_columns((pc.field("i") > 1) & (pc.field("st", "x") < pc.field("i")) | pc.field("s").is_null()) == ["i", "st", "s"]


@pytest.mark.parametrize(
    "filters",
    [
        [("i", ">", 1)],
        [("i", "not in", [1, 4])],
        [("s", "in", ["a", "abc"]), ("i", "!=", 4)],
        [[("i", "<", 1)], [("s", "==", "B")]],
        [("d", ">=", dt.date(2024, 1, 4))],
        [("i", "=", "4")],  # a value as text, as partition filters give it, is cast to the column
    ],
    ids=str,
)
def test_dnf_tuples_select_what_pyarrow_filters_to_expression_selects(filters: list[Any]) -> None:
    expected = pyarrow_selects(pq.filters_to_expression([("i", "=", 4)] if filters == [("i", "=", "4")] else filters))
    assert selected(from_dnf(filters)) == expected


def test_bad_dnf_is_an_invalid_predicate() -> None:
    with pytest.raises(InvalidPredicateError, match="DNF"):
        from_dnf([("i", "~", 1)])
