"""Label selectors as the API server reads them: its grammar, its validation, its matching.

A port (our own Python) of apimachinery's ``pkg/labels/selector.go`` (``labels.Parse``,
its lexer and parser, ``NewRequirement``) and of the label key and value checks it uses
(``pkg/api/validate/content``), so that the cache answers a selector exactly as the API
server answers ``?labelSelector=``: the same selectors accepted, the same objects
matched, and for a rejected one the same message the server's 400 carries.

The grammar, as the server has it:

- requirements separated by ``,``; whitespace (space, tab, CR, LF) between tokens is
  ignored; an empty (or all-whitespace) selector selects everything;
- ``k`` (exists), ``!k`` (does not exist), ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
  ``k notin (a,b)``, ``k>n`` and ``k<n`` (``n`` an int64; the label must exist and be an
  int64 too);
- a key is a qualified name: an optional DNS-1123 subdomain prefix (at most 253 bytes)
  and ``/``, then a name of at most 63 bytes of ``[-A-Za-z0-9_.]`` that starts and ends
  with an alphanumeric; a value is empty or such a name;
- an exact value may be empty (``k=``, ``k==,x``); in a set, an empty element is the
  empty value (``k in (a,)``, ``k in (,a)``, ``k in (a,,b)``, and ``k in ()`` is
  ``k in ("")``);
- no trailing comma after a requirement (``a=b,``), no comma before the first;
  ``in`` and ``notin`` are keywords only where an operator is expected (``in in (in)``
  is a valid selector);
- a NUL character ends the selector where a token would start (the Go lexer reads a
  zero byte as its end of input).

`parse` raises ValueError with the server's own message (e.g. ``unable to parse
requirement: found 'db', expected: ',' or ')'``). `from_labels` makes the selector of a
``{key: value}`` dict, checking each key and value the same way.

`Selector.implies` is the rule the cache uses to serve a query from a label-selected
informer: it claims implication only when it holds (see its docstring).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "DOES_NOT_EXIST", "DOUBLE_EQUALS", "EQUALS", "EXISTS", "GREATER_THAN", "IN", "LESS_THAN",
    "NOT_EQUALS", "NOT_IN", "Requirement", "Selector", "from_labels", "label_key_errors",
    "label_value_errors", "parse", "parse_int64",
]

# The operators, spelt as apimachinery's `selection.Operator`.
DOES_NOT_EXIST = "!"
EQUALS = "="
DOUBLE_EQUALS = "=="
IN = "in"
NOT_EQUALS = "!="
NOT_IN = "notin"
EXISTS = "exists"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_POSITIVE = (EQUALS, DOUBLE_EQUALS, IN)          # the label has one of the values
_NEGATIVE = (NOT_EQUALS, NOT_IN)                 # the label is absent or none of them
_ORDERED = (GREATER_THAN, LESS_THAN)


# -- label keys and values (apimachinery's pkg/api/validate/content) --------------------

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start "
                  "and end with an alphanumeric character")
_LABEL_VALUE_FMT = f"({_LABEL_KEY_FMT})?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case "
                          "alphanumeric characters, '-' or '.', and must start and end with an "
                          "alphanumeric character")
_LABEL_KEY = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)
_NAME_MAX = 63
_PREFIX_MAX = 253
_INT64 = re.compile(r"[+-]?[0-9]+")


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError, to the character (its doubled spaces included)."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def _size(text: str) -> int:
    """Length as Go counts it: UTF-8 bytes."""
    return len(text.encode("utf-8", "surrogatepass"))


def label_key_errors(key: str) -> list[str]:
    """What is wrong with `key` as a label key (empty: nothing), in the server's words."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a valid label key " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName",
                                                     "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _size(prefix) > _PREFIX_MAX:
                errors.append("prefix part " + _max_len_error(_PREFIX_MAX))
            if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
                errors.append("prefix part " + _regex_error(
                    _DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    if not name:
        errors.append("name part must be non-empty")
    elif _size(name) > _NAME_MAX:
        errors.append("name part " + _max_len_error(_NAME_MAX))
    if not _LABEL_KEY.fullmatch(name):
        errors.append("name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName",
                                                  "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """What is wrong with `value` as a label value (empty: nothing), in the server's words."""
    errors: list[str] = []
    if _size(value) > _NAME_MAX:
        errors.append(_max_len_error(_NAME_MAX))
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value",
                                   "12345"))
    return errors


def parse_int64(text: str) -> int | None:
    """`text` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it, or None if it does not."""
    if not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if -(2 ** 63) <= number < 2 ** 63 else None


def _go_quote(text: str) -> str:
    """Go's %q of a string (strconv.Quote), as the server's messages show bad values."""
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", "\\": "\\\\", '"': '\\"'}
    out = []
    for char in text:
        code = ord(char)
        if char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _invalid(field: str, value: str, details: list[str]) -> str:
    """A field.Invalid error's text: ``<field>: Invalid value: "<value>": <details>``."""
    return f"{field}: Invalid value: {_go_quote(value)}: " + "; ".join(details)


def _aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message, or ``[a, b]`` (duplicates once)."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# -- requirements and selectors ------------------------------------------------------------

class Requirement(NamedTuple):
    """One requirement on one label: ``key``, ``operator`` (one of the constants above) and
    ``values``, sorted and without duplicates (one for ``=``, ``==``, ``!=``, ``gt``,
    ``lt``; none for ``exists`` and ``!``)."""

    key: str
    operator: str
    values: tuple[str, ...]

    @classmethod
    def make(cls, key: str, operator: str, values: Iterable[str] = (),
             key_field: str = "key") -> Requirement:
        """A checked requirement (apimachinery's NewRequirement); ValueError with the
        server's message when the key, operator or values are not valid."""
        values = tuple(sorted(set(values)))
        errors: list[str] = []
        if problems := label_key_errors(key):
            errors.append(_invalid(key_field, key, problems))
        if operator in (IN, NOT_IN) and not values:
            errors.append(f"values: Invalid value: {_go_list(values)}: for 'in', 'notin' "
                          "operators, values set can't be empty")
        elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(values) != 1:
            errors.append(f"values: Invalid value: {_go_list(values)}: exact-match "
                          "compatibility requires one single value")
        elif operator in (EXISTS, DOES_NOT_EXIST) and values:
            errors.append(f"values: Invalid value: {_go_list(values)}: values set must be "
                          "empty for exists and does not exist")
        elif operator in _ORDERED:
            if len(values) != 1:
                errors.append(f"values: Invalid value: {_go_list(values)}: for 'Gt', 'Lt' "
                              "operators, exactly one value is required")
            errors.extend(_invalid(f"values[{i}]", value, [
                "for 'Gt', 'Lt' operators, the value must be an integer"])
                for i, value in enumerate(values) if parse_int64(value) is None)
        elif operator not in (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, EXISTS,
                              DOES_NOT_EXIST):
            supported = ", ".join(f'"{op}"' for op in (*_BINARY_OPERATORS, EXISTS,
                                                        DOES_NOT_EXIST))
            errors.append(f"operator: Unsupported value: {_go_quote(operator)}: "
                          f"supported values: {supported}")
        for i, value in enumerate(values):
            if problems := label_value_errors(value):
                errors.append(_invalid(f"values[{i}][{key}]", value, problems))
        if errors:
            raise ValueError(_aggregate(errors))
        return cls(key, operator, values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a set of labels satisfies this requirement (as the server decides)."""
        present = self.key in labels
        if self.operator in _POSITIVE:
            return present and labels[self.key] in self.values
        if self.operator in _NEGATIVE:
            return not present or labels[self.key] not in self.values
        if self.operator == EXISTS:
            return present
        if self.operator == DOES_NOT_EXIST:
            return not present
        if self.operator in _ORDERED and present and len(self.values) == 1:
            have, bound = parse_int64(labels[self.key]), parse_int64(self.values[0])
            if have is None or bound is None:
                return False
            return have > bound if self.operator == GREATER_THAN else have < bound
        return False

    def implies(self, other: Requirement) -> bool:
        """Whether every set of labels that satisfies this requirement satisfies `other`.

        Sound, and exact except for ``>``/``<`` against a set (never claimed). Only the
        states of one label matter: absent, or present with some value."""
        if self.key != other.key:
            return False
        if self.operator in _POSITIVE:       # finitely many states: try each one
            return all(other.matches({self.key: value}) for value in self.values)
        if self.operator == DOES_NOT_EXIST:  # one state: absent
            return other.matches({})
        if self.operator == EXISTS:          # any value: only "exists" allows them all
            return other.operator == EXISTS
        if self.operator in _NEGATIVE:       # absent, or any value but these
            return other.operator in _NEGATIVE and set(other.values) <= set(self.values)
        if self.operator in _ORDERED:        # present, an integer beyond the bound
            bound = parse_int64(self.values[0]) if len(self.values) == 1 else None
            if bound is None:
                return False
            if other.operator == EXISTS:
                return True
            if other.operator == self.operator:
                theirs = parse_int64(other.values[0]) if len(other.values) == 1 else None
                return theirs is not None and (theirs <= bound if self.operator == GREATER_THAN
                                               else theirs >= bound)
            if other.operator in _NEGATIVE:  # none of the excluded values is beyond the bound
                return not any(self.matches({self.key: value}) for value in other.values)
        return False

    def __str__(self) -> str:
        """As apimachinery's Requirement.String() writes it."""
        if self.operator == DOES_NOT_EXIST:
            return "!" + self.key
        if self.operator == EXISTS:
            return self.key
        values = ",".join(self.values)
        written = {IN: f" in ({values})", NOT_IN: f" notin ({values})",
                   GREATER_THAN: f">{values}", LESS_THAN: f"<{values}"}
        return self.key + written.get(self.operator, self.operator + values)


def _go_list(values: tuple[str, ...]) -> str:
    """A []string bad value as the server shows it (JSON)."""
    return "[" + ",".join(_go_quote(v) for v in values) + "]"


@dataclass(frozen=True)
class Selector:
    """Requirements that must all hold, sorted by key (stable). Empty: selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def implies(self, other: Selector) -> bool:
        """Whether every object this selector matches is matched by `other` too.

        Sound by construction: true only when each requirement of `other` is implied by
        one requirement of this selector on the same key (`Requirement.implies`), so a
        conjunction that implies `other` only through two of its requirements together
        (``a in (x,y),a!=y`` against ``a=x``) is not recognised; that costs a request,
        never a wrong answer."""
        return all(any(mine.implies(theirs) for mine in self.requirements)
                   for theirs in other.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        """The canonical text (apimachinery's Selector.String()): parses to the same."""
        return ",".join(str(requirement) for requirement in self.requirements)


def from_labels(labels: Mapping[str, str]) -> Selector:
    """The selector of every label in `labels` equal to its value (apimachinery's
    ValidatedSelectorFromSet): ValueError naming the first bad key or value, by key."""
    requirements = []
    for key in sorted(labels):
        value = labels[key]
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"label selector {dict(labels)!r}: keys and values must be "
                            f"strings, not {type(key).__name__}: {type(value).__name__}")
        requirements.append(Requirement.make(key, EQUALS, [value]))
    return Selector(tuple(requirements))


# -- the lexer ---------------------------------------------------------------------------

class _Token(enum.Enum):
    ERROR = enum.auto()
    END = enum.auto()
    CLOSED_PAR = enum.auto()
    COMMA = enum.auto()
    DOES_NOT_EXIST = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER_THAN = enum.auto()
    IDENTIFIER = enum.auto()
    IN = enum.auto()
    LESS_THAN = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN_PAR = enum.auto()


_LITERALS = {")": _Token.CLOSED_PAR, ",": _Token.COMMA, "!": _Token.DOES_NOT_EXIST,
             "==": _Token.DOUBLE_EQUALS, "=": _Token.EQUALS, ">": _Token.GREATER_THAN,
             "in": _Token.IN, "<": _Token.LESS_THAN, "!=": _Token.NOT_EQUALS,
             "notin": _Token.NOT_IN, "(": _Token.OPEN_PAR}
_OPERATOR_OF = {_Token.IN: IN, _Token.EQUALS: EQUALS, _Token.DOUBLE_EQUALS: DOUBLE_EQUALS,
                _Token.GREATER_THAN: GREATER_THAN, _Token.LESS_THAN: LESS_THAN,
                _Token.NOT_IN: NOT_IN, _Token.NOT_EQUALS: NOT_EQUALS}
_WHITESPACE = " \t\r\n"
_SPECIAL = "=!(),><"
_END = "\0"  # what Go's lexer reads past the end; a NUL in the text reads the same


def _tokens(text: str) -> list[tuple[_Token, str]]:
    """The tokens up to (and including) the first end of input, as the Go lexer makes them."""
    position = 0

    def read() -> str:
        nonlocal position
        if position < len(text):
            position += 1
            return text[position - 1]
        return _END

    found: list[tuple[_Token, str]] = []
    while True:
        char = read()
        while char in _WHITESPACE:
            char = read()
        if char == _END:
            found.append((_Token.END, ""))
            return found
        buffer = char
        if char in _SPECIAL:  # the longest run of symbols that is a token
            token = _LITERALS[char]  # every symbol alone is one
            while (char := read()) != _END:
                if char not in _SPECIAL or buffer + char not in _LITERALS:
                    position -= 1
                    break
                buffer += char
                token = _LITERALS[buffer]
            found.append((token, buffer))
            continue
        while (char := read()) != _END:  # an identifier or a keyword
            if char in _SPECIAL or char in _WHITESPACE:
                position -= 1
                break
            buffer += char
        found.append((_LITERALS.get(buffer, _Token.IDENTIFIER), buffer))


# -- the parser --------------------------------------------------------------------------

class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _tokens(text)
        self.position = 0

    def lookahead(self, values: bool = True) -> tuple[_Token, str]:
        return self._as(self.items[self.position], values)

    def consume(self, values: bool = True) -> tuple[_Token, str]:
        self.position += 1
        return self._as(self.items[self.position - 1], values)

    @staticmethod
    def _as(item: tuple[_Token, str], values: bool) -> tuple[_Token, str]:
        """Where values are read, ``in`` and ``notin`` are identifiers."""
        token, literal = item
        if values and token in (_Token.IN, _Token.NOT_IN):
            return _Token.IDENTIFIER, literal
        return token, literal

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self.lookahead()
            if token == _Token.END:
                return requirements
            if token not in (_Token.IDENTIFIER, _Token.DOES_NOT_EXIST):
                raise ValueError(f"found '{literal}', expected: !, identifier, or "
                                 "'end of string'")
            try:
                requirements.append(self.requirement())
            except ValueError as err:
                raise ValueError(f"unable to parse requirement: {err}") from None
            token, literal = self.consume()
            if token == _Token.END:
                return requirements
            if token != _Token.COMMA:
                raise ValueError(f"found '{literal}', expected: ',' or 'end of string'")
            token, literal = self.lookahead()
            if token not in (_Token.IDENTIFIER, _Token.DOES_NOT_EXIST):
                raise ValueError(f"found '{literal}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        operator = ""
        token, key = self.consume()
        if token == _Token.DOES_NOT_EXIST:
            operator = DOES_NOT_EXIST
            token, key = self.consume()
        if token != _Token.IDENTIFIER:
            raise ValueError(f"found '{key}', expected: identifier")
        if problems := label_key_errors(key):
            raise ValueError(_invalid("<nil>", key, problems))  # the parser's path is nil
        if self.lookahead()[0] in (_Token.END, _Token.COMMA) and operator != DOES_NOT_EXIST:
            operator = EXISTS
        if operator in (EXISTS, DOES_NOT_EXIST):
            return Requirement.make(key, operator)
        token, literal = self.consume(values=False)
        if token not in _OPERATOR_OF:
            raise ValueError(f"found '{literal}', expected: " + ", ".join(_BINARY_OPERATORS))
        operator = _OPERATOR_OF[token]
        values = self.set_values() if operator in (IN, NOT_IN) else self.exact_value()
        return Requirement.make(key, operator, values)

    def set_values(self) -> set[str]:
        token, literal = self.consume()
        if token != _Token.OPEN_PAR:
            raise ValueError(f"found '{literal}' expected: '('")
        token, literal = self.lookahead()
        if token == _Token.CLOSED_PAR:  # "()" is the empty value
            self.consume()
            return {""}
        if token not in (_Token.IDENTIFIER, _Token.COMMA):
            raise ValueError(f"found '{literal}', expected: ',', ')' or identifier")
        values = self.identifiers()
        self.consume()  # the ")" that ended the list
        return values

    def identifiers(self) -> set[str]:
        """The elements up to ")": an empty element (before, between or after commas) is
        the empty value."""
        values: set[str] = set()
        while True:
            token, literal = self.consume()
            if token == _Token.IDENTIFIER:
                values.add(literal)
                following, after = self.lookahead()
                if following == _Token.CLOSED_PAR:
                    return values
                if following != _Token.COMMA:
                    raise ValueError(f"found '{after}', expected: ',' or ')'")
            elif token == _Token.COMMA:
                if not values:
                    values.add("")  # "(,"
                following, _ = self.lookahead()
                if following in (_Token.CLOSED_PAR, _Token.COMMA):
                    values.add("")  # ",)" and ",,"
                if following == _Token.CLOSED_PAR:
                    return values
            else:
                raise ValueError(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> list[str]:
        token, _ = self.lookahead()
        if token in (_Token.END, _Token.COMMA):
            return [""]
        token, literal = self.consume()
        if token != _Token.IDENTIFIER:
            raise ValueError(f"found '{literal}', expected: identifier")
        return [literal]


def parse(text: str) -> Selector:
    """`text` as the API server parses ``labelSelector=`` (apimachinery's labels.Parse);
    ValueError with the message of the server's 400 when it would refuse it."""
    requirements = _Parser(text).parse()
    return Selector(tuple(sorted(requirements, key=lambda r: r.key)))
