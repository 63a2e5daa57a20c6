"""Dataclass type hints -> OpenAPI v3 structural schema, and the JSON codec that matches it.

A custom resource's spec and status are dataclasses. This module reads their type hints
once into a small tree of *shapes* (`shape_of`), and every shape does three things:

- ``schema()``: its OpenAPI v3 schema, structural as a CustomResourceDefinition needs;
- ``decode(value, path)``: checks a JSON value against the type and builds the Python
  value (dataclass instances, Enums, datetimes), raising `InvalidValue` with the field
  path on a mismatch — it never coerces a wrong type;
- ``encode(value)``: the JSON value (Enum by value, datetime as RFC 3339 ``...Z``).

Because the schema and the codec come from the same shapes, the field names, types and
defaults the API server checks are exactly those the Python objects use.

Field names in JSON follow a *naming policy* chosen by the caller (`shape_of(...,
json_names="camelCase")`; a CustomResource chooses it once with its ``json_names``
attribute): ``"python"`` keeps the Python names, ``"camelCase"`` writes ``last_run`` as
``lastRun``. One field can still be named by hand, which wins over the policy:
``field(metadata={"json_name": "x"})`` or dataclasses-json's
``field(metadata=config(field_name="x"))`` (and a class-level dataclasses-json
``letter_case``). Descriptions come from ``field(metadata={"description": ...})`` and
from the dataclass docstring.

Validation constraints ride on the type with ``typing.Annotated`` (see
`operator_kit.api.validation`): ``Annotated[int, Minimum(0)]`` adds ``minimum: 0`` to the
field's schema. They are checked against the type here, so `Minimum` on a str fails when
the class is parsed, naming the field.

Defaults are checked too: a dataclass default that does not fit its field's type
(``deadline: int | None = "10"``) is a `SchemaError` naming the field, and encoding a
value of the wrong type raises `InvalidValue` with its path instead of writing it.

Each decoded instance remembers the keys its dataclass does not know and which keys were
present, so decode -> encode gives back what came in, at any nesting level: unknown keys
are written back, None is written as null only where the input had the key, and a
default that decoding filled in stays out until it is changed. Instances that cannot
carry this (``slots=True`` dataclasses) drop unknown keys.

The shapes themselves are in `operator_kit.api.shapes`; this module reads type hints into
them. It imports only `operator_kit.api.shapes` and `operator_kit.api.validation`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import enum
import inspect
import reprlib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from operator_kit.api import validation as _validation
from operator_kit.api.shapes import (
    SCALAR_TYPES,
    AnyShape,
    ConstrainedShape,
    DateShape,
    DateTimeShape,
    EnumShape,
    FieldShape,
    IntOrStringShape,
    InvalidValue,
    ListShape,
    LiteralShape,
    MapShape,
    NullableShape,
    ObjectShape,
    ScalarShape,
    SchemaError,
    Shape,
)

__all__ = [
    "AnyShape",
    "ConstrainedShape",
    "DateShape",
    "DateTimeShape",
    "EnumShape",
    "FieldShape",
    "IntOrStringShape",
    "InvalidValue",
    "JsonNames",
    "ListShape",
    "LiteralShape",
    "MapShape",
    "NullableShape",
    "ObjectShape",
    "ScalarShape",
    "SchemaError",
    "Shape",
    "camel_case",
    "schema_for",
    "shape_of",
]

JsonNames = Literal["python", "camelCase"]
"""A naming policy: JSON field names as in Python, or in camelCase (Kubernetes style)."""


def camel_case(name: str) -> str:
    """``last_run`` -> ``lastRun``; a name without underscores is kept as it is."""
    head, *rest = name.split("_")
    if not rest:
        return name
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_NAMING: dict[str, Callable[[str], str] | None] = {"python": None, "camelCase": camel_case}


def schema_for(
    tp: Any,
    *,
    path: str = "",
    localns: Mapping[str, Any] | None = None,
    json_names: JsonNames = "python",
) -> dict[str, Any]:
    """The OpenAPI v3 schema of a type hint (usually a dataclass).

    `path` prefixes the field path in a `SchemaError` (``Backup.spec``); by default it is
    the dataclass's name. `localns` resolves string annotations that name classes local
    to a function (``from __future__ import annotations`` inside a test, say).
    """
    return shape_of(tp, path=path, localns=localns, json_names=json_names).schema()


def shape_of(
    tp: Any,
    *,
    path: str = "",
    localns: Mapping[str, Any] | None = None,
    json_names: JsonNames = "python",
) -> Shape:
    """Parse a type hint into the `Shape` that gives its schema and its JSON codec.

    `json_names` is the naming policy of every dataclass field below `tp` that is not
    named by hand (see the module docstring)."""
    if json_names not in _NAMING:
        raise SchemaError(f"json_names {json_names!r}: use 'python' or 'camelCase'")
    if not path and isinstance(tp, type):
        path = tp.__name__
    return _Parser(dict(localns or {}), _NAMING[json_names]).parse(tp, path, ())


# -------------------------------------------------------------------------- parsing

_SEQUENCES: tuple[Any, ...] = (
    list,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
)
_MAPPINGS: tuple[Any, ...] = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SETS: tuple[Any, ...] = (
    set,
    frozenset,
    collections.abc.Set,
    collections.abc.MutableSet,
)


class _Parser:
    """Parses type hints into shapes; `localns` helps resolve string annotations."""

    def __init__(self, localns: dict[str, Any], naming: Callable[[str], str] | None) -> None:
        self.localns = localns
        self.naming = naming

    def parse(self, tp: Any, path: str, stack: tuple[type, ...]) -> Shape:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)

        if tp is Any:
            return AnyShape(object_only=False)
        if origin is typing.Annotated:
            return self._parse_annotated(args[0], args[1:], path, stack)
        if isinstance(tp, typing.NewType):
            return self.parse(tp.__supertype__, path, stack)
        if origin is typing.Union or origin is types.UnionType:
            return self._parse_union(tp, args, path, stack)
        if origin is typing.Literal:
            return LiteralShape(tuple(args), _json_type_of_values(tp, args, path))
        if tp in _SEQUENCES or origin in _SEQUENCES:
            return ListShape(self.parse(args[0], f"{path}[]", stack) if args else AnyShape(False))
        if tp in _MAPPINGS or origin in _MAPPINGS:
            return self._parse_mapping(tp, args, path, stack)
        if tp in _SETS or origin in _SETS:
            item = _type_name(args[0]) if args else "Any"
            raise _cannot(path, tp, f"use list[{item}]")
        if tp is tuple or origin is tuple:
            raise _cannot(path, tp, "use list[...] or a dataclass")
        if not isinstance(tp, type):
            raise _cannot(
                path, tp, "use str, int, float, bool, list, dict[str, ...] or a dataclass"
            )
        if dataclasses.is_dataclass(tp):
            return self._parse_dataclass(tp, path, stack)
        if issubclass(tp, enum.Enum):
            values = [m.value for m in tp]
            return EnumShape(tp, _json_type_of_values(tp, values, path))
        if tp in SCALAR_TYPES:
            return ScalarShape(tp)
        if tp is dt.datetime:
            return DateTimeShape()
        if tp is dt.date:
            return DateShape()
        if tp in (bytes, bytearray):
            raise _cannot(path, tp, "use str (for example base64-encoded)")
        if tp is type(None):
            raise _cannot(path, tp, "use Optional[X]")
        raise _cannot(path, tp, "make it a dataclass")

    def _parse_annotated(
        self, tp: Any, extras: tuple[Any, ...], path: str, stack: tuple[type, ...]
    ) -> Shape:
        inner = self.parse(tp, path, stack)
        constraints = tuple(c for c in extras if isinstance(c, _validation.Constraint))
        if not constraints:
            return inner
        json_type, core = _json_type(inner)
        where = f"{path}: " if path else ""
        try:
            keywords = _validation.constraint_schema(
                constraints, json_type, _type_name(tp), path
            )
            _check_list_keywords(keywords, core)
        except ValueError as e:
            raise SchemaError(f"{where}{e}") from None
        return ConstrainedShape(inner, constraints, keywords)

    def _parse_union(
        self, tp: Any, args: tuple[Any, ...], path: str, stack: tuple[type, ...]
    ) -> Shape:
        others = [a for a in args if a is not type(None)]
        nullable = len(others) < len(args)
        if len(others) == 1:
            inner = self.parse(others[0], path, stack)
        elif set(others) == {int, str}:
            inner = IntOrStringShape()
        else:
            raise _cannot(path, tp, "use one type (or int | str, or Any to accept any value)")
        return NullableShape(inner) if nullable else inner

    def _parse_mapping(
        self, tp: Any, args: tuple[Any, ...], path: str, stack: tuple[type, ...]
    ) -> Shape:
        if not args:
            return AnyShape(object_only=True)
        key, value = args
        if key is not str:
            raise _cannot(path, tp, f"use dict[str, {_type_name(value)}]")
        if value is Any:
            return AnyShape(object_only=True)
        return MapShape(self.parse(value, f"{path}{{}}", stack))

    def _type_hints(self, cls: type) -> dict[str, Any]:
        try:
            return typing.get_type_hints(cls, include_extras=True)
        except NameError:
            if not self.localns:
                raise
            return typing.get_type_hints(cls, localns=self.localns, include_extras=True)

    def _parse_dataclass(self, cls: type, path: str, stack: tuple[type, ...]) -> ObjectShape:
        if cls in stack:
            raise SchemaError(
                f"{path}: {cls.__name__} contains itself; a structural schema cannot express "
                "a recursive dataclass (use Any or dict[str, Any] for the recursive part)"
            )
        try:
            hints = self._type_hints(cls)
        except NameError as e:
            raise SchemaError(
                f"{path}: cannot resolve the type hints of {cls.__name__} ({e}); define the "
                "types it names at module level, or pass localns=locals()"
            ) from e
        fields: list[FieldShape] = []
        names: set[str] = set()
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            json_name = _json_name(cls, f, self.naming)
            sub = f"{path}.{json_name}" if path else json_name
            if json_name in names:
                raise SchemaError(f"{sub}: two fields of {cls.__name__} have this JSON name")
            names.add(json_name)
            shape = self.parse(hints[f.name], sub, (*stack, cls))
            description = f.metadata.get("description")
            _check_default(f, shape, sub)
            fields.append(
                FieldShape(
                    name=f.name,
                    json_name=json_name,
                    shape=shape,
                    required=f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING,
                    description=str(description) if description else None,
                    default=_schema_default(f),
                    make_default=_make_default(f),
                )
            )
        rules = _validation.class_rules(cls)
        for rule in rules:
            try:
                rule.check(path)
            except ValueError as e:
                raise SchemaError(f"{path}: {e}") from None
        return ObjectShape(cls, tuple(fields), _docstring(cls), rules)


def _json_name(
    cls: type, f: dataclasses.Field[Any], naming: Callable[[str], str] | None
) -> str:
    """The field's JSON name: named by hand (``json_name``, dataclasses-json's field or
    class letter_case), else the naming policy's, else the Python name."""
    by_hand = f.metadata.get("json_name")
    if by_hand is not None:
        if not isinstance(by_hand, str) or not by_hand:
            raise SchemaError(f"{cls.__name__}.{f.name}: json_name must be a non-empty str")
        return by_hand
    letter_case = f.metadata.get("dataclasses_json", {}).get("letter_case")
    if letter_case is None:
        class_config = getattr(cls, "dataclass_json_config", None) or {}
        letter_case = class_config.get("letter_case")
    if letter_case is None:
        return naming(f.name) if naming is not None else f.name
    name = typing.cast(Callable[[str], str], letter_case)(f.name)
    return str(name)


def _json_type(shape: Shape) -> tuple[str | None, Shape]:
    """The JSON type a shape's values have (None for any / int-or-string), and the shape
    under any Nullable and Constrained wrappers."""
    while isinstance(shape, (NullableShape, ConstrainedShape)):
        shape = shape.inner
    if isinstance(shape, (ScalarShape, EnumShape, LiteralShape)):
        schema_type = shape.schema()["type"]
        return str(schema_type), shape
    if isinstance(shape, (DateTimeShape, DateShape)):
        return "string", shape
    if isinstance(shape, ListShape):
        return "array", shape
    if isinstance(shape, (ObjectShape, MapShape)):
        return "object", shape
    if isinstance(shape, AnyShape) and shape.object_only:
        return "object", shape
    return None, shape


def _check_list_keywords(keywords: dict[str, Any], core: Shape) -> None:
    """A set holds scalars; a map's keys are fields of its items, required or defaulted."""
    list_type = keywords.get("x-kubernetes-list-type")
    if list_type is None or not isinstance(core, ListShape):
        return
    item_type, item = _json_type(core.items)
    if list_type == "set" and item_type not in ("string", "integer", "number", "boolean"):
        raise ValueError(
            "a list of type 'set' (or UniqueItems) needs scalar items; for a list of "
            "objects use ListType('map', keys=(...))"
        )
    if list_type == "map":
        if not isinstance(item, ObjectShape):
            raise ValueError("ListType('map') needs dataclass items; use 'set' for scalars")
        by_name = {f.json_name: f for f in item.fields}
        for key in keywords["x-kubernetes-list-map-keys"]:
            f = by_name.get(key)
            if f is None:
                raise ValueError(
                    f"map key {key!r} is not a field of {item.cls.__name__} (its JSON "
                    f"names are {', '.join(by_name) or 'none'})"
                )
            if not f.required and f.default is dataclasses.MISSING:
                raise ValueError(
                    f"map key {key!r} must be a required field of {item.cls.__name__} or "
                    "have a non-None default"
                )


def _check_default(f: dataclasses.Field[Any], shape: Shape, path: str) -> None:
    """A default of the wrong type fails now, not when the API server reads the CRD."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return
    if value is None:
        return
    try:
        shape.encode(value)
    except InvalidValue as e:
        where = f"{path}.{e.path}" if e.path and not e.path.startswith("[") else path + e.path
        raise SchemaError(
            f"{where}: the default {reprlib.repr(value)} does not fit the field's type "
            f"({e.reason}); give a default of the declared type"
        ) from None


def _schema_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return dataclasses.MISSING if f.default is None else f.default
    if f.default_factory is not dataclasses.MISSING and f.default_factory in (list, dict):
        return f.default_factory()
    return dataclasses.MISSING


def _make_default(f: dataclasses.Field[Any]) -> Callable[[], Any] | None:
    if f.default is not dataclasses.MISSING:
        value = f.default
        return lambda: value
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory
    return None


def _docstring(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    if not doc or doc.startswith(f"{cls.__name__}("):  # dataclass's generated signature
        return None
    return inspect.cleandoc(doc)


def _json_type_of_values(tp: Any, values: typing.Sequence[Any], path: str) -> str:
    kinds = {type(v) for v in values}
    if len(kinds) == 1:
        (kind,) = kinds
        for py_type, json_type in SCALAR_TYPES.items():
            if kind is py_type:
                return json_type
    raise _cannot(path, tp, "give every value the same type: str, int, float or bool")


# ------------------------------------------------------------------------- helpers


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return repr(tp).replace("typing.", "")


def _cannot(path: str, tp: Any, advice: str) -> SchemaError:
    where = f"{path}: " if path else ""
    return SchemaError(f"{where}cannot express {_type_name(tp)} in an OpenAPI schema; {advice}")
