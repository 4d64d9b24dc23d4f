"""Delta schemas (the JSON in ``metaData.schemaString``) to and from pyarrow schemas.

Each Arrow field carries the Delta field metadata (column mapping ids and physical names,
invariants, generation expressions...) JSON-encoded under ``b"delta.metadata"``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError, SchemaError

FIELD_METADATA_KEY = b"delta.metadata"

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "variant": pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)]),
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def _type_to_arrow(t: Any, where: str) -> pa.DataType:
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if m := _DECIMAL.match(t):
            precision, scale = int(m.group(1)), int(m.group(2))
            return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        raise SchemaError(f"unknown Delta type '{t}' at {where}", field=where)
    if not isinstance(t, dict):
        raise SchemaError(f"malformed Delta type at {where}: {t!r}", field=where)
    kind = t.get("type")
    if kind == "struct":
        return pa.struct([_field_to_arrow(f, where) for f in t.get("fields", [])])
    if kind == "array":
        item = pa.field("element", _type_to_arrow(t["elementType"], where + ".element"), t.get("containsNull", True))
        return pa.list_(item)
    if kind == "map":
        key = _type_to_arrow(t["keyType"], where + ".key")
        value = pa.field("value", _type_to_arrow(t["valueType"], where + ".value"), t.get("valueContainsNull", True))
        return pa.map_(key, value)
    raise SchemaError(f"unknown Delta type '{kind}' at {where}", field=where)


def _field_to_arrow(f: dict[str, Any], parent: str) -> pa.Field:
    try:
        name = f["name"]
        where = f"{parent}.{name}" if parent else name
        meta = f.get("metadata") or {}
        md = {FIELD_METADATA_KEY: orjson.dumps(meta)} if meta else None
        return pa.field(name, _type_to_arrow(f["type"], where), f.get("nullable", True), metadata=md)
    except KeyError as e:
        raise SchemaError(f"schema field under '{parent or '<root>'}' lacks '{e.args[0]}'", field=parent) from None


def delta_schema_to_arrow(schema: str | dict[str, Any]) -> pa.Schema:
    try:
        obj = orjson.loads(schema) if isinstance(schema, (str, bytes)) else schema
    except orjson.JSONDecodeError as e:
        raise SchemaError(f"schemaString is not valid JSON: {e}", field="schemaString") from None
    if not isinstance(obj, dict) or obj.get("type") != "struct":
        raise SchemaError("schemaString is not a struct type", field="schemaString")
    return pa.schema([_field_to_arrow(f, "") for f in obj.get("fields", [])])


def _type_from_arrow(t: pa.DataType, where: str) -> Any:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    simple = {
        pa.int64(): "long",
        pa.int32(): "integer",
        pa.int16(): "short",
        pa.int8(): "byte",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.date32(): "date",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_unsigned_integer(t):
        raise SchemaError(f"unsigned type {t} at {where} has no Delta equivalent; cast it to a signed type", field=where)
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field_from_arrow(t.field(i), where) for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {
            "type": "array",
            "elementType": _type_from_arrow(t.value_type, where + ".element"),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _type_from_arrow(t.key_type, where + ".key"),
            "valueType": _type_from_arrow(t.item_type, where + ".value"),
            "valueContainsNull": t.item_field.nullable,
        }
    if pa.types.is_dictionary(t):
        return _type_from_arrow(t.value_type, where)
    raise SchemaError(f"Arrow type {t} at {where} has no Delta equivalent", field=where)


def _field_from_arrow(f: pa.Field, parent: str) -> dict[str, Any]:
    where = f"{parent}.{f.name}" if parent else f.name
    meta = orjson.loads(f.metadata[FIELD_METADATA_KEY]) if f.metadata and FIELD_METADATA_KEY in f.metadata else {}
    return {"name": f.name, "type": _type_from_arrow(f.type, where), "nullable": f.nullable, "metadata": meta}


def arrow_to_delta_schema(schema: pa.Schema) -> str:
    """The ``schemaString`` for a pyarrow schema."""
    return orjson.dumps({"type": "struct", "fields": [_field_from_arrow(f, "") for f in schema]}).decode()


def delta_field_metadata(field: pa.Field) -> dict[str, Any]:
    if field.metadata and FIELD_METADATA_KEY in field.metadata:
        value = orjson.loads(field.metadata[FIELD_METADATA_KEY])
        return value if isinstance(value, dict) else {}
    return {}


def map_fields(t: Any, visit: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """``t`` (a Delta JSON type: a schema's struct, an array, a map or a primitive) with every
    field replaced by ``visit(field)``, whose type is then mapped the same way: outer fields
    before the fields nested in them."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return {**t, "fields": [_mapped_field(visit(f), visit) for f in t["fields"]]}
        if kind == "array":
            return {**t, "elementType": map_fields(t["elementType"], visit)}
        if kind == "map":
            return {**t, "keyType": map_fields(t["keyType"], visit), "valueType": map_fields(t["valueType"], visit)}
    return t


def _mapped_field(f: dict[str, Any], visit: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    return {**f, "type": map_fields(f["type"], visit)}


def assign_column_mapping(schema_string: str, start_id: int = 0) -> tuple[str, int]:
    """Give every field without one a column mapping id and a physical name.

    Returns the new schemaString and the highest id used (``delta.columnMapping.maxColumnId``).
    """
    next_id = start_id

    def visit_field(f: dict[str, Any]) -> dict[str, Any]:
        nonlocal next_id
        meta = dict(f.get("metadata") or {})
        if props.COLUMN_MAPPING_ID_KEY not in meta:
            next_id += 1
            meta[props.COLUMN_MAPPING_ID_KEY] = next_id
            meta[props.PHYSICAL_NAME_KEY] = f"col-{uuid.uuid4()}"
        else:
            next_id = max(next_id, int(meta[props.COLUMN_MAPPING_ID_KEY]))
        return {**f, "metadata": meta}

    out = map_fields(orjson.loads(schema_string), visit_field)
    return orjson.dumps(out).decode(), next_id


# --- identity, generated and default columns ---------------------------------------------------
#
# Their definitions live in the columns' Delta metadata (PROTOCOL.md "Identity Columns",
# "Generated Columns", "Default Columns"); these read and build them.

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class Identity:
    """An identity column's definition: values ``start + k * step`` (k >= 0), each beyond
    ``high_water_mark`` (None: none generated yet). ``always`` (GENERATED ALWAYS): a writer
    refuses values given for it; otherwise (BY DEFAULT) given values are kept as they are."""

    start: int
    step: int
    high_water_mark: int | None = None
    always: bool = True

    @property
    def next_value(self) -> int:
        """The first value a writer may generate now."""
        return self.start if self.high_water_mark is None else self.high_water_mark + self.step

    def beyond_mark(self, value: int) -> bool:
        """Whether ``value`` lies past the high-water mark in the step's direction."""
        if self.high_water_mark is None:
            return (value - self.start) * self.step >= 0
        return (value - self.high_water_mark) * self.step > 0

    def advanced(self, candidate: int) -> int | None:
        """The high-water mark after generating up to ``candidate``: rounded up to a value of
        the column's sequence and never moved back, as delta-spark advances it; None when it
        stays where it is."""
        if (candidate - self.start) * self.step < 0:  # before the start: nothing to record
            return None
        offset = candidate - self.start
        if offset % self.step:  # off the sequence (a given value): the next value of it
            quotient = abs(offset) // abs(self.step)  # truncated towards 0, as the JVM divides
            candidate = self.start + self.step * (quotient + 1)
        if self.high_water_mark is not None and (candidate - self.high_water_mark) * self.step <= 0:
            return None
        return candidate


def identity_of(field: pa.Field | dict[str, Any]) -> Identity | None:
    """The identity definition of ``field`` (an Arrow field or a Delta JSON field), or None.
    SchemaError naming the column when its metadata holds only part of one, a step of 0, or a
    type other than long (delta-spark's rules)."""
    if isinstance(field, pa.Field):
        meta, name, is_long = delta_field_metadata(field), field.name, field.type == pa.int64()
    else:
        meta, name, is_long = field.get("metadata") or {}, str(field.get("name")), field.get("type") == "long"
    keys = (props.IDENTITY_START_KEY, props.IDENTITY_STEP_KEY, props.IDENTITY_ALLOW_EXPLICIT_INSERT_KEY)
    present = [k in meta for k in keys]
    if not any(present):
        return None
    if not all(present):
        missing = [k for k, p in zip(keys, present, strict=True) if not p]
        raise SchemaError(f"identity column '{name}' lacks {', '.join(missing)} in its metadata", field=name)
    try:
        start, step = _long(meta[props.IDENTITY_START_KEY]), _long(meta[props.IDENTITY_STEP_KEY])
        mark = meta.get(props.IDENTITY_HIGH_WATER_MARK_KEY)
        high_water_mark = None if mark is None else _long(mark)
    except (TypeError, ValueError, OverflowError):
        raise SchemaError(f"identity column '{name}' has a start, step or high-water mark that is not a long", field=name) from None
    if step == 0:
        raise SchemaError(f"identity column '{name}' has {props.IDENTITY_STEP_KEY} 0: the step of an identity column cannot be 0", field=name)
    if not is_long:
        raise SchemaError(f"identity column '{name}' must be of type long (BIGINT)", field=name)
    explicit = meta[props.IDENTITY_ALLOW_EXPLICIT_INSERT_KEY]
    if isinstance(explicit, str):
        explicit = explicit.strip().lower() == "true"
    return Identity(start, step, high_water_mark, always=not bool(explicit))


def _long(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(value)
    number = int(value)
    if not LONG_MIN <= number <= LONG_MAX:
        raise OverflowError(value)
    return number


def generation_expression(field: pa.Field) -> str | None:
    """The SQL a generated column's values must equal (``delta.generationExpression``), or None."""
    value = delta_field_metadata(field).get(props.GENERATION_EXPRESSION_KEY)
    return str(value) if value is not None else None


def default_expression(field: pa.Field) -> str | None:
    """The SQL a column's missing values default to (``CURRENT_DEFAULT``), or None."""
    value = delta_field_metadata(field).get(props.CURRENT_DEFAULT_KEY)
    return str(value) if value is not None else None


def _with_metadata(name: str, type_: pa.DataType, nullable: bool, meta: dict[str, Any]) -> pa.Field:
    return pa.field(name, type_, nullable, metadata={FIELD_METADATA_KEY: orjson.dumps(meta)})


def identity_column(name: str, *, start: int = 1, step: int = 1, generated: str = "always", nullable: bool = True) -> pa.Field:
    """A long column whose values the table generates, ``start``, ``start + step``, ... (delta-spark's
    ``GENERATED ALWAYS AS IDENTITY (START WITH start INCREMENT BY step)``); ``generated="by default"``
    also accepts values a write gives (``GENERATED BY DEFAULT AS IDENTITY``)."""
    mode = generated.strip().lower().replace("_", " ")
    if mode not in ("always", "by default"):
        raise InvalidArgumentError(f"generated must be 'always' or 'by default', got {generated!r}")
    if isinstance(start, bool) or isinstance(step, bool) or not isinstance(start, int) or not isinstance(step, int):
        raise InvalidArgumentTypeError("identity_column: start and step must be integers")
    if step == 0:
        raise InvalidArgumentError("identity_column: step cannot be 0")
    if not (LONG_MIN <= start <= LONG_MAX and LONG_MIN <= step <= LONG_MAX):
        raise InvalidArgumentError("identity_column: start and step must fit a long")
    meta = {props.IDENTITY_START_KEY: start, props.IDENTITY_STEP_KEY: step, props.IDENTITY_ALLOW_EXPLICIT_INSERT_KEY: mode == "by default"}
    return _with_metadata(name, pa.int64(), nullable, meta)


def generated_column(name: str, type: pa.DataType, expression: str, *, nullable: bool = True) -> pa.Field:  # noqa: A002 - pa.field's word
    """A column whose value is always ``expression`` (Spark SQL over the row's other columns),
    as delta-spark's ``GENERATED ALWAYS AS (expression)``: computed when a write leaves it out,
    checked when a write gives it."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgumentError("generated_column needs a SQL expression")
    return _with_metadata(name, type, nullable, {props.GENERATION_EXPRESSION_KEY: expression})


def default_column(name: str, type: pa.DataType, expression: str, *, nullable: bool = True) -> pa.Field:  # noqa: A002 - pa.field's word
    """A column that takes ``expression`` (a SQL literal or expression without columns, e.g.
    ``'new'``, ``0``, ``current_date()``) in rows a write does not give it for (``DEFAULT``)."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgumentError("default_column needs a SQL expression")
    return _with_metadata(name, type, nullable, {props.CURRENT_DEFAULT_KEY: expression})


def with_high_water_marks(schema_string: str, marks: Mapping[str, int]) -> str:
    """``schema_string`` with the identity high-water mark of each top-level column named in
    ``marks`` set (everything else as it was)."""
    schema = orjson.loads(schema_string)
    for f in schema.get("fields", []):
        if f.get("name") in marks:
            f["metadata"] = {**(f.get("metadata") or {}), props.IDENTITY_HIGH_WATER_MARK_KEY: int(marks[f["name"]])}
    return orjson.dumps(schema).decode()
