"""One cell of the conflict matrix in docs/concurrency.md: a loser reads, a winner commits, the
loser commits; the outcome as the matrix writes it.

The table: two files of ten rows (file A: ids 0-9, file B: ids 10-19), unpartitioned, deletion
vectors and row tracking on. The loser works on rows 1 and 2 of file A; the winner on
- "same rows": rows 2 and 3 of A (an OPTIMIZE: file A; an append: a row the loser matches);
- "same file, other rows": rows 5 and 6 of A (an OPTIMIZE: file A; an append: rows it does not);
- "other files": rows 12 and 13 of B (an OPTIMIZE: file B).
A losing OPTIMIZE compacts file A.

The delta-spark column is run too (:func:`delta_spark_column`): the loser's file actions are
the ones txnlog commits for it (committed on a scratch copy of the table and read back), staged
in delta-spark's own OptimisticTransaction with the reads delta-spark's command of that kind
records (DELETE and UPDATE: their condition; MERGE without target-only predicates: every file;
OPTIMIZE: the files it compacts), against the same winning commit
(tests/txn/delta_spark_conflicts.py).

Run as a script, it prints the matrix's rows (``python -m tests.txn.conflict_matrix``).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
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


def _committed_actions(path: Path, read_mark: int) -> list[dict[str, Any]]:
    """The last commit of the table at ``path`` as actions for delta-spark to commit itself:
    without commitInfo and the row id high-water mark, fresh row ids left to assign."""
    log = sorted((path / "_delta_log").glob("*.json"))[-1]
    actions = []
    for line in log.read_bytes().splitlines():
        action = orjson.loads(line)
        if "commitInfo" in action or action.get("domainMetadata", {}).get("domain") == "delta.rowTracking":
            continue
        add = action.get("add")
        if add is not None and add.get("baseRowId", -1) > read_mark:
            add.pop("baseRowId")
            add.pop("defaultRowCommitVersion", None)
        actions.append(action)
    return actions


def _stage_delta(delta: Any, loser: str, copy: Path, actions: list[dict[str, Any]]) -> Any:
    """delta-spark's transaction on ``copy`` with the reads its ``loser`` command records and
    ``actions``; returns its commit."""
    txn = delta.start(str(copy))
    predicate = None
    if loser in ("DELETE", "UPDATE"):
        predicate = delta.condition(str(copy), _in(LOSER_ROWS))
        txn.filterFiles(delta.seq([predicate]), False)
    elif loser == "MERGE":
        txn.filterFiles(delta.seq([]), False)
    elif loser == "OPTIMIZE":
        read = [{"add": {k: r["remove"][k] for k in ("path", "partitionValues", "size")} | {"modificationTime": 0, "dataChange": False}}
                for r in actions if "remove" in r]
        txn.trackFilesRead(delta.seq([delta.action(a) for a in read]))
    operation = delta.operation("UPDATE" if loser in ("DELETE", "UPDATE", "MERGE") else loser, predicate)
    jactions = delta.seq([delta.action(a) for a in actions])
    return lambda: txn.commit(jactions, operation)


def delta_spark_column(root: Path, spark: Any, winner: str, relation: str) -> dict[str, str]:
    """delta-spark's outcome for every loser against one ``winner`` (txnlog's, as in the
    "txnlog now" column): the loser's actions as txnlog commits them, staged in delta-spark's
    OptimisticTransaction with the reads its command records (from a few threads: each loser
    has its own copy of the table)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.txn.delta_spark_conflicts import Delta, delta_outcome, sync

    delta = Delta(spark)
    origin = root / "origin"
    table = Table.create(str(origin), SCHEMA, properties=PROPERTIES)
    for first in (0, 10):
        table.append(pa.table({"id": list(range(first, first + 10)), "v": [0] * 10}, schema=SCHEMA))
    read_mark = int(orjson.loads(table.snapshot().domain_metadata("delta.rowTracking") or "{}").get("rowIdHighWaterMark", -1))
    with ThreadPoolExecutor(4) as pool:
        staged = {}
        for loser in OPERATIONS:
            scratch, copy = root / f"scratch-{loser}", root / f"delta-{loser}"
            shutil.copytree(origin, scratch)
            shutil.copytree(origin, copy)
            begin(Table(str(scratch)), loser, LOSER_ROWS, relation, winner=False).commit()
            sync(scratch, copy, data_only=True)
            staged[loser] = (copy, pool.submit(_stage_delta, delta, loser, copy, _committed_actions(scratch, read_mark)))
        commits = {loser: future.result() for loser, (_, future) in staged.items()}
        begin(table, winner, WINNER_ROWS[relation], relation, winner=True).commit()
        for copy, _ in staged.values():
            sync(origin, copy)
        outcomes = dict(zip(commits, pool.map(delta_outcome, commits.values()), strict=True))
    return {loser: DELTA_NAMES.get(outcome, outcome) for loser, outcome in outcomes.items()}


#: delta-spark's outcomes as the matrix writes them.
DELTA_NAMES = {
    "ok": "commits",
    "Append": "ConcurrentAppendException",
    "DeleteRead": "ConcurrentDeleteReadException",
    "DeleteDelete": "ConcurrentDeleteDeleteException",
    "Metadata": "MetadataChangedException",
    "Protocol": "ProtocolChangedException",
    "Txn": "ConcurrentTransactionException",
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for loser in OPERATIONS:
            for winner in OPERATIONS:
                cells = [outcome(Path(tmp) / f"{loser}-{winner}-{i}", loser, winner, r) for i, r in enumerate(RELATIONS)]
                print(f"| {loser} | {winner} | " + " | ".join(cells) + " |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
