"""The row visitor: an Arrow expression true exactly on the rows where the predicate is TRUE."""

from __future__ import annotations

import pyarrow as pa

from txnlog.expressions import FilePredicate

from .helpers import matching_rows


def test_row_filter_follows_sql_null_semantics() -> None:
    data = pa.table({"region": ["EU", None, "US", None], "id": pa.array([1, 2, None, None], pa.int64())})
    schema = data.schema
    cases = {
        "region = 'EU' OR id = 2": [0, 1],  # TRUE OR NULL is TRUE
        "region = 'EU' AND id = 1": [0],
        "NOT (region = 'EU')": [2],
        "region <> 'EU' OR id > 0": [0, 1, 2],
        "NOT (region = 'EU' AND id = 1)": [1, 2],  # row 1: NULL AND FALSE is FALSE; row 3: NULL
        "region IS NULL AND id IS NULL": [3],
        "id NOT IN (1)": [1],
        "region NOT LIKE 'E%'": [2],
        "region = region": [0, 2],  # column against column
        "region <> region": [],
    }
    for sql, rows in cases.items():
        p = FilePredicate(sql, schema, [])
        assert matching_rows(p, data) == rows, sql
        # Never NULL, so its negation selects exactly the rows a DELETE keeps.
        assert data.filter(~p.row_filter()).num_rows == 4 - len(rows), sql

