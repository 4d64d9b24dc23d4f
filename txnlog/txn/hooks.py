"""Post-commit hooks: side effects that run after a version is safely in the log.

A failing hook never fails the committed transaction: the failure is logged and reported on
``CommitResult.hook_failures``. Engines plug in without the core naming them: the default
registry loads every hook declared in the ``txnlog.post_commit_hooks`` entry-point group
(``[project.entry-points."txnlog.post_commit_hooks"]`` in a package's ``pyproject.toml``; each
names a zero-argument callable that returns a hook).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Protocol

from txnlog.snapshot import Snapshot
from txnlog.storage.location import Located, TableLocation
from txnlog.table_configuration import TableConfiguration

log = logging.getLogger(__name__)

#: The entry-point group engines declare their hooks in.
ENTRY_POINT_GROUP = "txnlog.post_commit_hooks"


@dataclass
class PostCommitContext(Located):
    """What a hook sees: where the table is, the version just committed, and its snapshot
    (built on demand). ``Table.from_location(ctx.location)`` gives a hook the Table."""

    location: TableLocation
    version: int
    operation: str
    #: The protocol and metadata in force at ``version`` (winners cannot have changed them).
    table_configuration: TableConfiguration
    _snapshot_factory: Callable[[], Snapshot] = field(repr=False)
    _snapshot: Snapshot | None = field(default=None, repr=False)

    @property
    def configuration(self) -> Mapping[str, str]:
        """The table properties in force at ``version``."""
        return self.table_configuration.properties

    @property
    def snapshot(self) -> Snapshot:
        """The table at ``version``."""
        if self._snapshot is None:
            self._snapshot = self._snapshot_factory()
        return self._snapshot


class PostCommitHook(Protocol):
    name: str

    def __call__(self, ctx: PostCommitContext) -> None: ...


@dataclass(frozen=True)
class HookFailure:
    hook: str
    error: BaseException


class CheckpointHook:
    """Write a checkpoint at every ``delta.checkpointInterval``-th version."""

    name = "checkpoint"

    def __call__(self, ctx: PostCommitContext) -> None:
        interval = ctx.table_configuration.checkpoint_interval
        if ctx.version > 0 and ctx.version % interval == 0:
            ctx.snapshot.checkpoint()


class HookRegistry:
    """An ordered set of hooks by name."""

    def __init__(self, hooks: list[PostCommitHook] | None = None) -> None:
        self._hooks: dict[str, PostCommitHook] = {h.name: h for h in hooks or []}

    def register(self, hook: PostCommitHook) -> None:
        self._hooks[hook.name] = hook

    def unregister(self, name: str) -> None:
        self._hooks.pop(name, None)

    def __iter__(self) -> Iterator[PostCommitHook]:
        return iter(list(self._hooks.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._hooks

    def copy(self) -> HookRegistry:
        return HookRegistry(list(self._hooks.values()))

    def run(self, ctx: PostCommitContext) -> list[HookFailure]:
        failures = []
        for hook in self:
            try:
                hook(ctx)
            except Exception as e:  # a hook must never undo or fail a commit that landed
                log.warning("post-commit hook %r failed after version %d of %s", hook.name, ctx.version, ctx.uri, exc_info=True)
                failures.append(HookFailure(hook.name, e))
        return failures


def load_entry_point_hooks(group: str = ENTRY_POINT_GROUP) -> list[PostCommitHook]:
    """One hook from each entry point of ``group``; one that fails to load is logged and skipped
    (a broken plug-in must not stop every commit)."""
    hooks: list[PostCommitHook] = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            hook = ep.load()()
            if not isinstance(getattr(hook, "name", None), str) or not callable(hook):
                raise TypeError(f"{ep.value} returned {hook!r}, which has no name or is not callable")
        except Exception:
            log.warning("could not load post-commit hook %r (%s) from group %s", ep.name, ep.value, group, exc_info=True)
            continue
        hooks.append(hook)
    return hooks


class _DefaultHooks(HookRegistry):
    """The registry every new Table copies: the checkpoint hook, then the entry-point group,
    loaded once, on first use (so importing txnlog imports no engine)."""

    def __init__(self) -> None:
        super().__init__([CheckpointHook()])
        self._loaded = False
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self._lock:
            if not self._loaded:
                self._loaded = True
                for hook in load_entry_point_hooks():
                    self._hooks.setdefault(hook.name, hook)

    def __iter__(self) -> Iterator[PostCommitHook]:
        self._load()
        return super().__iter__()

    def copy(self) -> HookRegistry:
        self._load()
        return super().copy()


#: Hooks every new Table starts with; register more here or on ``table.hooks``.
default_hooks: HookRegistry = _DefaultHooks()
