"""What a reconcile writes besides its own object's spec: children and foreign status.

- `OwnedKinds`: the kinds a controller declares in ``owns``. ``ctx.apply_owned`` and
  ``ctx.create(owner=)`` of any other kind work, but nothing watches such children (one
  deleted or edited by hand is not repaired until the owner changes) and the ownership
  check cannot read a cache (each apply costs a GET first): the first such call of each
  kind logs one WARNING per controller, with the line to add.
- `ForbiddenChild`: a 403 on a child names every verb the call needs and, for a kind not
  in ``owns``, that declaring it there grants them — not only the one verb refused.
- `foreign_status`: ``ctx.patch_status`` of an object whose kind the operator does not
  define: a merge patch of another party's CRD's status subresource; a `TypeError` for
  a built-in kind (its status belongs to Kubernetes' controllers) or a kind without one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.api.kinds import Kind
from operator_kit.client.transport import ApiError, Resource
from operator_kit.runtime.objects import Objects, encode, identity

# The verbs `apply_owned` / ``create(owner=)`` need on a child's kind: get (the
# ownership check), create and patch (server-side apply); ``owns`` grants these and
# list, watch (its cache) and delete (removing old children).
CHILD_VERBS = ("get", "create", "patch")


class OwnedKinds:
    """The (group, kind) pairs a controller owns, and the kinds it was warned about."""

    def __init__(self, controller: str, kinds: Iterable[Kind]) -> None:
        self.controller = controller
        self._owned = frozenset((kind.group, kind.kind) for kind in kinds)
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def has(self, kind: Kind) -> bool:
        """Whether `kind` is in the controller's ``owns``."""
        return (kind.group, kind.kind) in self._owned

    def check(self, kind: Kind, log: logging.Logger) -> None:
        """Warn once per kind when a child of `kind` is made without ``owns`` naming it."""
        if self.has(kind):
            return
        with self._lock:
            if (kind.group, kind.kind) in self._warned:
                return
            self._warned.add((kind.group, kind.kind))
        log.warning(
            "%s: apply_owned/create(owner=) of %s, which the controller does not list in "
            "`owns`: a child deleted or changed by hand is not repaired until its owner "
            "changes (nothing watches %s), and each apply costs a GET first (the ownership "
            "check has no cache). Add it: owns = [..., %r] (logged once per kind)",
            self.controller, kind, kind.kind, str(kind))


class ForbiddenChild:
    """A context manager: a 403 inside it is raised again as an `ApiError` whose message
    names every verb a child's apply needs and, when the kind is not owned, ``owns``."""

    def __init__(self, kind: Kind, resource: Resource, owned: bool) -> None:
        self.kind, self.resource, self.owned = kind, resource, owned

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not isinstance(err, ApiException) or err.status != 403:
            return
        rule = (f"Rule([{self.resource.group!r}], [{self.resource.plural!r}], "
                f"{list(CHILD_VERBS)!r})")
        verbs = ", ".join(CHILD_VERBS)
        if self.owned:
            hint = (f"a child of {self.kind} needs {verbs} on {self.resource}; the "
                    "controller's `owns` grants them: regenerate and apply the manifests "
                    "(python -m operator_kit.manifests APP)")
        else:
            hint = (f"a child of {self.kind} needs {verbs} on {self.resource} ({rule}): "
                    f"declare {str(self.kind)!r} in the controller's `owns`, which grants "
                    "them (with list, watch and delete) and caches the children, then "
                    "regenerate the manifests")
        refused = ApiError.of(err)
        refused.hint = hint
        raise refused from None


def foreign_status(objects: Objects, obj: Any, status: Mapping[str, Any] | Any) -> Any:
    """``ctx.patch_status`` of `obj` (a dict or client model) whose kind the operator does
    not define: `status` (a dict) as a JSON merge patch of its status subresource; the
    object as the API server has it then, in `obj`'s form (or `obj` when nothing would
    change: no request)."""
    kind, meta = identity(obj, objects.api.client)
    if kind.built_in:
        raise TypeError(f"patch_status({kind}): the status of a {kind.kind} belongs to "
                        "Kubernetes' own controllers, which overwrite it; change what they "
                        "read instead (its spec, labels or annotations: ctx.patch)")
    if not isinstance(status, Mapping):
        raise TypeError(f"patch_status({kind}) takes a dict (a JSON merge patch of the "
                        f"status) for a kind the operator does not define, not "
                        f"{type(status).__name__}")
    current = encode(obj, objects.api.client)[1].get("status") or {}
    if merged(current, status) == current:
        return obj  # nothing would change
    name, namespace = str(meta.get("name")), meta.get("namespace")
    try:
        return objects.patch(kind, name, {"status": dict(status)}, namespace,
                             subresource="status")
    except ApiException as err:
        if err.status == 404 and objects.get(kind, name, namespace) is not None:
            raise TypeError(f"patch_status({kind}): {kind.kind} has no status subresource "
                            "(its CustomResourceDefinition declares none); write the field "
                            "with ctx.patch instead") from None
        if err.status == 403:
            refused = ApiError.of(err)
            refused.hint = (f"writing the status of {kind} needs patch on "
                            f"{objects.resource(kind).plural}/status: set `writes_status = "
                            "True` on the controller (it grants that), then regenerate the "
                            "manifests")
            raise refused from None
        raise


def merged(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386)."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result
