"""Shapes: the tree a dataclass's type hints are read into, each with its schema and codec.

`operator_kit.api.schema` builds the tree (`shape_of`); each `Shape` here gives its
OpenAPI v3 schema (``schema()``), decodes a JSON value into the Python value
(``decode(value, path)``, raising `InvalidValue` with the field path, never coercing a
wrong type) and encodes it back (``encode(value)``). An `ObjectShape` (a dataclass)
remembers on each decoded instance the keys its dataclass does not know and which keys
were present, so decode -> encode gives back what came in.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
import re
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from operator_kit.api import validation as _validation

__all__ = [
    "SCALAR_TYPES",
    "AnyShape",
    "ConstrainedShape",
    "DateShape",
    "DateTimeShape",
    "EnumShape",
    "FieldShape",
    "IntOrStringShape",
    "InvalidValue",
    "ListShape",
    "LiteralShape",
    "MapShape",
    "NullableShape",
    "ObjectShape",
    "ScalarShape",
    "SchemaError",
    "Shape",
    "json_copy",
]

_T = TypeVar("_T")
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_copy(value: _T) -> _T:
    """A deep copy of `value`, about four times faster than `copy.deepcopy` for what JSON
    decodes to (dicts, lists, strings, numbers, booleans, None), which is all an object
    read from the API holds; anything else inside is copied by `copy.deepcopy`. Unlike
    it, a dict or list reached twice is copied twice (JSON has no shared references)."""
    return cast(_T, _json_copy(value))


def _json_copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _JSON_SCALARS else _json_copy(item)
                for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _JSON_SCALARS else _json_copy(item) for item in value]
    return value if kind in _JSON_SCALARS else copy.deepcopy(value)


class SchemaError(TypeError):
    """A type hint that no OpenAPI v3 structural schema can express."""


class InvalidValue(ValueError):
    """A JSON value that does not match its type; `path` names the field (``spec.retain``)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason

    def under(self, segment: str) -> InvalidValue:
        """The same error one level down: `segment` is a field name or ``[i]``."""
        if not self.path:
            return InvalidValue(segment, self.reason)
        sep = "" if self.path.startswith("[") else "."
        return InvalidValue(f"{segment}{sep}{self.path}", self.reason)


class Shape:
    """One node of a parsed type: its schema, and how its JSON values decode and encode."""

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def decode(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def encode(self, value: Any) -> Any:
        """The JSON value; `InvalidValue` (path relative to this shape) on a wrong type."""
        return value


@dataclasses.dataclass(frozen=True)
class ScalarShape(Shape):
    """str, int, float or bool."""

    py_type: type

    def schema(self) -> dict[str, Any]:
        return {"type": SCALAR_TYPES[self.py_type]}

    def decode(self, value: Any, path: str) -> Any:
        if self.py_type is float and _is_int(value):
            return float(value)
        if isinstance(value, self.py_type) and (self.py_type is bool or not _is_bool(value)):
            return value
        raise _mismatch(path, self.py_type.__name__, value)

    def encode(self, value: Any) -> Any:
        if value is None or type(value) is self.py_type:
            return value
        if self.py_type is float and _is_int(value):
            return value
        if isinstance(value, self.py_type) and (self.py_type is bool or not _is_bool(value)):
            return value
        raise _mismatch("", self.py_type.__name__, value)


SCALAR_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclasses.dataclass(frozen=True)
class IntOrStringShape(Shape):
    """``int | str``: Kubernetes' int-or-string (a port number or name, ``25%``)."""

    def schema(self) -> dict[str, Any]:
        return {"x-kubernetes-int-or-string": True}

    def decode(self, value: Any, path: str) -> Any:
        if isinstance(value, str) or _is_int(value):
            return value
        raise _mismatch(path, "int or str", value)

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, str) or _is_int(value):
            return value
        raise _mismatch("", "int or str", value)


@dataclasses.dataclass(frozen=True)
class DateTimeShape(Shape):
    """datetime <-> RFC 3339 string; naive datetimes are taken as UTC."""

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "format": "date-time"}

    def decode(self, value: Any, path: str) -> Any:
        parsed = _parse_rfc3339(value) if isinstance(value, str) else None
        if parsed is None:
            raise _mismatch(path, "an RFC 3339 date-time like '2024-01-02T03:04:05Z'", value)
        return parsed

    def encode(self, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, dt.datetime):
            raise _mismatch("", "datetime", value)
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.replace(tzinfo=None).isoformat() + "Z"


@dataclasses.dataclass(frozen=True)
class DateShape(Shape):
    """date <-> ``YYYY-MM-DD``."""

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "format": "date"}

    def decode(self, value: Any, path: str) -> Any:
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise _mismatch(path, "a date like '2024-01-02'", value)

    def encode(self, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
            raise _mismatch("", "date", value)
        return value.isoformat()


@dataclasses.dataclass(frozen=True)
class EnumShape(Shape):
    """An Enum, in JSON by value."""

    enum_type: type[enum.Enum]
    json_type: str

    def schema(self) -> dict[str, Any]:
        return {"type": self.json_type, "enum": [m.value for m in self.enum_type]}

    def decode(self, value: Any, path: str) -> Any:
        for member in self.enum_type:
            if member.value == value and type(member.value) is type(value):
                return member
        raise _mismatch(path, _one_of([m.value for m in self.enum_type]), value)

    def encode(self, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, self.enum_type):
            return value.value
        if not isinstance(value, enum.Enum):  # the plain value of a member is fine too
            for member in self.enum_type:
                if member.value == value and type(member.value) is type(value):
                    return value
        raise _mismatch("", f"a {self.enum_type.__name__}", value)


@dataclasses.dataclass(frozen=True)
class LiteralShape(Shape):
    """``Literal["a", "b"]``."""

    values: tuple[Any, ...]
    json_type: str

    def schema(self) -> dict[str, Any]:
        return {"type": self.json_type, "enum": list(self.values)}

    def decode(self, value: Any, path: str) -> Any:
        if any(v == value and type(v) is type(value) for v in self.values):
            return value
        raise _mismatch(path, _one_of(list(self.values)), value)

    def encode(self, value: Any) -> Any:
        if value is None or any(v == value and type(v) is type(value) for v in self.values):
            return value
        raise _mismatch("", _one_of(list(self.values)), value)


@dataclasses.dataclass(frozen=True)
class NullableShape(Shape):
    """``Optional[X]``: X, or null."""

    inner: Shape

    def schema(self) -> dict[str, Any]:
        return {**self.inner.schema(), "nullable": True}

    def decode(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.decode(value, path)

    def encode(self, value: Any) -> Any:
        return None if value is None else self.inner.encode(value)


@dataclasses.dataclass(frozen=True)
class AnyShape(Shape):
    """``Any`` (any JSON value) or ``dict[str, Any]`` (any JSON object): kept as is."""

    object_only: bool

    def schema(self) -> dict[str, Any]:
        if self.object_only:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"x-kubernetes-preserve-unknown-fields": True}

    def decode(self, value: Any, path: str) -> Any:
        if self.object_only and not isinstance(value, Mapping):
            raise _mismatch(path, "object", value)
        return json_copy(dict(value) if isinstance(value, Mapping) else value)

    def encode(self, value: Any) -> Any:
        return json_copy(value)


@dataclasses.dataclass(frozen=True)
class ListShape(Shape):
    """``list[X]`` or ``Sequence[X]``: a JSON array, decoded as a list."""

    items: Shape

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.items.schema()}

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _mismatch(path, "list", value)
        return [self.items.decode(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def encode(self, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, (list, tuple)):
            raise _mismatch("", "list", value)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(self.items.encode(v))
            except InvalidValue as e:
                raise e.under(f"[{i}]") from None
        return out


@dataclasses.dataclass(frozen=True)
class MapShape(Shape):
    """``dict[str, X]``: a JSON object with arbitrary keys."""

    values: Shape

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": self.values.schema()}

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise _mismatch(path, "object", value)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidValue(path, f"keys must be strings, got {_describe(key)}")
            out[key] = self.values.decode(item, f"{path}.{key}")
        return out

    def encode(self, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, Mapping):
            raise _mismatch("", "dict", value)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidValue("", f"keys must be strings, got {_describe(k)}")
            try:
                out[k] = self.values.encode(v)
            except InvalidValue as e:
                raise e.under(k) from None
        return out


@dataclasses.dataclass(frozen=True)
class ConstrainedShape(Shape):
    """``Annotated[X, Minimum(0), ...]``: X's schema with the constraints' keywords."""

    inner: Shape
    constraints: tuple[_validation.Constraint, ...]
    keywords: dict[str, Any]

    def schema(self) -> dict[str, Any]:
        out = self.inner.schema()
        rules = self.keywords.get("x-kubernetes-validations")
        out.update({k: v for k, v in self.keywords.items() if k != "x-kubernetes-validations"})
        if rules:
            out["x-kubernetes-validations"] = [*out.get("x-kubernetes-validations", ()), *rules]
        return out

    def decode(self, value: Any, path: str) -> Any:
        return self.inner.decode(value, path)

    def encode(self, value: Any) -> Any:
        return self.inner.encode(value)


@dataclasses.dataclass(frozen=True)
class FieldShape:
    """One dataclass field as JSON sees it."""

    name: str
    json_name: str
    shape: Shape
    required: bool
    description: str | None
    default: Any  # the schema's default; dataclasses.MISSING when it has none
    make_default: Callable[[], Any] | None  # the dataclass default, None when required


@dataclasses.dataclass(frozen=True)
class ObjectShape(Shape):
    """A dataclass: a JSON object with known properties."""

    cls: type
    fields: tuple[FieldShape, ...]
    description: str | None
    rules: tuple[_validation.CelRule, ...] = ()

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.description:
            out["description"] = self.description
        out["type"] = "object"
        properties: dict[str, Any] = {}
        for f in self.fields:
            prop = f.shape.schema()
            if f.description:  # the field's own words win over its type's docstring
                prop = {"description": f.description, **_without(prop, "description")}
            if f.default is not dataclasses.MISSING:
                prop["default"] = f.shape.encode(f.default)
            properties[f.json_name] = prop
        out["properties"] = properties
        required = [f.json_name for f in self.fields if f.required]
        if required:
            out["required"] = required
        if self.rules:
            out["x-kubernetes-validations"] = [r.validation() for r in self.rules]
        return out

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise _mismatch(path, "object", value)
        kwargs: dict[str, Any] = {}
        for f in self.fields:
            sub = f"{path}.{f.json_name}" if path else f.json_name
            if f.json_name in value:
                kwargs[f.name] = f.shape.decode(value[f.json_name], sub)
            elif f.required:
                raise InvalidValue(sub, "required field is missing")
        try:
            obj = self.cls(**kwargs)
        except (TypeError, ValueError) as e:  # __post_init__ rejecting the values
            raise InvalidValue(path, f"{self.cls.__name__}: {e}") from e
        known = {f.json_name for f in self.fields}
        unknown = {k: json_copy(v) for k, v in value.items() if k not in known}
        _remember(obj, _Seen(unknown=unknown, present=frozenset(value)))
        return obj

    def encode(self, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, self.cls):
            raise _mismatch("", f"a {self.cls.__name__}", value)
        seen = _recall(value)
        decoded = seen is not _NOTHING_SEEN
        out: dict[str, Any] = {}
        for f in self.fields:
            item = getattr(value, f.name)
            if f.json_name not in seen.present and (
                item is None
                # a decoded object gives back what it got: a default it filled in stays out
                or (decoded and f.make_default is not None and item == f.make_default())
            ):
                continue
            try:
                out[f.json_name] = f.shape.encode(item)
            except InvalidValue as e:
                raise e.under(f.json_name) from None
        for key, item in seen.unknown.items():
            out.setdefault(key, json_copy(item))
        return out

    def default_instance(self) -> Any | None:
        """``cls()`` when every field has a default, else None."""
        if any(f.required for f in self.fields):
            return None
        return self.cls()


# ------------------------------------------------------------------ unknown JSON keys


@dataclasses.dataclass(frozen=True)
class _Seen:
    """What decoding saw that the dataclass fields cannot hold."""

    unknown: dict[str, Any]
    present: frozenset[str]


_NOTHING_SEEN = _Seen(unknown={}, present=frozenset())
_SEEN_ATTR = "__operator_kit_seen__"


def _remember(obj: Any, seen: _Seen) -> None:
    try:
        object.__setattr__(obj, _SEEN_ATTR, seen)
    except AttributeError:  # slots=True: nowhere to keep them
        pass


def _recall(obj: Any) -> _Seen:
    seen = getattr(obj, _SEEN_ATTR, _NOTHING_SEEN)
    return seen if isinstance(seen, _Seen) else _NOTHING_SEEN


# ------------------------------------------------------------------------- helpers


_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def _parse_rfc3339(text: str) -> dt.datetime | None:
    match = _RFC3339.fullmatch(text)
    if not match:
        return None
    day, time, fraction, offset = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    tz = "+00:00" if offset in ("Z", "z") else offset
    try:
        return dt.datetime.fromisoformat(f"{day}T{time}.{micros}{tz}")
    except ValueError:
        return None


def _without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _mismatch(path: str, expected: str, value: Any) -> InvalidValue:
    return InvalidValue(path, f"expected {expected}, got {_describe(value)}")


def _one_of(values: list[Any]) -> str:
    return "one of " + ", ".join(repr(v) for v in values)
