"""Every write mode on a table that records change data, against a model of its row changes.

One sequence of writes, run by any writer (``Table.write``, ``txnlog.spark.write``,
``format("txnlog")``): a first append that creates the table, an append, a replaceWhere on the
partition column, a replaceWhere on another column, an overwrite of every row, a replaceWhere
that matches and writes nothing. After each commit, the version's change feed must equal the rows the model says it
changed: the change data each write mode records is what a downstream consumer sees.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import txnlog

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
Row = tuple[int, str, int]
Change = tuple[int, str, int, str]
#: write(rows, mode, replace_where) -> the committed version (or None)
Writer = Callable[[list[Row], str, "str | None"], Any]


def rows_table(rows: list[Row]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "p": [r[1] for r in rows], "v": [r[2] for r in rows]}, schema=SCHEMA)


def changes_of(table: pa.Table) -> collections.Counter[Change]:
    return collections.Counter((r["id"], r["p"], r["v"], r["_change_type"]) for r in table.to_pylist())


def run(uri: str, write: Writer) -> dict[int, collections.Counter[Change]]:
    """Run the sequence through ``write``; per committed version, the changes the model expects
    (every version's feed is also checked against it as the sequence goes)."""
    live: dict[int, Row] = {}
    expected: dict[int, collections.Counter[Change]] = {}

    def step(rows: list[Row], mode: str, replace_where: str | None, removed: Callable[[Row], bool]) -> None:
        version = write(rows, mode, replace_where)
        gone = [r for r in live.values() if removed(r)] if mode == "overwrite" else []
        changes = collections.Counter([(*r, "delete") for r in gone] + [(*r, "insert") for r in rows])
        if not changes:
            assert version is None, f"{mode} {replace_where} changed nothing yet committed version {version}"
            return
        assert version is not None, f"{mode} {replace_where} committed nothing"
        for r in gone:
            del live[r[0]]
        live.update((r[0], r) for r in rows)
        expected[int(version)] = changes
        got = changes_of(txnlog.Table(uri).changes(int(version), int(version)))
        assert got == changes, f"version {version} ({mode}, replaceWhere {replace_where!r}): the change feed {got} is not the model's {changes}"

    step([(1, "x", 1), (2, "y", 2), (3, "x", 3)], "append", None, lambda r: False)
    step([(4, "y", 4), (5, "x", 5)], "append", None, lambda r: False)
    step([(10, "x", 10)], "overwrite", "p = 'x'", lambda r: r[1] == "x")
    step([(11, "y", 11)], "overwrite", "id IN (4, 11)", lambda r: r[0] in (4, 11))
    step([(20, "x", 20), (21, "y", 21)], "overwrite", None, lambda r: True)
    step([], "overwrite", "id = 99", lambda r: r[0] == 99)  # nothing matches, nothing written: no commit
    return expected


def all_changes(table: pa.Table) -> collections.Counter[tuple[int, str, int, str, int]]:
    return collections.Counter((r["id"], r["p"], r["v"], r["_change_type"], r["_commit_version"]) for r in table.to_pylist())


def expected_all(expected: dict[int, collections.Counter[Change]]) -> collections.Counter[tuple[int, str, int, str, int]]:
    return collections.Counter({(*c, v): n for v, changes in expected.items() for c, n in changes.items()})
