"""Every row of the row-level conflict matrix in docs/concurrency.md, run: the "txnlog now"
column must be what the interleaving gives (tests/txn/conflict_matrix.py sets it up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.txn.conflict_matrix import OPERATIONS, RELATIONS, outcome

DOC = Path(__file__).resolve().parents[2] / "docs" / "concurrency.md"


def matrix_rows() -> list[tuple[str, str, str, str]]:
    text = DOC.read_text()
    section = text.split("### The matrix of operation pairs", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in OPERATIONS:
            rows.append((cells[0], cells[1], cells[2], cells[5]))
    return rows


ROWS = matrix_rows()


def test_the_matrix_covers_every_pair_and_relation() -> None:
    assert {(loser, winner, relation) for loser, winner, relation, _ in ROWS} == {
        (loser, winner, relation) for loser in OPERATIONS for winner in OPERATIONS for relation in RELATIONS
    }


@pytest.mark.parametrize("loser, winner, relation, expected", ROWS, ids=[f"{r[0]}-loses-to-{r[1]}-{r[2]}" for r in ROWS])
def test_each_cell(tmp_path: Path, loser: str, winner: str, relation: str, expected: str) -> None:
    assert outcome(tmp_path / "t", loser, winner, relation) == expected
