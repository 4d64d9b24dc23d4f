"""The MERGE builder, as deltalake's ``TableMerger`` and delta-spark's ``DeltaMergeBuilder``:
clauses added in order, then ``execute()``.

Delta applies a MERGE's clauses of one kind in the order given: a matched target row takes the
first ``when_matched_*`` clause whose predicate holds, an unmatched source row the first
``when_not_matched_insert*``, a target row no source row matches the first
``when_not_matched_by_source_*``; a row no clause takes is left alone. The builder only collects
:class:`~txnlog.dml.plans.ClauseSpec` values (in the MERGE's own aliases turned into ``t`` and
``s``); the engine that made it plans (:meth:`~txnlog.dml.MergePlan.build`) and runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from txnlog.dml.plans import Action, ClauseSpec, When, keyword_clauses
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError
from txnlog.expressions import requalify

R = TypeVar("R")

#: txnlog's own aliases of the target and the source, which plans are written in.
TARGET, SOURCE = "t", "s"


class MergeAliases:
    """A MERGE's aliases of its target and source, and the rewriting of its SQL into ``t`` and ``s``."""

    def __init__(self, target_alias: str = TARGET, source_alias: str = SOURCE) -> None:
        for name, alias in (("target_alias", target_alias), ("source_alias", source_alias)):
            if not isinstance(alias, str) or not alias.strip():
                raise InvalidArgumentTypeError(f"{name} must be a non-empty name, got {alias!r}")
        if target_alias.lower() == source_alias.lower():
            raise InvalidArgumentError(f"target_alias and source_alias must differ, both are {target_alias!r}")
        self.target = target_alias
        self.source = source_alias
        self.renames = {} if (target_alias.lower(), source_alias.lower()) == (TARGET, SOURCE) else {target_alias: TARGET, source_alias: SOURCE}

    def sql(self, text: str) -> str:
        """``text`` written over ``t`` and ``s``."""
        return requalify(text, self.renames) if self.renames and isinstance(text, str) else text

    def on(self, on: str | Sequence[str]) -> str | Sequence[str]:
        return self.sql(on) if isinstance(on, str) else on

    def assignments(self, values: Mapping[str, str] | str) -> Mapping[str, str] | str:
        """An update or insert clause's {column: SQL} (or ``"*"``) written over ``t`` and ``s``."""
        if isinstance(values, str):
            return values
        return {self.column(c): self.sql(e) for c, e in values.items()}  # type: ignore[misc]

    def column(self, name: object) -> object:
        """An assigned column, named bare or as ``<target alias>.column``."""
        if isinstance(name, str) and "." in name:
            qualifier, _, rest = name.partition(".")
            if qualifier.lower() in (self.target.lower(), TARGET):
                return rest
        return name


class MergeBuilder(Generic[R]):
    """Clauses of a MERGE, added in order; :meth:`execute` runs them (through the engine's
    ``run``) and returns what it returns. Each method returns the builder, to chain."""

    def __init__(self, run: Callable[[list[ClauseSpec]], R], aliases: MergeAliases | None = None) -> None:
        self._run = run
        self._aliases = aliases if aliases is not None else MergeAliases()
        self.clauses: list[ClauseSpec] = []

    def _add(self, when: When, action: Action, predicate: str | None, updates: Mapping[str, str] | str | None) -> MergeBuilder[R]:
        if predicate is not None and not isinstance(predicate, str):
            raise InvalidArgumentTypeError(f"when_{when}_{action}: predicate must be SQL text, got {type(predicate).__name__}")
        if isinstance(updates, Mapping):
            updates = self._aliases.assignments(updates)
        elif updates is not None and updates != "*":
            raise InvalidArgumentTypeError(f"when_{when}_{action}: updates must be a dict of column -> SQL expression, got {type(updates).__name__}")
        self.clauses.append(ClauseSpec(when, action, None if predicate is None else self._aliases.sql(predicate), updates))
        return self

    def when_matched_update(self, updates: Mapping[str, str], predicate: str | None = None) -> MergeBuilder[R]:
        """Update matched target rows (where ``predicate`` holds): {column: SQL expression}."""
        return self._add("matched", "update", predicate, updates)

    def when_matched_update_all(self, predicate: str | None = None) -> MergeBuilder[R]:
        """Update matched target rows with every column of the source row (by name)."""
        return self._add("matched", "update", predicate, "*")

    def when_matched_delete(self, predicate: str | None = None) -> MergeBuilder[R]:
        """Delete matched target rows (where ``predicate`` holds)."""
        return self._add("matched", "delete", predicate, None)

    def when_not_matched_insert(self, updates: Mapping[str, str], predicate: str | None = None) -> MergeBuilder[R]:
        """Insert source rows no target row matches (where ``predicate`` holds): {column: SQL
        expression over the source}; the columns not set are NULL (or their default)."""
        return self._add("not_matched", "insert", predicate, updates)

    def when_not_matched_insert_all(self, predicate: str | None = None) -> MergeBuilder[R]:
        """Insert unmatched source rows, every target column from the source column of its name."""
        return self._add("not_matched", "insert", predicate, "*")

    def when_not_matched_by_source_update(self, updates: Mapping[str, str], predicate: str | None = None) -> MergeBuilder[R]:
        """Update target rows no source row matches (where ``predicate``, over the target only, holds)."""
        return self._add("not_matched_by_source", "update", predicate, updates)

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> MergeBuilder[R]:
        """Delete target rows no source row matches (where ``predicate``, over the target only, holds)."""
        return self._add("not_matched_by_source", "delete", predicate, None)

    def add_keyword_clauses(self, when_matched_update: Mapping[str, str] | str | None, when_matched_delete: bool | str,
                            when_not_matched_insert: Mapping[str, str] | str | None) -> bool:
        """Add the clauses of the keyword form (:func:`~txnlog.dml.plans.keyword_clauses`),
        written in this MERGE's aliases; False, adding nothing, when no keyword is given."""
        if when_matched_update is None and not when_matched_delete and when_not_matched_insert is None:
            return False
        aliases = self._aliases
        self.clauses.extend(keyword_clauses(
            None if when_matched_update is None else aliases.assignments(when_matched_update),
            aliases.sql(when_matched_delete) if isinstance(when_matched_delete, str) else when_matched_delete,
            None if when_not_matched_insert is None else aliases.assignments(when_not_matched_insert)))
        return True

    def execute(self) -> R:
        """Plan and run the MERGE with the clauses added, in one commit."""
        if not self.clauses:
            raise InvalidArgumentError("merge needs at least one clause: add one with when_matched_update(...) etc. before execute()")
        return self._run(list(self.clauses))


__all__ = ["MergeAliases", "MergeBuilder"]
