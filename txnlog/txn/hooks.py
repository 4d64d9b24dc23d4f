"""Post-commit hooks: side effects that run after a version is safely in the log.

A failing hook never fails the committed transaction: the failure is logged and reported on
the commit result. Later issues add log cleanup and Iceberg export as hooks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from txnlog import properties as props

if TYPE_CHECKING:
    from txnlog.table import Snapshot, Table

log = logging.getLogger(__name__)


@dataclass
class PostCommitContext:
    """What a hook sees: the table, the version just committed, and its snapshot (built on demand)."""

    table: "Table"
    version: int
    operation: str
    #: The table properties in force at ``version`` (winners cannot have changed them).
    configuration: Mapping[str, str]
    _snapshot_factory: Callable[[], "Snapshot"] = field(repr=False)
    _snapshot: "Snapshot | None" = field(default=None, repr=False)

    @property
    def snapshot(self) -> "Snapshot":
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
        interval = props.CHECKPOINT_INTERVAL.get(ctx.configuration)
        if ctx.version > 0 and ctx.version % interval == 0:
            from txnlog.log.checkpoint_writer import write_checkpoint

            write_checkpoint(ctx.snapshot)


class HookRegistry:
    """An ordered set of hooks by name."""

    def __init__(self, hooks: list[PostCommitHook] | None = None) -> None:
        self._hooks: dict[str, PostCommitHook] = {h.name: h for h in hooks or []}

    def register(self, hook: PostCommitHook) -> None:
        self._hooks[hook.name] = hook

    def unregister(self, name: str) -> None:
        self._hooks.pop(name, None)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._hooks.values()))

    def copy(self) -> "HookRegistry":
        return HookRegistry(list(self._hooks.values()))

    def run(self, ctx: PostCommitContext) -> list[HookFailure]:
        failures = []
        for hook in self:
            try:
                hook(ctx)
            except Exception as e:  # a hook must never undo or fail a commit that landed
                log.warning("post-commit hook %r failed after version %d of %s", hook.name, ctx.version, ctx.table.uri, exc_info=True)
                failures.append(HookFailure(hook.name, e))
        return failures


#: Hooks every new Table starts with; register more here or on ``table.hooks``.
default_hooks = HookRegistry([CheckpointHook()])
