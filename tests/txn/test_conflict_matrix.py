"""Every row of the row-level conflict matrix in docs/concurrency.md, run: the "txnlog now"
column must be what the interleaving gives, and the delta-spark column what delta-spark 4.4
decides about the same winning commit (tests/txn/conflict_matrix.py sets both up)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.txn.conflict_matrix import OPERATIONS, RELATIONS, delta_spark_column, outcome

DOC = Path(__file__).resolve().parents[2] / "docs" / "concurrency.md"
FAST = {"spark.databricks.delta.snapshotPartitions": "1", "spark.databricks.delta.writeChecksumFile.enabled": "false"}


def matrix_rows() -> list[tuple[str, str, str, str, str]]:
    """(loser, winner, winner's rows, delta-spark, txnlog now) of each row."""
    text = DOC.read_text()
    section = text.split("### The matrix of operation pairs", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in OPERATIONS:
            rows.append((cells[0], cells[1], cells[2], cells[3], cells[5]))
    return rows


ROWS = matrix_rows()


def test_the_matrix_covers_every_pair_and_relation() -> None:
    assert {(loser, winner, relation) for loser, winner, relation, _, _ in ROWS} == {
        (loser, winner, relation) for loser in OPERATIONS for winner in OPERATIONS for relation in RELATIONS
    }


@pytest.mark.parametrize("loser, winner, relation, expected", [(r[0], r[1], r[2], r[4]) for r in ROWS],
                         ids=[f"{r[0]}-loses-to-{r[1]}-{r[2]}" for r in ROWS])
def test_each_cell(tmp_path: Path, loser: str, winner: str, relation: str, expected: str) -> None:
    assert outcome(tmp_path / "t", loser, winner, relation) == expected


@pytest.fixture
def fast_delta(delta_spark: Any) -> Any:
    saved = {key: delta_spark.conf.get(key, None) for key in FAST}
    for key, value in FAST.items():
        delta_spark.conf.set(key, value)
    yield delta_spark
    for key, value in saved.items():
        if value is None:
            delta_spark.conf.unset(key)
        else:
            delta_spark.conf.set(key, value)


#: The default suite's cells of the delta-spark column; the other nine run under ``soak``.
#: delta-spark decides on files, never rows, so "same rows" and "same file, other rows" give
#: the same outcomes; these cover every winner, every relation, and each kind of outcome.
DEFAULT_DELTA_CELLS = {
    ("DELETE", "same rows"),
    ("DELETE", "other files"),
    ("UPDATE", "same file, other rows"),
    ("MERGE", "other files"),
    ("OPTIMIZE", "same rows"),
    ("append", "same rows"),
}


@pytest.mark.spark
@pytest.mark.parametrize("winner, relation", [
    (w, r) if (w, r) in DEFAULT_DELTA_CELLS else pytest.param(w, r, marks=pytest.mark.soak)
    for w in OPERATIONS for r in RELATIONS
], ids=lambda v: str(v))
def test_the_delta_spark_column(fast_delta: Any, tmp_path: Path, winner: str, relation: str) -> None:
    expected = {loser: delta for loser, w, r, delta, _ in ROWS if (w, r) == (winner, relation)}
    assert delta_spark_column(tmp_path, fast_delta, winner, relation) == expected
