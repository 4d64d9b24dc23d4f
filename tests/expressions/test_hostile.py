"""Hostile and malformed predicates get a clear ``InvalidPredicateError`` or a correct answer:
never an exception from the parser library, never a ``RecursionError``.

A hypothesis test feeds the predicate parser random token soups and random text; any exception
that is not a ``TxnLogError`` fails it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnlog import Table
from txnlog.errors import InvalidPredicateError, TxnLogError

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64()), ("day", pa.date32())])


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path: Path = tmp_path_factory.mktemp("hostile") / "t"
    table = Table.create(path, SCHEMA, partition_by=["region"])
    for start in range(0, 40, 10):
        ids = list(range(start, start + 10))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "region": ["EU" if i % 2 else "US" for i in ids],
                    "amount": [i * 1.5 for i in ids],
                    "day": pa.array([i for i in ids], pa.int32()).cast(pa.date32()),
                },
                schema=SCHEMA,
            )
        )
    return table.snapshot()


@pytest.mark.parametrize(
    ("predicate", "says"),
    [
        ("id >", "cannot parse"),
        ("", "empty|No expression"),
        ("nope = 1", "unknown column 'nope'"),
        ("region = 'EU' AND missing > 3", "unknown column 'missing'"),
        ("id = 'abc'", "id"),
        ("day > 'not a date'", "day"),
        ("1=1; DELETE FROM t", "unsupported construct"),
        ("id = 1; DROP TABLE t", "unsupported construct"),
        ("id IN (SELECT id FROM other)", "unsupported construct"),
        ("amount", "amount"),
        ("((((id > 1)", "cannot parse"),
        ("id > 1))", "cannot parse"),
    ],
)
def test_bad_predicates_get_a_clear_error(snapshot, predicate: str, says: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidPredicateError, match=says) as info:
        snapshot.files(predicate)
    assert info.value.predicate == predicate
    assert predicate[:20] in str(info.value)


@pytest.mark.parametrize("depth", [20, 50, 1_000, 5_000])
def test_deeply_nested_parentheses(snapshot, depth: int) -> None:  # type: ignore[no-untyped-def]
    predicate = "(" * depth + "id > 35" + ")" * depth
    if depth <= 20:
        assert snapshot.files(predicate).num_rows == 2
        return
    try:
        files = snapshot.files(predicate)
    except InvalidPredicateError as e:
        assert "nest" in str(e) or "too" in str(e), e  # a clear refusal says why
        return
    assert files.num_rows == 2  # or the right answer: the last append's two files have id > 35


@pytest.mark.parametrize("terms", [1_000, 20_000])
def test_tens_of_thousands_of_terms(snapshot, terms: int) -> None:  # type: ignore[no-untyped-def]
    conjunction = " AND ".join(["id >= 0"] * (terms - 1) + ["id > 35"])
    disjunction = " OR ".join([f"id = {1000 + i}" for i in range(terms - 1)] + ["id = 3"])
    # id > 35: the last append's EU and US files; id = 3: the first append's files (EU holds it,
    # and the US file's range, 0 to 8, cannot rule it out).
    for predicate, expected in ((conjunction, 2), (disjunction, 2)):
        try:
            files = snapshot.files(predicate)
        except InvalidPredicateError as e:
            assert "too" in str(e), e
            continue
        assert files.num_rows == expected


def test_deep_not_chain(snapshot) -> None:  # type: ignore[no-untyped-def]
    predicate = "NOT " * 4_001 + "id > 35"  # odd count: NOT (id > 35)
    try:
        files = snapshot.files(predicate)
    except InvalidPredicateError as e:
        assert "too" in str(e) or "nest" in str(e), e
        return
    assert files.num_rows == 4  # every file holds some id <= 35


TOKENS = [
    "id", "region", "amount", "day", "nope", "s.a", "`id`", "`we``ird`",
    "1", "-1", "0.5", "1e309", "'EU'", "'it''s'", "''", "DATE '2024-01-01'", "TIMESTAMP 'x'", "NULL", "TRUE",
    "=", "==", "<>", "!=", "<", "<=", ">", ">=", "<=>", "+", "-", "*", "/", "%",
    "AND", "OR", "NOT", "IN", "IS", "BETWEEN", "LIKE", "ILIKE", "ESCAPE", "CAST", "AS", "INT", "SELECT", "FROM",
    "(", ")", ",", ";", "'", '"', "`", "\\", "\x00", "é", "\U0001f600",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join), st.text(max_size=60)))
def test_fuzzed_predicates_raise_only_txnlog_errors(snapshot, predicate: str) -> None:  # type: ignore[no-untyped-def]
    try:
        files = snapshot.files(predicate)
    except TxnLogError as e:
        assert "sqlglot" not in str(e) and "<class" not in str(e), e  # the parser's internals stay inside
        return
    assert files.num_rows <= snapshot.num_files


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["id", "amount"]),
            st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
            st.integers(min_value=-5, max_value=45),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["AND", "OR"]),
)
def test_pruning_never_drops_a_matching_file(snapshot, terms, junction) -> None:  # type: ignore[no-untyped-def]
    """Where the parser answers, it is right: every file holding a matching row is kept."""
    predicate = f" {junction} ".join(f"{c} {op} {v}" for c, op, v in terms)
    kept = set(snapshot.files(predicate).column("path").to_pylist())
    from txnlog.expressions import FilePredicate

    row_filter = FilePredicate(predicate, snapshot.schema, snapshot.partition_columns).row_filter()
    import pyarrow.dataset as ds

    for path, uri in zip(snapshot.files().column("path").to_pylist(), snapshot.file_uris()):
        rows = ds.dataset(uri.removeprefix("file://"), format="parquet").to_table()
        if pc.any(rows.filter(row_filter).column("id").is_valid()).as_py():
            assert path in kept, (predicate, path)
