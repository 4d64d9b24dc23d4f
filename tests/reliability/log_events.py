"""A timeline of everything that happens in a table's ``_delta_log`` during a load run, whoever
does it: every commit, checkpoint, ``_last_checkpoint`` and checksum file created, renamed into
place, written in place or deleted, with the time it was seen, read from Linux's inotify (so
delta-rs's writes are seen as well as txnlog's). Commit files are read as they appear: the
timeline says which ids each commit added and which engine wrote it. ``explain`` turns it into
the story of one acknowledged id that went missing.

Only the log directory is watched; temp files (``.x.tmp``, delta-rs's ``_commit_<uuid>.json.tmp``)
are left out. On a machine without inotify the watcher records nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import time
from pathlib import Path
from typing import Any

import orjson

_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_NAMES = {_IN_CLOSE_WRITE: "write", _IN_MOVED_FROM: "moved-away", _IN_MOVED_TO: "moved-in", _IN_CREATE: "create", _IN_DELETE: "delete"}
_HEADER = struct.Struct("iIII")


def _interesting(name: str) -> bool:
    return not name.endswith(".tmp") and (name.endswith((".json", ".parquet", ".crc")) or name == "_last_checkpoint")


def _describe(path: str, name: str) -> dict[str, Any]:
    """What a just-created log file holds: a commit's ids, operation and engine; the version a
    hint names; a checkpoint's size."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return {"unreadable": type(e).__name__}
    if name == "_last_checkpoint":
        try:
            return {"hint": orjson.loads(data).get("version")}
        except orjson.JSONDecodeError:
            return {"hint": None, "bytes": len(data)}
    if not name.endswith(".json"):
        return {"bytes": len(data)}
    ids: set[int] = set()
    info: dict[str, Any] = {}
    for line in data.splitlines():
        try:
            action = orjson.loads(line)
        except orjson.JSONDecodeError:
            info["torn"] = True
            continue
        if "add" in action and action["add"].get("stats"):
            ident = orjson.loads(action["add"]["stats"]).get("minValues", {}).get("id")
            if ident is not None:
                ids.add(ident)
        elif "commitInfo" in action:
            commit_info = action["commitInfo"]
            info["op"] = commit_info.get("operation")
            info["engine"] = commit_info.get("engineInfo") or commit_info.get("clientVersion")
    return {"ids": sorted(ids), **info}


def watch(directory: str, out_path: str, stop: Any) -> None:
    """Record the log's events into ``out_path`` (JSON lines) until ``stop`` is set."""
    with open(out_path, "wb") as out:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        mask = _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
        if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), mask) < 0:
            out.write(orjson.dumps({"t": time.time(), "ev": "no-inotify", "errno": ctypes.get_errno()}) + b"\n")
            return
        try:
            while True:
                stopping = stop.is_set()
                ready, _, _ = select.select([fd], [], [], 0.05)
                if ready:
                    _drain(fd, directory, out)
                elif stopping:
                    return
        finally:
            os.close(fd)


def _drain(fd: int, directory: str, out: Any) -> None:
    try:
        data = os.read(fd, 1 << 20)
    except BlockingIOError:
        return
    seen = time.time()
    offset = 0
    while offset < len(data):
        _wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
        raw = data[offset + _HEADER.size : offset + _HEADER.size + length]
        offset += _HEADER.size + length
        if mask & _IN_Q_OVERFLOW:
            out.write(orjson.dumps({"t": seen, "ev": "overflow"}) + b"\n")
            continue
        name = raw.split(b"\0", 1)[0].decode()
        if not _interesting(name):
            continue
        kind = next((label for bit, label in _NAMES.items() if mask & bit), hex(mask))
        event: dict[str, Any] = {"t": seen, "ev": kind, "name": name}
        if kind in ("create", "moved-in", "write"):
            event.update(_describe(os.path.join(directory, name), name))
        out.write(orjson.dumps(event) + b"\n")
    out.flush()


def read(path: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


def _version(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) == 20 else None


def explain(events: list[dict[str, Any]], ident: int, processes: list[dict[str, Any]] | None = None, *, around_s: float = 3.0) -> str:
    """The timeline of the acknowledged id ``ident``: the commit files that held it and what
    happened to them, to checkpoints and to ``_last_checkpoint`` around then, and the
    maintenance runs and writer calls (``processes``: dicts with ``t0``, ``t1``, ``what``) that
    overlapped."""
    held = [e for e in events if ident in e.get("ids", [])]
    if not held:
        return f"id {ident}: no commit file holding it was ever seen in _delta_log"
    lines = [f"id {ident}:"]
    for first in held:
        version = _version(first["name"])
        t0, t1 = first["t"] - around_s, first["t"] + around_s
        lines.append(f"  {first['name']} ({first.get('engine')}, {first.get('op')}) appeared at {first['t']:.3f}")
        for e in events:
            v = _version(e.get("name", ""))
            same_file = e.get("name") == first["name"]
            nearby = t0 <= e["t"] <= t1 and (v is None or version is None or abs(v - version) <= 120)
            structural = ".checkpoint" in e.get("name", "") or e.get("name") == "_last_checkpoint" or e["ev"] in ("delete", "moved-away", "overflow")
            if same_file or (nearby and (structural or v == version)):
                detail = {k: e[k] for k in ("ids", "hint", "engine", "op", "bytes") if k in e}
                lines.append(f"    {e['t']:.3f} {e['ev']:<10} {e.get('name', '')} {detail if detail else ''}")
        for p in processes or []:
            if p["t0"] <= t1 and p["t1"] >= t0:
                lines.append(f"    [{p['t0']:.3f} .. {p['t1']:.3f}] {p['what']}")
    return "\n".join(lines)
