"""Kubernetes label selectors: the full string grammar of ``k8s.io/apimachinery/pkg/labels``.

Grammar::

    selector    ::= "" | requirement ("," requirement)*
    requirement ::= ["!"] KEY
                  | KEY ("=" | "==" | "!=") VALUE
                  | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"
                  | KEY (">" | "<") INTEGER

Keys are qualified names (optional DNS-subdomain prefix and ``/``), values are at most 63
characters of ``[A-Za-z0-9._-]`` starting and ending alphanumeric (or empty). Parse errors raise
:class:`~metrics_adapter.errors.InvalidSelectorError` naming the offending token and position.

Where kube-apiserver's parser differs from the grammar's face value, we do as it does (checked
selector by selector against the real apiserver in
tests/e2e/metrics_adapter/test_selector_grammar.py): ``in`` and ``notin`` are keys where a key
is expected; an empty set ``()`` is the set of the empty value, and ``(,a)`` holds ``""`` and
``a``; a ``>``/``<`` operand is a label value too (so no sign); a NUL character where a token
would start ends the selector, and right after a word or symbol ends it and is dropped, as Go's
lexer reads a NUL as its end-of-input mark.
"""

from __future__ import annotations

import enum
import functools
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import cachetools

from metrics_adapter.bounded_cache import POINTER_BYTES, estimate_text
from metrics_adapter.errors import InvalidSelectorError
from metrics_adapter.kube.names import DNS1123_SUBDOMAIN, QUALIFIED_NAME_PART

_INTEGER = re.compile(r"^[0-9]+$")
_SPECIAL = frozenset(" \t\r\n,()!=<>")


class Operator(enum.Enum):
    """A requirement's operator."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


class _Tok(enum.Enum):
    IDENT = "identifier"
    BANG = "!"
    EQ = "="
    DEQ = "=="
    NEQ = "!="
    GT = ">"
    LT = "<"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    IN = "in"
    NOTIN = "notin"
    END = "end of string"


@dataclass(frozen=True)
class _Token:
    kind: _Tok
    text: str
    pos: int


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` clause."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this requirement."""
        present = self.key in labels
        op = self.operator
        if op is Operator.EXISTS:
            return present
        if op is Operator.DOES_NOT_EXIST:
            return not present
        if op is Operator.EQUALS or op is Operator.IN:
            return present and labels[self.key] in self.values
        if op is Operator.NOT_EQUALS or op is Operator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if not present or not _INTEGER.match(labels[self.key]):
            return False
        have, want = int(labels[self.key]), int(self.values[0])
        return have > want if op is Operator.GREATER_THAN else have < want

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if op in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {op.value} ({','.join(self.values)})"
        symbol = {Operator.EQUALS: "=", Operator.NOT_EQUALS: "!=", Operator.GREATER_THAN: ">"}
        return f"{self.key}{symbol.get(op, '<')}{self.values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse a selector string (``None`` or blank means "everything")."""
        if text is None or not text.strip():
            return _EVERYTHING
        return _parse_cached(text)

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether every requirement holds for ``labels``."""
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True

    def equality_labels(self) -> dict[str, str]:
        """The ``key=value`` pairs the selector pins (used as External metricLabels)."""
        return {
            r.key: r.values[0]
            for r in self.requirements
            if r.operator is Operator.EQUALS or (r.operator is Operator.IN and len(r.values) == 1)
        }

    @functools.cached_property
    def _text(self) -> str:
        # The canonical text keys the store's per-selector caches on every query: made once.
        return ",".join(str(r) for r in self.requirements)

    def __str__(self) -> str:
        return self._text


_EVERYTHING = LabelSelector()


PARSED_SELECTORS_MAX_BYTES = 4 << 20
"""The parsed-selector cache's budget (selector texts are client input)."""


def selector_bytes(selector: LabelSelector) -> int:
    """A selector's estimated bytes, with the text it was parsed from and its own text."""
    texts = [t for r in selector.requirements for t in (r.key, *r.values)]
    return 3 * estimate_text(*texts) + (POINTER_BYTES + 64) * (len(texts) + 2) + 64


@cachetools.cached(
    cachetools.LRUCache(maxsize=PARSED_SELECTORS_MAX_BYTES, getsizeof=selector_bytes),
    lock=threading.Lock(),
)
def _parse_cached(text: str) -> LabelSelector:
    # Selectors are immutable and the HPA sends the same ones every sync: parse each once.
    return LabelSelector(_Parser(text).parse())


def validate_key(key: str) -> str | None:
    """Return why ``key`` is not a valid label key, or ``None`` when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not QUALIFIED_NAME_PART.match(name):
        return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"  # noqa: E501
    return None


def validate_value(value: str) -> str | None:
    """Return why ``value`` is not a valid label value, or ``None`` when it is."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not QUALIFIED_NAME_PART.match(value):
        return "must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"  # noqa: E501
    return None


def _lex(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\x00":  # the Go lexer's end-of-input mark: the rest is never read
            n = i
            break
        if c in " \t\r\n":
            i += 1
            continue
        two = text[i : i + 2]
        if two in ("==", "!="):
            tokens.append(_Token(_Tok.DEQ if two == "==" else _Tok.NEQ, two, i))
            i += 2 + (text[i + 2 : i + 3] == "\x00")  # a NUL right after is consumed
            continue
        single = {
            "!": _Tok.BANG,
            "=": _Tok.EQ,
            ">": _Tok.GT,
            "<": _Tok.LT,
            "(": _Tok.LPAREN,
            ")": _Tok.RPAREN,
            ",": _Tok.COMMA,
        }
        if c in single:
            tokens.append(_Token(single[c], c, i))
            i += 1 + (text[i + 1 : i + 2] == "\x00")  # a NUL right after is consumed
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] != "\x00":
            i += 1
        word = text[start:i]
        if i < n and text[i] == "\x00":
            i += 1  # ends the word and is consumed, as in Go's scanIDOrKeyword
        kind = {"in": _Tok.IN, "notin": _Tok.NOTIN}.get(word, _Tok.IDENT)
        tokens.append(_Token(kind, word, start))
    tokens.append(_Token(_Tok.END, "", n))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _lex(text)
        self._i = 0

    def _peek(self) -> _Token:
        return self._tokens[self._i]

    def _next(self) -> _Token:
        tok = self._tokens[self._i]
        self._i = min(self._i + 1, len(self._tokens) - 1)
        return tok

    def _fail(self, tok: _Token, expected: str) -> InvalidSelectorError:
        found = "end of string" if tok.kind is _Tok.END else repr(tok.text)
        return InvalidSelectorError(
            f"unable to parse label selector {self._text!r}: found {found} at position "
            f"{tok.pos}, expected {expected}"
        )

    def parse(self) -> tuple[Requirement, ...]:
        if self._peek().kind is _Tok.END:
            return ()  # nothing before a NUL: the empty selector, as in Kubernetes
        reqs = [self._requirement()]
        while True:
            tok = self._next()
            if tok.kind is _Tok.END:
                return tuple(reqs)
            if tok.kind is not _Tok.COMMA:
                raise self._fail(tok, "',' or end of string")
            reqs.append(self._requirement())

    def _key(self) -> _Token:
        tok = self._next()
        if tok.kind not in (_Tok.IDENT, _Tok.IN, _Tok.NOTIN):
            raise self._fail(tok, "a label key")
        why = validate_key(tok.text)
        if why:
            raise InvalidSelectorError(
                f"unable to parse label selector {self._text!r}: invalid label key "
                f"{tok.text!r} at position {tok.pos}: {why}"
            )
        return tok

    def _value(self, tok: _Token) -> str:
        why = validate_value(tok.text)
        if why:
            raise InvalidSelectorError(
                f"unable to parse label selector {self._text!r}: invalid label value "
                f"{tok.text!r} at position {tok.pos}: {why}"
            )
        return tok.text

    def _requirement(self) -> Requirement:
        if self._peek().kind is _Tok.BANG:
            self._next()
            negated = self._key()
            after = self._peek()
            if after.kind not in (_Tok.COMMA, _Tok.END):
                raise self._fail(after, "',' or end of string after '!key'")
            return Requirement(negated.text, Operator.DOES_NOT_EXIST)
        key = self._key().text
        op_tok = self._peek()
        if op_tok.kind in (_Tok.COMMA, _Tok.END):
            return Requirement(key, Operator.EXISTS)
        self._next()
        if op_tok.kind in (_Tok.EQ, _Tok.DEQ, _Tok.NEQ):
            op = Operator.NOT_EQUALS if op_tok.kind is _Tok.NEQ else Operator.EQUALS
            return Requirement(key, op, (self._single_value(),))
        if op_tok.kind in (_Tok.GT, _Tok.LT):
            tok = self._next()
            if tok.kind is not _Tok.IDENT or not _INTEGER.match(tok.text):
                raise self._fail(tok, "an integer value")
            if int(tok.text) >= 2**63:  # Go's strconv.ParseInt(value, 10, 64)
                raise self._fail(tok, "an integer value of 64 bits")
            op = Operator.GREATER_THAN if op_tok.kind is _Tok.GT else Operator.LESS_THAN
            return Requirement(key, op, (tok.text,))
        if op_tok.kind in (_Tok.IN, _Tok.NOTIN):
            op = Operator.IN if op_tok.kind is _Tok.IN else Operator.NOT_IN
            return Requirement(key, op, self._value_set())
        raise self._fail(op_tok, "'=', '==', '!=', 'in', 'notin', '>', '<', ',' or end of string")

    def _single_value(self) -> str:
        tok = self._peek()
        if tok.kind in (_Tok.COMMA, _Tok.END):
            return ""  # `key=` selects the empty value, as in Kubernetes
        self._next()
        if tok.kind not in (_Tok.IDENT, _Tok.IN, _Tok.NOTIN):
            raise self._fail(tok, "a label value")
        return self._value(tok)

    def _value_set(self) -> tuple[str, ...]:
        tok = self._next()
        if tok.kind is not _Tok.LPAREN:
            raise self._fail(tok, "'('")
        values: list[str] = []
        while True:
            tok = self._next()
            if tok.kind in (_Tok.IDENT, _Tok.IN, _Tok.NOTIN):
                values.append(self._value(tok))
                tok = self._next()
            elif tok.kind in (_Tok.COMMA, _Tok.RPAREN):
                values.append("")  # `()`, `(,a)`, `(a,)` carry an empty value, as in Kubernetes
            else:
                raise self._fail(tok, "a label value")
            if tok.kind is _Tok.RPAREN:
                return tuple(values)
            if tok.kind is not _Tok.COMMA:
                raise self._fail(tok, "',' or ')'")
