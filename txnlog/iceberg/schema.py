"""Delta schemas as Iceberg schemas: types, stable field ids, the name mapping, the partition spec.

Field ids: a column-mapped table's ``delta.columnMapping.id`` (Parquet files carry them), else
the id the previous Iceberg schema gave the same column path, else a fresh one above every id
seen. The ids so persist in the Iceberg metadata itself; adding a column keeps the old ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import MappedField, NameMapping
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from txnlog import properties as props
from txnlog.errors import SchemaError
from txnlog.file_facts import is_column_mapped, is_variant, physical_name
from txnlog.schema import delta_field_metadata

#: Partition field ids start here, as Iceberg's own writers do.
FIRST_PARTITION_FIELD_ID = 1000

CHANGE_TYPE_COLUMN = "_change_type"
#: Iceberg's reserved field id for ``_change_type`` (Integer.MAX_VALUE - 104).
CHANGE_TYPE_FIELD_ID = 2**31 - 1 - 104
_NESTED_IDS_KEY = props.NESTED_IDS_KEY
Path = tuple[str, ...]


def _primitive(t: pa.DataType, where: str) -> IcebergType:
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return IntegerType()
    if pa.types.is_int64(t):
        return LongType()
    if pa.types.is_float32(t):
        return FloatType()
    if pa.types.is_float64(t):
        return DoubleType()
    if pa.types.is_decimal(t):
        return DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BinaryType()
    if pa.types.is_date(t):
        return DateType()
    if pa.types.is_timestamp(t):
        # Delta timestamp is an instant (Iceberg timestamptz); timestamp_ntz is wall time.
        return TimestamptzType() if t.tz is not None else TimestampType()
    raise SchemaError(f"column '{where}' has type {t}, which Iceberg format v2 cannot represent", field=where)


class _IdAssigner:
    def __init__(self, schema: pa.Schema, mapped: bool, previous: Schema | None, last_column_id: int) -> None:
        self.mapped = mapped
        self.previous = _ids_by_path(previous) if previous is not None else {}
        reserved: set[int] = set()
        if mapped:
            for f in schema:
                _collect_mapping_ids(f, reserved)
        self.used: set[int] = set(reserved)
        self.next_id = max([last_column_id, *reserved]) + 1

    def fresh(self) -> int:
        while self.next_id in self.used:
            self.next_id += 1
        self.used.add(self.next_id)
        return self.next_id

    def for_path(self, path: Path, mapping_id: int | None) -> int:
        if mapping_id is not None:
            return mapping_id
        old = self.previous.get(path)
        if old is not None and old not in self.used:
            self.used.add(old)
            return old
        return self.fresh()


def _collect_mapping_ids(f: pa.Field, out: set[int]) -> None:
    meta = delta_field_metadata(f)
    if props.COLUMN_MAPPING_ID_KEY in meta:
        out.add(int(meta[props.COLUMN_MAPPING_ID_KEY]))
    nested = meta.get(_NESTED_IDS_KEY)
    if isinstance(nested, Mapping):
        out.update(int(v) for v in nested.values())
    t = f.type
    if pa.types.is_struct(t) and not is_variant(t):
        for child in t:
            _collect_mapping_ids(child, out)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _collect_mapping_ids(t.value_field, out)
    elif pa.types.is_map(t):
        _collect_mapping_ids(t.key_field, out)
        _collect_mapping_ids(t.item_field, out)


def _ids_by_path(schema: Schema) -> dict[Path, int]:
    out: dict[Path, int] = {}

    def walk(t: IcebergType, path: Path) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                out[(*path, f.name)] = f.field_id
                walk(f.field_type, (*path, f.name))
        elif isinstance(t, ListType):
            out[(*path, "element")] = t.element_id
            walk(t.element_type, (*path, "element"))
        elif isinstance(t, MapType):
            out[(*path, "key")] = t.key_id
            out[(*path, "value")] = t.value_id
            walk(t.key_type, (*path, "key"))
            walk(t.value_type, (*path, "value"))

    walk(schema.as_struct(), ())
    return out


def _nested_id(meta: Mapping[str, Any], key: str) -> int | None:
    nested = meta.get(_NESTED_IDS_KEY)
    if isinstance(nested, Mapping) and key in nested:
        return int(nested[key])
    return None


def _convert(t: pa.DataType, path: Path, owner_meta: Mapping[str, Any], nested_key: str, ids: _IdAssigner) -> IcebergType:
    where = ".".join(path)
    if is_variant(t):
        raise SchemaError(f"column '{where}' is a variant, which Iceberg format v2 cannot represent", field=where)
    if pa.types.is_struct(t):
        return StructType(*[_field(child, path, ids) for child in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = t.value_field
        key = f"{nested_key}.element"
        element_id = ids.for_path((*path, "element"), _nested_id(owner_meta, key) if ids.mapped else None)
        element_type = _convert(element.type, (*path, "element"), owner_meta, key, ids)
        return ListType(element_id, element_type, element_required=not element.nullable)
    if pa.types.is_map(t):
        kkey, vkey = f"{nested_key}.key", f"{nested_key}.value"
        key_id = ids.for_path((*path, "key"), _nested_id(owner_meta, kkey) if ids.mapped else None)
        value_id = ids.for_path((*path, "value"), _nested_id(owner_meta, vkey) if ids.mapped else None)
        key_type = _convert(t.key_type, (*path, "key"), owner_meta, kkey, ids)
        value_type = _convert(t.item_type, (*path, "value"), owner_meta, vkey, ids)
        return MapType(key_id, key_type, value_id, value_type, value_required=not t.item_field.nullable)
    return _primitive(t, where)


def _field(f: pa.Field, parent: Path, ids: _IdAssigner) -> NestedField:
    path = (*parent, f.name)
    meta = delta_field_metadata(f)
    mapping_id = int(meta[props.COLUMN_MAPPING_ID_KEY]) if ids.mapped and props.COLUMN_MAPPING_ID_KEY in meta else None
    field_id = ids.for_path(path, mapping_id)
    nested_key = physical_name(f, ids.mapped)
    return NestedField(field_id, f.name, _convert(f.type, path, meta, nested_key, ids), required=not f.nullable)


def iceberg_schema(schema: pa.Schema, configuration: Mapping[str, str], previous: Schema | None, last_column_id: int) -> Schema:
    """The Iceberg schema of a Delta schema; ``previous`` (the current Iceberg schema) keeps ids
    stable for tables without column mapping."""
    ids = _IdAssigner(schema, is_column_mapped(configuration), previous, last_column_id)
    fields = [_field(f, (), ids) for f in schema]
    return Schema(*fields, schema_id=0)


def same_schema(a: Schema, b: Schema) -> bool:
    return a.as_struct() == b.as_struct()


def name_mapping(schema: pa.Schema, iceberg: Schema, configuration: Mapping[str, str]) -> NameMapping:
    """``schema.name-mapping.default``: each field id with the name data files use for it (the
    physical name under column mapping), for Parquet files written without field ids."""
    mapped = is_column_mapped(configuration)

    def fields_of(arrow_fields: list[pa.Field], ice: StructType) -> list[MappedField]:
        return [_mapped(af, nf) for af, nf in zip(arrow_fields, ice.fields)]

    def nested(t: pa.DataType, it: IcebergType) -> list[MappedField]:
        if isinstance(it, StructType):
            return fields_of(list(t), it)
        if isinstance(it, ListType):
            return [MappedField(field_id=it.element_id, names=["element"], fields=nested(t.value_type, it.element_type))]
        if isinstance(it, MapType):
            return [
                MappedField(field_id=it.key_id, names=["key"], fields=nested(t.key_type, it.key_type)),
                MappedField(field_id=it.value_id, names=["value"], fields=nested(t.item_type, it.value_type)),
            ]
        return []

    def _mapped(af: pa.Field, nf: NestedField) -> MappedField:
        return MappedField(field_id=nf.field_id, names=[physical_name(af, mapped)], fields=nested(af.type, nf.field_type))

    fields = fields_of(list(schema), iceberg.as_struct())
    if all(f.name != CHANGE_TYPE_COLUMN for f in schema):
        # Some writers leave CDF's _change_type in data files; map it to Iceberg's reserved id for
        # that column so readers resolve (and skip) it instead of failing on an unmapped name.
        fields.append(MappedField(field_id=CHANGE_TYPE_FIELD_ID, names=[CHANGE_TYPE_COLUMN]))
    return NameMapping(fields)


def partition_spec(
    iceberg: Schema, partition_columns: tuple[str, ...], existing: list[PartitionSpec], last_partition_id: int
) -> PartitionSpec:
    """Identity partitioning on the Delta partition columns: an existing spec with the same
    fields when there is one, else a new spec (id and field ids after the existing ones)."""
    sources = [iceberg.find_field(name).field_id for name in partition_columns]
    for spec in existing:
        if [f.source_id for f in spec.fields] == sources and all(isinstance(f.transform, IdentityTransform) for f in spec.fields):
            return spec
    next_field = max(last_partition_id, FIRST_PARTITION_FIELD_ID - 1) + 1
    fields = [
        PartitionField(source_id=src, field_id=next_field + i, transform=IdentityTransform(), name=name)
        for i, (src, name) in enumerate(zip(sources, partition_columns))
    ]
    spec_id = max((s.spec_id for s in existing), default=-1) + 1
    return PartitionSpec(*fields, spec_id=spec_id)
