"""SQL text to an expression tree, through sqlglot's Spark dialect.

sqlglot is imported with the first predicate parsed, not with txnlog: reading a table without a
predicate need not hold the parser (12 MiB resident). Errors are :class:`InvalidPredicateError`
in the user's words: what is wrong and where, never the parser's internals.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from txnlog.errors import InvalidPredicateError
from txnlog.expressions.binding import cast_literal, is_number, is_string
from txnlog.expressions.tree import (
    FLIPPED_OPERATOR,
    ColumnComparison,
    Comparison,
    Constant,
    Expression,
    In,
    IsNull,
    Like,
    Opaque,
    Reference,
    and_,
    equal_null_safe,
    or_,
)
from txnlog.expressions.values import (
    CaseValue,
    CastValue,
    ColumnValue,
    FunctionCall,
    InList,
    LikeValue,
    LiteralValue,
    NullTest,
    Operation,
    ValueExpression,
)

# Deeper nesting (parentheses, NOT chains) is refused: the SQL parser recurses per level.
MAX_PREDICATE_NESTING = 32
# Longer predicates are refused rather than parsed.
MAX_PREDICATE_TOKENS = 200_000

T = TypeVar("T")

_US_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
_US_TIMESTAMP = pa.timestamp("us")

if TYPE_CHECKING:
    import sqlglot
    from sqlglot import exp
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.time import format_time


class _Parsing:
    """What parsing needs from sqlglot, filled in by :func:`_load_sqlglot`."""

    dialect: type[Dialect]
    comparisons: dict[type[exp.Expression], str]


_SQL = _Parsing()


def _load_sqlglot() -> None:
    """Import sqlglot when the first predicate is parsed. Binds the module-level names the
    parsing methods use."""
    if hasattr(_SQL, "dialect"):
        return
    import sqlglot  # deferred: the parser
    from sqlglot import exp  # deferred: the parser
    from sqlglot.dialects.spark import Spark  # deferred: the parser
    from sqlglot.time import format_time  # deferred: the parser

    class _SparkQuotedIdentifiers(Spark):
        """Spark SQL, except that double quotes delimit identifiers (as in ANSI SQL), not strings."""

        class Tokenizer(Spark.Tokenizer):
            QUOTES = ["'"]
            IDENTIFIERS = ["`", '"']

    comparisons: dict[type[exp.Expression], str] = {
        exp.EQ: "=",
        exp.NEQ: "<>",
        exp.LT: "<",
        exp.LTE: "<=",
        exp.GT: ">",
        exp.GTE: ">=",
    }
    globals().update(sqlglot=sqlglot, exp=exp, format_time=format_time)  # the names the parsing methods use
    _SQL.comparisons = comparisons
    _SQL.dialect = _SparkQuotedIdentifiers  # last: its presence says all is bound


def parse(sql: str) -> Expression:
    """The boolean SQL expression ``sql`` (Spark's dialect; double quotes name columns) as an
    expression tree in negation normal form. Conditions the tree cannot express (``key % 10 = 3``,
    ``upper(name) = 'A'``, CASE) become :class:`~txnlog.expressions.tree.Opaque` leaves. Columns
    are not resolved here: see :func:`txnlog.expressions.bind`."""
    if not isinstance(sql, str):
        raise InvalidPredicateError(f"a predicate must be SQL text, not {type(sql).__name__}", predicate=repr(sql))
    _load_sqlglot()
    return _Parser(sql).parse()


def parse_value(sql: str) -> ValueExpression:
    """The SQL value expression ``sql`` (``amount * 2``, ``upper(s.name)``, ``t.id = s.id AND
    s.op <> 'D'``) as a :mod:`txnlog.expressions.values` tree. Columns are not resolved here;
    qualified names (``t.id``) keep their qualifier as the reference's first name."""
    if not isinstance(sql, str):
        raise InvalidPredicateError(f"an expression must be SQL text, not {type(sql).__name__}", predicate=repr(sql))
    _load_sqlglot()
    parser = _Parser(sql, "expression")
    return parser.parse_with(parser.value)


def requalify(sql: str, aliases: Mapping[str, str]) -> str:
    """``sql`` with each column qualifier named in ``aliases`` (case-insensitively) replaced by
    its value, all at once (``{"target": "t", "t": "s"}`` swaps nothing twice): how a MERGE's
    own aliases become txnlog's ``t`` and ``s``. Text that does not parse is returned as it is
    (parsing it later names the error)."""
    if not isinstance(sql, str) or not aliases:
        return sql
    _load_sqlglot()
    lowered = {k.lower(): v for k, v in aliases.items()}
    try:
        tree = sqlglot.parse_one(sql, read=_SQL.dialect)
    except sqlglot.errors.SqlglotError:
        return sql
    changed = False
    for column in tree.find_all(exp.Column):
        qualifier = column.args.get("table")
        if qualifier is not None and qualifier.name.lower() in lowered:
            column.set("table", exp.to_identifier(lowered[qualifier.name.lower()]))
            changed = True
    return tree.sql(dialect=_SQL.dialect) if changed else sql


# --- the parser's errors, in the user's words -------------------------------------------------

# What an operator is called when its operand is missing, by sqlglot's name for it.
_INCOMPLETE = {
    "EQ": "comparison '='",
    "NEQ": "comparison '<>'",
    "LT": "comparison '<'",
    "LTE": "comparison '<='",
    "GT": "comparison '>'",
    "GTE": "comparison '>='",
    "NullSafeEQ": "comparison '<=>'",
    "NullSafeNEQ": "comparison IS DISTINCT FROM",
    "And": "AND",
    "Or": "OR",
    "Xor": "XOR",
    "Not": "NOT",
    "Between": "BETWEEN",
    "Like": "LIKE",
    "ILike": "ILIKE",
    "In": "IN",
    "Is": "IS",
    "Paren": "parenthesis '('",
    "Cast": "CAST",
}
_MISSING_PART = {
    "expression": "right-hand side",
    "this": "operand",
    "low": "lower bound (BETWEEN low AND high)",
    "high": "upper bound (BETWEEN low AND high)",
    "to": "type",
}
# Constructs a predicate cannot use, by sqlglot's name for them.
_CONSTRUCTS = {
    "Block": "more than one statement",
    "Escape": "LIKE with ESCAPE",
    "Star": "'*'",
    "Placeholder": "a parameter placeholder",
    "Add": "arithmetic",
    "Sub": "arithmetic",
    "Mul": "arithmetic",
    "Div": "arithmetic",
    "IntDiv": "arithmetic",
    "Mod": "arithmetic",
    "Neg": "a negated non-number",
    "DPipe": "string concatenation (||)",
    "Xor": "XOR",
    "Case": "CASE",
    "If": "IF",
    "Exists": "EXISTS",
    "Array": "an array",
    "Struct": "a struct",
    "Interval": "an interval",
}
# What gives a value, never a condition, by sqlglot's name for it (bitwise operators too).
_VALUES_ONLY = {"Add", "Sub", "Mul", "Div", "IntDiv", "Mod", "Neg", "DPipe", "Literal", "HexString", "Interval", "Array", "Struct"}


def _words(class_name: str) -> str:
    """A class name as lowercase words: 'BitwiseRightShift' -> 'bitwise right shift'."""
    return " ".join(part.lower() for part in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", class_name)) or "construct"


def _without_class_names(text: str) -> str:
    return re.sub(r"<class '(?:[\w]+\.)*(\w+)'>", lambda m: _words(m.group(1)), text)


def _position(sql: str, line: int, col: int, highlight: str) -> str:
    """Where the parser stopped, counted in characters from 1 (sqlglot reports where the
    offending token ends)."""
    start = max(1, col - len(highlight) + 1)
    if "\n" in sql:
        return f"at line {line}, character {start}"
    return f"at character {start}"


def _syntax_error(sql: str, error: Any) -> str:
    """A sqlglot ParseError's first error, said in terms of the predicate."""
    found = error.errors[0] if getattr(error, "errors", None) else {}
    description = str(found.get("description") or str(error).splitlines()[0])
    highlight = str(found.get("highlight") or "")
    where = ""
    if isinstance(found.get("line"), int) and isinstance(found.get("col"), int):
        where = " (" + _position(sql, found["line"], found["col"], highlight) + ")"
    missing = re.match(r"Required keyword: '(\w+)' missing for <class '(?:\w+\.)*(\w+)'>", description)
    if missing:
        part, kind = missing.groups()
        what = _INCOMPLETE.get(kind, _words(kind))
        if kind in ("Like", "ILike") and part == "expression":
            named = "pattern"
        elif kind in ("Not", "Paren"):
            named = "what follows it"
        else:
            named = _MISSING_PART.get(part, part)
        return f"incomplete {what}: missing {named}{where}"
    if description.startswith("Expecting )"):
        return f"unbalanced parentheses: a ')' is missing{where}"
    if description.startswith("Invalid expression / Unexpected token"):
        return f"has an unexpected {highlight!r}{where}" if highlight else f"has an unexpected token{where}"
    return _without_class_names(description) + where


def _unterminated_quote(sql: str) -> tuple[str, int] | None:
    """The first quote (', " or `) never closed, and its position counted from 1."""
    i = 0
    while i < len(sql):
        quote = sql[i]
        if quote not in "'\"`":
            i += 1
            continue
        j = i + 1
        while j < len(sql):
            if quote == "'" and sql[j] == "\\":
                j += 2
                continue
            if sql[j] == quote:
                if j + 1 < len(sql) and sql[j + 1] == quote:  # a doubled quote stands for itself
                    j += 2
                    continue
                break
            j += 1
        else:
            return quote, i + 1
        i = j + 1
    return None


def _token_error(sql: str) -> str:
    unterminated = _unterminated_quote(sql)
    if unterminated is not None:
        quote, at = unterminated
        kind = "string" if quote == "'" else "quoted name"
        return f"has an unterminated {kind}: the {quote} at character {at} is never closed"
    return "has text that is not SQL"


def _construct(e: exp.Expression) -> str:
    name = type(e).__name__
    if name in _CONSTRUCTS:
        return _CONSTRUCTS[name]
    if isinstance(e, (exp.Query, exp.Subquery)):
        return "a query"
    if isinstance(e, exp.Func):
        return "a function call"
    if name.startswith("Bitwise"):
        return "a bitwise operator"
    return _words(name)


# --- the parser ----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, sql: str, noun: str = "predicate") -> None:
        self.sql = sql
        self.noun = noun

    def error(self, what: str) -> InvalidPredicateError:
        return InvalidPredicateError(f"{self.noun} {self.sql!r} {what}", predicate=self.sql)

    def parse(self) -> Expression:
        return self.parse_with(self.build)

    def parse_with(self, build: Callable[[exp.Expression], T]) -> T:
        if not self.check_shape():
            raise self.error("cannot parse: nothing to parse (the text is empty)")
        try:
            parsed = sqlglot.parse_one(self.sql, read=_SQL.dialect)
            if not isinstance(parsed, exp.Expression):
                raise self.error("cannot parse: nothing to parse (the text is empty)")
            return build(parsed)
        except sqlglot.errors.TokenError:
            raise self.error(f"cannot parse: {_token_error(self.sql)}") from None
        except sqlglot.errors.ParseError as e:
            raise self.error(f"cannot parse: {_syntax_error(self.sql, e)}") from None
        except sqlglot.errors.SqlglotError as e:
            raise self.error(f"cannot parse: {_without_class_names(str(e).splitlines()[0])}") from None
        except RecursionError:
            raise self.error(f"nests too deeply (at most {MAX_PREDICATE_NESTING} levels are accepted)") from None

    def check_shape(self) -> bool:
        """Refuse predicates too deep or too long to parse, before the (recursive) parser sees
        them. False when there is nothing to parse."""
        try:
            tokens = _SQL.dialect().tokenize(self.sql)
        except sqlglot.errors.SqlglotError:
            raise self.error(f"cannot parse: {_token_error(self.sql)}") from None
        if len(tokens) > MAX_PREDICATE_TOKENS:
            raise self.error(f"is too long ({len(tokens)} tokens; at most {MAX_PREDICATE_TOKENS} are accepted)")
        depth = deepest = nots = 0
        for token in tokens:
            kind = token.token_type
            if kind == sqlglot.TokenType.L_PAREN:
                depth += 1
            elif kind == sqlglot.TokenType.R_PAREN:
                depth -= 1
            nots = nots + 1 if kind == sqlglot.TokenType.NOT else 0
            deepest = max(deepest, depth + nots)
        if deepest > MAX_PREDICATE_NESTING:
            raise self.error(f"nests too deeply ({deepest} levels; at most {MAX_PREDICATE_NESTING} are accepted)")
        return bool(tokens)

    def unsupported(self, e: exp.Expression, what: str | None = None) -> InvalidPredicateError:
        text = e.sql(dialect=_SQL.dialect)
        return self.error(f"uses an unsupported construct: {what or _construct(e)} ({text})")

    # -- the tree ---------------------------------------------------------------------------

    def build(self, e: exp.Expression) -> Expression:
        """``e`` as a tree; NOT is pushed down by :meth:`Expression.negate`."""
        e = self.unparen(e)
        if isinstance(e, exp.Not):
            return self.build(e.this).negate()
        if isinstance(e, (exp.And, exp.Or)):
            # A chain of one connective is flattened without recursion: the parser makes
            # ``a AND b AND c ...`` a left-deep tree as deep as it is long.
            kind = type(e)
            operands: list[exp.Expression] = []
            pending: list[exp.Expression] = [e]
            while pending:
                item = self.unparen(pending.pop())
                if type(item) is kind:
                    pending.extend((item.expression, item.this))
                else:
                    operands.append(item)
            parts = [self.build(operand) for operand in operands]
            return and_(*parts) if kind is exp.And else or_(*parts)
        if isinstance(e, exp.Boolean):
            return Constant(bool(e.this))
        if isinstance(e, exp.Null):
            return Constant(None)
        if isinstance(e, (exp.Column, exp.Dot)):
            return Comparison(self.reference(e), "=", pa.scalar(True))  # a boolean column as a condition
        if type(e) in _SQL.comparisons:
            if not (self.is_simple(e.this) and self.is_simple(e.expression)):
                return self.opaque(e)
            return self.build_comparison(e.this, _SQL.comparisons[type(e)], e.expression)
        if isinstance(e, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            return self.build_null_safe(e)
        if isinstance(e, exp.Between):
            if not all(self.is_simple(part) for part in (e.this, e.args["low"], e.args["high"])):
                return self.opaque(e)
            low = self.build_comparison(e.this, ">=", e.args["low"])
            high = self.build_comparison(e.this, "<=", e.args["high"])
            return and_(low, high)
        if isinstance(e, exp.In):
            return self.build_in(e)
        if isinstance(e, exp.Is):
            return self.build_is(e)
        if isinstance(e, (exp.Like, exp.ILike)):
            return self.build_like(e)
        if isinstance(e, exp.Func):  # CASE, IF, CAST, coalesce(), startswith(), ...: boolean or not, rows tell
            return self.opaque(e)
        if isinstance(e, exp.Alias):  # sqlglot reads "a b" as "a AS b"
            after = e.this.sql(dialect=_SQL.dialect)
            raise self.error(f"cannot parse: has an unexpected {e.alias!r} after {after!r}")
        name = type(e).__name__
        if name in _VALUES_ONLY or name.startswith("Bitwise"):
            text = e.sql(dialect=_SQL.dialect)
            raise self.error(f"has {text!r} where a condition is expected: it gives a value ({_construct(e)}), not true or false")
        raise self.unsupported(e)

    def opaque(self, e: exp.Expression) -> Expression:
        """``e``, a condition the tree cannot express, as a leaf computed on rows only."""
        return Opaque(self.value(e), e.sql(dialect=_SQL.dialect))

    def is_literal(self, e: exp.Expression) -> bool:
        """Is ``e`` written as a literal (what :meth:`literal` reads, or refuses in words)?"""
        e = self.unparen(e)
        if isinstance(e, (exp.Null, exp.Boolean, exp.Literal, exp.HexString)):
            return True
        if isinstance(e, (exp.Neg, exp.Cast, exp.TryCast)):
            return self.is_literal(e.this)
        return isinstance(e, exp.Concat) and all(isinstance(p, exp.Literal) and p.is_string for p in e.expressions)

    def is_simple(self, e: exp.Expression) -> bool:
        """A column or a literal: what the tree's comparisons hold."""
        return self.is_column(e) or self.is_literal(e)

    def is_column(self, e: exp.Expression) -> bool:
        return isinstance(self.unparen(e), (exp.Column, exp.Dot))

    def unparen(self, e: exp.Expression) -> exp.Expression:
        while isinstance(e, exp.Paren):
            e = e.this
        return e

    def reference(self, e: exp.Expression) -> Reference:
        e = self.unparen(e)
        names: list[str] = []
        while isinstance(e, exp.Dot):
            names.insert(0, e.expression.name)
            e = e.this
        if not isinstance(e, exp.Column):
            raise self.unsupported(e)
        names = [p.name for p in e.parts] + names
        if not all(names):
            raise self.unsupported(e)
        return Reference(tuple(names))

    def build_comparison(self, left: exp.Expression, op: str, right: exp.Expression) -> Expression:
        left, right = self.unparen(left), self.unparen(right)
        if self.is_column(left) and self.is_column(right):
            return ColumnComparison(self.reference(left), op, self.reference(right))
        if not self.is_column(left):
            if not self.is_column(right):
                return self.fold(self.literal(left), op, self.literal(right))
            left, right, op = right, left, FLIPPED_OPERATOR[op]
        return Comparison(self.reference(left), op, self.literal(right))

    def fold(self, left: pa.Scalar | None, op: str, right: pa.Scalar | None) -> Expression:
        if left is None or right is None:
            return Constant(None)
        a, b = left.as_py(), right.as_py()
        ops: dict[str, Callable[[object, object], bool]] = {
            "=": lambda x, y: x == y,
            "<>": lambda x, y: x != y,
            "<": lambda x, y: x < y,  # type: ignore[operator]
            "<=": lambda x, y: x <= y,  # type: ignore[operator]
            ">": lambda x, y: x > y,  # type: ignore[operator]
            ">=": lambda x, y: x >= y,  # type: ignore[operator]
        }
        try:
            return Constant(bool(ops[op](a, b)))
        except TypeError:
            raise self.error(f"compares incompatible literals {a!r} and {b!r}") from None

    def build_null_safe(self, e: exp.Expression) -> Expression:
        """``a <=> b`` / ``a IS DISTINCT FROM b``: never NULL, NULL equals NULL."""
        left, right = self.unparen(e.this), self.unparen(e.expression)
        if not self.is_column(left):
            left, right = right, left
        if not self.is_column(left) or not self.is_literal(right):
            # Never NULL, so IS DISTINCT FROM is exactly the negation of <=>.
            equal_sql = exp.NullSafeEQ(this=e.this.copy(), expression=e.expression.copy())
            node = Opaque(Operation("<=>", (self.value(left), self.value(right))), equal_sql.sql(dialect=_SQL.dialect))
            return node if isinstance(e, exp.NullSafeEQ) else node.negate()
        equal = equal_null_safe(self.reference(left), self.literal(right))
        return equal if isinstance(e, exp.NullSafeEQ) else equal.negate()

    def build_in(self, e: exp.In) -> Expression:
        if e.args.get("query") is not None or e.args.get("unnest") is not None or e.args.get("field") is not None:
            raise self.unsupported(e, "IN with a subquery")
        if not e.expressions:
            raise self.error("has an empty IN list")
        if not self.is_column(e.this) or not all(self.is_literal(item) for item in e.expressions):
            return self.opaque(e)
        return In(self.reference(e.this), tuple(self.literal(item) for item in e.expressions))

    def build_is(self, e: exp.Is) -> Expression:
        target, what = self.unparen(e.this), self.unparen(e.expression)
        if not self.is_column(target):
            return self.opaque(e)
        ref = self.reference(target)
        if isinstance(what, exp.Null):
            return IsNull(ref)
        if isinstance(what, exp.Boolean):
            # Never NULL: FALSE on the NULL rows, so that IS NOT TRUE holds there.
            return and_(IsNull(ref, negated=True), Comparison(ref, "=", pa.scalar(bool(what.this))))
        raise self.unsupported(e, "IS with something other than NULL, TRUE or FALSE")

    def build_like(self, e: exp.Expression) -> Expression:
        target = self.unparen(e.this)
        if not self.is_column(target):
            return self.opaque(e)
        pattern = self.literal(e.expression)
        if pattern is not None and not is_string(pattern.type):
            raise self.error(f"uses a non-string LIKE pattern {pattern.as_py()!r}")
        node = Like(self.reference(target), None if pattern is None else pattern.as_py(),
                    ignore_case=isinstance(e, exp.ILike))
        return node.negate() if e.args.get("negate") else node

    # -- value expressions ------------------------------------------------------------------

    def value(self, e: exp.Expression) -> ValueExpression:
        """``e`` as a value expression (arithmetic, functions, CASE, conditions)."""
        e = self.unparen(e)
        if isinstance(e, (exp.Column, exp.Dot)):
            return ColumnValue(self.reference(e))
        if isinstance(e, (exp.Null, exp.Boolean, exp.Literal, exp.HexString)):
            return LiteralValue(self.literal(e))
        if isinstance(e, exp.Neg):
            inner = self.value(e.this)
            if isinstance(inner, LiteralValue):
                return LiteralValue(self.literal(e))
            return Operation("NEG", (inner,))
        if isinstance(e, exp.Not):
            return Operation("NOT", (self.value(e.this),))
        binary = self.binary_operator(e)
        if binary is not None:
            return Operation(binary, (self.value(e.this), self.value(e.expression)))
        if isinstance(e, exp.Between):
            operand = self.value(e.this)
            low = Operation(">=", (operand, self.value(e.args["low"])))
            return Operation("AND", (low, Operation("<=", (operand, self.value(e.args["high"])))))
        if isinstance(e, exp.In):
            if e.args.get("query") is not None or e.args.get("unnest") is not None or e.args.get("field") is not None:
                raise self.unsupported(e, "IN with a subquery")
            if not e.expressions:
                raise self.error("has an empty IN list")
            return InList(self.value(e.this), tuple(self.value(item) for item in e.expressions))
        if isinstance(e, exp.Is):
            what = self.unparen(e.expression)
            if isinstance(what, exp.Null):
                return NullTest(self.value(e.this))
            if isinstance(what, exp.Boolean):  # never NULL
                return Operation("<=>", (self.value(e.this), LiteralValue(pa.scalar(bool(what.this)))))
            raise self.unsupported(e, "IS with something other than NULL, TRUE or FALSE")
        if isinstance(e, (exp.Like, exp.ILike)):
            pattern = self.literal(e.expression)
            if pattern is not None and not is_string(pattern.type):
                raise self.error(f"uses a non-string LIKE pattern {pattern.as_py()!r}")
            return LikeValue(self.value(e.this), None if pattern is None else pattern.as_py(),
                             negated=bool(e.args.get("negate")), ignore_case=isinstance(e, exp.ILike))
        if isinstance(e, exp.Case):
            return self.case(e)
        if isinstance(e, exp.If):
            return CaseValue(((self.value(e.this), self.value(e.args["true"])),), self.optional(e.args.get("false")))
        if isinstance(e, (exp.Cast, exp.TryCast)):  # the Spark dialect reads CAST as TryCast
            return CastValue(self.value(e.this), self.sql_type(e.to))
        if isinstance(e, exp.Func):
            return self.function(e)
        if isinstance(e, exp.Alias):
            after = e.this.sql(dialect=_SQL.dialect)
            raise self.error(f"cannot parse: has an unexpected {e.alias!r} after {after!r}")
        raise self.unsupported(e)

    def optional(self, e: exp.Expression | None) -> ValueExpression | None:
        return None if e is None else self.value(e)

    def binary_operator(self, e: exp.Expression) -> str | None:
        if type(e) in _SQL.comparisons:
            return _SQL.comparisons[type(e)]
        ops: dict[type[exp.Expression], str] = {
            exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.DPipe: "||",
            exp.And: "AND", exp.Or: "OR", exp.NullSafeEQ: "<=>",
        }
        if type(e) in ops:
            return ops[type(e)]
        if isinstance(e, exp.NullSafeNEQ):
            raise self.unsupported(e, "IS DISTINCT FROM (write NOT (a <=> b))")
        return None

    def case(self, e: exp.Case) -> ValueExpression:
        subject = self.optional(e.this)
        branches = []
        for branch in e.args.get("ifs") or []:
            condition = self.value(branch.this)
            if subject is not None:  # CASE x WHEN v THEN ...: x = v
                condition = Operation("=", (subject, condition))
            branches.append((condition, self.value(branch.args["true"])))
        return CaseValue(tuple(branches), self.optional(e.args.get("default")))

    def function(self, e: exp.Func) -> ValueExpression:
        if isinstance(e, exp.Anonymous):
            return FunctionCall(str(e.name).lower(), tuple(self.value(a) for a in e.expressions))
        name = e.sql_name().lower()
        if isinstance(e, (exp.Coalesce, exp.Concat)):
            first = [] if isinstance(e, exp.Concat) else [e.this]
            return FunctionCall("coalesce" if isinstance(e, exp.Coalesce) else "concat",
                                tuple(self.value(a) for a in [*first, *e.expressions]))
        if isinstance(e, exp.Trim) and e.args.get("expression") is None:
            position = str(e.args.get("position") or "").upper()
            return FunctionCall({"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim"), (self.value(e.this),))
        if isinstance(e, exp.Nullif):
            return FunctionCall("nullif", (self.value(e.this), self.value(e.expression)))
        dated = self.date_function(e)
        if dated is not None:
            return dated
        # Any other function: its operands in sqlglot's argument order, so the columns it
        # reads are known even where txnlog cannot compute it.
        args: list[ValueExpression] = []
        for arg in e.args.values():
            for item in arg if isinstance(arg, list) else [arg]:
                if isinstance(item, exp.Expression) and not isinstance(item, (exp.DataType, exp.Var)):
                    args.append(self.value(item))
        return FunctionCall(name, tuple(args))

    def date_function(self, e: exp.Func) -> ValueExpression | None:
        """The date, time and text functions generation expressions use, in Spark's terms
        (sqlglot rewrites them into its own): ``year(x)``, ``month``, ``day``, ``hour``,
        ``minute``, ``second``, ``date_format(x, 'yyyy-MM')``, ``substring(x, pos[, len])``,
        ``date_trunc('HOUR', x)``, ``trunc(x, 'MM')`` and ``to_date(x)`` (a cast to date);
        None for any other function."""
        parts = {exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.DayOfMonth: "day", exp.Hour: "hour",
                 exp.Minute: "minute", exp.Second: "second"}
        if type(e) in parts:
            return FunctionCall(parts[type(e)], (self.value(e.this),))
        if isinstance(e, exp.TsOrDsToDate) and e.args.get("format") is None:
            return CastValue(self.value(e.this), pa.date32())
        if isinstance(e, exp.TimeStrToTime):  # how sqlglot reads date_format's operand
            return self.value(e.this)
        if isinstance(e, exp.TimeToStr):
            spelled = format_time(str(e.args["format"].this), _SQL.dialect.INVERSE_TIME_MAPPING, _SQL.dialect.INVERSE_TIME_TRIE)
            return FunctionCall("date_format", (self.value(e.this), LiteralValue(pa.scalar(spelled or ""))))
        if isinstance(e, exp.Substring):
            args = [self.value(e.this), self.value(e.args["start"])]
            if e.args.get("length") is not None:
                args.append(self.value(e.args["length"]))
            return FunctionCall("substring", tuple(args))
        if isinstance(e, exp.TimestampTrunc):
            unit = e.args.get("unit")
            return FunctionCall("date_trunc", (LiteralValue(pa.scalar(str(unit.name if unit is not None else "").upper())), self.value(e.this)))
        if isinstance(e, exp.DateTrunc):
            unit = e.args.get("unit")
            text = unit.name if isinstance(unit, (exp.Literal, exp.Var)) else ""
            return FunctionCall("trunc", (self.value(e.this), LiteralValue(pa.scalar(str(text).upper()))))
        return None

    # -- literals ---------------------------------------------------------------------------

    def literal(self, e: exp.Expression) -> pa.Scalar | None:
        """A literal as an Arrow scalar of its own type; None for NULL."""
        e = self.unparen(e)
        if isinstance(e, exp.Null):
            return None
        if isinstance(e, exp.Boolean):
            return pa.scalar(bool(e.this))
        if isinstance(e, exp.Literal):
            return pa.scalar(e.this, pa.string()) if e.is_string else self.number(e.this)
        if isinstance(e, exp.Neg):
            inner = self.literal(e.this)
            if inner is None:
                return None
            if not is_number(inner.type):
                raise self.unsupported(e)
            return pc.negate_checked(inner)
        if isinstance(e, exp.HexString):
            return pa.scalar(bytes.fromhex(e.this), pa.binary())
        if isinstance(e, exp.Concat) and all(isinstance(p, exp.Literal) and p.is_string for p in e.expressions):
            return pa.scalar("".join(p.this for p in e.expressions), pa.string())  # Spark joins 'a' 'b'
        if isinstance(e, (exp.Cast, exp.TryCast)):
            inner = self.literal(e.this)
            if inner is None:
                return None
            return cast_literal(inner, self.sql_type(e.to), e.sql(dialect=_SQL.dialect), self.error)
        if self.is_column(e):
            text = e.sql(dialect=_SQL.dialect)
            raise self.error(f"compares column '{text}' where a literal was expected")
        raise self.unsupported(e)

    def number(self, text: str) -> pa.Scalar:
        if text.isdigit():
            value = int(text)
            return pa.scalar(value) if value < 2**63 else pa.scalar(decimal.Decimal(text))
        if "e" in text.lower():
            return pa.scalar(float(text))
        try:
            return pa.scalar(decimal.Decimal(text))
        except (decimal.InvalidOperation, pa.ArrowInvalid):
            raise self.error(f"has a malformed number {text!r}") from None

    def sql_type(self, dt: exp.DataType) -> pa.DataType:
        name = dt.this.name
        simple = {
            "DATE": pa.date32(),
            "TIMESTAMP": _US_TIMESTAMP_UTC,
            "TIMESTAMPTZ": _US_TIMESTAMP_UTC,
            "TIMESTAMPLTZ": _US_TIMESTAMP_UTC,
            "TIMESTAMPNTZ": _US_TIMESTAMP,
            "DATETIME": _US_TIMESTAMP,
            "TINYINT": pa.int8(),
            "SMALLINT": pa.int16(),
            "INT": pa.int32(),
            "BIGINT": pa.int64(),
            "FLOAT": pa.float32(),
            "DOUBLE": pa.float64(),
            "BOOLEAN": pa.bool_(),
            "VARCHAR": pa.string(),
            "CHAR": pa.string(),
            "TEXT": pa.string(),
            "BINARY": pa.binary(),
            "VARBINARY": pa.binary(),
        }
        if name in simple:
            return simple[name]
        if name == "DECIMAL":
            params = [int(p.this.this) for p in dt.expressions] if dt.expressions else [10, 0]
            precision, scale = (params + [0])[:2]
            return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        raise self.error(f"casts to unsupported type {dt.sql(dialect=_SQL.dialect)}")


__all__ = ["MAX_PREDICATE_NESTING", "MAX_PREDICATE_TOKENS", "parse", "parse_value", "requalify"]
