"""One cell of the conflict matrix in docs/concurrency.md: a loser reads, a winner commits, the
loser commits; the outcome as the matrix writes it.

The table: two files of ten rows (file A: ids 0-9, file B: ids 10-19), unpartitioned, deletion
vectors and row tracking on. The loser works on rows 1 and 2 of file A; the winner on
- "same rows": rows 2 and 3 of A (an OPTIMIZE: file A; an append: a row the loser matches);
- "same file, other rows": rows 5 and 6 of A (an OPTIMIZE: file A; an append: rows it does not);
- "other files": rows 12 and 13 of B (an OPTIMIZE: file B).
A losing OPTIMIZE compacts file A.

Run as a script, it prints the matrix's rows (``python -m tests.txn.conflict_matrix``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow as pa

from txnlog import OptimisticTransaction, Table, dml
from txnlog.errors import CommitConflictError
from txnlog.optimize import OptimizeParameters, stage_optimize

OPERATIONS = ["DELETE", "UPDATE", "MERGE", "OPTIMIZE", "append"]
RELATIONS = ["same rows", "same file, other rows", "other files"]
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
PROPERTIES = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
LOSER_ROWS = (1, 2)
WINNER_ROWS = {"same rows": (2, 3), "same file, other rows": (5, 6), "other files": (12, 13)}


def _in(ids: tuple[int, ...]) -> str:
    return f"id in ({', '.join(map(str, ids))})"


def begin(table: Table, operation: str, ids: tuple[int, ...], relation: str, *, winner: bool) -> OptimisticTransaction:
    txn = table.transaction("WRITE" if operation == "append" else operation)
    if operation == "DELETE":
        dml.delete(txn, _in(ids))
    elif operation == "UPDATE":
        dml.update(txn, _in(ids), {"v": "v + 1"})
    elif operation == "MERGE":
        dml.merge(txn, pa.table({"id": list(ids), "v": [7] * len(ids)}, schema=SCHEMA), "id", when_matched_update="*")
    elif operation == "OPTIMIZE":
        chosen = txn.snapshot.files("id >= 10" if winner and relation == "other files" else "id < 10")
        stage_optimize(txn, OptimizeParameters(min_files=1), files=chosen)
    else:  # a blind append: of a row the other side's rows name, or of new ids
        new = (ids[0],) if relation == "same rows" else (100, 101)
        txn.write(pa.table({"id": list(new), "v": [0] * len(new)}, schema=SCHEMA))
    return txn


def outcome(path: Path, loser: str, winner: str, relation: str) -> str:
    table = Table.create(str(path), SCHEMA, properties=PROPERTIES)
    for first in (0, 10):
        table.append(pa.table({"id": list(range(first, first + 10)), "v": [0] * 10}, schema=SCHEMA))
    losing = begin(table, loser, LOSER_ROWS, relation, winner=False)
    begin(table, winner, WINNER_ROWS[relation], relation, winner=True).commit()
    try:
        result = losing.commit()
    except CommitConflictError as e:
        return type(e).__name__
    steps = getattr(result, "rebased", ())
    kinds = sorted({step.kind for step in steps})
    return "commits" + (f" (rebased: {', '.join(kinds)})" if kinds else "")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for loser in OPERATIONS:
            for winner in OPERATIONS:
                cells = [outcome(Path(tmp) / f"{loser}-{winner}-{i}", loser, winner, r) for i, r in enumerate(RELATIONS)]
                print(f"| {loser} | {winner} | " + " | ".join(cells) + " |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
