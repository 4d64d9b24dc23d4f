"""The arguments of the maintenance calls, checked before anything is read: the table (a Table or
a URI), counts and versions, durations. A bad one raises InvalidArgumentTypeError (also a
TypeError) or InvalidArgumentError (also a ValueError) naming the parameter and the value."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeAlias, TypeVar

from txnlog import Table
from txnlog.errors import InvalidArgumentError, InvalidArgumentTypeError
from txnlog.properties import parse_duration_ms

#: What every maintenance call takes as its table: a Table, or the URI or path of one.
TableOrUri: TypeAlias = "Table | str | os.PathLike[str]"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def open_table(table_or_uri: object, parameter: str = "table") -> Table:
    """``table_or_uri`` itself if it is a Table, else the Table at that URI or path (opened with
    no storage options: pass a Table to give some)."""
    if isinstance(table_or_uri, Table):
        return table_or_uri
    if isinstance(table_or_uri, (str, os.PathLike)):
        uri = os.fspath(table_or_uri)
        if isinstance(uri, str):
            if not uri.strip():
                # Otherwise '' would open the current directory.
                raise InvalidArgumentError(f"{parameter} is an empty URI: give a path or a URI such as s3://bucket/table")
            return Table(uri)
    raise InvalidArgumentTypeError(
        f"{parameter} must be a txnlog.Table or a table URI (str or os.PathLike), got {type(table_or_uri).__name__} {table_or_uri!r}"
    )


def takes_table(fn: Callable[Concatenate[Table, _P], _R]) -> Callable[Concatenate[TableOrUri, _P], _R]:
    """Let ``fn``, whose first parameter is a Table, be called with a URI too (see :func:`open_table`)."""

    @functools.wraps(fn)
    def run(table: TableOrUri, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return fn(open_table(table), *args, **kwargs)

    # run also takes table=... by keyword, which a Concatenate type cannot say.
    return run  # type: ignore[return-value]


def integer(parameter: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{parameter} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{parameter} must be >= {minimum}, got {value}")
    return value


def optional_integer(parameter: str, value: object, *, minimum: int | None = None) -> int | None:
    return None if value is None else integer(parameter, value, minimum=minimum)


def duration_ms(parameter: str, value: object) -> int | None:
    """A duration given as ms (an int >= 0) or as text (``30d``, ``168h``, ``interval 7 days``)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse_duration_ms(value)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{parameter}: {e}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{parameter} must be ms (an int) or text like '30d', got {type(value).__name__} {value!r}")
    return integer(parameter, value, minimum=0)
