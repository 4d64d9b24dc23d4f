"""txnlog and delta-spark writing one table at the same time: the operations both run, and the
checks a mixed history must pass.

The operations are the row-level model's (tests/txn/row_level_model.py: DELETE, UPDATE, MERGE,
appends and OPTIMIZE over a small key space, so they collide), plus table changes: a property
set (a metadata change) and a feature enabled (protocol and metadata). txnlog runs them with
its transactions; delta-spark with its SQL, each statement tagged with
``commitInfo.userMetadata`` (a per-thread session setting) so that its version is found in the
log afterwards. Whatever committed, in commit order, run alone on the model must give the
table; each commit's change rows must be its change on the model; row ids stay unique.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from tests.txn import row_level_model as model
from txnlog import Table, dml
from txnlog.errors import CommitConflictError
from txnlog.log.filenames import commit_path

PROPERTIES = {**model.PROPERTIES, "delta.enableChangeDataFeed": "true"}
TABLE_CHANGES = ("property", "feature")
_FEATURES = ["delta.enableInCommitTimestamps", "delta.checkpointPolicy"]


def create(path: Path) -> Table:
    table = Table.create(str(path), model.SCHEMA, properties=PROPERTIES)
    rows = model.initial_rows()
    for k in range(model.FILES):
        part = rows[k * model.ROWS_PER_FILE : (k + 1) * model.ROWS_PER_FILE]
        table.append(pa.table({"id": [r[0] for r in part], "v": [r[1] for r in part]}, schema=model.SCHEMA))
    return table


def random_op(rng: random.Random) -> model.Op:
    if rng.random() < 0.08:
        return model.Op(rng.choice(TABLE_CHANGES), value=rng.randint(1, 9))
    return model.random_op(rng)


def _feature(op: model.Op) -> tuple[str, str]:
    key = _FEATURES[op.value % len(_FEATURES)]
    return key, "v2" if key == "delta.checkpointPolicy" else "true"


# -- running one operation ------------------------------------------------------------------------


def run_txnlog(table: Table, op: model.Op) -> int | None:
    """``op`` as a txnlog transaction: the committed version, or None (nothing to commit).
    A conflict raises CommitConflictError."""
    if op.kind in TABLE_CHANGES:
        with table.transaction("SET TBLPROPERTIES") as txn:
            conf = dict(txn.metadata.configuration)
            if op.kind == "property":
                conf["delta.logRetentionDuration"] = f"interval {30 + op.value} days"
            else:
                key, value = _feature(op)
                conf[key] = value
            txn.update_metadata(configuration=conf)
        return txn.result.version if txn.result is not None else None
    txn = model.begin(table, op)
    if txn is None:
        return None
    return txn.commit().version


def _values(ids: Sequence[int], value: int) -> str:
    return ", ".join(f"({i}, {value})" for i in ids)


def delta_sql(path: Path, op: model.Op) -> str:
    t = f"delta.`{path}`"
    ids = ", ".join(str(i) for i in op.ids)
    if op.kind == "delete":
        return f"DELETE FROM {t} WHERE id IN ({ids})"
    if op.kind == "update":
        return f"UPDATE {t} SET v = v + {op.value} WHERE id IN ({ids})"
    if op.kind == "merge":
        return (f"MERGE INTO {t} AS t USING (SELECT * FROM VALUES {_values(op.ids, op.value)} AS s(id, v)) AS s "
                "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)")
    if op.kind == "append":
        return f"INSERT INTO {t} VALUES {_values(op.ids, op.value)}"
    if op.kind == "optimize":
        return f"OPTIMIZE {t}"
    if op.kind == "property":
        return f"ALTER TABLE {t} SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval {30 + op.value} days')"
    key, value = _feature(op)
    return f"ALTER TABLE {t} SET TBLPROPERTIES ('{key}' = '{value}')"


#: delta-spark's listing of ``_delta_log`` on a local filesystem is a directory read, not a
#: snapshot: one that races another process's commit can miss it and see a gap, and delta-spark
#: then fails the statement (before or after its own commit). txnlog reads a missing version
#: directly. The log says whether such a statement committed.
LISTING_GAP = "DELTA_VERSIONS_NOT_CONTIGUOUS"


def is_delta_conflict(error: BaseException) -> bool:
    """A delta-spark commit conflict (io.delta.exceptions.*, a ConcurrentModificationException),
    as PySpark raises it."""
    text = f"{type(error).__name__}: {error}"
    return any(name in text for name in (
        "ConcurrentAppend", "ConcurrentDeleteRead", "ConcurrentDeleteDelete", "MetadataChanged", "ProtocolChanged",
        "ConcurrentTransaction", "DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED",
    ))


# -- a mixed history ------------------------------------------------------------------------------


@dataclass
class History:
    """What each writer did: committed (version, op) by txnlog, tagged ops by delta-spark, and
    the conflicts each side met."""

    txnlog: list[tuple[int, model.Op]] = field(default_factory=list)
    delta: dict[str, model.Op] = field(default_factory=dict)  # every statement, by its tag
    conflicts: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def committed(self, table: Table, start: int) -> list[tuple[int, model.Op]]:
        """Every commit after ``start`` with its operation, in commit order; a delta-spark
        commit is found by its userMetadata tag. Every version must be accounted for."""
        by_version = dict(self.txnlog)
        seen: set[str] = set()
        for version in range(start + 1, table.latest_version() + 1):
            info = orjson.loads(table.store.read(commit_path(version)).split(b"\n", 1)[0]).get("commitInfo", {})
            tag = info.get("userMetadata")
            if tag in self.delta:
                op = self.delta[tag]
                assert tag not in seen or op.kind in ("optimize", *TABLE_CHANGES), f"{tag} ({op}) committed twice"
                seen.add(tag)
                by_version[version] = op
            elif info.get("operation") in ("ROW TRACKING BACKFILL", "UPGRADE PROTOCOL") or version in by_version:
                by_version.setdefault(version, model.Op("optimize"))  # no row changes
            else:
                raise AssertionError(f"version {version} ({info.get('operation')}, tag {tag}) is no operation of this run")
        return sorted(by_version.items())


def txnlog_writer(path: Path, ops: Sequence[model.Op], history: History) -> None:
    table = Table(str(path))
    for op in ops:
        try:
            version = run_txnlog(table, op)
        except CommitConflictError as e:
            with history.lock:
                history.conflicts[f"txnlog:{type(e).__name__}"] += 1
            continue
        if version is not None:
            with history.lock:
                history.txnlog.append((version, op))


def delta_writer(spark: Any, path: Path, ops: Sequence[model.Op], history: History, name: str) -> None:
    session = spark.newSession()  # its own SQL settings: the userMetadata tag is per statement
    for k, op in enumerate(ops):
        tag = f"{name}-{k}"
        with history.lock:
            history.delta[tag] = op  # whether it committed, the log says
        session.conf.set("spark.databricks.delta.commitInfo.userMetadata", tag)
        try:
            session.sql(delta_sql(path, op)).collect()
        except Exception as e:  # noqa: BLE001 (PySpark raises its own classes)
            with history.lock:
                if is_delta_conflict(e):
                    history.conflicts[f"delta:{str(e).split(']')[0].strip('[')}"] += 1
                elif LISTING_GAP in str(e):
                    history.conflicts["delta:listing gap"] += 1
                else:
                    history.errors.append(f"{tag} {op}: {e}"[:2000])


def run_threads(targets: Sequence[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- checks ---------------------------------------------------------------------------------------


def expected_changes(before: list[model.Row], op: model.Op) -> Counter[tuple[str, int, int]]:
    """The change rows of ``op`` run on ``before``: (change type, id, v)."""
    ids = set(op.ids)
    out: Counter[tuple[str, int, int]] = Counter()
    if op.kind == "delete":
        out.update(("delete", i, v) for i, v in before if i in ids)
    elif op.kind == "update":
        for i, v in before:
            if i in ids:
                out.update([("update_preimage", i, v), ("update_postimage", i, v + op.value)])
    elif op.kind == "merge":
        present = {i for i, _ in before}
        for i, v in before:
            if i in ids:
                out.update([("update_preimage", i, v), ("update_postimage", i, op.value)])
        out.update(("insert", i, op.value) for i in op.ids if i not in present)
    elif op.kind == "append":
        out.update(("insert", i, op.value) for i in op.ids)
    return out


def check_history(table: Table, committed: Sequence[tuple[int, model.Op]]) -> None:
    """The table equals the serial run of ``committed`` on the model, and each version's change
    rows are its operation's change on the model."""
    rows = model.initial_rows()
    for version, op in committed:
        changes = table.changes(version, version, columns=["id", "v"]).to_pylist()
        got = Counter((c["_change_type"], c["id"], c["v"]) for c in changes)
        want = expected_changes(rows, op)
        assert got == want, f"version {version} ({op}): change rows {sorted(got.elements())}, expected {sorted(want.elements())}"
        rows = model.apply(rows, op)
    assert model.table_rows(table) == sorted(rows), f"committed {list(committed)}"


def check_row_ids(spark: Any, path: Path) -> None:
    """Row ids are unique, read by delta-spark."""
    ids = [r[0] for r in spark.read.format("delta").load(str(path)).select("_metadata.row_id").collect()]
    assert None not in ids and len(ids) == len(set(ids)), sorted(ids)


def add_ids(count: int, start: int) -> Callable[[], pa.Table]:
    return lambda: pa.table({"id": list(range(start, start + count)), "v": [0] * count}, schema=model.SCHEMA)


__all__ = ["History", "check_history", "check_row_ids", "create", "delta_writer", "dml", "random_op", "txnlog_writer"]
