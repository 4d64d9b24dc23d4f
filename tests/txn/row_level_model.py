"""The model of row-level concurrency the model checks share: operations as plain data, how
txnlog runs one inside a transaction, and the serial reference that a committed history must
equal (a Python list of rows, independent of txnlog)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from txnlog import OptimisticTransaction, Table, dml
from txnlog.optimize import OptimizeParameters, stage_optimize

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
PROPERTIES = {
    "delta.enableDeletionVectors": "true",
    "delta.enableRowTracking": "true",
    # Commit order is then the serial order a history must equal.
    "delta.isolationLevel": "Serializable",
}
FILES, ROWS_PER_FILE = 3, 8
KEYS = FILES * ROWS_PER_FILE + 6  # DML and appends pick ids below this: they collide often

Row = tuple[int, int]


@dataclass(frozen=True)
class Op:
    """``kind``: delete | update | merge | append | optimize; ``ids`` the ids it names;
    ``value`` the update's increment, or the value merged or appended."""

    kind: str
    ids: tuple[int, ...] = ()
    value: int = 0


def initial_rows() -> list[Row]:
    return [(i, 0) for i in range(FILES * ROWS_PER_FILE)]


def create(path: Path | str) -> Table:
    table = Table.create(str(path), SCHEMA, properties=PROPERTIES)
    rows = initial_rows()
    for k in range(FILES):
        part = rows[k * ROWS_PER_FILE : (k + 1) * ROWS_PER_FILE]
        table.append(pa.table({"id": [r[0] for r in part], "v": [r[1] for r in part]}, schema=SCHEMA))
    return table


def random_op(rng: random.Random) -> Op:
    kind = rng.choice(["delete", "update", "update", "merge", "append", "optimize", "optimize"])
    if kind == "optimize":
        return Op(kind)
    ids = tuple(sorted(rng.sample(range(KEYS), rng.randint(1, 3))))
    if kind == "append":
        ids = tuple(sorted(rng.sample(range(KEYS, KEYS + 1000), rng.randint(1, 3)))) if rng.random() < 0.5 else ids
    return Op(kind, ids, rng.randint(1, 9))


def _in(ids: Sequence[int]) -> str:
    return f"id in ({', '.join(str(i) for i in ids)})"


def begin(table: Table, op: Op) -> OptimisticTransaction | None:
    """Open a transaction for ``op`` on the latest snapshot and stage its work; None when it
    has nothing to commit (a DML that matched no row)."""
    txn = table.transaction(op.kind.upper())
    if op.kind == "delete":
        changed = dml.delete(txn, _in(op.ids)).changed
    elif op.kind == "update":
        changed = dml.update(txn, _in(op.ids), {"v": f"v + {op.value}"}).changed
    elif op.kind == "merge":
        source = pa.table({"id": list(op.ids), "v": [op.value] * len(op.ids)}, schema=SCHEMA)
        changed = dml.merge(txn, source, "id", when_matched_update="*", when_not_matched_insert="*").changed
    elif op.kind == "append":
        txn.write(pa.table({"id": list(op.ids), "v": [op.value] * len(op.ids)}, schema=SCHEMA))
        changed = True
    else:  # optimize: every live row rewritten with its row id, dataChange=false
        changed = stage_optimize(txn, OptimizeParameters()).changed
    if not changed:
        txn.abort()
        return None
    return txn


def apply(rows: list[Row], op: Op) -> list[Row]:
    """``op`` run alone on ``rows``: the serial reference."""
    ids = set(op.ids)
    if op.kind == "delete":
        return [r for r in rows if r[0] not in ids]
    if op.kind == "update":
        return [(i, v + op.value) if i in ids else (i, v) for i, v in rows]
    if op.kind == "merge":
        present = {i for i, _ in rows}
        return [(i, op.value) if i in ids else (i, v) for i, v in rows] + [(i, op.value) for i in op.ids if i not in present]
    if op.kind == "append":
        return rows + [(i, op.value) for i in op.ids]
    return list(rows)


def serial(committed: Sequence[Op]) -> list[Row]:
    rows = initial_rows()
    for op in committed:
        rows = apply(rows, op)
    return sorted(rows)


def table_rows(table: Table) -> list[Row]:
    return sorted((r["id"], r["v"]) for r in table.snapshot().to_arrow().to_pylist())


def describe(history: Sequence[Any]) -> str:
    return "\n".join(str(h) for h in history)
