"""Fault injection for testing pipelines built on txnlog.

:class:`FaultInjectingStore` wraps any :class:`~txnlog.storage.LogStore` and, by rules you add,
makes chosen calls fail, fail N times then succeed, land and then fail (an ambiguous outcome),
run slowly, write only part of their bytes, list without the newest entries (a listing is not a
snapshot), or kill the whole process with SIGKILL at an exact step (a real crash, for crash
tests). Data files written through the store's Arrow filesystem are covered too.

    store = FaultInjectingStore(open_store("/data/events"))
    store.fail("put_if_absent", "_delta_log/*.json", times=2)   # two lost races to storage errors
    store.fail_after("put_if_absent", "_delta_log/*.json")      # lands, then the caller hears an error
    table = Table("/data/events", store=store)

Operations: ``read``, ``list``, ``info``, ``walk``, ``put_if_absent``, ``put``, ``delete``,
``open_atomic_output``, ``open_input``, ``write_data`` (an output stream of the Arrow
filesystem: data files), ``read_data`` and ``delete_data``. Paths are matched with
:func:`fnmatch.fnmatchcase` against the root-relative path (``*`` also crosses ``/``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from txnlog.errors import AmbiguousWriteError, StorageError
from txnlog.storage import FileInfo, LogStore

OPERATIONS = frozenset(
    {
        "read",
        "list",
        "info",
        "walk",
        "put_if_absent",
        "put",
        "delete",
        "open_atomic_output",
        "open_input",
        "write_data",
        "read_data",
        "delete_data",
    }
)


@dataclass
class Rule:
    """One fault: which calls it matches and what it does to them.

    The first ``skip`` matching calls pass untouched; the next ``times`` (None: all) get the fault.
    ``fired`` counts how often it did.
    """

    operation: str
    pattern: str
    action: str
    times: int | None = 1
    skip: int = 0
    seconds: float = 0.0
    keep: float = 0.5
    count: int = 1
    error: Callable[[str, str], BaseException] | None = None
    fired: int = 0
    _seen: int = field(default=0, repr=False)

    def _take(self, operation: str, path: str) -> bool:
        if operation != self.operation or not fnmatch.fnmatchcase(path, self.pattern):
            return False
        self._seen += 1
        if self._seen <= self.skip:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        self.fired += 1
        return True


def _injected(operation: str, path: str) -> StorageError:
    return StorageError(f"injected fault: {operation} {path}", path=path)


class FaultInjectingStore(LogStore):
    """A :class:`LogStore` that forwards to ``inner`` except where a rule says otherwise."""

    read_ahead = 1  # one read at a time: rules meet the calls in the order they are made

    def __init__(self, inner: LogStore) -> None:
        super().__init__(inner.root_uri)
        self.inner = inner
        self.supports_put_if_absent = inner.supports_put_if_absent
        self.rules: list[Rule] = []
        #: (operation, path) of every call, in order, faulted or not.
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    # -- adding rules -----------------------------------------------------------------------

    def _add(self, operation: str, pattern: str, action: str, **kwargs: Any) -> Rule:
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; one of {sorted(OPERATIONS)}")
        rule = Rule(operation, pattern, action, **kwargs)
        with self._lock:
            self.rules.append(rule)
        return rule

    def fail(
        self,
        operation: str,
        path: str = "*",
        *,
        times: int | None = 1,
        skip: int = 0,
        error: Callable[[str, str], BaseException] | None = None,
    ) -> Rule:
        """Raise before the call does anything (``error(operation, path)``, by default a
        ``StorageError``); with ``times=N`` the call then succeeds from the N+1-th try."""
        return self._add(operation, path, "fail", times=times, skip=skip, error=error)

    def fail_after(self, operation: str, path: str = "*", *, times: int | None = 1, skip: int = 0) -> Rule:
        """Let the call complete, then raise ``AmbiguousWriteError``: the write landed, but the
        caller cannot know (a timeout after the request was sent)."""
        return self._add(operation, path, "fail_after", times=times, skip=skip)

    def delay(self, operation: str, seconds: float, path: str = "*", *, times: int | None = None, skip: int = 0) -> Rule:
        """Sleep ``seconds`` before the call."""
        return self._add(operation, path, "delay", seconds=seconds, times=times, skip=skip)

    def truncate(
        self, operation: str, path: str = "*", *, keep: float = 0.5, raise_error: bool = True, times: int | None = 1, skip: int = 0
    ) -> Rule:
        """Write only the first ``keep`` fraction of the bytes (``put``, ``put_if_absent``,
        ``open_atomic_output``, ``write_data``); then raise a ``StorageError`` unless
        ``raise_error`` is False (a torn write nobody noticed)."""
        return self._add(operation, path, "truncate" if raise_error else "truncate_silently", keep=keep, times=times, skip=skip)

    def hide_newest(self, path: str = "_delta_log", *, count: int = 1, times: int | None = 1, skip: int = 0) -> Rule:
        """Make listings of ``path`` miss their ``count`` newest (last-named) entries, as an
        eventually consistent listing, or one taken while commits land, does."""
        return self._add("list", path, "hide_newest", count=count, times=times, skip=skip)

    def kill(self, operation: str, path: str = "*", *, skip: int = 0, after: bool = False) -> Rule:
        """SIGKILL this process at the matching call: before it does anything, or ``after`` it
        completed. For crash tests run in a child process."""
        return self._add(operation, path, "kill_after" if after else "kill", times=1, skip=skip)

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    # -- applying them ----------------------------------------------------------------------

    def _matching(self, operation: str, path: str) -> list[Rule]:
        with self._lock:
            self.calls.append((operation, path))
            return [r for r in self.rules if r._take(operation, path)]

    def _before(self, rules: list[Rule], operation: str, path: str) -> None:
        for rule in rules:
            if rule.action == "delay":
                time.sleep(rule.seconds)
            elif rule.action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif rule.action == "fail":
                raise (rule.error or _injected)(operation, path)

    def _after(self, rules: list[Rule], operation: str, path: str) -> None:
        for rule in rules:
            if rule.action == "kill_after":
                os.kill(os.getpid(), signal.SIGKILL)
            elif rule.action == "fail_after":
                raise AmbiguousWriteError(f"injected fault after {operation} of {path} completed", path=path)

    def _call(self, operation: str, path: str, run: Callable[[], Any]) -> Any:
        rules = self._matching(operation, path)
        self._before(rules, operation, path)
        result = run()
        self._after(rules, operation, path)
        return result

    def _write(self, operation: str, path: str, data: bytes, write: Callable[[bytes], None]) -> None:
        rules = self._matching(operation, path)
        self._before(rules, operation, path)
        torn = next((r for r in rules if r.action.startswith("truncate")), None)
        if torn is not None:
            write(data[: int(len(data) * torn.keep)])
            if torn.action == "truncate":
                raise StorageError(f"injected fault: {operation} of {path} cut short", path=path)
        else:
            write(data)
        self._after(rules, operation, path)

    # -- the LogStore contract --------------------------------------------------------------

    def read(self, path: str) -> bytes:
        return self._call("read", path, lambda: self.inner.read(path))  # type: ignore[no-any-return]

    def list_from(self, directory: str, start_name: str = "") -> list[FileInfo]:
        rules = self._matching("list", directory)
        self._before(rules, "list", directory)
        listed = self.inner.list_from(directory, start_name)
        for rule in rules:
            if rule.action == "hide_newest" and listed:
                listed = listed[: max(0, len(listed) - rule.count)]
        self._after(rules, "list", directory)
        return listed

    def info(self, path: str) -> FileInfo:
        return self._call("info", path, lambda: self.inner.info(path))  # type: ignore[no-any-return]

    def walk_files(self, directory: str = "") -> Iterator[FileInfo]:
        return iter(self._call("walk", directory, lambda: list(self.inner.walk_files(directory))))

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._write("put_if_absent", path, data, lambda b: self.inner.put_if_absent(path, b))

    def put(self, path: str, data: bytes) -> None:
        self._write("put", path, data, lambda b: self.inner.put(path, b))

    def delete(self, path: str) -> None:
        self._call("delete", path, lambda: self.inner.delete(path))

    @contextlib.contextmanager
    def open_atomic_output(self, path: str) -> Iterator[BinaryIO]:
        rules = self._matching("open_atomic_output", path)
        self._before(rules, "open_atomic_output", path)
        torn = next((r for r in rules if r.action.startswith("truncate")), None)
        with self.inner.open_atomic_output(path) as out:
            if torn is None:
                yield out
            else:
                buffer = _Buffer()
                yield buffer  # type: ignore[misc]
                data = buffer.getvalue()
                out.write(data[: int(len(data) * torn.keep)])
                if torn.action == "truncate":
                    raise StorageError(f"injected fault: open_atomic_output of {path} cut short", path=path)
        self._after(rules, "open_atomic_output", path)

    def open_input(self, path: str) -> BinaryIO:
        return self._call("open_input", path, lambda: self.inner.open_input(path))  # type: ignore[no-any-return]

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, root = self.inner.arrow_filesystem()
        return pafs.PyFileSystem(_FaultyArrowHandler(self, fs, root)), root

    def uri_of(self, path: str) -> str:
        return self.inner.uri_of(path)


class _Buffer:
    """A write-only byte sink with the file methods pyarrow and the checkpoint writer call."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        return len(chunk)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def tell(self) -> int:
        return sum(len(p) for p in self._parts)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


class _FaultyArrowHandler(pafs.FileSystemHandler):  # type: ignore[misc]  # pyarrow is untyped
    """The store's Arrow filesystem with the data-file operations run through the rules."""

    def __init__(self, store: FaultInjectingStore, fs: pafs.FileSystem, root: str) -> None:
        self.store = store
        self.fs = fs
        self.prefix = f"{root}/" if root else ""

    def _relative(self, path: str) -> str:
        return path.removeprefix(self.prefix)

    def get_type_name(self) -> str:
        return f"faulty+{self.fs.type_name}"

    def normalize_path(self, path: str) -> str:
        return str(self.fs.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)  # type: ignore[no-any-return]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)  # type: ignore[no-any-return]

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.fs.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path: str) -> None:
        self.store._call("delete_data", self._relative(path), lambda: self.fs.delete_file(path))

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.store._call("read_data", self._relative(path), lambda: self.fs.open_input_stream(path))

    def open_input_file(self, path: str) -> Any:
        return self.store._call("read_data", self._relative(path), lambda: self.fs.open_input_file(path))

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        relative = self._relative(path)
        rules = self.store._matching("write_data", relative)
        self.store._before(rules, "write_data", relative)
        torn = next((r for r in rules if r.action.startswith("truncate")), None)
        try:
            inner = self.fs.open_output_stream(path, metadata=metadata)
        except FileNotFoundError:
            # Its directory is missing: the writer makes it and opens the file again, and the
            # rules belong to that open, which writes the file.
            with self.store._lock:
                for rule in rules:
                    rule.fired -= 1
                    rule._seen -= 1
            raise
        return pa.PythonFile(_FaultyOutput(self.store, rules, relative, inner, torn), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_append_stream(path, metadata=metadata)


class _FaultyOutput:
    """An output stream that applies truncate/kill/fail-after rules when it is closed."""

    def __init__(self, store: FaultInjectingStore, rules: list[Rule], path: str, inner: Any, torn: Rule | None) -> None:
        self.store, self.rules, self.path, self.inner, self.torn = store, rules, path, inner, torn
        self._buffer = _Buffer() if torn is not None else None
        self.closed = False

    def write(self, data: Any) -> int:
        if self._buffer is not None:
            return self._buffer.write(data)
        return self.inner.write(data)  # type: ignore[no-any-return]

    def tell(self) -> int:
        return self._buffer.tell() if self._buffer is not None else int(self.inner.tell())

    def flush(self) -> None:
        if self._buffer is None:
            self.inner.flush()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._buffer is not None and self.torn is not None:
            data = self._buffer.getvalue()
            self.inner.write(data[: int(len(data) * self.torn.keep)])
            self.inner.close()
            if self.torn.action == "truncate":
                raise StorageError(f"injected fault: write_data of {self.path} cut short", path=self.path)
        else:
            self.inner.close()
        self.store._after(self.rules, "write_data", self.path)


__all__ = ["OPERATIONS", "FaultInjectingStore", "Rule"]
