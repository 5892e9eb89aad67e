"""Conditional single-item writes as PartiQL statements, so that several travel in one ``BatchExecuteStatement``.

The adapters build their writes as ``UpdateItem`` / ``DeleteItem`` parameters (``Key``, ``UpdateExpression``,
``ConditionExpression``, ``ExpressionAttributeNames``, ``ExpressionAttributeValues``, plain values as the
resource layer takes them). This module turns one such write into one statement with the same outcome, for the
small grammar the hot path uses, in the syntax documented for Amazon DynamoDB's PartiQL (not whatever DynamoDB
Local also accepts); anything else raises :class:`Untranslatable`, so nothing is sent mistranslated:

* ``SET a = :v``, ``SET a = b + :v`` / ``- :v``, ``REMOVE a``, ``ADD n :number`` (as ``SET n = n + ?``); top-level
  attribute names only; a ``SET`` or ``ADD`` that reads an attribute needs the condition to prove it present
  (an expression reading an absent attribute fails where the statement's arithmetic would not be defined);
* conditions of ``=``, ``<``, ``<=``, ``>``, ``>=``, ``AND``, ``OR``, parentheses, ``attribute_exists`` /
  ``attribute_not_exists`` (``IS NOT MISSING`` / ``IS MISSING``) and ``NOT`` over those two functions only.
  A comparison with an absent attribute is false in a condition expression and MISSING in PartiQL: the same
  under ``AND`` and ``OR`` (neither is true), not under ``NOT`` (false becomes true, MISSING stays MISSING), so
  ``NOT`` of a comparison is refused, as is ``<>`` (true for an absent attribute in a condition expression);
* an ``UPDATE`` statement never creates an item where ``UpdateItem`` would (its condition must be false on an
  absent item), and a ``DELETE`` statement reports an absent item as deleted where ``DeleteItem`` reports its
  condition failed: a delete whose condition an absent item fails is translated only for a caller that counts
  an absent item as deleted (``absent_ok``; the table's per-item path then does the same).

Names and the table are double-quoted, values are ``?`` parameters in their order in the text, and the key comes
first in the ``WHERE`` clause.

The text depends only on the write's shape (the table, the expressions, the names, which placeholders and key
attributes it has), never on its values, and the hot path writes a handful of shapes over and over: a shape's text
and where each ``?`` takes its value from are worked out once per process (:class:`_Plan`), and each write then
only converts its values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from amsg.adapters.dynamo.plain_table import to_wire

_TOKENS = re.compile(
    r"\s*(?:(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)|(?P<op><>|<=|>=|=|<|>)"
    r"|(?P<punct>[(),+\-])|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>\S))"
)
_COMPARISONS = {"=", "<", "<=", ">", ">="}
_FUNCTIONS = {"attribute_exists": "IS NOT MISSING", "attribute_not_exists": "IS MISSING"}
_CLAUSES = {"SET", "REMOVE", "ADD", "DELETE"}
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", *_CLAUSES}
_ACCEPTED = {
    "Key",
    "UpdateExpression",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "TableName",
}


class Untranslatable(ValueError):
    """The write uses something outside the translated grammar (or would behave differently as a statement)."""


@dataclass(frozen=True)
class Statement:
    """One PartiQL statement and its parameters (wire-typed attribute values, in the order of the ``?``)."""

    text: str
    parameters: list[dict[str, Any]]


# ---- condition trees ------------------------------------------------------------------------------------------
# ("cmp", op, left, right) with operands ("path", name) / ("value", placeholder); ("fn", function, name);
# ("and" | "or", left, right); ("not", operand)

Node = tuple[Any, ...]


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for match in _TOKENS.finditer(text):
        kind = match.lastgroup
        if kind is None:
            continue
        token = match.group(kind)
        if kind == "bad":
            raise Untranslatable(f"unsupported character {token!r} in an expression")
        if kind == "word" and token.upper() in _KEYWORDS:
            kind, token = "keyword", token.upper()
        out.append((str(kind), token))
    return out


@dataclass
class _Parser:
    tokens: list[tuple[str, str]]
    at: int = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, kind: str, token: str | None = None) -> str:
        current = self.peek()
        if current is None or current[0] != kind or (token is not None and current[1] != token):
            raise Untranslatable(f"expected {token or kind} at token {self.at}, found {current}")
        self.at += 1
        return current[1]

    def accepts(self, kind: str, token: str | None = None) -> bool:
        current = self.peek()
        if current is not None and current[0] == kind and (token is None or current[1] == token):
            self.at += 1
            return True
        return False

    def done(self) -> None:
        if self.peek() is not None:
            raise Untranslatable(f"unexpected {self.peek()} at token {self.at}")

    # condition := and (OR and)* ; and := not (AND not)* ; not := NOT not | primary
    def condition(self) -> Node:
        node = self.conjunction()
        while self.accepts("keyword", "OR"):
            node = ("or", node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.accepts("keyword", "AND"):
            node = ("and", node, self.negation())
        return node

    def negation(self) -> Node:
        if self.accepts("keyword", "NOT"):
            operand = self.negation()
            if not _two_valued(operand):
                raise Untranslatable("NOT of a comparison (MISSING under NOT differs from false)")
            return ("not", operand)
        return self.primary()

    def primary(self) -> Node:
        if self.accepts("punct", "("):
            node = self.condition()
            self.take("punct", ")")
            return node
        current = self.peek()
        if current is not None and current[0] == "word" and current[1] in _FUNCTIONS:
            self.at += 1
            self.take("punct", "(")
            name = self.path()
            self.take("punct", ")")
            return ("fn", current[1], name)
        left = self.operand()
        op = self.take("op")
        if op not in _COMPARISONS:
            raise Untranslatable(f"comparison {op!r} is not translated")
        right = self.operand()
        if left[0] == "value" and right[0] == "value":
            raise Untranslatable("a comparison of two values")
        return ("cmp", op, left, right)

    def operand(self) -> Node:
        current = self.peek()
        if current is not None and current[0] == "value":
            self.at += 1
            return ("value", current[1])
        return ("path", self.path())

    def path(self) -> str:
        current = self.peek()
        if current is None or current[0] not in ("name", "word") or current[1] in _FUNCTIONS:
            raise Untranslatable(f"expected an attribute name at token {self.at}, found {current}")
        self.at += 1
        following = self.peek()
        if following is not None and following[0] == "punct" and following[1] == "(":
            raise Untranslatable(f"function {current[1]!r} is not translated")
        return current[1]


def _two_valued(node: Node) -> bool:
    """True when ``node`` is never MISSING: built of the existence functions only."""
    if node[0] == "fn":
        return True
    if node[0] in ("and", "or"):
        return _two_valued(node[1]) and _two_valued(node[2])
    if node[0] == "not":
        return _two_valued(node[1])
    return False


def _chain(node: Node, kind: str) -> list[Node]:
    """The operands of a chain of one operator (``a AND b AND c``), flattened: the same logic, fewer parentheses."""
    if node[0] != kind:
        return [node]
    return [*_chain(node[1], kind), *_chain(node[2], kind)]


def _on_absent_item(node: Node) -> bool:
    """The condition's value on an item that does not exist (every attribute absent)."""
    kind = node[0]
    if kind == "fn":
        return bool(node[1] == "attribute_not_exists")
    if kind == "and":
        return _on_absent_item(node[1]) and _on_absent_item(node[2])
    if kind == "or":
        return _on_absent_item(node[1]) or _on_absent_item(node[2])
    if kind == "not":
        return not _on_absent_item(node[1])
    return False  # a comparison with an absent attribute


def _proves_present(node: Node | None, name: str, names: Mapping[str, str]) -> bool:
    """Whether the condition holding implies attribute ``name`` is present (names compared after ``names``
    resolves their placeholders)."""
    if node is None:
        return False
    real = names.get(name, name)
    kind = node[0]
    if kind == "cmp":
        return any(operand[0] == "path" and names.get(operand[1], operand[1]) == real for operand in node[2:])
    if kind == "fn":
        return bool(node[1] == "attribute_exists" and names.get(node[2], node[2]) == real)
    if kind == "and":
        return _proves_present(node[1], name, names) or _proves_present(node[2], name, names)
    if kind == "or":
        return _proves_present(node[1], name, names) and _proves_present(node[2], name, names)
    return False


# ---- emitting -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """A shape's statement text and the source of each ``?`` in order: ``(True, name)`` the key's attribute
    ``name``, ``(False, placeholder)`` that expression attribute value. ``numbers``: the placeholders an ``ADD``
    reads, which every write must prove numeric (the one check that looks at a value)."""

    text: str
    sources: tuple[tuple[bool, str], ...]
    numbers: tuple[str, ...] = ()


@dataclass
class _Emitter:
    names: Mapping[str, str]
    values: Mapping[str, Any]
    sources: list[tuple[bool, str]] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    used_names: set[str] = field(default_factory=set)
    used_values: set[str] = field(default_factory=set)

    def name(self, written: str) -> str:
        if written.startswith("#"):
            if written not in self.names:
                raise Untranslatable(f"attribute name placeholder {written} is not defined")
            self.used_names.add(written)
            real = self.names[written]
        else:
            real = written
        if not real or '"' in real:
            raise Untranslatable("an attribute name that cannot be quoted")
        return f'"{real}"'

    def value(self, placeholder: str) -> str:
        if placeholder not in self.values:
            raise Untranslatable(f"attribute value placeholder {placeholder} is not defined")
        self.used_values.add(placeholder)
        self.sources.append((False, placeholder))
        return "?"

    def operand(self, node: Node) -> str:
        return self.value(node[1]) if node[0] == "value" else self.name(node[1])

    def condition(self, node: Node) -> str:
        kind = node[0]
        if kind == "cmp":
            return f"{self.operand(node[2])} {node[1]} {self.operand(node[3])}"
        if kind == "fn":
            return f"{self.name(node[2])} {_FUNCTIONS[node[1]]}"
        if kind == "not":
            return f"NOT ({self.condition(node[1])})"
        return "(" + f" {kind.upper()} ".join(self.condition(part) for part in _chain(node, kind)) + ")"

    def where(self, key: Mapping[str, Any], condition: Node | None) -> str:
        parts = []
        for name in key:
            parts.append(f"{self.name(name)} = ?")
            self.sources.append((True, name))
        if condition is not None:
            parts.append(self.condition(condition))
        return " AND ".join(parts)

    def check_all_used(self) -> None:
        # UpdateItem refuses placeholders its expressions do not use; a statement would ignore them
        unused = (set(self.names) - self.used_names) | (set(self.values) - self.used_values)
        if unused:
            raise Untranslatable(f"placeholders not used by the expressions: {sorted(unused)}")


def _parsed_condition(params: Mapping[str, Any]) -> Node | None:
    unknown = set(params) - _ACCEPTED
    if unknown:
        raise Untranslatable(f"parameters not translated: {sorted(unknown)}")
    text = params.get("ConditionExpression")
    if text is None:
        return None
    if not isinstance(text, str):
        raise Untranslatable("a condition object (only expression strings are translated)")
    parser = _Parser(_tokens(text))
    node = parser.condition()
    parser.done()
    return node


def _emitter(params: Mapping[str, Any]) -> _Emitter:
    return _Emitter(
        dict(params.get("ExpressionAttributeNames") or {}), dict(params.get("ExpressionAttributeValues") or {})
    )


def _key(params: Mapping[str, Any]) -> Mapping[str, Any]:
    key = params.get("Key")
    if not isinstance(key, Mapping) or not key:
        raise Untranslatable("a write without its Key")
    return key


# ---- updates --------------------------------------------------------------------------------------------------


def _update_actions(text: str) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """(clause, tokens of one action) for each action of an update expression."""
    clause: str | None = None
    action: list[tuple[str, str]] = []
    for kind, token in _tokens(text):
        if kind == "keyword" and token in _CLAUSES:
            if clause is not None:
                yield clause, _action(clause, action)
            clause, action = token, []
        elif clause is None:
            raise Untranslatable("an update expression must start with SET, REMOVE or ADD")
        elif kind == "punct" and token == ",":
            yield clause, _action(clause, action)
            action = []
        else:
            action.append((kind, token))
    if clause is None:
        raise Untranslatable("an empty update expression")
    yield clause, _action(clause, action)


def _action(clause: str, tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if not tokens:
        raise Untranslatable(f"an empty {clause} action")
    return tokens


def _set_action(tokens: list[tuple[str, str]], out: _Emitter, condition: Node | None) -> tuple[str, str]:
    """(the attribute as written, ``"a" = <value>``) of one SET action."""
    parser = _Parser(tokens)
    target = parser.path()
    parser.take("op", "=")
    operands = [parser.operand()]
    sign = None
    if parser.peek() is not None:
        sign = parser.take("punct")
        if sign not in ("+", "-"):
            raise Untranslatable(f"{sign!r} in a SET action")
        operands.append(parser.operand())
    parser.done()
    for operand in operands:
        if operand[0] == "path" and not _proves_present(condition, operand[1], out.names):
            raise Untranslatable(f"SET reads {operand[1]}, which the condition does not prove present")
    rendered = [out.operand(operand) for operand in operands]
    return target, f"SET {out.name(target)} = {f' {sign} '.join(rendered)}"


def _add_action(tokens: list[tuple[str, str]], out: _Emitter, condition: Node | None) -> tuple[str, str]:
    parser = _Parser(tokens)
    target = parser.path()
    placeholder = parser.take("value")
    parser.done()
    _check_number(out.values.get(placeholder))
    out.numbers.append(placeholder)
    if not _proves_present(condition, target, out.names):
        raise Untranslatable(f"ADD to {target}, which the condition does not prove present")
    name = out.name(target)
    return target, f"SET {name} = {name} + {out.value(placeholder)}"


def _check_number(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise Untranslatable("ADD of something other than a number")


def update_statement(table: str, params: Mapping[str, Any]) -> Statement:
    """The ``UPDATE`` statement of one conditional ``UpdateItem`` (its parameters as the adapters build them)."""
    return _bound(_planned(("update", table), params, lambda: _update_plan(table, params)), params)


def delete_statement(table: str, params: Mapping[str, Any], *, absent_ok: bool) -> Statement:
    """The ``DELETE`` statement of one conditional ``DeleteItem``. ``absent_ok``: the caller counts an absent item
    as deleted (a statement reports it so, where ``DeleteItem`` reports a condition an absent item fails)."""
    plan = _planned(("delete", table, absent_ok), params, lambda: _delete_plan(table, params, absent_ok=absent_ok))
    return _bound(plan, params)


# a shape -> its plan; a process writes a few dozen shapes at most, the bound is for a caller that would not
_PLANS: dict[Hashable, _Plan] = {}
_MAX_PLANS = 256


def _planned(kind: tuple[Hashable, ...], params: Mapping[str, Any], plan: Callable[[], _Plan]) -> _Plan:
    """The plan of ``params``'s shape, worked out on its first write (a write it refuses is never remembered, so
    it is refused again, with the same error, every time)."""
    shape = _shape(kind, params)
    if shape is None:
        return plan()
    known = _PLANS.get(shape)
    if known is None:
        known = plan()
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[shape] = known
    return known


def _shape(kind: tuple[Hashable, ...], params: Mapping[str, Any]) -> Hashable | None:
    """All a write's plan depends on besides the values (an ``ADD``'s is checked per write); None when some part
    is not what a plan reads (the translation then runs, and refuses it, as for an uncached write)."""
    try:
        key = params["Key"]
        names = tuple(dict(params.get("ExpressionAttributeNames") or {}).items())
        values = tuple(dict(params.get("ExpressionAttributeValues") or {}))
        expressions = (params.get("UpdateExpression"), params.get("ConditionExpression"))
        shape = (*kind, tuple(params), expressions, tuple(key) if isinstance(key, Mapping) else None, names, values)
        hash(shape)
    except (KeyError, TypeError, ValueError):
        return None
    return shape


def _bound(plan: _Plan, params: Mapping[str, Any]) -> Statement:
    """The plan's statement with this write's values, wire-typed in the order of the ``?``."""
    key = params["Key"]
    values = params.get("ExpressionAttributeValues") or {}
    for placeholder in plan.numbers:
        _check_number(values.get(placeholder))
    chosen = {str(i): key[name] if in_key else values[name] for i, (in_key, name) in enumerate(plan.sources)}
    return Statement(plan.text, list(to_wire(chosen).values()))


def _update_plan(table: str, params: Mapping[str, Any]) -> _Plan:
    condition = _parsed_condition(params)
    if condition is None or _on_absent_item(condition):
        raise Untranslatable("an update whose condition holds on an absent item (UpdateItem would create it)")
    text = params.get("UpdateExpression")
    if not isinstance(text, str):
        raise Untranslatable("an update without its UpdateExpression")
    out = _emitter(params)
    clauses, targets = [], []
    for clause, tokens in _update_actions(text):
        if clause == "SET":
            target, rendered = _set_action(tokens, out, condition)
        elif clause == "ADD":
            target, rendered = _add_action(tokens, out, condition)
        elif clause == "REMOVE":
            parser = _Parser(tokens)
            target = parser.path()
            parser.done()
            rendered = f"REMOVE {out.name(target)}"
        else:
            raise Untranslatable(f"{clause} actions are not translated")
        clauses.append(rendered)
        targets.append(out.names.get(target, target))
    key = _key(params)
    if len(set(targets)) != len(targets) or set(targets) & set(key):
        raise Untranslatable("an attribute written twice, or a key attribute written")
    where = out.where(key, condition)
    out.check_all_used()
    text = f"UPDATE {_quoted(table)} {' '.join(clauses)} WHERE {where}"
    return _Plan(text, tuple(out.sources), tuple(out.numbers))


def _delete_plan(table: str, params: Mapping[str, Any], *, absent_ok: bool) -> _Plan:
    condition = _parsed_condition(params)
    if "UpdateExpression" in params:
        raise Untranslatable("a delete with an UpdateExpression")
    if condition is not None and not _on_absent_item(condition) and not absent_ok:
        raise Untranslatable("a delete whose condition an absent item fails, for a caller that must know")
    out = _emitter(params)
    where = out.where(_key(params), condition)
    out.check_all_used()
    # names are quoted identifiers and every value a parameter: nothing of the data is in the text
    return _Plan(f"DELETE FROM {_quoted(table)} WHERE {where}", tuple(out.sources))  # noqa: S608


def _quoted(table: str) -> str:
    if not table or '"' in table:
        raise Untranslatable("a table name that cannot be quoted")
    return f'"{table}"'
