"""ALTER TABLE: each method one commit, named and parametrized as delta-spark records it.

The methods build the requested metadata; whether it is legal (and what it needs of the rows
already there) is decided, as for every metadata change, by :mod:`txnlog.txn.schema_changes`
inside ``update_metadata``. Dropping or renaming a column turns on column mapping
(``delta.columnMapping.mode=name``) in the same commit when the table does not have it yet, as
a dropped column's data must not come back under its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, SchemaChangeError
from txnlog.schema import arrow_to_delta_schema
from txnlog.txn.schema_changes import column_path, logical_clustering_columns, mapped_schema_of
from txnlog.txn.transaction import CommitResult, OptimisticTransaction

#: Opens a transaction on the latest snapshot: (operation, operationParameters) -> transaction.
TransactionFactory = Callable[[str, Mapping[str, Any]], OptimisticTransaction]

COMMENT_KEY = "comment"


def _struct_of(t: Any, where: str) -> dict[str, Any]:
    if not isinstance(t, dict) or t.get("type") != "struct":
        raise SchemaChangeError(f"column {where} is not a struct: it has no nested columns", field=where, rule="nested column")
    return t


def _locate(schema: dict[str, Any], path: tuple[str, ...]) -> tuple[list[dict[str, Any]], int, str]:
    """The fields list holding the column at ``path`` (names matched case-insensitively), its
    index there, and its name as the schema spells it (dotted)."""
    fields = schema["fields"]
    spelled: list[str] = []
    for depth, name in enumerate(path):
        where = ".".join([*spelled, name])
        index = next((i for i, f in enumerate(fields) if str(f["name"]).lower() == name.lower()), None)
        if index is None:
            raise SchemaChangeError(f"column {where} does not exist", field=where, rule="column exists")
        spelled.append(str(fields[index]["name"]))
        if depth == len(path) - 1:
            return fields, index, ".".join(spelled)
        fields = _struct_of(fields[index]["type"], ".".join(spelled))["fields"]
    raise AssertionError("unreachable")


def _field_json(field: pa.Field) -> dict[str, Any]:
    """A pyarrow field as a Delta schema field."""
    if not isinstance(field, pa.Field):
        raise InvalidArgumentTypeError(f"a column to add is a pyarrow Field, got {type(field).__name__}")
    return dict(orjson.loads(arrow_to_delta_schema(pa.schema([field])))["fields"][0])


def _delta_type(data_type: pa.DataType | str) -> Any:
    """A Delta type from a pyarrow type or a Delta type name (``"long"``, ``"decimal(12,2)"``)."""
    if isinstance(data_type, str):
        return data_type.strip().lower()
    if isinstance(data_type, pa.DataType):
        return _field_json(pa.field("c", data_type))["type"]
    raise InvalidArgumentTypeError(f"a type is a pyarrow DataType or a Delta type name, got {type(data_type).__name__}")


class TableAlterer:
    """``Table.alter``: ALTER TABLE, one commit per call; each returns the committed version."""

    def __init__(self, transaction: TransactionFactory) -> None:
        self._transaction = transaction

    # -- columns ------------------------------------------------------------------------------

    def add_columns(self, fields: pa.Field | Iterable[pa.Field]) -> CommitResult:
        """``ADD COLUMNS``: each field (nullable, as on a table with rows) appended to the table,
        or, when its name is a dotted path (``"s.inner"``), to that struct column."""
        added = [fields] if isinstance(fields, pa.Field) else list(fields)
        if not added:
            raise InvalidArgumentError("add_columns needs at least one field")
        logged = []
        with self._transaction("ADD COLUMNS", {}) as txn:
            schema = self._schema(txn)
            for f in added:
                path = column_path(f.name)
                column = _field_json(f.with_name(path[-1]))
                parent = schema if len(path) == 1 else _struct_of(*self._column_type(schema, path[:-1]))
                where = ".".join(path)
                if any(str(g["name"]).lower() == path[-1].lower() for g in parent["fields"]):
                    raise SchemaChangeError(f"column {where} already exists", field=where, rule="column exists")
                parent["fields"].append(column)
                logged.append({"column": {**column, "name": where}})
            txn.operation_parameters["columns"] = orjson.dumps(logged).decode()
            txn.update_metadata(schema=schema)
            return txn.commit()

    def drop_columns(self, columns: str | Sequence[str] | Iterable[str | Sequence[str]]) -> CommitResult:
        """``DROP COLUMNS`` (nested ones by dotted path). Turns column mapping on when the table
        lacks it; a partition column, or the last column, cannot be dropped."""
        paths = [column_path(columns)] if isinstance(columns, str) else [column_path(c) for c in columns]
        if not paths:
            raise InvalidArgumentError("drop_columns needs at least one column")
        with self._transaction("DROP COLUMNS", {}) as txn:
            schema = self._schema(txn, mapped=True)
            partition = {c.lower() for c in txn.metadata.partition_columns}
            names = []
            for path in paths:
                fields, index, where = _locate(schema, path)
                if len(path) == 1 and where.lower() in partition:
                    raise SchemaChangeError(f"column {where} is a partition column and cannot be dropped", field=where, rule="partitioning")
                if len(fields) == 1:
                    raise SchemaChangeError(f"column {where} is the last column of its struct and cannot be dropped",
                                            field=where, rule="drop column")
                fields.pop(index)
                names.append(where)
            txn.operation_parameters["columns"] = orjson.dumps(names).decode()
            txn.update_metadata(schema=schema, configuration=self._column_mapping_on(txn))
            return txn.commit()

    def rename_column(self, column: str | Sequence[str], new_name: str) -> CommitResult:
        """``RENAME COLUMN`` ``column`` (a dotted path for a nested one) to ``new_name`` (a
        name in the same struct). Turns column mapping on when the table lacks it; the data keeps
        its physical name."""
        path = column_path(column)
        if not isinstance(new_name, str) or not new_name:
            raise InvalidArgumentTypeError(f"new_name must be a non-empty string, got {new_name!r}")
        with self._transaction("RENAME COLUMN", {}) as txn:
            schema = self._schema(txn, mapped=True)
            fields, index, where = _locate(schema, path)
            if any(str(f["name"]).lower() == new_name.lower() for i, f in enumerate(fields) if i != index):
                raise SchemaChangeError(f"column {new_name} already exists beside {where}", field=new_name, rule="column exists")
            fields[index] = {**fields[index], "name": new_name}
            partitioning = [new_name if len(path) == 1 and c.lower() == where.lower() else c for c in txn.metadata.partition_columns]
            new_path = ".".join([*where.split(".")[:-1], new_name])
            txn.operation_parameters.update({"oldColumnPath": where, "newColumnPath": new_path})
            txn.update_metadata(schema=schema, partition_columns=partitioning, configuration=self._column_mapping_on(txn))
            return txn.commit()

    def set_column_type(self, column: str | Sequence[str], data_type: pa.DataType | str) -> CommitResult:
        """``CHANGE COLUMN`` to a wider type (PROTOCOL.md's type widening: byte < short < int
        < long, float to double, byte/short/int to double, integers and decimals to wide enough
        decimals, date to timestamp_ntz). The change is recorded in the column's
        ``delta.typeChanges`` and turns type widening on; anything else is refused."""
        new_type = _delta_type(data_type)
        return self._change_column(column, lambda f: {**f, "type": new_type},
                                   configuration={props.ENABLE_TYPE_WIDENING.key: "true"})

    def set_not_null(self, column: str | Sequence[str]) -> CommitResult:
        """``CHANGE COLUMN ... SET NOT NULL``, checked against the live rows."""
        return self._change_column(column, lambda f: {**f, "nullable": False})

    def drop_not_null(self, column: str | Sequence[str]) -> CommitResult:
        """``CHANGE COLUMN ... DROP NOT NULL``."""
        return self._change_column(column, lambda f: {**f, "nullable": True})

    def set_column_comment(self, column: str | Sequence[str], comment: str | None) -> CommitResult:
        """``CHANGE COLUMN ... COMMENT`` (None removes the comment)."""

        def commented(f: dict[str, Any]) -> dict[str, Any]:
            meta = {k: v for k, v in (f.get("metadata") or {}).items() if k != COMMENT_KEY}
            if comment is not None:
                meta[COMMENT_KEY] = str(comment)
            return {**f, "metadata": meta}

        return self._change_column(column, commented)

    def _change_column(self, column: str | Sequence[str], change: Callable[[dict[str, Any]], dict[str, Any]],
                       configuration: Mapping[str, str] | None = None) -> CommitResult:
        path = column_path(column)
        with self._transaction("CHANGE COLUMN", {}) as txn:
            schema = self._schema(txn)
            fields, index, where = _locate(schema, path)
            fields[index] = change(fields[index])
            txn.operation_parameters["column"] = orjson.dumps({**fields[index], "name": where}).decode()
            txn.update_metadata(schema=schema, configuration=configuration)
            return txn.commit()

    # -- properties and constraints -----------------------------------------------------------

    def set_table_properties(self, properties: Mapping[str, str]) -> CommitResult:
        """``SET TBLPROPERTIES``: merged into the table's properties."""
        if not isinstance(properties, Mapping) or not properties:
            raise InvalidArgumentError("set_table_properties needs a non-empty mapping of properties")
        conf = {str(k): str(v) for k, v in properties.items()}
        with self._transaction("SET TBLPROPERTIES", {"properties": orjson.dumps(conf).decode()}) as txn:
            txn.update_metadata(configuration=conf)
            return txn.commit()

    def unset_table_properties(self, keys: str | Iterable[str], *, if_exists: bool = False) -> CommitResult:
        """``UNSET TBLPROPERTIES``: the properties removed; a key the table lacks is refused
        unless ``if_exists``. CHECK constraints go with :meth:`drop_constraint`."""
        names = [keys] if isinstance(keys, str) else list(keys)
        params = {"properties": orjson.dumps(names).decode(), "ifExists": if_exists}
        with self._transaction("UNSET TBLPROPERTIES", params) as txn:
            present = {k.lower() for k in txn.metadata.configuration}
            missing = [k for k in names if k.lower() not in present]
            if missing and not if_exists:
                raise InvalidArgumentError(f"table {txn.uri} has no properties {missing} (pass if_exists=True to ignore)")
            if any(k.lower().startswith(props.CONSTRAINTS.prefix.lower()) for k in names):
                raise InvalidArgumentError("CHECK constraints are removed with drop_constraint, not unset_table_properties")
            txn.update_metadata(unset_properties=names)
            return txn.commit()

    def add_constraint(self, constraints: Mapping[str, str]) -> CommitResult:
        """``ADD CONSTRAINT name CHECK (expression)`` for each entry, checked against the live
        rows (deleted rows excluded) in this commit's transaction."""
        if not isinstance(constraints, Mapping) or not constraints:
            raise InvalidArgumentError("add_constraint needs a non-empty mapping of name to SQL expression")
        first = next(iter(constraints.items()))
        with self._transaction("ADD CONSTRAINT", {"name": first[0], "expr": first[1]}) as txn:
            existing = {name.lower() for name, _ in props.CONSTRAINTS.items(txn.metadata.configuration)}
            conf = {}
            for name, sql in constraints.items():
                if name.lower() in existing:
                    raise SchemaChangeError(f"constraint {name} already exists on table {txn.uri}", field=name, rule="CHECK constraint")
                conf[props.CONSTRAINTS.key(name.lower())] = str(sql)
            if len(constraints) > 1:
                txn.operation_parameters.update(name=",".join(constraints), expr=orjson.dumps(dict(constraints)).decode())
            txn.update_metadata(configuration=conf)
            return txn.commit()

    def drop_constraint(self, name: str, *, raise_if_not_exists: bool = True) -> CommitResult | None:
        """``DROP CONSTRAINT``; None (no commit) when the table lacks it and not
        ``raise_if_not_exists``."""
        with self._transaction("DROP CONSTRAINT", {"name": name}) as txn:
            found = [(key, sql) for key, sql in props.CONSTRAINTS.items(txn.metadata.configuration) if key.lower() == name.lower()]
            if not found:
                if raise_if_not_exists:
                    raise SchemaChangeError(f"table {txn.uri} has no constraint {name}", field=name, rule="CHECK constraint")
                txn.abort()
                return None
            txn.operation_parameters["expr"] = found[0][1]
            txn.update_metadata(unset_properties=[props.CONSTRAINTS.key(found[0][0])])
            return txn.commit()

    # -- clustering ---------------------------------------------------------------------------

    def cluster_by(self, columns: Sequence[str | Sequence[str]]) -> CommitResult:
        """``CLUSTER BY``: the table's clustering columns become ``columns`` (an empty list:
        none), kept in the ``delta.clustering`` domain; each must have statistics collected."""
        with self._transaction("CLUSTER BY", {}) as txn:
            old = txn.snapshot.domain_metadata(props.CLUSTERING_DOMAIN) if txn.snapshot is not None else None
            before = [".".join(p) for p in logical_clustering_columns(txn.metadata, old)]
            after = [".".join(column_path(c)) for c in columns]
            txn.operation_parameters.update(oldClusteringColumns=",".join(before), newClusteringColumns=",".join(after))
            txn.cluster_by(columns)
            return txn.commit()

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _schema(txn: OptimisticTransaction, *, mapped: bool = False) -> dict[str, Any]:
        """The schema to edit; ``mapped``: with column mapping ids, so that a rename in the
        commit turning column mapping on keeps its column's data."""
        return dict(orjson.loads(mapped_schema_of(txn.metadata) if mapped else txn.metadata.schema_string))

    @staticmethod
    def _column_type(schema: dict[str, Any], path: tuple[str, ...]) -> tuple[Any, str]:
        fields, index, where = _locate(schema, path)
        return fields[index]["type"], where

    @staticmethod
    def _column_mapping_on(txn: OptimisticTransaction) -> dict[str, str] | None:
        """Column mapping by name, when the table does not have it yet (delta-spark asks for it
        before a drop or rename)."""
        if props.COLUMN_MAPPING_MODE.get(txn.metadata.configuration) != "none":
            return None
        return {props.COLUMN_MAPPING_MODE.key: "name"}


__all__ = ["COMMENT_KEY", "TableAlterer", "TransactionFactory"]
