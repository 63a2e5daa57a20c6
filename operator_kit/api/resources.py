"""CustomResource: a typed custom resource declared on a class, and its dict round-trip.

A kind is a subclass that names its API coordinates as class attributes and annotates
``spec`` (and optionally ``status``) with dataclasses::

    class Backup(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Backup"
        spec: BackupSpec
        status: BackupStatus

Another served version of the same kind is declared with ``version_of=``::

    class BackupV2(CustomResource, version_of=Backup):
        version = "v2"
        spec: BackupSpecV2

The class without ``version_of`` is the kind's *root*: it holds the list of its versions
(``Backup.versions()``) and is the storage version unless another one sets
``storage = True``. Declarations are checked when the class is created, so a mistake
fails at import with a message naming the class.

JSON field names follow the kind's ``json_names`` policy, chosen once on the root class
(``json_names = "camelCase"`` writes ``last_run`` as ``lastRun``; the default
``"python"`` keeps the Python names); a version may choose its own.

Printer columns are per version (`operator_kit.api.columns`). ``kubectl get`` shows the
*preferred* version, the served one of highest priority (`operator_kit.api.names`):
`preferred_version()` says which, and ``preferred = True`` on a version states the choice
so the CRD fails to generate if Kubernetes would show another.

``from_dict`` / ``to_dict`` convert to and from the API's dict. Spec and status go
through the codec of `operator_kit.api.schema` (the same shapes the CRD schema comes from);
metadata and keys this class does not know are carried through unchanged, so an object
read from the API can be written back without losing anything.
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
import sys
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from operator_kit.api.columns import AGE, PrinterColumn, check_columns_syntax, path_exists
from operator_kit.api.names import DNS_LABEL, GROUP, KIND, version_priority
from operator_kit.api.schema import InvalidValue, JsonNames, ObjectShape, shape_of
from operator_kit.api.shapes import json_copy

__all__ = ["CustomResource", "InvalidResource", "PrinterColumn"]

_R = TypeVar("_R", bound="CustomResource")

_TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")
# Declared once on the root, the same for every version of a kind.
_SHARED = ("group", "kind", "plural", "namespaced", "short_names", "categories", "external")


class InvalidResource(ValueError):
    """A dict that is not a valid object of the kind; the message names kind, object and field.

    For example ``Backup default/nightly: spec.retain: expected int, got str 'x'``.
    """


class CustomResource:
    """Base class of typed custom resources; see the module docstring for how to declare one.

    An instance holds ``metadata`` (the API's metadata dict), ``spec`` and ``status``
    (dataclass instances). ``Backup("nightly", BackupSpec(...), namespace="default")``
    builds a new one; ``Backup.from_dict(d)`` reads one from the API.
    """

    # --- declared by subclasses (group, version and kind are required on a root)
    group: ClassVar[str]
    version: ClassVar[str]
    kind: ClassVar[str]
    plural: ClassVar[str]  # default: kind.lower() + "s"
    namespaced: ClassVar[bool] = True
    external: ClassVar[bool] = False  # True: another party installs its CRD (none generated)
    short_names: ClassVar[tuple[str, ...]] = ()
    categories: ClassVar[tuple[str, ...]] = ()
    printer_columns: ClassVar[tuple[PrinterColumn, ...]] = ()
    storage: ClassVar[bool | None] = None  # True on the storage version if not the root
    served: ClassVar[bool] = True
    deprecated: ClassVar[bool | str] = False  # True, or the warning clients are shown
    json_names: ClassVar[JsonNames] = "python"  # or "camelCase"; versions inherit the root's
    age_column: ClassVar[bool] = True  # add an Age column to the declared printer columns
    preferred: ClassVar[bool | None] = None  # True: this is the version kubectl shows

    # --- set by __init_subclass__
    _root: ClassVar[type[CustomResource]]
    _versions: ClassVar[list[type[CustomResource]]]
    _spec_shape: ClassVar[ObjectShape]
    _status_shape: ClassVar[ObjectShape | None]

    # --- per object
    metadata: dict[str, Any]
    spec: Any
    status: Any

    def __init_subclass__(
        cls, *, version_of: type[CustomResource] | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        caller = sys._getframe(1)
        if version_of is None:
            _declare_root(cls)
        else:
            _declare_version(cls, version_of)
        _declare_types(cls, caller.f_locals)
        check_columns_syntax(cls.__name__, cls.__dict__.get("printer_columns", ()))

    # ------------------------------------------------------------------ the kind

    @classmethod
    def api_version(cls) -> str:
        """``group/version``, as in the object's apiVersion."""
        return f"{cls.group}/{cls.version}"

    @classmethod
    def versions(cls) -> tuple[type[CustomResource], ...]:
        """Every version class of this kind: the root first, then in declaration order."""
        _require_declared(cls)
        return tuple(cls._root._versions)

    @classmethod
    def storage_version(cls) -> type[CustomResource]:
        """The version stored in etcd: the one with ``storage = True``, else the root."""
        versions = cls.versions()
        marked = [v for v in versions if v.__dict__.get("storage") is True]
        if len(marked) > 1:
            names = ", ".join(v.__name__ for v in marked)
            raise TypeError(
                f"{cls._root.__name__}: only one version may set storage = True: {names}"
            )
        if marked:
            return marked[0]
        root = cls._root
        if root.__dict__.get("storage") is False:
            raise TypeError(
                f"{root.__name__}: no storage version; set storage = True on one version"
            )
        return root

    @classmethod
    def preferred_version(cls) -> type[CustomResource]:
        """The version ``kubectl get`` shows: the served version with the highest Kubernetes
        version priority (GA above beta above alpha, higher numbers first).

        Raises TypeError when a version sets ``preferred = True`` and Kubernetes would
        prefer another one, saying how to make the choice hold."""
        served = [v for v in cls.versions() if v.served]
        if not served:
            raise TypeError(f"{cls._root.__name__}: no version is served; set served = True")
        best = min(served, key=lambda v: version_priority(v.version))
        chosen = [v for v in cls.versions() if v.__dict__.get("preferred") is True]
        if len(chosen) > 1:
            names = ", ".join(v.__name__ for v in chosen)
            raise TypeError(f"{cls._root.__name__}: only one version may set preferred: {names}")
        if chosen and chosen[0] is not best:
            want = chosen[0]
            higher = [v for v in served
                      if version_priority(v.version) < version_priority(want.version)]
            raise TypeError(
                f"{want.__name__}: preferred = True, but Kubernetes shows the served version "
                f"with the highest priority, {best.version} ({best.__name__}); set served = "
                f"False on {', '.join(v.__name__ for v in higher)}, or rename the versions "
                f"so that {want.version!r} sorts first (v2 > v1 > v1beta1 > v1alpha1)"
            )
        return best

    @classmethod
    def columns(cls) -> tuple[PrinterColumn, ...]:
        """This version's printer columns: the declared ones whose path exists in this
        version's schema, then Age (unless ``age_column = False`` or one is declared)."""
        _require_declared(cls)
        schema = cls.openapi_schema()
        out = [c for c in cls.printer_columns if path_exists(schema, c.json_path)]
        if out and cls.age_column and not any(
            c.name.lower() == "age" or c.json_path == AGE.json_path for c in out
        ):
            out.append(AGE)
        return tuple(out)

    @classmethod
    def check_columns(cls) -> None:
        """TypeError when a printer column's path exists in no version of the kind."""
        versions = cls.versions()
        schemas = [v.openapi_schema() for v in versions]
        for v in versions:
            for column in v.printer_columns:
                if not any(path_exists(s, column.json_path) for s in schemas):
                    raise TypeError(
                        f"{v.__name__}: printer column {column.name!r} has json_path "
                        f"{column.json_path!r}, which no version of {cls._root.__name__} has; "
                        "fix the path (like '.spec.<json field name>') or remove the column"
                    )

    @classmethod
    def openapi_schema(cls) -> dict[str, Any]:
        """This version's OpenAPI v3 schema: an object with spec (and status) properties.

        The class docstring, if any, is its description; spec is required when its
        dataclass has required fields.
        """
        _require_declared(cls)
        out: dict[str, Any] = {}
        doc = cls.__dict__.get("__doc__")
        if doc:
            out["description"] = inspect.cleandoc(doc)
        out["type"] = "object"
        out["properties"] = {"spec": cls._spec_shape.schema()}
        if cls._status_shape is not None:
            out["properties"]["status"] = cls._status_shape.schema()
        if any(f.required for f in cls._spec_shape.fields):
            out["required"] = ["spec"]
        return out

    @classmethod
    def spec_type(cls) -> type:
        """The spec dataclass."""
        _require_declared(cls)
        return cls._spec_shape.cls

    @classmethod
    def status_type(cls) -> type | None:
        """The status dataclass, or None when the kind has no status."""
        _require_declared(cls)
        return cls._status_shape.cls if cls._status_shape else None

    @classmethod
    def status_shape(cls) -> ObjectShape | None:
        """The status dataclass's shape (its schema and JSON codec), or None."""
        _require_declared(cls)
        return cls._status_shape

    def status_as_read(self) -> dict[str, Any] | None:
        """The status JSON this object had when it was read from the API (a copy taken
        then, which no change to `status` reaches); None for an object made in code."""
        return json_copy(self._read_status)

    # ------------------------------------------------------------------ an object

    def __init__(
        self,
        name: str,
        spec: Any,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        status: Any = None,
    ) -> None:
        """A new object; status defaults to ``StatusType()`` when every field has a default."""
        cls = type(self)
        _require_declared(cls)
        if not isinstance(spec, cls._spec_shape.cls):
            raise TypeError(
                f"{cls.__name__}: spec must be a {cls._spec_shape.cls.__name__}, "
                f"got {type(spec).__name__}"
            )
        if namespace is not None and not cls.namespaced:
            raise ValueError(f"{cls.kind} is cluster-scoped; {name!r} cannot have a namespace")
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        if labels is not None:
            metadata["labels"] = dict(labels)
        if annotations is not None:
            metadata["annotations"] = dict(annotations)
        if status is None and cls._status_shape is not None:
            status = cls._status_shape.default_instance()
        self._setup(metadata, spec, status, unknown={}, absent={}, read_status=None)

    def _setup(
        self,
        metadata: dict[str, Any],
        spec: Any,
        status: Any,
        *,
        unknown: dict[str, Any],
        absent: dict[str, Any],
        read_status: dict[str, Any] | None,
    ) -> None:
        self.metadata = metadata
        self.spec = spec
        self.status = status
        # Top-level keys this class does not know, kept for to_dict().
        self._unknown = unknown
        # spec/status that were missing from the dict, with the JSON of their default:
        # to_dict() leaves them out again while they still equal it.
        self._absent = absent
        # The status as read (a copy the user's code never sees): see status_as_read().
        self._read_status = read_status

    @classmethod
    def from_dict(cls: type[_R], data: Mapping[str, Any]) -> _R:
        """Read an object from the API's dict; raises `InvalidResource` if it does not fit."""
        _require_declared(cls)
        if not isinstance(data, Mapping):
            raise InvalidResource(f"{cls.kind}: expected an object, got {_describe(data)}")
        metadata = data.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, Mapping):
            raise InvalidResource(
                f"{cls.kind}: metadata: expected an object, got {_describe(metadata)}"
            )
        where = f"{cls.kind} {_object_name(metadata)}"
        for key, expected in (("apiVersion", cls.api_version()), ("kind", cls.kind)):
            if key in data and data[key] != expected:
                raise InvalidResource(
                    f"{where}: {key}: expected {expected}, got {_describe(data[key])}"
                )

        absent: dict[str, Any] = {}
        spec_shape, status_shape = cls._spec_shape, cls._status_shape
        try:
            if "spec" in data:
                spec = spec_shape.decode(data["spec"], "spec")
            else:
                spec = spec_shape.default_instance()
                if spec is None:
                    raise InvalidValue("spec", "required field is missing")
                absent["spec"] = spec_shape.encode(spec)
            status = None
            if status_shape is not None:
                if "status" in data:
                    raw = data["status"]
                    status = None if raw is None else status_shape.decode(raw, "status")
                else:
                    status = status_shape.default_instance()
                    if status is not None:
                        absent["status"] = status_shape.encode(status)
        except InvalidValue as e:
            raise InvalidResource(f"{where}: {e}") from e

        known = _TOP_LEVEL if status_shape is not None else _TOP_LEVEL[:-1]
        unknown = {k: json_copy(v) for k, v in data.items() if k not in known}
        obj = cls.__new__(cls)
        read_status = json_copy(data.get("status")) if status_shape is not None else None
        obj._setup(json_copy(dict(metadata)), spec, status, unknown=unknown, absent=absent,
                   read_status=read_status or {})
        return obj

    def to_dict(self) -> dict[str, Any]:
        """The API's dict: apiVersion, kind, metadata, spec, status (when set), unknown keys.

        The result is a new plain-JSON dict, usable as a body for the kubernetes client.
        """
        cls = type(self)
        out: dict[str, Any] = {
            "apiVersion": cls.api_version(),
            "kind": cls.kind,
            "metadata": json_copy(self.metadata),
        }
        parts: tuple[tuple[str, Any, ObjectShape | None], ...] = (
            ("spec", self.spec, cls._spec_shape),
            ("status", self.status, cls._status_shape),
        )
        for key, value, shape in parts:
            if value is None or shape is None:
                continue
            try:
                encoded = shape.encode(value)
            except InvalidValue as e:
                raise InvalidResource(
                    f"{cls.kind} {_object_name(self.metadata)}: {e.under(key)}"
                ) from None
            if key in self._absent and self._absent[key] == encoded:
                continue
            out[key] = encoded
        for key, value in self._unknown.items():
            out.setdefault(key, json_copy(value))
        return out

    # ------------------------------------------------------------------ metadata

    @property
    def name(self) -> str:
        """``metadata.name`` (empty until set)."""
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str | None:
        """``metadata.namespace``; None for a cluster-scoped kind or an object not yet placed."""
        return self.metadata.get("namespace")

    @property
    def uid(self) -> str | None:
        """``metadata.uid``, set by the API server; None before the object is created."""
        return self.metadata.get("uid")

    @property
    def generation(self) -> int | None:
        """``metadata.generation``: the API server bumps it on every spec change (compare with
        ``status.observedGeneration``)."""
        return self.metadata.get("generation")

    @property
    def resource_version(self) -> str | None:
        """``metadata.resourceVersion``: the version as read (for optimistic concurrency)."""
        return self.metadata.get("resourceVersion")

    @property
    def deletion_timestamp(self) -> str | None:
        """``metadata.deletionTimestamp``: set once the object is being deleted (its finalizers
        still run)."""
        return self.metadata.get("deletionTimestamp")

    @property
    def labels(self) -> dict[str, str]:
        """The labels, as a mutable dict inside metadata (created when missing)."""
        return typing.cast(dict[str, str], self._metadata_item("labels", dict))

    @property
    def annotations(self) -> dict[str, str]:
        """The annotations, as a mutable dict inside metadata (created when missing)."""
        return typing.cast(dict[str, str], self._metadata_item("annotations", dict))

    @property
    def finalizers(self) -> list[str]:
        """The finalizers, as a mutable list inside metadata (created when missing)."""
        return typing.cast(list[str], self._metadata_item("finalizers", list))

    @property
    def owner_references(self) -> list[dict[str, Any]]:
        """The ownerReferences, as a mutable list inside metadata (created when missing)."""
        return typing.cast(list[dict[str, Any]], self._metadata_item("ownerReferences", list))

    def _metadata_item(self, key: str, make: type) -> Any:
        if self.metadata.get(key) is None:
            self.metadata[key] = make()
        return self.metadata[key]

    # ------------------------------------------------------------------ value behaviour

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, CustomResource)
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, namespace={self.namespace!r}, "
                f"spec={self.spec!r}, status={self.status!r})")


# ---------------------------------------------------------------------- declaration


def _declare_root(cls: type[CustomResource]) -> None:
    missing = [a for a in ("group", "version", "kind") if not getattr(cls, a, None)]
    if missing:
        raise TypeError(
            f"{cls.__name__}: a custom resource needs {' and '.join(missing)} class "
            'attributes, for example group = "example.com", version = "v1", kind = "Backup"'
        )
    for attr in ("group", "version", "kind"):
        if not isinstance(getattr(cls, attr), str):
            raise TypeError(f"{cls.__name__}: {attr} must be a str")
    if not KIND.fullmatch(cls.kind):
        raise TypeError(f"{cls.__name__}: kind {cls.kind!r} must be alphanumeric, like 'Backup'")
    if not GROUP.fullmatch(cls.group):
        raise TypeError(
            f"{cls.__name__}: group {cls.group!r} must be a lowercase DNS name with a dot, "
            "like 'example.com'"
        )
    if "plural" not in cls.__dict__ and ("kind" in cls.__dict__ or not hasattr(cls, "plural")):
        cls.plural = cls.kind.lower() + "s"
    if not DNS_LABEL.fullmatch(cls.plural):
        raise TypeError(
            f"{cls.__name__}: plural {cls.plural!r} must be a lowercase DNS label, like 'backups'"
        )
    _check_version_name(cls)
    cls._root = cls
    cls._versions = [cls]


def _declare_version(cls: type[CustomResource], version_of: type[CustomResource]) -> None:
    root = getattr(version_of, "_root", None)
    if not (isinstance(version_of, type) and issubclass(version_of, CustomResource) and root):
        raise TypeError(
            f"{cls.__name__}: version_of must be a CustomResource kind, not {version_of!r}"
        )
    for attr in _SHARED:
        if attr in cls.__dict__ and cls.__dict__[attr] != getattr(root, attr):
            raise TypeError(
                f"{cls.__name__}: {attr} is shared by every version of {root.__name__}; "
                f"set it on {root.__name__} only"
            )
        setattr(cls, attr, getattr(root, attr))
    for attr in ("printer_columns", "json_names", "age_column"):
        if attr not in cls.__dict__:
            setattr(cls, attr, getattr(root, attr))
    if "version" not in cls.__dict__:
        raise TypeError(
            f"{cls.__name__}: a version of {root.__name__} needs its own version attribute, "
            'for example version = "v2"'
        )
    _check_version_name(cls)
    for other in root._versions:
        if other.version == cls.version:
            raise TypeError(
                f"{cls.__name__}: version {cls.version!r} is already declared by {other.__name__}"
            )
        if cls.__dict__.get("storage") is True and other.__dict__.get("storage") is True:
            raise TypeError(
                f"{cls.__name__}: {other.__name__} is already the storage version of "
                f"{root.__name__}; only one version may set storage = True"
            )
    cls._root = root
    root._versions.append(cls)


def _check_version_name(cls: type[CustomResource]) -> None:
    if not isinstance(cls.version, str) or not DNS_LABEL.fullmatch(cls.version):
        raise TypeError(
            f"{cls.__name__}: version {cls.version!r} must be a lowercase DNS label, like 'v1'"
        )


def _declare_types(cls: type[CustomResource], caller_locals: Mapping[str, Any]) -> None:
    try:
        hints = typing.get_type_hints(cls)
    except NameError:
        try:  # a class declared inside a function, with postponed annotations
            hints = typing.get_type_hints(cls, localns=dict(caller_locals))
        except NameError as e:
            raise TypeError(
                f"{cls.__name__}: cannot resolve its annotations ({e}); define the spec and "
                "status dataclasses before the class"
            ) from e
    spec = hints.get("spec", Any)
    if not _is_dataclass_type(spec):
        raise TypeError(
            f"{cls.__name__}: annotate spec with a dataclass (spec: {cls.__name__}Spec), "
            f"not {_type_name(spec)}"
        )
    status = _strip_optional(hints.get("status", Any))
    if status is not Any and not _is_dataclass_type(status):
        raise TypeError(
            f"{cls.__name__}: annotate status with a dataclass "
            f"(status: {cls.__name__}Status), not {_type_name(status)}"
        )
    if cls.json_names not in ("python", "camelCase"):
        raise TypeError(
            f"{cls.__name__}: json_names {cls.json_names!r} must be 'python' or 'camelCase'"
        )
    names = cls.json_names
    spec_shape = shape_of(
        spec, path=f"{cls.__name__}.spec", localns=caller_locals, json_names=names
    )
    assert isinstance(spec_shape, ObjectShape)
    cls._spec_shape = spec_shape
    cls._status_shape = None
    if status is not Any:
        status_shape = shape_of(
            status, path=f"{cls.__name__}.status", localns=caller_locals, json_names=names
        )
        assert isinstance(status_shape, ObjectShape)
        cls._status_shape = status_shape


def _require_declared(cls: type[CustomResource]) -> None:
    if "_spec_shape" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a custom resource kind; subclass it")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None))
    return tp


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else repr(tp).replace("typing.", "")


def _object_name(metadata: Mapping[str, Any]) -> str:
    name = metadata.get("name") or "<unnamed>"
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def _describe(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {reprlib.repr(value)}"
