"""Liquid clustering's incremental file choice and the marks its output carries, as delta-spark
keeps them, so that either engine's OPTIMIZE leaves the other's clustered files alone.

Each clustering OPTIMIZE writes one *cube*: its files carry ``clusteringProvider="liquid"``
(PROTOCOL.md's Clustered Table) and the tags ``ZCUBE_ID`` (the run's id) and
``ZCUBE_ZORDER_BY`` (the clustering columns, a JSON list). The next OPTIMIZE rewrites the files
of no cube (new appends) together with the cubes still smaller than the minimum cube size, and
does nothing when that would only rewrite one cube by itself.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa

from txnlog.log.actions import AddFile

#: ``AddFile.clusteringProvider`` of a file written by a clustering OPTIMIZE.
CLUSTERING_PROVIDER = "liquid"
#: The tags of a cube's files (delta-spark's ``AddFile.Tags``).
ZCUBE_ID = "ZCUBE_ID"
ZCUBE_ZORDER_BY = "ZCUBE_ZORDER_BY"


def new_cube_id() -> str:
    return str(uuid.uuid4())


def cube_candidates(files: pa.Table, clustering_columns: Sequence[str], min_cube_size: int) -> pa.Table:
    """The files (rows of ``Snapshot.files()``) a clustering OPTIMIZE rewrites: those in no cube
    and those of cubes of ``clustering_columns`` smaller than ``min_cube_size`` bytes; none when
    that is a single cube alone. Files another provider clustered, or clustered by other columns,
    are left alone."""
    if not files.num_rows:
        return files
    tags = files.column("tags").to_pylist(maps_as_pydicts="lossy")
    providers = files.column("clustering_provider").to_pylist()
    sizes = files.column("size").to_pylist()
    loose: list[int] = []
    cubes: dict[str, list[int]] = {}
    for i, (tag, provider) in enumerate(zip(tags, providers)):
        if provider not in (None, CLUSTERING_PROVIDER):
            continue
        cube, by = (tag or {}).get(ZCUBE_ID), (tag or {}).get(ZCUBE_ZORDER_BY)
        if cube is None or by is None:
            loose.append(i)
        elif _columns(by) == list(clustering_columns):
            cubes.setdefault(cube, []).append(i)
    small = [members for members in cubes.values() if sum(sizes[i] for i in members) < min_cube_size]
    if not loose and len(small) <= 1:
        return files.slice(0, 0)
    chosen = sorted(loose + [i for members in small for i in members])
    return files.take(pa.array(chosen, pa.int64()))


def _columns(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None  # a tag that is not ours: the file counts as clustered by other columns


def mark_cube(added: pa.Table | Sequence[AddFile], cube_id: str, clustering_columns: Sequence[str]) -> pa.Table | list[AddFile]:
    """``added`` (the new files, as an executor returns them) as members of cube ``cube_id``."""
    marks = {ZCUBE_ID: cube_id, ZCUBE_ZORDER_BY: orjson.dumps(list(clustering_columns)).decode()}
    if isinstance(added, pa.Table):
        n = added.num_rows
        old = added.column("tags").to_pylist(maps_as_pydicts="lossy") if "tags" in added.column_names else [None] * n
        tags = pa.array([list({**(t or {}), **marks}.items()) for t in old], added.schema.field("tags").type
                        if "tags" in added.column_names else pa.map_(pa.string(), pa.string()))
        provider = pa.array([CLUSTERING_PROVIDER] * n, pa.string())
        out = added
        for name, values in (("tags", tags), ("clustering_provider", provider)):
            index = out.schema.get_field_index(name)
            out = out.set_column(index, name, values) if index >= 0 else out.append_column(name, values)
        return out
    return [dataclasses.replace(a, tags={**(a.tags or {}), **marks}, clustering_provider=CLUSTERING_PROVIDER) for a in added]


__all__ = ["CLUSTERING_PROVIDER", "ZCUBE_ID", "ZCUBE_ZORDER_BY", "cube_candidates", "mark_cube", "new_cube_id"]
