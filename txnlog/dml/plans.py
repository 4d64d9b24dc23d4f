"""DML plans: everything a DELETE, UPDATE or MERGE decides before any row is read.

A plan is a frozen value built from the snapshot a transaction reads and the table
configuration it commits under: the validated clauses and their parsed trees, the columns each
step reads, deletion vectors (merge-on-read) or copy-on-write, the row-id policy (the table's
:class:`~txnlog.write.ConformSpec`), whether change data is recorded, and the commit's
``operationParameters``. Executors only run a plan: ``txnlog.dml`` on Arrow in this process,
``txnlog.spark`` on a cluster; each returns a metrics value (:mod:`txnlog.dml.metrics`) that the
transaction's owner records.

SQL that txnlog's parser does not read is kept as text when the plan is built for an engine that
speaks SQL itself (``strict=False``, Spark): the Python executor refuses such a plan, naming the
expression, and :meth:`MergePlan.portable` is then False.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.dml.clauses import MergeCondition, assignments, key_bounds, key_range_predicate
from txnlog.errors import DuplicateMatchError, InvalidArgumentError, InvalidArgumentTypeError, InvalidPredicateError
from txnlog.expressions import FilePredicate, Portability, ValueExpression, parse_value, portable_equality, target_columns_read
from txnlog.snapshot import Snapshot
from txnlog.table_configuration import TableConfiguration
from txnlog.write import ConformSpec


@dataclass(frozen=True)
class SqlExpression:
    """A SQL expression of a DML clause: its text and txnlog's tree of it, or (``tree`` None)
    why txnlog cannot read it (an engine that speaks the SQL can still run it)."""

    sql: str
    tree: ValueExpression | None
    error: str | None = None

    @classmethod
    def parse(cls, sql: object, what: str, *, strict: bool = True) -> SqlExpression:
        if not isinstance(sql, str):
            raise InvalidArgumentTypeError(f"{what} must be a SQL expression string, got {type(sql).__name__}")
        try:
            return cls(sql, parse_value(sql))
        except InvalidPredicateError as e:
            if strict:
                raise
            return cls(sql, None, str(e))

    def parsed(self) -> ValueExpression:
        """The tree; InvalidPredicateError when txnlog cannot read the SQL."""
        if self.tree is None:
            raise InvalidPredicateError(self.error or f"cannot parse {self.sql!r}", predicate=self.sql)
        return self.tree


def _snapshot_config(snapshot: Snapshot, config: TableConfiguration | None) -> TableConfiguration:
    return config if config is not None else snapshot.table_configuration


def _bound(snapshot: Snapshot, text: str, what: str) -> FilePredicate:
    """``text`` bound to the table; its errors also name the table."""
    try:
        return snapshot.predicate(text)
    except InvalidPredicateError as e:
        raise InvalidPredicateError(f"{what} on table {snapshot.uri}: {e}", predicate=text) from None


# --- DELETE and UPDATE ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RowChangePlan:
    """A DELETE, or an UPDATE (``assignments``: table column -> its new value), of the rows on
    which ``condition`` is TRUE."""

    operation: Literal["DELETE", "UPDATE"]
    table_uri: str
    predicate: str  # as the commit records it
    condition: FilePredicate
    assignments: Mapping[str, SqlExpression]
    deletion_vectors: bool  # merge-on-read; else copy-on-write
    change_data: bool
    conform: ConformSpec

    @classmethod
    def delete(cls, snapshot: Snapshot, predicate: str, *, config: TableConfiguration | None = None) -> RowChangePlan:
        """``DELETE FROM table WHERE predicate``."""
        if not isinstance(predicate, str):
            raise InvalidArgumentTypeError(f"delete() takes the predicate as SQL text, got {type(predicate).__name__}")
        return cls._make("DELETE", snapshot, config, predicate, _bound(snapshot, predicate, "delete"), {})

    @classmethod
    def update(
        cls, snapshot: Snapshot, predicate: str | None, set: Mapping[str, str], *,  # noqa: A002 - the SQL word
        config: TableConfiguration | None = None, strict: bool = True,
    ) -> RowChangePlan:
        """``UPDATE table SET column = expression ... WHERE predicate`` (every row when None)."""
        if not isinstance(set, Mapping) or not set:
            raise InvalidArgumentError("update() needs at least one column in set= (a dict of column -> SQL expression)")
        names = [f.name for f in snapshot.schema]
        by_lower = {n.lower(): n for n in names}
        values: dict[str, SqlExpression] = {}
        for name, text in set.items():
            if not isinstance(name, str) or name.lower() not in by_lower:
                raise InvalidArgumentError(f"update() sets column {name!r}, which table {snapshot.uri} does not have (columns: {', '.join(names)})")
            values[by_lower[name.lower()]] = SqlExpression.parse(text, f"update() set[{name!r}]", strict=strict)
        condition = _bound(snapshot, predicate if predicate is not None else "TRUE", "update")
        return cls._make("UPDATE", snapshot, config, predicate if predicate is not None else "true", condition, values)

    @classmethod
    def _make(cls, operation: Literal["DELETE", "UPDATE"], snapshot: Snapshot, config: TableConfiguration | None, predicate: str,
              condition: FilePredicate, values: Mapping[str, SqlExpression]) -> RowChangePlan:
        config = _snapshot_config(snapshot, config)
        return cls(operation, snapshot.uri, predicate, condition, values, config.deletion_vectors_enabled, config.change_data_feed_enabled,
                   ConformSpec.for_configuration(config, snapshot.uri))

    @property
    def parameters(self) -> dict[str, Any]:
        """The commit's ``operationParameters`` (delta-spark's: the list of conditions)."""
        return {"predicate": [self.predicate]}

    @property
    def partition_only(self) -> bool:
        """A DELETE its files' partition values decide: the files skipping keeps are removed
        whole, unread."""
        return self.operation == "DELETE" and self.condition.matches_partition_only()

    @property
    def columns_read(self) -> list[str]:
        """The columns finding the changed rows reads."""
        return sorted(self.condition.columns)

    @property
    def portable(self) -> bool:
        """Whether txnlog's evaluator finds exactly the rows any SQL engine would."""
        return Portability.of_schema(self.conform.schema).condition(self.condition.expression)


# --- MERGE ---------------------------------------------------------------------------------------

When = Literal["matched", "not_matched", "not_matched_by_source"]
Action = Literal["update", "delete", "insert"]
_ACTIONS: dict[str, tuple[str, ...]] = {"matched": ("update", "delete"), "not_matched": ("insert",), "not_matched_by_source": ("update", "delete")}


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause: for rows ``when`` matched (a target row some source row matches),
    not matched (a source row no target row matches) or not matched by source (a target row no
    source row matches), ``action`` them if ``condition`` (None: always). Clauses of one kind
    apply in order: a row takes the first whose condition holds. ``assignments``: target column
    -> value, for update and insert."""

    when: When
    action: Action
    condition: SqlExpression | None = None
    assignments: Mapping[str, SqlExpression] | None = None

    def parameter(self) -> dict[str, str]:
        """Its entry in the commit's ``operationParameters``."""
        out = {"predicate": self.condition.sql} if self.condition is not None else {}
        return {**out, "actionType": self.action}


@dataclass(frozen=True)
class ClauseSpec:
    """A WHEN clause as a caller gives it, before it is checked against the tables: its
    condition (SQL over ``t`` and ``s``, or None) and, for update and insert, {target column: SQL
    expression} or ``"*"`` (every column from the source by name)."""

    when: When
    action: Action
    condition: str | None = None
    assignments: Mapping[str, str] | str | None = None

    def clause(self, columns: Sequence[str], source_columns: Sequence[str], *, strict: bool, schema_evolution: bool = False) -> MergeClause:
        """The clause checked against the target's ``columns`` and the source's, its SQL parsed
        (``schema_evolution``: see :func:`~txnlog.dml.clauses.assignments`'s ``keep_missing``)."""
        what = f"when_{self.when}_{self.action}"
        if self.action != "delete" and self.assignments is None:
            raise InvalidArgumentError(f"{what} needs the columns it sets: a dict of column -> SQL expression, or '*'")
        if self.action == "update" and self.when == "not_matched_by_source" and isinstance(self.assignments, str):
            raise InvalidArgumentError(f"{what} cannot take '*': no source row is there to take the columns from")
        condition = None if self.condition is None else SqlExpression.parse(self.condition, f"{what} predicate", strict=strict)
        values = None
        if self.action != "delete":
            chosen = assignments(what, self.assignments, columns, source_columns, keep_missing=schema_evolution)
            assert chosen is not None
            values = {c: SqlExpression.parse(e, f"{what}[{c!r}]", strict=strict) for c, e in chosen.items()}
        if self.when == "not_matched_by_source":
            for expression in ([condition] if condition is not None else []) + list((values or {}).values()):
                if expression.tree is not None and any(len(r.path) > 1 and r.path[0].lower() == "s" for r in expression.tree.references()):
                    raise InvalidArgumentError(
                        f"{what}: {expression.sql!r} reads the source (s.), but a target row no source row matches has no source row")
        return MergeClause(self.when, self.action, condition, values)


@dataclass(frozen=True)
class MergePlan:
    """``MERGE INTO table t USING source s ON condition`` with its clauses."""

    table_uri: str
    condition: MergeCondition
    pairs: tuple[tuple[str, str], ...]  # (target column, source column), names as the tables spell them
    clauses: tuple[MergeClause, ...]
    target_columns: tuple[str, ...]
    source_columns: tuple[str, ...]
    deletion_vectors: bool
    change_data: bool
    conform: ConformSpec

    @classmethod
    def of(
        cls,
        snapshot: Snapshot,
        source_columns: Sequence[str],
        on: str | Sequence[str],
        *,
        when_matched_update: Mapping[str, str] | str | None = None,
        when_matched_delete: bool | str = False,
        when_not_matched_insert: Mapping[str, str] | str | None = None,
        config: TableConfiguration | None = None,
        strict: bool = True,
        schema_evolution: bool = False,
    ) -> MergePlan:
        """The keyword form: a delete clause (True or a condition) applied before an update
        clause, and an insert clause; ``"*"`` takes every column from the source by name."""
        return cls.build(snapshot, source_columns, on, keyword_clauses(when_matched_update, when_matched_delete, when_not_matched_insert),
                         config=config, strict=strict, schema_evolution=schema_evolution)

    @classmethod
    def build(cls, snapshot: Snapshot, source_columns: Sequence[str], on: str | Sequence[str], specs: Sequence[ClauseSpec], *,
              config: TableConfiguration | None = None, strict: bool = True, schema_evolution: bool = False) -> MergePlan:
        """The plan of clauses given as :class:`ClauseSpec` (a MERGE builder's, in its order),
        over the columns of ``config`` (the transaction's: a schema it evolved), else the
        snapshot's. ``schema_evolution``: the MERGE evolves the schema (``UPDATE SET *`` then
        leaves target columns the source lacks as they were)."""
        columns = [f.name for f in _snapshot_config(snapshot, config).schema]
        source = list(source_columns)
        return cls.from_clauses(snapshot, source, on, [spec.clause(columns, source, strict=strict, schema_evolution=schema_evolution)
                                                       for spec in specs], config=config)

    @classmethod
    def from_clauses(cls, snapshot: Snapshot, source_columns: Sequence[str], on: str | Sequence[str], clauses: Sequence[MergeClause], *,
                     config: TableConfiguration | None = None) -> MergePlan:
        """The clause list, in the order each kind applies (a MERGE builder's form)."""
        if not clauses:
            raise InvalidArgumentError("merge needs at least one clause")
        for clause in clauses:
            if clause.action not in _ACTIONS.get(clause.when, ()):
                raise InvalidArgumentError(f"a merge clause when {clause.when} cannot {clause.action}")
            if (clause.assignments is None) != (clause.action == "delete"):
                raise InvalidArgumentError(f"a merge {clause.action} clause {'takes no' if clause.action == 'delete' else 'needs'} assignments")
        for when in ("matched", "not_matched", "not_matched_by_source"):
            kind = [c for c in clauses if c.when == when]
            if any(c.condition is None for c in kind[:-1]):
                # As Delta: a clause without a condition takes every row, so none after it could apply.
                raise InvalidArgumentError(f"of a merge's when_{when} clauses only the last may omit its predicate: "
                                           "a clause after one without a predicate would never apply")
        condition = MergeCondition.parse(on)
        columns = [f.name for f in _snapshot_config(snapshot, config).schema]
        source = list(source_columns)
        target_lower = {c.lower(): c for c in columns}
        source_lower = {c.lower(): c for c in source}
        pairs = []
        for target_key, source_key in condition.pairs:
            if source_key.lower() not in source_lower:
                raise InvalidArgumentError(f"merge key {source_key!r} is not a column of the source (columns: {', '.join(source)})")
            if target_key.lower() not in target_lower:
                raise InvalidArgumentError(f"merge key {target_key!r} is not a column of table {snapshot.uri} (columns: {', '.join(columns)})")
            pairs.append((target_lower[target_key.lower()], source_lower[source_key.lower()]))
        config = _snapshot_config(snapshot, config)
        return cls(snapshot.uri, condition, tuple(pairs), tuple(clauses), tuple(columns), tuple(source),
                   config.deletion_vectors_enabled, config.change_data_feed_enabled, ConformSpec.for_configuration(config, snapshot.uri))

    # -- what the clauses are --------------------------------------------------------------

    @property
    def by_source(self) -> bool:
        """Whether a clause changes target rows no source row matches (every file is then read)."""
        return bool(self.clauses_when("not_matched_by_source"))

    def clauses_when(self, when: When) -> tuple[MergeClause, ...]:
        return tuple(c for c in self.clauses if c.when == when)

    @property
    def matched_clause(self) -> bool:
        """Whether a matched target row may change (so matching must be exact: no target row
        matched twice)."""
        return bool(self.clauses_when("matched"))

    @property
    def every_match_changes(self) -> bool:
        """Whether every matched target row is updated or deleted (some matched clause has no
        condition): the rows a MERGE marks are then all the rows it matched."""
        return any(c.condition is None for c in self.clauses_when("matched"))

    @property
    def keyword_form(self) -> bool:
        """Whether the clauses are those the keyword form makes: a matched delete (with or
        without condition) before an unconditional matched update, and an unconditional insert
        (the shape an executor may run with fewer passes)."""
        matched = self.clauses_when("matched")
        inserts = self.clauses_when("not_matched")
        return (
            not self.clauses_when("not_matched_by_source")
            and len(inserts) <= 1 and all(c.condition is None for c in inserts)
            and [c.action for c in matched] in ([], ["delete"], ["update"], ["delete", "update"])
            and all(c.condition is None for c in matched if c.action == "update")
        )

    @property
    def parameters(self) -> dict[str, Any]:
        """The commit's ``operationParameters`` in delta-spark's form: the ON condition, and per
        clause kind the clauses in the order they apply."""
        return {
            "predicate": [self.condition.sql],
            "matchedPredicates": [c.parameter() for c in self.clauses_when("matched")],
            "notMatchedPredicates": [c.parameter() for c in self.clauses_when("not_matched")],
            "notMatchedBySourcePredicates": [c.parameter() for c in self.clauses_when("not_matched_by_source")],
        }

    # -- what the executors read ------------------------------------------------------------

    @property
    def columns_matched(self) -> list[str]:
        """The target columns matching reads: the keys and what the rest of ON reads."""
        return sorted({t for t, _ in self.pairs} | set(target_columns_read(self.condition.residual, list(self.target_columns))))

    def columns_changed(self) -> list[str]:
        """The target columns the matched clauses read: their conditions and values, and the
        columns an update copies from the target row; every column when change data is
        recorded (pre-images and deleted rows are whole rows) or a clause's SQL is not
        txnlog's (it may read anything)."""
        matched = self.clauses_when("matched") + self.clauses_when("not_matched_by_source")
        expressions = [e for c in matched for e in ([c.condition] if c.condition else []) + list((c.assignments or {}).values())]
        if (self.change_data and matched) or any(e.tree is None for e in expressions):
            return list(self.target_columns)
        needed = set(target_columns_read([e.tree for e in expressions if e.tree is not None], list(self.target_columns)))
        for clause in matched:
            if clause.action == "update":
                needed |= {c for c in self.target_columns if c not in (clause.assignments or {})}
        needed |= set(self.columns_matched)
        return [c for c in self.target_columns if c in needed]

    def keyed(self, rows: pa.Table) -> pa.Table:
        """The source rows whose key columns are all set: a NULL key matches nothing."""
        mask = None
        for name in dict.fromkeys(s for _, s in self.pairs):
            if not rows.column(name).null_count:
                continue
            valid = rows.column(name).is_valid()
            mask = valid if mask is None else pc.and_(mask, valid)
        return rows if mask is None else rows.filter(mask)

    def key_range(self, bounds: Mapping[str, tuple[Any, Any]]) -> str | None:
        """The source's key range (each source key column's (min, max)) as a predicate on the
        target, or None when no bound can be written as a literal."""
        return key_range_predicate(self.pairs, bounds)

    def key_bounds(self, keyed: pa.Table) -> dict[str, tuple[Any, Any]]:
        """Each source key column's (min, max) over ``keyed`` rows (every key set)."""
        return key_bounds(keyed, [s for _, s in self.pairs])

    def keys_compare_exactly(self, target: pa.Schema, source: pa.Schema) -> bool:
        """Whether each source key has its target column's exact type, one whose equality every
        engine agrees on, and no column is in two equalities: key matching on one machine then
        pairs the rows a SQL engine's join pairs."""
        for side in zip(*self.pairs):
            if len({name.lower() for name in side}) != len(side):
                return False
        target_types = {f.name.lower(): f.type for f in target}
        source_types = {f.name.lower(): f.type for f in source}
        return all(portable_equality(target_types.get(t.lower()), source_types.get(s.lower())) for t, s in self.pairs)

    def portable(self, source: pa.Schema) -> bool:
        """Whether the Python executor changes exactly the rows any SQL engine's MERGE would, to
        the same values, for a source of Arrow schema ``source``: an ON condition of key
        equalities alone between columns of one exact type, conditions and assignments the
        portability visitor accepts (any clause list: the executor applies clauses in Delta's
        order), and no nested columns."""
        target = self.conform.schema
        if self.condition.residual or any(pa.types.is_nested(f.type) for f in (*target, *source)):
            return False
        if len({n.lower() for n in source.names}) != len(source.names) or not self.keys_compare_exactly(target, source):
            return False
        visitor = Portability({"t": {f.name: f.type for f in target}, "s": {f.name: f.type for f in source}})
        types = {f.name: f.type for f in target}
        for clause in self.clauses:
            if clause.condition is not None and (clause.condition.tree is None or not visitor.is_condition(clause.condition.tree)):
                return False
            if not all(visitor.assigns(e.sql, types[c]) for c, e in (clause.assignments or {}).items()):
                return False
        return True

    def duplicate_match(self, key: dict[str, Any], source_rows: int, path: str) -> DuplicateMatchError:
        """The error of a target row (``key``, in file ``path``) that ``source_rows`` source
        rows match, as every executor raises it, before anything is written."""
        return DuplicateMatchError(
            f"merge into {self.table_uri}: {source_rows} source rows match the same target row (key {key}, in file {path}); "
            "a target row may be updated or deleted by one source row only: deduplicate the source",
            uri=self.table_uri,
            key=key,
            source_rows=source_rows,
        )


def keyword_clauses(when_matched_update: Mapping[str, str] | str | None, when_matched_delete: bool | str,
                    when_not_matched_insert: Mapping[str, str] | str | None) -> list[ClauseSpec]:
    """The clauses of the keyword form (``Table.merge(..., when_matched_update=...)``): a
    matched delete (True or a condition) before an unconditional matched update, then an insert."""
    if when_matched_update is None and not when_matched_delete and when_not_matched_insert is None:
        raise InvalidArgumentError("merge needs at least one of when_matched_update, when_matched_delete, when_not_matched_insert")
    if when_matched_update is not None and when_matched_delete is True:
        raise InvalidArgumentError("when_matched_delete=True deletes every matched row: when_matched_update would never apply")
    if not isinstance(when_matched_delete, (bool, str)):
        raise InvalidArgumentTypeError(f"when_matched_delete must be a bool or a SQL condition, got {type(when_matched_delete).__name__}")
    specs = []
    if when_matched_delete:
        specs.append(ClauseSpec("matched", "delete", when_matched_delete if isinstance(when_matched_delete, str) else None))
    if when_matched_update is not None:
        specs.append(ClauseSpec("matched", "update", None, when_matched_update))
    if when_not_matched_insert is not None:
        specs.append(ClauseSpec("not_matched", "insert", None, when_not_matched_insert))
    return specs


__all__ = ["ClauseSpec", "MergeClause", "MergePlan", "RowChangePlan", "SqlExpression", "keyword_clauses"]
