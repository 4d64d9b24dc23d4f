"""Serializability of committed histories, and the seeds' employee scenario.

The stateful test opens transactions on the latest snapshot, lets them stage copy-on-write
changes, and commits them in random interleavings. Under Serializable isolation:

- every commit that lands must have the effect the same operation has when run serially, in
  commit order, against a model of the table (so no commit acted on stale reads); a commit that
  changes no data (a DELETE or UPDATE that found no file) is ordered at the version it read, as
  delta-spark orders it (it downgrades such a commit to SnapshotIsolation), so it leaves the
  table as it finds it;
- every rejected commit must have had a real conflict: a winner removed a file it read or
  removes, or added a row that its read predicate matches.
"""

from __future__ import annotations

import itertools
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from txnlog import Table
from txnlog.errors import CommitConflictError, ConcurrentAppendError, ConcurrentDeleteReadError
from txnlog.log.file_actions import file_keys
from txnlog.storage import TableLocation
from txnlog.txn.isolation import IsolationLevel

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.int64()), ("value", pa.int64())])


def read_rows(table: Table | TableLocation, files: pa.Table, schema: pa.Schema) -> pa.Table:
    """The rows of ``files`` (partition columns restored from partition values)."""
    fs, root = table.store.arrow_filesystem()
    pieces = []
    for row in files.select(["path", "partition_values"]).to_pylist(maps_as_pydicts="lossy"):
        data = pq.read_table(f"{root}/{_unescape(row['path'])}", filesystem=fs)
        for name, value in (row["partition_values"] or {}).items():
            typ = schema.field(name).type
            data = data.append_column(name, pa.array([value] * data.num_rows, pa.string()).cast(typ))
        pieces.append(data.select(schema.names).cast(schema))
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def _unescape(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def copy_on_write(txn, predicate: str, change) -> pa.Table:
    """UPDATE/DELETE by rewriting the files ``predicate`` finds: returns the files read."""
    files = txn.filter_files(predicate)
    rows = read_rows(txn.location, files, txn.metadata.schema)
    txn.remove_files(files)
    new_rows = change(rows, txn.snapshot.predicate(predicate).row_filter())
    if new_rows.num_rows:
        txn.write(new_rows)
    return files


# --- the seeds' scenario ------------------------------------------------------------------------

EMPLOYEE = pa.schema([("id", pa.int64()), ("name", pa.string()), ("department", pa.string()), ("salary", pa.float64())])


def _update(rows: pa.Table, where, column: str, value_fn) -> pa.Table:
    import pyarrow.dataset as ds

    mask = ds.dataset(rows).to_table(columns={"m": where}).column("m")
    mask = pc.fill_null(mask, False)
    new_col = pc.if_else(mask, value_fn(rows), rows.column(column))
    return rows.set_column(rows.schema.get_field_index(column), column, new_col)


@pytest.mark.parametrize("level", list(IsolationLevel))
def test_seed_employee_scenario(tmp_path, level):
    """tx2 read Alice and Bob as Sales; tx1 moved Bob to Marketing first: tx2 must fail."""
    t = Table.create(tmp_path / "employee", EMPLOYEE)
    t.append(
        pa.table(
            {
                "id": [1, 2, 3],
                "name": ["Alice", "Bob", "Carol"],
                "department": ["Sales", "Sales", "Engineering"],
                "salary": [100.0, 100.0, 100.0],
            },
            schema=EMPLOYEE,
        )
    )
    assert t.snapshot().num_files == 1  # every row in one file, as in the seeds

    tx2 = t.transaction("UPDATE", level)
    copy_on_write(tx2, "department = 'Sales'", lambda rows, where: _update(rows, where, "salary", lambda r: pc.multiply(r["salary"], 1.1)))

    with t.transaction("UPDATE", level) as tx1:
        copy_on_write(tx1, "id = 2", lambda rows, where: _update(rows, where, "department", lambda r: pa.array(["Marketing"] * r.num_rows)))

    # Delta's order checks appends first: tx1's rewritten file still holds a Sales row (Alice),
    # which tx2's predicate matches. Under SnapshotIsolation appends do not count, and the
    # delete of the file tx2 read is what fails it.
    expected = ConcurrentDeleteReadError if level is IsolationLevel.SNAPSHOT_ISOLATION else ConcurrentAppendError
    with pytest.raises(expected) as err:
        tx2.commit()
    assert err.value.winning_version == tx1.result
    assert err.value.winning_operation == "UPDATE"
    assert err.value.conflicting_file is not None

    # Re-running tx2 on the new state means something else: only Alice gets the raise.
    with t.transaction("UPDATE", level) as retry:
        copy_on_write(retry, "department = 'Sales'", lambda rows, where: _update(rows, where, "salary", lambda r: pc.multiply(r["salary"], 1.1)))
    final = read_rows(t, t.snapshot().files(), EMPLOYEE).sort_by("id").to_pylist()
    assert [(r["name"], r["department"], round(r["salary"], 2)) for r in final] == [
        ("Alice", "Sales", 110.0),
        ("Bob", "Marketing", 100.0),
        ("Carol", "Engineering", 100.0),
    ]


def test_a_delete_that_found_nothing_is_ordered_before_a_concurrent_append(tmp_path):
    """Hypothesis's example: under Serializable, a DELETE whose predicate found no file changes
    no data, so it commits after a concurrent append of a matching row (delta-spark downgrades it
    to SnapshotIsolation: it is ordered at the version it read) and the row stays. A DELETE that
    found a file still conflicts with that append."""
    t = Table.create(str(tmp_path / "t"), SCHEMA, partition_by=["part"])
    keep = lambda rows, where: rows.filter(pc.invert(pc.fill_null(_mask(rows, where), False)))  # noqa: E731
    empty_delete = t.transaction("DELETE", IsolationLevel.SERIALIZABLE)
    assert copy_on_write(empty_delete, "part = 0 AND value < 1", keep).num_rows == 0
    t.append(pa.table({"id": [1], "part": [0], "value": [0]}, schema=SCHEMA))
    assert empty_delete.commit() == 2
    assert read_rows(t, t.snapshot().files(), SCHEMA).to_pylist() == [{"id": 1, "part": 0, "value": 0}]

    delete = t.transaction("DELETE", IsolationLevel.SERIALIZABLE)
    assert copy_on_write(delete, "part = 0 AND value < 1", keep).num_rows == 1
    t.append(pa.table({"id": [2], "part": [0], "value": [0]}, schema=SCHEMA))
    with pytest.raises(ConcurrentAppendError):
        delete.commit()


# --- random interleavings ---------------------------------------------------------------------


def apply_serially(model: dict[int, tuple[int, int]], op: tuple) -> dict[int, tuple[int, int]]:
    kind = op[0]
    out = dict(model)
    if kind == "append":
        for rid, part, value in op[1]:
            out[rid] = (part, value)
    elif kind == "delete":
        _, part, k = op
        out = {i: (p, v) for i, (p, v) in out.items() if not (p == part and v < k)}
    elif kind == "update":
        _, part, k = op
        out = {i: (p, v + 100 if p == part and v >= k else v) for i, (p, v) in out.items()}
    elif kind == "count":
        _, rid = op
        out[rid] = (0, len(model))
    return out


class InterleavedTransactions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = Table.create(f"memory://serial-{uuid.uuid4().hex}", SCHEMA, partition_by=["part"])
        self.model: dict[int, tuple[int, int]] = {}
        self.open: list[dict] = []
        self.ids = itertools.count(1)

    def _begin(self, op: tuple) -> None:
        txn = self.table.transaction(op[0].upper(), IsolationLevel.SERIALIZABLE)
        read: pa.Table | None = None
        predicate = None
        kind = op[0]
        if kind == "append":
            rows = pa.table([list(c) for c in zip(*op[1])], schema=SCHEMA)
            txn.write(rows)
        elif kind == "delete":
            predicate = f"part = {op[1]} AND value < {op[2]}"
            read = copy_on_write(txn, predicate, lambda rows, where: rows.filter(pc.invert(pc.fill_null(_mask(rows, where), False))))
        elif kind == "update":
            predicate = f"part = {op[1]} AND value >= {op[2]}"
            read = copy_on_write(
                txn, predicate, lambda rows, where: _update(rows, where, "value", lambda r: pc.add(r["value"], 100))
            )
        elif kind == "count":
            read = txn.read_whole_table()
            n = read_rows(self.table, read, SCHEMA).num_rows
            txn.write(pa.table({"id": [op[1]], "part": [0], "value": [n]}, schema=SCHEMA))
        self.open.append({"txn": txn, "op": op, "read": read, "predicate": predicate})

    @rule(rows=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 20)), min_size=1, max_size=4))
    def begin_append(self, rows):
        self._begin(("append", [(next(self.ids), p, v) for p, v in rows]))

    @rule(part=st.integers(0, 2), k=st.integers(0, 25))
    def begin_delete(self, part, k):
        self._begin(("delete", part, k))

    @rule(part=st.integers(0, 2), k=st.integers(0, 25))
    def begin_update(self, part, k):
        self._begin(("update", part, k))

    @rule()
    def begin_count(self):
        self._begin(("count", next(self.ids)))

    @precondition(lambda self: self.open)
    @rule(pick=st.integers(0, 10))
    def commit_one(self, pick):
        entry = self.open.pop(pick % len(self.open))
        txn = entry["txn"]
        before = self.table.latest_version()
        try:
            txn.commit()
        except CommitConflictError:
            assert self._had_real_conflict(entry, before), f"{entry['op']} was rejected without a real conflict"
            return
        found_nothing = entry["op"][0] in ("delete", "update") and entry["read"].num_rows == 0
        expected = self.model if found_nothing else apply_serially(self.model, entry["op"])
        actual = self._table_rows()
        assert actual == expected, f"committing {entry['op']} on stale reads broke serializability"
        self.model = expected

    def _table_rows(self) -> dict[int, tuple[int, int]]:
        rows = read_rows(self.table, self.table.snapshot().files(), SCHEMA).to_pylist()
        assert len(rows) == len({r["id"] for r in rows}), "a row is duplicated"
        return {r["id"]: (r["part"], r["value"]) for r in rows}

    def _had_real_conflict(self, entry: dict, latest: int) -> bool:
        """A winner since the read removed a file this txn read or removes, or added a row its
        predicate matches (any row, for a whole-table read)."""
        txn = entry["txn"]
        read_keys = set(file_keys(entry["read"]).to_pylist()) if entry["read"] is not None else set()
        from txnlog.log.commits import read_commits
        from txnlog.log.segment import list_log

        listing = list_log(self.table.store, txn.read_version + 1)
        winners = read_commits(self.table.store, [listing.commits[v] for v in sorted(listing.commits) if v <= latest])
        for commit in winners:
            for obj in commit.actions:
                if "remove" in obj and obj["remove"]["path"] in read_keys:
                    return True
                if "add" in obj and obj["add"].get("dataChange", True) and entry["read"] is not None:
                    added = self._rows_of_add(obj["add"])
                    if entry["predicate"] is None and added.num_rows:
                        return True
                    if entry["predicate"] is not None:
                        where = txn.snapshot.predicate(entry["predicate"]).row_filter()
                        if pc.any(pc.fill_null(_mask(added, where), False)).as_py():
                            return True
        return False

    def _rows_of_add(self, add: dict) -> pa.Table:
        files = pa.table({"path": [add["path"]], "partition_values": pa.array([add["partitionValues"]], pa.map_(pa.string(), pa.string()))})
        return read_rows(self.table, files, SCHEMA)

    @invariant()
    def committed_state_matches_model(self):
        if not self.open:
            assert self._table_rows() == self.model


def _mask(rows: pa.Table, where) -> pa.ChunkedArray:
    import pyarrow.dataset as ds

    return ds.dataset(rows).to_table(columns={"m": where}).column("m")


InterleavedTransactions.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_random_interleavings_are_serializable = InterleavedTransactions.TestCase
