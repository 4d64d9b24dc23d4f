"""The column-wise JSON encoding of add/remove rows writes exactly what the row-wise reference
encoding (``log_body``, shared with the codec) writes."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from txnlog.log.file_actions import _columnar_lines, _python_lines, file_action_lines, table_from_log_dicts

_text = st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FF), max_size=8)
_plain = st.text(st.characters(blacklist_categories=("Cs", "Cc"), max_codepoint=0x2FF), max_size=8)


def _body(kind: str, text: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, Any] = {
        "path": text.map(lambda s: "p/" + s),
        "partitionValues": st.dictionaries(text, st.one_of(st.none(), text), max_size=3),
        "size": st.integers(0, 2**40),
        "dataChange": st.booleans(),
        "stats": st.one_of(st.none(), text),
        "tags": st.one_of(st.none(), st.dictionaries(text, text, max_size=2)),
        "baseRowId": st.one_of(st.none(), st.integers(0, 2**40)),
    }
    if kind == "add":
        fields["modificationTime"] = st.integers(0, 2**42)
    else:
        fields["deletionTimestamp"] = st.one_of(st.none(), st.integers(0, 2**42))
    return st.fixed_dictionaries(fields).map(lambda d: {k: v for k, v in d.items() if v is not None})


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["add", "remove"]).flatmap(lambda k: st.tuples(st.just(k), st.lists(_body(k, _plain), min_size=1, max_size=20))))
def test_columnar_lines_equal_the_reference(case: tuple[str, list[dict[str, Any]]]) -> None:
    kind, bodies = case
    table = table_from_log_dicts(bodies, kind)
    columnar = _columnar_lines(table, kind)
    assert columnar is not None
    reference = _python_lines(table, kind)
    assert [orjson.loads(line) for line in columnar.to_pylist()] == [orjson.loads(line) for line in reference]


@settings(max_examples=30, deadline=None)
@given(st.lists(_body("add", _text), min_size=70, max_size=90))
def test_any_rows_encode_to_what_they_hold(bodies: list[dict[str, Any]]) -> None:
    """Control characters take the reference path; every line parses back to the row."""
    table = table_from_log_dicts(bodies, "add")
    lines = b"\n".join(file_action_lines(table, "add")).split(b"\n")
    assert [orjson.loads(line) for line in lines] == [orjson.loads(line) for line in _python_lines(table, "add")]
