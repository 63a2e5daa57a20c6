"""Validation constraints declared on dataclass fields, enforced by the API server.

A constraint rides on the field's type with ``typing.Annotated``; the schema of the CRD
carries it, so the API server rejects an object that breaks it before any operator or
webhook sees it::

    @dataclass
    class BackupSpec:
        database: Annotated[str, MinLength(1), MaxLength(63), Pattern(r"^[a-z][a-z0-9-]*$")]
        retain: Annotated[int, Minimum(1), Maximum(100)] = 7
        tags: Annotated[list[str], MaxItems(10), ListType("set")] = field(default_factory=list)
        schedule: Annotated[str, CelRule("self != ''", message="schedule must not be empty")] = "x"

A CEL rule on a whole dataclass (its ``self`` is the object) is declared with the
`cel_rules` class decorator; a *transition rule* compares with ``oldSelf`` and runs only on
updates::

    @cel_rules(CelRule("self.minReplicas <= self.maxReplicas", message="min above max"),
               CelRule("self.database == oldSelf.database", message="database is immutable"))
    @dataclass
    class ClusterSpec: ...

Mistakes that can be seen locally fail when the class is parsed (at the CustomResource's
declaration), naming the field: a constraint on a type it cannot apply to (`Minimum` on a
str), a regex Python cannot compile, a minimum above the maximum, map keys that are not
required fields of the items, a CEL expression with unbalanced brackets or quotes.

This module imports nothing else of operator_kit; `operator_kit.api.schema` reads it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal, TypeVar

__all__ = [
    "CelRule",
    "Constraint",
    "ExclusiveMaximum",
    "ExclusiveMinimum",
    "Format",
    "ListType",
    "MapType",
    "MaxItems",
    "MaxLength",
    "MaxProperties",
    "Maximum",
    "MinItems",
    "MinLength",
    "MinProperties",
    "Minimum",
    "MultipleOf",
    "Pattern",
    "UniqueItems",
    "cel_rules",
]

_T = TypeVar("_T", bound=type)

# JSON types a constraint may sit on; None means "any value" (Any, int-or-string).
_NUMBER = ("integer", "number")
_STRING = ("string",)
_ARRAY = ("array",)
_OBJECT = ("object",)
_RULES_ATTR = "__operator_kit_rules__"


class Constraint:
    """Base of every constraint: its schema keywords, and the JSON types it applies to."""

    applies_to: tuple[str, ...] | None = None  # None: any type
    advice: str = ""

    def keywords(self) -> dict[str, Any]:
        """The JSON-schema keywords this constraint adds to its field's schema."""
        raise NotImplementedError

    def check(self, path: str) -> None:
        """Raise ValueError when the constraint cannot be valid, whatever the type."""


def _number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} needs a number, got {value!r}")


def _count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} needs a non-negative int, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Minimum(Constraint):
    """``value >= minimum`` (a number or an integer field)."""

    value: float
    applies_to = _NUMBER
    advice = "use MinLength for a str or MinItems for a list"

    def __post_init__(self) -> None:
        _number("Minimum", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"minimum": self.value}


@dataclasses.dataclass(frozen=True)
class Maximum(Constraint):
    """``value <= maximum`` (a number or an integer field)."""

    value: float
    applies_to = _NUMBER
    advice = "use MaxLength for a str or MaxItems for a list"

    def __post_init__(self) -> None:
        _number("Maximum", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"maximum": self.value}


@dataclasses.dataclass(frozen=True)
class ExclusiveMinimum(Constraint):
    """``value > minimum``."""

    value: float
    applies_to = _NUMBER
    advice = Minimum.advice

    def __post_init__(self) -> None:
        _number("ExclusiveMinimum", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"minimum": self.value, "exclusiveMinimum": True}


@dataclasses.dataclass(frozen=True)
class ExclusiveMaximum(Constraint):
    """``value < maximum``."""

    value: float
    applies_to = _NUMBER
    advice = Maximum.advice

    def __post_init__(self) -> None:
        _number("ExclusiveMaximum", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"maximum": self.value, "exclusiveMaximum": True}


@dataclasses.dataclass(frozen=True)
class MultipleOf(Constraint):
    """``value % multiple == 0``; the multiple must be above 0."""

    value: float
    applies_to = _NUMBER

    def __post_init__(self) -> None:
        _number("MultipleOf", self.value)
        if self.value <= 0:
            raise ValueError(f"MultipleOf needs a number above 0, got {self.value!r}")

    def keywords(self) -> dict[str, Any]:
        return {"multipleOf": self.value}


@dataclasses.dataclass(frozen=True)
class MinLength(Constraint):
    """At least this many characters."""

    value: int
    applies_to = _STRING
    advice = "use Minimum for a number or MinItems for a list"

    def __post_init__(self) -> None:
        _count("MinLength", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"minLength": self.value}


@dataclasses.dataclass(frozen=True)
class MaxLength(Constraint):
    """At most this many characters."""

    value: int
    applies_to = _STRING
    advice = "use Maximum for a number or MaxItems for a list"

    def __post_init__(self) -> None:
        _count("MaxLength", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"maxLength": self.value}


@dataclasses.dataclass(frozen=True)
class Pattern(Constraint):
    """The string matches this regular expression (ECMA-262 as the API server reads it;
    unanchored, so add ``^...$`` to match the whole string). Python must compile it too."""

    regex: str
    applies_to = _STRING

    def __post_init__(self) -> None:
        if not isinstance(self.regex, str):
            raise ValueError(f"Pattern needs a str, got {self.regex!r}")

    def check(self, path: str) -> None:
        try:
            re.compile(self.regex)
        except re.error as e:
            raise ValueError(f"Pattern {self.regex!r} is not a valid regex ({e})") from e

    def keywords(self) -> dict[str, Any]:
        return {"pattern": self.regex}


_FORMATS = (
    "bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid",
    "uuid3", "uuid4", "uuid5", "isbn", "isbn10", "isbn13", "creditcard", "ssn", "hexcolor",
    "rgbcolor", "byte", "password", "date", "duration", "datetime", "date-time",
    "int32", "int64", "float", "double",
)


@dataclasses.dataclass(frozen=True)
class Format(Constraint):
    """A format the API server validates: ``email``, ``hostname``, ``uuid``, ``ipv4``,
    ``duration``, ``date-time``, ``int64``, ...(the formats CRD schemas support)."""

    name: str
    applies_to = ("string", "integer", "number")

    def check(self, path: str) -> None:
        if self.name not in _FORMATS:
            raise ValueError(
                f"Format {self.name!r} is not one the API server checks; use one of "
                + ", ".join(_FORMATS)
            )

    def keywords(self) -> dict[str, Any]:
        return {"format": self.name}


@dataclasses.dataclass(frozen=True)
class MinItems(Constraint):
    """A list with at least this many items."""

    value: int
    applies_to = _ARRAY
    advice = "use MinLength for a str or Minimum for a number"

    def __post_init__(self) -> None:
        _count("MinItems", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"minItems": self.value}


@dataclasses.dataclass(frozen=True)
class MaxItems(Constraint):
    """A list with at most this many items."""

    value: int
    applies_to = _ARRAY
    advice = "use MaxLength for a str or Maximum for a number"

    def __post_init__(self) -> None:
        _count("MaxItems", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"maxItems": self.value}


@dataclasses.dataclass(frozen=True)
class UniqueItems(Constraint):
    """No two items equal. The API server does not accept ``uniqueItems`` in a CRD, so
    this writes ``x-kubernetes-list-type: set`` (scalar items) — the Kubernetes way."""

    applies_to = _ARRAY

    def keywords(self) -> dict[str, Any]:
        return {"x-kubernetes-list-type": "set"}


@dataclasses.dataclass(frozen=True)
class ListType(Constraint):
    """``x-kubernetes-list-type``: ``atomic`` (replaced whole by server-side apply),
    ``set`` (unique scalar items) or ``map`` (items are objects identified by `keys`,
    which must be required fields, or fields with a default, of the item dataclass)."""

    type: Literal["atomic", "set", "map"]
    keys: tuple[str, ...] = ()
    applies_to = _ARRAY

    def __post_init__(self) -> None:
        if self.type not in ("atomic", "set", "map"):
            raise ValueError(f"ListType {self.type!r}: use 'atomic', 'set' or 'map'")
        if isinstance(self.keys, str):
            raise ValueError(f"ListType keys must be a tuple, like keys=({self.keys!r},)")
        if self.type == "map" and not self.keys:
            raise ValueError("ListType('map') needs keys, like ListType('map', keys=('name',))")
        if self.type != "map" and self.keys:
            raise ValueError(f"ListType({self.type!r}) takes no keys; keys are for 'map'")

    def keywords(self) -> dict[str, Any]:
        out: dict[str, Any] = {"x-kubernetes-list-type": self.type}
        if self.keys:
            out["x-kubernetes-list-map-keys"] = list(self.keys)
        return out


@dataclasses.dataclass(frozen=True)
class MapType(Constraint):
    """``x-kubernetes-map-type``: ``atomic`` or ``granular`` (for server-side apply)."""

    type: Literal["atomic", "granular"]
    applies_to = _OBJECT

    def __post_init__(self) -> None:
        if self.type not in ("atomic", "granular"):
            raise ValueError(f"MapType {self.type!r}: use 'atomic' or 'granular'")

    def keywords(self) -> dict[str, Any]:
        return {"x-kubernetes-map-type": self.type}


@dataclasses.dataclass(frozen=True)
class MinProperties(Constraint):
    """A ``dict[str, X]`` with at least this many keys."""

    value: int
    applies_to = _OBJECT

    def __post_init__(self) -> None:
        _count("MinProperties", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"minProperties": self.value}


@dataclasses.dataclass(frozen=True)
class MaxProperties(Constraint):
    """A ``dict[str, X]`` with at most this many keys."""

    value: int
    applies_to = _OBJECT

    def __post_init__(self) -> None:
        _count("MaxProperties", self.value)

    def keywords(self) -> dict[str, Any]:
        return {"maxProperties": self.value}


@dataclasses.dataclass(frozen=True)
class CelRule(Constraint):
    """A CEL validation rule (``x-kubernetes-validations``): `rule` is true for a valid
    value, named ``self``; a rule that mentions ``oldSelf`` is a transition rule, checked
    on updates only. `message` is what the API server answers when the rule fails
    (`message_expression` computes it in CEL instead); `reason` is one of
    FieldValueInvalid, FieldValueForbidden, FieldValueRequired, FieldValueDuplicate;
    `field_path` points the error at a sub-field (``.spec.replicas``)."""

    rule: str
    message: str | None = None
    message_expression: str | None = None
    reason: str | None = None
    field_path: str | None = None
    optional_old_self: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.rule, str) or not self.rule.strip():
            raise ValueError(f"CelRule needs a CEL expression, got {self.rule!r}")
        if self.reason is not None and self.reason not in _REASONS:
            raise ValueError(f"CelRule reason {self.reason!r}: use one of " + ", ".join(_REASONS))
        if self.field_path is not None and not self.field_path.startswith("."):
            raise ValueError(f"CelRule field_path {self.field_path!r} must start with '.'")

    def check(self, path: str) -> None:
        for expression in (self.rule, self.message_expression):
            if expression is not None:
                problem = _cel_problem(expression)
                if problem:
                    raise ValueError(f"CelRule {expression!r} is not valid CEL: {problem}")

    def keywords(self) -> dict[str, Any]:
        return {"x-kubernetes-validations": [self.validation()]}

    def validation(self) -> dict[str, Any]:
        """This rule's ``x-kubernetes-validations`` entry."""
        out: dict[str, Any] = {"rule": self.rule}
        for key, value in (
            ("message", self.message),
            ("messageExpression", self.message_expression),
            ("reason", self.reason),
            ("fieldPath", self.field_path),
            ("optionalOldSelf", self.optional_old_self),
        ):
            if value is not None:
                out[key] = value
        return out


_REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
            "FieldValueDuplicate")
_PAIRS = {")": "(", "]": "[", "}": "{"}


def _cel_problem(expression: str) -> str | None:
    """What a quick local scan finds wrong with a CEL expression (brackets, quotes)."""
    stack: list[str] = []
    i = 0
    while i < len(expression):
        ch = expression[i]
        if ch in "\"'":
            end = i + 1
            while end < len(expression) and expression[end] != ch:
                end += 2 if expression[end] == "\\" else 1
            if end >= len(expression):
                return f"the string opened at character {i + 1} is never closed"
            i = end
        elif ch in "([{":
            stack.append(ch)
        elif ch in ")]}":
            if not stack or stack.pop() != _PAIRS[ch]:
                return f"unbalanced {ch!r} at character {i + 1}"
        i += 1
    if stack:
        return f"{stack[-1]!r} is never closed"
    if re.search(r"(&&|\|\||[=!<>]=|[+\-*/%<>])\s*$", expression):
        return "it ends with an operator"
    return None


def cel_rules(*declared: CelRule) -> Callable[[_T], _T]:
    """Class decorator: CEL rules on a whole dataclass (``self`` is the object).

    Put it above ``@dataclass``; the rules go to the object's schema wherever the
    dataclass is used, the spec or status of a CustomResource included."""
    for rule in declared:
        if not isinstance(rule, CelRule):
            raise TypeError(f"cel_rules() takes CelRule(...) values, got {rule!r}")

    def decorate(cls: _T) -> _T:
        existing: tuple[CelRule, ...] = cls.__dict__.get(_RULES_ATTR, ())
        setattr(cls, _RULES_ATTR, (*existing, *declared))
        return cls

    return decorate


def class_rules(cls: type) -> tuple[CelRule, ...]:
    """The rules `cel_rules` put on `cls` (not on its bases)."""
    found = cls.__dict__.get(_RULES_ATTR, ())
    return tuple(found)


def constraint_schema(
    constraints: tuple[Constraint, ...], json_type: str | None, type_name: str, path: str
) -> dict[str, Any]:
    """The schema keywords of `constraints` on a value of `json_type`; ValueError when a
    constraint does not fit the type or contradicts another one. The caller adds `path`."""
    out: dict[str, Any] = {}
    validations: list[dict[str, Any]] = []
    for c in constraints:
        if c.applies_to is not None and json_type not in c.applies_to:
            kinds = " or ".join(c.applies_to)
            advice = f"; {c.advice}" if c.advice else ""
            raise ValueError(
                f"{type(c).__name__} applies to {kinds} values, not {type_name}{advice}"
            )
        c.check(path)
        if isinstance(c, Format) and json_type in _NUMBER and c.name not in (
            "int32", "int64", "float", "double"
        ):
            raise ValueError(f"Format {c.name!r} is for strings, not {type_name}")
        for key, value in c.keywords().items():
            if key == "x-kubernetes-validations":
                validations.extend(value)
            elif key in out and out[key] != value:
                raise ValueError(
                    f"{type(c).__name__} sets {key} to {value!r}, but it is already {out[key]!r}"
                )
            else:
                out[key] = value
    if validations:
        out["x-kubernetes-validations"] = validations
    _check_bounds(out)
    return out


def _check_bounds(schema: dict[str, Any]) -> None:
    for low, high in (("minimum", "maximum"), ("minLength", "maxLength"),
                      ("minItems", "maxItems"), ("minProperties", "maxProperties")):
        if low in schema and high in schema:
            lo, hi = schema[low], schema[high]
            exclusive = schema.get("exclusiveMinimum") or schema.get("exclusiveMaximum")
            if lo > hi or (low == "minimum" and exclusive and lo == hi):
                raise ValueError(
                    f"{low} {lo!r} is above {high} {hi!r}, so no value is valid; "
                    "lower the minimum or raise the maximum"
                )
