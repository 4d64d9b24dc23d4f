"""Delta schemas (the JSON in ``metaData.schemaString``) to and from pyarrow schemas.

Each Arrow field carries the Delta field metadata (column mapping ids and physical names,
invariants, generation expressions...) JSON-encoded under ``b"delta.metadata"``.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import orjson
import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import SchemaError

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


def assign_column_mapping(schema_string: str, start_id: int = 0, *, keep_names: bool = False) -> tuple[str, int]:
    """Give every field without one a column mapping id and a physical name: a new one, or its
    own name with ``keep_names`` (mapping turned on for a table whose data files name columns so).

    Returns the new schemaString and the highest id used (``delta.columnMapping.maxColumnId``).
    """
    next_id = start_id

    def visit_type(t: Any) -> Any:
        if isinstance(t, dict):
            if t.get("type") == "struct":
                return {**t, "fields": [visit_field(f) for f in t["fields"]]}
            if t.get("type") == "array":
                return {**t, "elementType": visit_type(t["elementType"])}
            if t.get("type") == "map":
                return {**t, "keyType": visit_type(t["keyType"]), "valueType": visit_type(t["valueType"])}
        return t

    def visit_field(f: dict[str, Any]) -> dict[str, Any]:
        nonlocal next_id
        meta = dict(f.get("metadata") or {})
        if props.COLUMN_MAPPING_ID_KEY not in meta:
            next_id += 1
            meta[props.COLUMN_MAPPING_ID_KEY] = next_id
            meta[props.PHYSICAL_NAME_KEY] = f["name"] if keep_names else f"col-{uuid.uuid4()}"
        else:
            next_id = max(next_id, int(meta[props.COLUMN_MAPPING_ID_KEY]))
        return {**f, "type": visit_type(f["type"]), "metadata": meta}

    obj = orjson.loads(schema_string)
    out = visit_type(obj)
    return orjson.dumps(out).decode(), next_id
