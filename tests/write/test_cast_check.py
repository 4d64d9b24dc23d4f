"""txnlog.write.cast_check: the core's description of the safe Arrow cast every txnlog writer
applies, which engines casting with their own functions (Spark's native writer) compile. Each
description is checked against Arrow itself: a column of values is refused by Arrow's safe
cast exactly when the description says one of its values would change."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txnlog.write import CastCheck, cast_check

INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
FLOATS = [pa.float32(), pa.float64()]
DECIMALS = [pa.decimal128(5, 0), pa.decimal128(6, 2), pa.decimal128(10, 3), pa.decimal128(20, 0), pa.decimal128(22, 2)]


def _changes(check: CastCheck, value: object, target: pa.DataType) -> bool:
    """Whether ``check`` says the cast changes ``value`` (not null)."""
    if check.low is not None and check.high is not None and not check.low <= value <= check.high:  # type: ignore[operator]
        return True
    if check.round_trip:
        assert isinstance(value, decimal.Decimal) and isinstance(target, pa.Decimal128Type)
        rounded = value.quantize(decimal.Decimal(1).scaleb(-target.scale), rounding=decimal.ROUND_HALF_UP)
        return rounded != value or len(rounded.as_tuple().digits) > target.precision and rounded != 0
    return False


def _values(kind: pa.DataType) -> st.SearchStrategy[object]:
    if pa.types.is_integer(kind):
        info = (-(1 << (kind.bit_width - 1)), (1 << (kind.bit_width - 1)) - 1)
        near = [v for edge in (1 << 24, 1 << 53, 1 << 31, 1 << 15, 1 << 7) for v in (edge - 1, edge, edge + 1, -edge - 1, -edge)]
        return st.one_of(st.integers(*info), st.sampled_from([v for v in near if info[0] <= v <= info[1]]))
    if pa.types.is_floating(kind):
        return st.floats(allow_nan=True, allow_infinity=True, width=kind.bit_width)
    assert isinstance(kind, pa.Decimal128Type)
    return st.decimals(min_value=-(10 ** (kind.precision - kind.scale)) + 1, max_value=10 ** (kind.precision - kind.scale) - 1,
                       places=kind.scale, allow_nan=False, allow_infinity=False)


PAIRS = [(s, t) for s in INTEGERS + FLOATS + DECIMALS for t in INTEGERS + FLOATS + DECIMALS
         if cast_check(s, t) is not None]


@pytest.mark.parametrize("source, target", PAIRS, ids=[f"{s}-to-{t}" for s, t in PAIRS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_cast_is_refused_by_arrow_exactly_where_the_description_says_a_value_changes(source: pa.DataType, target: pa.DataType, data: st.DataObject) -> None:
    check = cast_check(source, target)
    assert check is not None
    values = data.draw(st.lists(_values(source), min_size=1, max_size=8))
    column = pa.array(values, source)
    try:
        column.cast(target, safe=True)
        refused = False
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        refused = True
    assert refused == any(_changes(check, v, target) for v in values), (values, check)


def test_what_the_description_leaves_to_arrow() -> None:
    """An integer to a decimal without room for every value of its type: Arrow refuses it
    whatever the values (an engine then leaves it to Arrow); kinds txnlog casts otherwise."""
    assert cast_check(pa.int64(), pa.decimal128(18, 0)) is None
    with pytest.raises(pa.ArrowInvalid):
        pa.array([0], pa.int64()).cast(pa.decimal128(18, 0), safe=True)
    assert not cast_check(pa.int64(), pa.decimal128(19, 0)).needed  # type: ignore[union-attr]
    assert cast_check(pa.decimal128(10, 0), pa.int64()) is None
    assert cast_check(pa.float64(), pa.int64()) is None
    assert cast_check(pa.string(), pa.int64()) is None
    assert cast_check(pa.int16(), pa.int64()) == CastCheck() and cast_check(pa.int64(), pa.int16()) == CastCheck(-32768, 32767)
    assert cast_check(pa.int64(), pa.float64()) == CastCheck(-(1 << 53), 1 << 53) and not cast_check(pa.int32(), pa.float64()).needed  # type: ignore[union-attr]
