"""The one place deciding which schema, partitioning and property changes are legal.

Every metadata change goes through :func:`plan_change` (``update_metadata`` calls it, and ALTER,
schema evolution on write and the Spark writers all end in ``update_metadata``). It compares the
table's metadata with the requested one column by column (by column mapping id where the table
has column mapping, else by name) and says what the change needs:

- refused outright: a column mapping id or physical name reused, a column mapping mode changed
  other than from ``none`` to ``name``;
- allowed only when the commit replaces every row (an overwrite with ``schema_mode="overwrite"``)
  or the table has no rows: a column dropped or renamed without column mapping (its old values
  would come back under the name), a type narrowed or changed, the partition columns changed, a
  NOT NULL column added;
- checked against the live rows, in the same transaction: a new or changed CHECK constraint, a
  column made NOT NULL.

Widenings PROTOCOL.md allows are recorded in the field's ``delta.typeChanges`` and turn on
type widening. Column mapping ids and physical names are inherited by name from the table for
fields that come without them (a schema built anew in pyarrow), so an unchanged column keeps
its data.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from txnlog import properties as props
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, SchemaChangeError, TxnLogError
from txnlog.expressions import FilePredicate
from txnlog.file_facts import stats_columns
from txnlog.log.actions import Metadata

TYPE_CHANGES_KEY = props.TYPE_CHANGES_KEY

_INTEGERS = ("byte", "short", "integer", "long")
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
# Integer -> decimal: the fewest integer digits the decimal must keep (PROTOCOL.md, Type Widening).
_DECIMAL_DIGITS = {"byte": 10, "short": 10, "integer": 10, "long": 20}


def widening(from_type: str, to_type: str) -> str | None:
    """``"automatic"`` for a widening schema evolution on write may apply, ``"manual"`` for one
    only an explicit ALTER makes (an integer to double or decimal, as delta-spark asks), None
    when ``from_type`` cannot widen to ``to_type``."""
    if from_type in _INTEGERS and to_type in _INTEGERS:
        return "automatic" if _INTEGERS.index(from_type) < _INTEGERS.index(to_type) else None
    if (from_type, to_type) in (("float", "double"), ("date", "timestamp_ntz")):
        return "automatic"
    if from_type in ("byte", "short", "integer") and to_type == "double":
        return "manual"
    to_decimal = _DECIMAL.match(to_type)
    if to_decimal is None:
        return None
    precision, scale = int(to_decimal.group(1)), int(to_decimal.group(2))
    if from_type in _DECIMAL_DIGITS:
        return "manual" if precision - scale >= _DECIMAL_DIGITS[from_type] else None
    from_decimal = _DECIMAL.match(from_type)
    if from_decimal is None:
        return None
    more_digits, more_scale = precision - int(from_decimal.group(1)), scale - int(from_decimal.group(2))
    return "automatic" if more_digits >= more_scale >= 0 and (more_digits, more_scale) != (0, 0) else None


@dataclass(frozen=True)
class RowCheck:
    """A condition every live row must satisfy for the change to be legal."""

    field: str  # the column, or the constraint's name
    rule: str  # "CHECK constraint" or "NOT NULL"
    sql: str  # over the table's current column names


@dataclass
class SchemaChange:
    """What :func:`plan_change` decided: the metadata to commit (type changes recorded,
    column mapping inherited) and what the change needs of the rows already in the table."""

    metadata: Metadata
    #: What every live row must satisfy: new CHECK constraints and new NOT NULL columns.
    row_checks: list[RowCheck] = field(default_factory=list)
    #: Changes legal only when no row of the table survives the commit (a schema overwrite).
    needs_no_rows: list[SchemaChangeError] = field(default_factory=list)


@dataclass(frozen=True)
class _Column:
    path: tuple[str, ...]
    field: dict[str, Any]

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.field.get("metadata")
        return meta if isinstance(meta, dict) else {}


def _struct_fields(t: Any, path: tuple[str, ...]) -> Iterator[_Column]:
    """Every struct field inside type ``t`` with its logical path (arrays and maps add
    ``element``, ``key``, ``value``)."""
    if not isinstance(t, dict):
        return
    kind = t.get("type")
    if kind == "struct":
        for f in t.get("fields") or ():
            column = _Column((*path, str(f["name"])), f)
            yield column
            yield from _struct_fields(f.get("type"), column.path)
    elif kind == "array":
        yield from _struct_fields(t.get("elementType"), (*path, "element"))
    elif kind == "map":
        yield from _struct_fields(t.get("keyType"), (*path, "key"))
        yield from _struct_fields(t.get("valueType"), (*path, "value"))


def _key(column: _Column, mapped: bool) -> Any:
    if mapped and props.COLUMN_MAPPING_ID_KEY in column.metadata:
        return int(column.metadata[props.COLUMN_MAPPING_ID_KEY])
    return tuple(p.lower() for p in column.path)


def _columns(schema: dict[str, Any], mapped: bool) -> dict[Any, _Column]:
    return {_key(c, mapped): c for c in _struct_fields(schema, ())}


def highest_column_id(schema_string: str) -> int:
    """The highest column mapping id in a schema (0 when none has one)."""
    ids = [int(c.metadata[props.COLUMN_MAPPING_ID_KEY]) for c in _struct_fields(orjson.loads(schema_string), ())
           if props.COLUMN_MAPPING_ID_KEY in c.metadata]
    return max(ids, default=0)


def _map_struct_fields(t: Any, visit: Callable[[dict[str, Any], tuple[str, ...]], dict[str, Any]],
                       path: tuple[str, ...] = ()) -> Any:
    """Type ``t`` with every struct field replaced by ``visit(field, its logical path)``,
    outer fields first (paths as :func:`_struct_fields` gives them)."""
    if not isinstance(t, dict):
        return t
    kind = t.get("type")
    if kind == "array":
        return {**t, "elementType": _map_struct_fields(t["elementType"], visit, (*path, "element"))}
    if kind == "map":
        return {**t, "keyType": _map_struct_fields(t["keyType"], visit, (*path, "key")),
                "valueType": _map_struct_fields(t["valueType"], visit, (*path, "value"))}
    if kind != "struct":
        return t
    fields = []
    for f in t.get("fields") or ():
        here = (*path, str(f["name"]))
        f = visit(f, here)
        fields.append({**f, "type": _map_struct_fields(f.get("type"), visit, here)})
    return {**t, "fields": fields}


def mapped_schema_of(base: Metadata) -> str:
    """The table's schema with column mapping: as it is, or, for a table turning it on now,
    each column given an id (in schema order) and its name as physical name, which is what its
    data files call it."""
    if props.COLUMN_MAPPING_MODE.get(base.configuration) != "none":
        return base.schema_string
    next_id = max(props.COLUMN_MAPPING_MAX_ID.get(base.configuration), highest_column_id(base.schema_string))

    def visit(f: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        nonlocal next_id
        meta = dict(f.get("metadata") or {})
        if props.COLUMN_MAPPING_ID_KEY not in meta:
            next_id += 1
            meta[props.COLUMN_MAPPING_ID_KEY] = next_id
            meta[props.PHYSICAL_NAME_KEY] = path[-1]
        return {**f, "metadata": meta}

    return orjson.dumps(_map_struct_fields(orjson.loads(base.schema_string), visit)).decode()


def inherit_column_mapping(base: Metadata | None, schema_string: str, configuration: Mapping[str, str]) -> str:
    """``schema_string`` whose fields lacking a column mapping id take the id and physical name
    of the table's column of the same name path (:func:`mapped_schema_of`), so that a schema
    built anew keeps the data of its unchanged columns. New columns are left for
    :func:`txnlog.schema.assign_column_mapping`."""
    if base is None or props.COLUMN_MAPPING_MODE.get(configuration) == "none":
        return schema_string
    by_path = {tuple(p.lower() for p in c.path): c for c in _struct_fields(orjson.loads(mapped_schema_of(base)), ())}

    def visit(f: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        meta = dict(f.get("metadata") or {})
        old = by_path.get(tuple(p.lower() for p in path))
        if props.COLUMN_MAPPING_ID_KEY not in meta and old is not None:
            meta[props.COLUMN_MAPPING_ID_KEY] = old.metadata[props.COLUMN_MAPPING_ID_KEY]
            meta[props.PHYSICAL_NAME_KEY] = old.metadata.get(props.PHYSICAL_NAME_KEY, path[-1])
        return {**f, "metadata": meta}

    return orjson.dumps(_map_struct_fields(orjson.loads(schema_string), visit)).decode()


def _type_changes(old: Any, new: Any, where: str, suffix: tuple[str, ...], change: SchemaChange, automatic_only: bool) -> list[dict[str, str]]:
    """The widenings from type ``old`` to ``new`` (struct children are compared as columns of
    their own), each as a ``delta.typeChanges`` entry; a change that is no widening is noted
    as needing an empty table."""
    if isinstance(old, str) and isinstance(new, str):
        if old == new:
            return []
        kind = widening(old, new)
        if kind is None or (automatic_only and kind == "manual"):
            rule = "type widening" if kind is None else "automatic type widening"
            change.needs_no_rows.append(SchemaChangeError(
                f"column {where}: changing type {old} to {new} is not a widening "
                f"{'delta-spark applies on write (use ALTER set_column_type)' if kind else 'PROTOCOL.md allows'}; "
                "existing values would not read back", field=where, rule=rule))
            return []
        entry = {"fromType": old, "toType": new}
        if suffix:
            entry["fieldPath"] = ".".join(suffix)
        return [entry]
    old_kind = old.get("type") if isinstance(old, dict) else old
    new_kind = new.get("type") if isinstance(new, dict) else new
    if old_kind != new_kind:
        change.needs_no_rows.append(SchemaChangeError(
            f"column {where}: changing type {_type_name(old)} to {_type_name(new)} would make existing values unreadable",
            field=where, rule="type widening"))
        return []
    if old_kind == "array":
        _nested_nullability(old, new, "containsNull", where, change)
        return _type_changes(old["elementType"], new["elementType"], where, (*suffix, "element"), change, automatic_only)
    if old_kind == "map":
        _nested_nullability(old, new, "valueContainsNull", where, change)
        return [*_type_changes(old["keyType"], new["keyType"], where, (*suffix, "key"), change, automatic_only),
                *_type_changes(old["valueType"], new["valueType"], where, (*suffix, "value"), change, automatic_only)]
    return []


def _nested_nullability(old: dict[str, Any], new: dict[str, Any], key: str, where: str, change: SchemaChange) -> None:
    if old.get(key, True) and not new.get(key, True):
        change.needs_no_rows.append(SchemaChangeError(
            f"column {where}: elements cannot become NOT NULL over existing rows", field=where, rule="NOT NULL"))


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else str(t.get("type") if isinstance(t, dict) else t)


def _quoted(path: tuple[str, ...]) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in path)


def column_path(column: str | Sequence[str]) -> tuple[str, ...]:
    """A column path: ``"a.b"`` or ``["a", "b"]`` (a list for names holding dots)."""
    if isinstance(column, str):
        if not column:
            raise InvalidArgumentError("a column name cannot be empty")
        return tuple(column.split("."))
    parts = tuple(column)
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise InvalidArgumentTypeError(f"a column is a name or a list of names, got {column!r}")
    return parts


def clustering_domain_configuration(metadata: Metadata, columns: list[tuple[str, ...]]) -> str:
    """The ``delta.clustering`` domain's configuration for clustering by ``columns`` (logical
    paths): each column's physical path, after checking it may cluster the table."""
    check_clustering(metadata, columns)
    physical = []
    by_path = {tuple(p.lower() for p in c.path): c for c in _struct_fields(orjson.loads(metadata.schema_string), ())}
    mapped = props.COLUMN_MAPPING_MODE.get(metadata.configuration) != "none"
    for path in columns:
        names = []
        for depth in range(1, len(path) + 1):
            column = by_path[tuple(p.lower() for p in path[:depth])]
            names.append(str(column.metadata.get(props.PHYSICAL_NAME_KEY, column.path[-1])) if mapped else column.path[-1])
        physical.append(names)
    return orjson.dumps({"clusteringColumns": physical, "domainName": props.CLUSTERING_DOMAIN}).decode()  # as delta-spark writes it


def logical_clustering_columns(metadata: Metadata, configuration: str | None) -> list[tuple[str, ...]]:
    """The clustering columns a ``delta.clustering`` domain's configuration names (physical
    paths), as logical paths of ``metadata``'s schema (a path it lacks is kept as named)."""
    if not configuration:
        return []
    mapped = props.COLUMN_MAPPING_MODE.get(metadata.configuration) != "none"
    columns = {c.path: c for c in _struct_fields(orjson.loads(metadata.schema_string), ())}
    logical: dict[tuple[str, ...], tuple[str, ...]] = {}
    for path in columns:
        physical = tuple(str(columns[path[:d]].metadata.get(props.PHYSICAL_NAME_KEY, path[d - 1])) if mapped else path[d - 1]
                         for d in range(1, len(path) + 1))
        logical[physical] = path
    return [logical.get(tuple(names), tuple(names)) for names in orjson.loads(configuration).get("clusteringColumns") or []]


def check_clustering(metadata: Metadata, columns: list[tuple[str, ...]]) -> None:
    """Clustering columns must exist, not be partition columns (a clustered table is not
    partitioned), and have statistics collected (PROTOCOL.md's Clustered Table; delta-spark
    refuses a clustering column without statistics too)."""
    if metadata.partition_columns and columns:
        raise SchemaChangeError(f"a partitioned table (by {list(metadata.partition_columns)}) cannot be clustered",
                                field=",".join(metadata.partition_columns), rule="clustering")
    names = {tuple(p.lower() for p in c.path): c for c in _struct_fields(orjson.loads(metadata.schema_string), ())}
    with_stats = {tuple(p.lower() for p in path) for path in stats_columns(metadata.schema, metadata.configuration, metadata.partition_columns)}
    for path in columns:
        where = ".".join(path)
        key = tuple(p.lower() for p in path)
        if key not in names:
            raise SchemaChangeError(f"clustering column {where} does not exist", field=where, rule="clustering")
        if key not in with_stats:
            raise SchemaChangeError(
                f"clustering column {where} has no statistics collected: a clustered table needs them for every clustering "
                f"column (widen {props.DATA_SKIPPING_NUM_INDEXED_COLS.key} or name it in {props.DATA_SKIPPING_STATS_COLUMNS.key})",
                field=where, rule="clustering")


def plan_change(base: Metadata | None, new: Metadata, *, automatic_widening_only: bool = False,
                clustering: str | None = None) -> SchemaChange:
    """Decide whether ``base`` (None for a new table) may become ``new``: refuse with
    SchemaChangeError naming the column and rule, or say what the change needs (see the module
    docstring). ``automatic_widening_only``: schema evolution on write, which applies only the
    widenings delta-spark applies automatically."""
    change = SchemaChange(new)
    if base is None:
        return change
    # Clustering columns (``clustering``: the domain's configuration) keep existing and keeping statistics.
    check_clustering(new, logical_clustering_columns(new, clustering))
    old_mode = props.COLUMN_MAPPING_MODE.get(base.configuration)
    new_mode = props.COLUMN_MAPPING_MODE.get(new.configuration)
    if old_mode != new_mode and not (old_mode == "none" and new_mode == "name"):
        raise SchemaChangeError(
            f"{props.COLUMN_MAPPING_MODE.key} cannot change from {old_mode!r} to {new_mode!r} "
            "(only from 'none' to 'name'): the data files name their columns by the old mode",
            field=props.COLUMN_MAPPING_MODE.key, rule="column mapping")
    mapped = new_mode != "none"
    old_schema, new_schema = orjson.loads(base.schema_string), orjson.loads(new.schema_string)
    old_columns = _columns(old_schema, mapped and old_mode != "none")
    if mapped and old_mode == "none":  # turning it on: the ids it gives the old columns
        old_columns = _columns(orjson.loads(mapped_schema_of(base)), True)
    new_columns = _columns(new_schema, mapped)
    if mapped:
        _check_column_mapping(base, old_columns, new_columns, new)
    for key, dropped in old_columns.items():
        if key not in new_columns and not mapped:
            change.needs_no_rows.append(SchemaChangeError(
                f"column {dropped.name}: dropping or renaming a column needs column mapping "
                f"({props.COLUMN_MAPPING_MODE.key}=name), else its old values come back under the name",
                field=dropped.name, rule="column mapping"))
    type_changes: dict[Any, list[dict[str, str]]] = {}
    for key, column in new_columns.items():
        old = old_columns.get(key)
        if old is None:
            if not column.field.get("nullable", True):
                change.needs_no_rows.append(SchemaChangeError(
                    f"column {column.name}: a new column cannot be NOT NULL on a table with rows (they would hold NULL)",
                    field=column.name, rule="NOT NULL"))
            continue
        entries = _type_changes(old.field.get("type"), column.field.get("type"), column.name, (), change, automatic_widening_only)
        if entries:
            type_changes[key] = entries
        if old.field.get("nullable", True) and not column.field.get("nullable", True):
            if len(column.path) == 1:
                change.row_checks.append(RowCheck(column.name, "NOT NULL", f"{_quoted(old.path)} IS NOT NULL"))
            else:
                change.needs_no_rows.append(SchemaChangeError(
                    f"column {column.name}: a nested field cannot become NOT NULL over existing rows",
                    field=column.name, rule="NOT NULL"))
    if _partition_keys(base, old_columns, mapped) != _partition_keys(new, new_columns, mapped):
        change.needs_no_rows.append(SchemaChangeError(
            f"the partition columns cannot change from {list(base.partition_columns)} to {list(new.partition_columns)} "
            "on a table with rows: existing files hold the old layout", field=",".join(new.partition_columns) or None,
            rule="partitioning"))
    old_constraints = dict(props.CONSTRAINTS.items(base.configuration))
    for name, sql in props.CONSTRAINTS.items(new.configuration):
        if old_constraints.get(name) != sql:
            change.row_checks.append(RowCheck(name, "CHECK constraint", sql))
        try:
            FilePredicate(sql, new.schema, new.partition_columns)
        except TxnLogError as e:
            raise SchemaChangeError(f"CHECK constraint {name} ({sql}) does not apply to the new schema: {e}",
                                    field=name, rule="CHECK constraint") from None
    if type_changes:
        change.metadata = _with_type_changes(new, type_changes, mapped)
    return change


def _partition_keys(metadata: Metadata, columns: Mapping[Any, _Column], mapped: bool) -> list[Any]:
    """The partition columns as column identities (a rename under column mapping keeps them)."""
    by_name = {c.path[0].lower(): key for key, c in columns.items() if len(c.path) == 1}
    return [by_name.get(c.lower(), c.lower()) for c in metadata.partition_columns]


def _check_column_mapping(base: Metadata, old: dict[Any, _Column], new: dict[Any, _Column], metadata: Metadata) -> None:
    """No new column takes an id or a physical name a column of the table had (a dropped
    column's data would come back)."""
    max_id = props.COLUMN_MAPPING_MAX_ID.get(base.configuration)
    old_physical = {str(c.metadata.get(props.PHYSICAL_NAME_KEY)): c for c in old.values()}
    for key, column in new.items():
        if key in old:
            if column.metadata.get(props.PHYSICAL_NAME_KEY) != old[key].metadata.get(props.PHYSICAL_NAME_KEY):
                raise SchemaChangeError(
                    f"column {column.name}: its physical name cannot change (column mapping id {key})",
                    field=column.name, rule="column mapping")
            continue
        if isinstance(key, int) and key <= max_id:
            raise SchemaChangeError(
                f"column {column.name}: column mapping id {key} was already used by this table "
                f"({props.COLUMN_MAPPING_MAX_ID.key}={max_id}); a new column needs a new id",
                field=column.name, rule="column mapping")
        physical = str(column.metadata.get(props.PHYSICAL_NAME_KEY))
        if physical in old_physical:
            raise SchemaChangeError(
                f"column {column.name}: physical name {physical!r} belongs to column {old_physical[physical].name}; "
                "a physical name is never reused", field=column.name, rule="column mapping")


def _with_type_changes(metadata: Metadata, changes: Mapping[Any, list[dict[str, str]]], mapped: bool) -> Metadata:
    """``metadata`` with each widened field's ``delta.typeChanges`` extended and type
    widening enabled."""

    def visit(f: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        column = _Column(path, f)
        entries = changes.get(_key(column, mapped))
        recorded = list(column.metadata.get(TYPE_CHANGES_KEY) or [])
        if entries and recorded[-len(entries):] != entries:  # a planned schema may hold them already
            return {**f, "metadata": {**column.metadata, TYPE_CHANGES_KEY: [*recorded, *entries]}}
        return f

    schema_string = orjson.dumps(_map_struct_fields(orjson.loads(metadata.schema_string), visit)).decode()
    configuration = {**metadata.configuration, props.ENABLE_TYPE_WIDENING.key: "true"}
    return dataclasses.replace(metadata, schema_string=schema_string, configuration=configuration)


__all__ = ["TYPE_CHANGES_KEY", "RowCheck", "check_clustering", "clustering_domain_configuration", "column_path", "logical_clustering_columns", "SchemaChange", "highest_column_id", "inherit_column_mapping", "mapped_schema_of", "plan_change", "widening"]
