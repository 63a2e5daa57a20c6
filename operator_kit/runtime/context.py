"""What a reconcile gets besides its object: reads, writes, status, events, a logger.

Each reconcile gets a `Context` of its own. Its reads (`get`, `list`, `owned`) come from
the operator's informer caches where it watches the kind, and from the API server
otherwise (see `operator_kit.runtime.objects`); they see this reconcile's own writes at once.
Its writes (`create`, `apply`, `apply_owned`, `patch`, `patch_status`, `delete`) go to
the API server, each with a dry-run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from kubernetes import client

from operator_kit.api.kinds import Kind, KindSpec
from operator_kit.api.resources import CustomResource
from operator_kit.api.shapes import (
    ConstrainedShape,
    ListShape,
    NullableShape,
    ObjectShape,
    Shape,
)
from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import Fenced, Refusal
from operator_kit.client.transport import Api
from operator_kit.runtime.children import ForbiddenChild, OwnedKinds, foreign_status, merged
from operator_kit.runtime.objects import (
    Objects,
    PatchType,
    encode,
    identity,
    metadata_of,
    obj_like,
)
from operator_kit.runtime.own_writes import LastApplies, OwnWrites
from operator_kit.runtime.triggers import Triggers

R = TypeVar("R", bound=CustomResource)


ALL_NAMESPACES = "*"
"""``ctx.list(kind, namespace=ALL_NAMESPACES)``: every namespace, not the reconciled
object's (no namespace can be named ``*``)."""

_Items = list[Any]
# (aliases: inside the classes, `list` is the method)


class Context:
    """A reconcile's reads, writes, Events and logger.

    ``ctx.get(kind, name)``, ``ctx.list(kind, ...)`` and ``ctx.owned(obj, kind)`` read;
    ``ctx.create``, ``ctx.apply``, ``ctx.apply_owned``, ``ctx.patch``, ``ctx.delete``
    and ``ctx.patch_status`` write; ``ctx.event`` posts an Event; ``ctx.log`` logs.
    A `kind` is a CustomResource class, a ``"group/version/Kind"`` string or a
    kubernetes client model class (`operator_kit.api.kinds`)."""

    def __init__(self, api: Api, *, field_manager: str, recorder: EventRecorder,
                 controller: str, objects: Objects | None = None,
                 own_writes: OwnWrites | None = None, namespace: str | None = None,
                 shard_label: str | None = None,
                 last_applies: LastApplies | None = None,
                 refusal: Refusal | None = None, triggers: Triggers | None = None,
                 cluster: str | None = None, owns: OwnedKinds | None = None) -> None:
        self.api = api
        self.cluster = cluster
        """The fleet member cluster this Context reads and writes (None: the hub)."""
        self.shard_label = shard_label
        """A shard member's assignment label: children get their owner's (sharding.py)."""
        self.client: client.ApiClient = api.client
        self.field_manager = field_manager
        self.controller = controller
        self.namespace = namespace
        """The namespace of the object being reconciled (reads default to it)."""
        self.log = logging.getLogger(f"operator_kit.controller.{controller}")
        self.triggers = triggers if triggers is not None else Triggers()
        """Why this reconcile runs: the changes and requeues that queued its object,
        coalesced (`operator_kit.runtime.triggers.Triggers`; ``str()`` for a log line)."""
        self.objects = objects if objects is not None else Objects(
            api, field_manager=field_manager)
        self._own_writes = own_writes
        # Kept by the controller's base context and shared with each reconcile's.
        self._last_applies = last_applies if last_applies is not None else LastApplies()
        self._recorder = recorder
        # The fence of its writes and Events (a reconcile's timeout): see for_object.
        self._refusal = refusal
        # The kinds its controller owns, and those it was warned about (shared).
        self._owns = owns
        # The status each patch_status of this reconcile left, by (kind, namespace, name):
        # a second patch of the same `obj` compares against it, not against the status
        # `obj` held before the first one.
        self._statuses: dict[tuple[str, str | None, str], dict[str, Any]] = {}

    def for_object(self, obj: Any, refusal: Refusal | None = None,
                   triggers: Triggers | None = None) -> Context:
        """A context for one reconcile of `obj`: its own read-your-writes journal. With
        `refusal` (a reconcile's timeout), its writes and Events are fenced: refused
        with `Fenced` once `refusal` gives a reason (`operator_kit.client.fencing`).
        `triggers`: why it runs (``ctx.triggers``)."""
        objects = self.objects.session(refusal)
        return Context(objects.api, field_manager=self.field_manager,
                       recorder=self._recorder, controller=self.controller,
                       objects=objects, own_writes=self._own_writes,
                       namespace=metadata_of(obj, self.client).get("namespace"),
                       shard_label=self.shard_label, last_applies=self._last_applies,
                       refusal=refusal, triggers=triggers, cluster=self.cluster,
                       owns=self._owns)

    # -- reads -----------------------------------------------------------------------------

    def get(self, kind: KindSpec, name: str, namespace: str | None = None) -> Any | None:
        """The object `name` of `kind`, or None if there is none. For a namespaced kind,
        `namespace` defaults to the reconciled object's. From the cache when the operator
        watches `kind`, else from the API server."""
        return self.objects.get(kind, name, namespace or self.namespace)

    def list(self, kind: KindSpec, namespace: str | None = None,
             labels: Mapping[str, str] | str | None = None,
             index: tuple[str, str] | None = None) -> _Items:
        """The objects of `kind` in `namespace`, matching `labels`, filed under
        ``index=(name, value)``; ordered by namespace and name. For a namespaced kind,
        `namespace` defaults to the reconciled object's, as for `get`;
        ``namespace=ALL_NAMESPACES`` lists every namespace the operator sees. From the
        cache when the operator watches `kind`, else from the API server."""
        where = None if namespace == ALL_NAMESPACES else (namespace or self.namespace)
        return self.objects.list(kind, where, labels, index)

    def owned(self, obj: Any, kind: KindSpec) -> _Items:
        """The objects of `kind` (named in ``owns``) whose controller ownerReference is
        `obj`, from the cache, ordered by name; includes what this reconcile applied."""
        return self.objects.owned(obj, kind)

    # -- writes ------------------------------------------------------------------------------

    def create(self, obj: Any, *, owner: Any = None, dry_run: bool = False) -> Any:
        """Create `obj` (a CustomResource, client model or dict); the result, same form.

        With `owner`, the new object gets a controller ownerReference to it (and the
        owner's namespace when it names none), as controller-runtime's
        ``SetControllerReference``: deleting the owner garbage-collects it. An object
        of that name controlled by another owner is `AlreadyOwned`, before any write."""
        if owner is not None:
            body = self._owned_body(owner, obj)
            self._current_child(owner, body, adopt=False)
            created = self.objects.create(body, dry_run=dry_run)
            return obj_like(obj, created, self.client)
        return self.objects.create(obj, dry_run=dry_run)

    def apply(self, obj: Any, *, dry_run: bool = False, force: bool = True) -> Any:
        """Server-side apply `obj` as the operator's field manager; the result."""
        return self.objects.apply(obj, dry_run=dry_run, force=force)

    def patch(self, kind: KindSpec, name: str, patch: Mapping[str, Any] | _Items,
              namespace: str | None = None, *, type: PatchType = "merge",
              dry_run: bool = False) -> Any:
        """Patch object `name` of `kind` (merge patch by default); the object as it is now."""
        return self.objects.patch(kind, name, patch, namespace or self.namespace, type=type,
                                  dry_run=dry_run)

    def delete(self, kind: KindSpec, name: str, namespace: str | None = None, *,
               dry_run: bool = False,
               propagation: Literal["Background", "Foreground", "Orphan"] = "Background",
               ) -> bool:
        """Delete object `name` of `kind`; False when it was not there."""
        return self.objects.delete(kind, name, namespace or self.namespace, dry_run=dry_run,
                                   propagation=propagation)

    def patch_status(self, obj: R, status: Mapping[str, Any] | Any) -> R:
        """Write `obj`'s status subresource; returns the object as the API server has it.

        One rule: the kind's status *dataclass* means "the status is exactly this" —
        fields that are None, or absent from it, are cleared; a *dict* is a JSON merge
        patch — the keys it names change (None deletes one), the others stay, and a key
        the status dataclass does not have is a `TypeError` naming it (the API server
        would prune it silently). A write that would change nothing sends no request
        and returns `obj` — compared with what an earlier patch_status of the same
        object in this reconcile wrote, else with the status `obj` had when it was read
        (`CustomResource.status_as_read`: changes made to ``obj.status`` since, through a
        shared list say, cannot hide a change). An object made in code is always sent.

        A dict's keys may be the status fields' JSON names or their Python names (they
        differ under ``json_names = "camelCase"``: ``last_run`` or ``lastRun``), nested
        objects' keys too; one field named both ways is a `TypeError`.

        For an object of a kind the operator does not define (a dict or a client model),
        a dict is a merge patch of its status subresource (another party's CRD), and a
        built-in kind is a `TypeError`: its status belongs to Kubernetes."""
        if not isinstance(obj, CustomResource):
            return foreign_status(self.objects, obj, status)
        kind = type(obj)
        shape = kind.status_shape()
        if shape is None:
            raise TypeError(f"{kind.kind} declares no status: add a `status: <dataclass>` "
                            "annotation to the class to give it a status subresource")
        key = (kind.kind, obj.namespace, obj.name)
        current = self._statuses.get(key)
        if current is None:
            current = obj.status_as_read()
        if dataclasses.is_dataclass(status) and not isinstance(status, type):
            patch = _replacing(current or {}, shape.encode(status))
        elif isinstance(status, Mapping):
            patch = _status_patch(kind.kind, shape, status, "status")
        else:
            raise TypeError(f"patch_status takes a dict or {kind.kind}'s status dataclass, "
                            f"not {type(status).__name__}")
        if current is not None and merged(current, patch) == current:
            return obj  # nothing would change
        updated = self.objects.patch(kind, obj.name, {"status": patch}, obj.namespace,
                                     subresource="status")
        self._statuses[key] = updated.status_as_read() or {}  # as the API server has it
        return updated  # type: ignore[no-any-return]

    def apply_owned(self, owner: Any, child: Any, *,
                    dry_run: bool = False, adopt: bool = False) -> dict[str, Any]:
        """Server-side apply `child` with a controller ownerReference to `owner`.

        `child` is a dict, a kubernetes client model, or a CustomResource. The field
        manager is the operator's name; deleting the owner garbage-collects the child.
        Returns the applied object as a dict; `owned` in the same reconcile includes it.

        A child of that name controlled by another owner (whoever wrote that reference)
        is left alone: `AlreadyOwned`, before any write, and a Warning Event on `owner`
        naming the controller that holds it — unless ``adopt=True``, which takes it over.
        An apply that cannot change anything is not sent: when the child's
        resourceVersion (in the cache) is still the one this controller's last apply of
        the identical body left, the child as it is now is returned instead.
        """
        body = self._owned_body(owner, child)
        meta = body["metadata"]
        with self._forbidden_child(body):
            current = self._current_child(owner, body, adopt=adopt)
        if not dry_run and current is not None and self._last_applies.unchanged(
                body, (current.get("metadata") or {}).get("resourceVersion")):
            return current

        def send() -> dict[str, Any]:
            result: dict[str, Any] = self.objects.apply(body, dry_run=dry_run)
            if not dry_run:
                self._last_applies.remember(body, result)
            return result

        with self._forbidden_child(body):
            if self._own_writes is None or dry_run:
                return send()
            return self._own_writes.write(str(meta.get("namespace") or ""),
                                          str(meta.get("name") or ""), send)

    def _forbidden_child(self, body: Mapping[str, Any]) -> ForbiddenChild:
        """Around a child's reads and writes: a 403 names every verb the call needs and
        whether ``owns`` would grant them."""
        spec = Kind.of(f"{body['apiVersion']}/{body['kind']}")
        return ForbiddenChild(spec, self.objects.resource(spec), self._owns is not None
                              and self._owns.has(spec))

    def _current_child(self, owner: Any, body: dict[str, Any], *,
                       adopt: bool) -> dict[str, Any] | None:
        """The child `body` names as it is now (from the cache when the kind is cached),
        or None; `AlreadyOwned` when another owner controls it (with ``adopt``: that
        controller reference removed first, guarded by the child's resourceVersion)."""
        meta = body["metadata"]
        if not meta.get("name"):  # generateName: a new object, nobody else's
            return None
        spec = Kind.of(f"{body['apiVersion']}/{body['kind']}")
        found = self.objects.get(spec, str(meta["name"]), meta.get("namespace"))
        if found is None:
            return None
        current = encode(found, self.client)[1]
        cmeta = current.get("metadata") or {}
        refs = list(cmeta.get("ownerReferences") or [])
        owner_kind, owner_meta = identity(owner, self.client)
        other = next((r for r in refs if r.get("controller")
                      and r.get("uid") != owner_meta.get("uid")), None)
        if other is None:
            return current
        where = f"{body['kind']} {_where(cmeta)}"
        holder = f"{other.get('kind')} {other.get('name')} (uid {other.get('uid')})"
        if not adopt:
            note = (f"{where} is controlled by {holder}; not taking it over (pass "
                    "adopt=True to apply_owned to take it over)")
            self.event(owner, True, "AlreadyOwned", note)
            raise AlreadyOwned(f"{owner_kind.kind} {_where(owner_meta)}: {note}",
                               child=where, controller=holder)
        kept = [r for r in refs if r is not other]
        self.objects.patch(spec, str(cmeta.get("name")), [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": cmeta.get("resourceVersion")},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": kept}],
            cmeta.get("namespace"), type="json")
        self.log.info("%s: took %s over from %s (adopt=True)", self.controller, where, holder)
        return None

    def _owned_body(self, owner: Any, child: Any) -> dict[str, Any]:
        """`child` as the API's dict, with a controller ownerReference to `owner` and,
        for a namespaced kind that names no namespace, the owner's (a Namespace owner:
        itself)."""
        spec, body = encode(child, self.client)
        resource = self.objects.resource(spec)
        if self._owns is not None:
            self._owns.check(spec, self.log)
        owner_kind, owner_meta = identity(owner, self.client)
        meta = dict(body.get("metadata") or {})
        if resource.namespaced and not meta.get("namespace"):
            meta["namespace"] = owner_meta.get("namespace") or (
                owner_meta.get("name") if str(owner_kind) == "v1/Namespace" else None)
            if not meta["namespace"]:
                raise ValueError(f"{spec.kind} {meta.get('name')} is namespaced and its owner "
                                 f"{owner_kind.kind} {owner_meta.get('name')} is not: give the "
                                 "child a metadata.namespace")
        meta["ownerReferences"] = [owner_reference(owner, self.client)]
        labels = owner_meta.get("labels") or {}
        shard = labels.get(self.shard_label) if self.shard_label else None
        if shard:  # children follow their owner to its member
            meta["labels"] = {**(meta.get("labels") or {}), str(self.shard_label): shard}
        body["metadata"] = meta
        return body

    def event(self, obj: Any, warning: bool, reason: str, note: str, *,
              action: str = "Reconcile", related: Any = None) -> None:
        """Post an events.k8s.io/v1 Event regarding `obj` (shown by ``kubectl describe``):
        a Warning when `warning`, a CamelCase `reason`, a `note` for people, the `action`
        this controller took or failed (default ``Reconcile``) and optionally a `related`
        object. The same Event again becomes a series whose count rises
        (`operator_kit.client.events`); a reason or action the API server would refuse
        (empty, over 128 characters) is a ValueError."""
        refused = self._refusal() if self._refusal is not None else None
        if refused is not None:
            raise Fenced(f"Event {reason} on {_where(metadata_of(obj, self.client))} "
                         f"refused: {refused}")

        def as_dict(item: Any) -> dict[str, Any]:
            return dict(item) if isinstance(item, Mapping) else encode(item, self.client)[1]

        self._recorder.event(as_dict(obj), warning=warning, reason=reason, note=note,
                             action=action,
                             related=None if related is None else as_dict(related))


class AlreadyOwned(Exception):
    """A child is controlled by another owner (controller-runtime's AlreadyOwnedError):
    `apply_owned` and ``create(owner=)`` refuse it before any write. Not a transient
    failure: the controller retries it at its longest backoff, not at once."""

    def __init__(self, message: str, *, child: str, controller: str) -> None:
        super().__init__(message)
        self.child = child
        self.controller = controller


def _where(meta: Mapping[str, Any]) -> str:
    namespace, name = meta.get("namespace"), meta.get("name")
    return f"{namespace}/{name}" if namespace else str(name)


def owner_reference(owner: Any, api_client: client.ApiClient) -> dict[str, Any]:
    """A controller ownerReference to `owner` (any form a read returns; it must have been
    read from the API)."""
    kind, meta = identity(owner, api_client)
    if not meta.get("uid"):
        raise ValueError(f"{kind.kind} {meta.get('name')} has no uid: read it from the API "
                         "first")
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": meta.get("name"),
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def _status_patch(kind: str, shape: ObjectShape, patch: Mapping[str, Any],
                  path: str) -> dict[str, Any]:
    """`patch` with each key as the status JSON names it: a field may be named by its
    JSON name or its Python name (they differ under ``json_names = "camelCase"``), at any
    depth where the value is an object (or a list of objects) of a nested dataclass. A
    TypeError for a key that is neither, or for one field named both ways."""
    by_json = {f.json_name: f for f in shape.fields}
    by_python = {f.name: f for f in shape.fields}
    out: dict[str, Any] = {}
    for name, value in patch.items():
        field = by_json.get(name) or by_python.get(name)
        if field is None:
            known = ", ".join(sorted(by_json)) or "none"
            raise TypeError(f"patch_status({kind}): {path} has no field {name!r} (its fields: "
                            f"{known}); the API server would drop it without a word")
        if field.json_name in out:
            raise TypeError(f"patch_status({kind}): {path} names the field "
                            f"{field.json_name!r} twice ({field.name!r} is its Python name); "
                            "keep one key")
        inner = _unwrapped(field.shape)
        items = _unwrapped(inner.items) if isinstance(inner, ListShape) else None
        where = f"{path}.{field.json_name}"
        if isinstance(inner, ObjectShape) and isinstance(value, Mapping):
            value = _status_patch(kind, inner, value, where)
        elif isinstance(items, ObjectShape) and isinstance(value, list):
            value = [_status_patch(kind, items, v, f"{where}[{i}]")
                     if isinstance(v, Mapping) else v for i, v in enumerate(value)]
        out[field.json_name] = value
    return out


def _unwrapped(shape: Shape) -> Shape:
    while isinstance(shape, (NullableShape, ConstrainedShape)):
        shape = shape.inner
    return shape


def _replacing(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that turns `old` into exactly `new` (keys `new` lacks: null)."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = _replacing(before, value)
        else:
            patch[key] = value
    return patch


