"""What a reconcile gets besides its object: reads, writes, status, events, a logger.

Each reconcile gets a `Context` of its own. Its reads (`get`, `list`, `owned`) come from
the operator's informer caches where it watches the kind, and from the API server
otherwise (see `operator_kit.objects`); they see this reconcile's own writes at once.
Its writes (`create`, `apply`, `apply_owned`, `patch`, `patch_status`, `delete`) go to
the API server, each with a dry-run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from kubernetes import client

from operator_kit.api.kinds import KindSpec
from operator_kit.api.resources import CustomResource
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api
from operator_kit.runtime.objects import Objects, PatchType, encode, obj_like
from operator_kit.runtime.own_writes import OwnWrites

R = TypeVar("R", bound=CustomResource)


_Items = list[Any]
# (aliases: inside the classes, `list` is the method)


class Context:
    """A reconcile's reads, writes, Events and logger.

    ``ctx.get(kind, name)``, ``ctx.list(kind, ...)`` and ``ctx.owned(obj, kind)`` read;
    ``ctx.create``, ``ctx.apply``, ``ctx.apply_owned``, ``ctx.patch``, ``ctx.delete``
    and ``ctx.patch_status`` write; ``ctx.event`` posts an Event; ``ctx.log`` logs.
    A `kind` is a CustomResource class, a ``"group/version/Kind"`` string or a
    kubernetes client model class (`operator_kit.kinds`)."""

    def __init__(self, api: Api, *, field_manager: str, recorder: EventRecorder,
                 controller: str, objects: Objects | None = None,
                 own_writes: OwnWrites | None = None, namespace: str | None = None,
                 shard_label: str | None = None) -> None:
        self.api = api
        self.shard_label = shard_label
        """A shard member's assignment label: children get their owner's (sharding.py)."""
        self.client: client.ApiClient = api.client
        self.field_manager = field_manager
        self.controller = controller
        self.namespace = namespace
        """The namespace of the object being reconciled (reads default to it)."""
        self.log = logging.getLogger(f"operator_kit.controller.{controller}")
        self.objects = objects if objects is not None else Objects(
            api, field_manager=field_manager)
        self._own_writes = own_writes
        self._recorder = recorder
        # The status each patch_status of this reconcile left, by (kind, namespace, name):
        # a second patch of the same `obj` compares against it, not against the status
        # `obj` held before the first one.
        self._statuses: dict[tuple[str, str | None, str], dict[str, Any]] = {}

    def for_object(self, obj: CustomResource) -> Context:
        """A context for one reconcile of `obj`: its own read-your-writes journal."""
        return Context(self.api, field_manager=self.field_manager, recorder=self._recorder,
                       controller=self.controller, objects=self.objects.session(),
                       own_writes=self._own_writes, namespace=obj.namespace,
                       shard_label=self.shard_label)

    # -- reads -----------------------------------------------------------------------------

    def get(self, kind: KindSpec, name: str, namespace: str | None = None) -> Any | None:
        """The object `name` of `kind`, or None if there is none. For a namespaced kind,
        `namespace` defaults to the reconciled object's. From the cache when the operator
        watches `kind`, else from the API server."""
        return self.objects.get(kind, name, namespace or self.namespace)

    def list(self, kind: KindSpec, namespace: str | None = None,
             labels: Mapping[str, str] | str | None = None,
             index: tuple[str, str] | None = None) -> _Items:
        """The objects of `kind` in `namespace` (None: all the operator sees), matching
        `labels`, filed under ``index=(name, value)``; ordered by namespace and name.
        From the cache when the operator watches `kind`, else from the API server."""
        return self.objects.list(kind, namespace, labels, index)

    def owned(self, obj: CustomResource | Mapping[str, Any], kind: KindSpec) -> _Items:
        """The objects of `kind` (named in ``owns``) whose controller ownerReference is
        `obj`, from the cache, ordered by name; includes what this reconcile applied."""
        return self.objects.owned(obj, kind)

    # -- writes ------------------------------------------------------------------------------

    def create(self, obj: Any, *, owner: CustomResource | None = None,
               dry_run: bool = False) -> Any:
        """Create `obj` (a CustomResource, client model or dict); the result, same form.

        With `owner`, the new object gets a controller ownerReference to it (and the
        owner's namespace when it names none), as controller-runtime's
        ``SetControllerReference``: deleting the owner garbage-collects it."""
        if owner is not None:
            created = self.objects.create(self._owned_body(owner, obj), dry_run=dry_run)
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
        patch — the keys it names change (None deletes one), the others stay. A write
        that would change nothing sends no request and returns `obj` — compared with
        what an earlier patch_status of the same object in this reconcile wrote, else
        with the status `obj` holds (so patching one `obj` twice does what it says)."""
        kind = type(obj)
        shape = kind._status_shape
        if shape is None:
            raise TypeError(f"{kind.kind} declares no status: add a `status: <dataclass>` "
                            "annotation to the class to give it a status subresource")
        key = (kind.kind, obj.namespace, obj.name)
        current = self._statuses.get(key)
        if current is None:
            current = obj.to_dict().get("status") or {}
        if dataclasses.is_dataclass(status) and not isinstance(status, type):
            patch = _replacing(current, shape.encode(status))
        elif isinstance(status, Mapping):
            patch = dict(status)
        else:
            raise TypeError(f"patch_status takes a dict or {kind.kind}'s status dataclass, "
                            f"not {type(status).__name__}")
        if _merged(current, patch) == current:
            return obj  # nothing would change
        updated = self.objects.patch(kind, obj.name, {"status": patch}, obj.namespace,
                                     subresource="status")
        self._statuses[key] = updated.to_dict().get("status") or {}
        return updated  # type: ignore[no-any-return]

    def apply_owned(self, owner: CustomResource, child: Any, *,
                    dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply `child` with a controller ownerReference to `owner`.

        `child` is a dict, a kubernetes client model, or a CustomResource. The field
        manager is the operator's name; deleting the owner garbage-collects the child.
        Returns the applied object as a dict; `owned` in the same reconcile includes it.
        """
        body = self._owned_body(owner, child)
        meta = body["metadata"]

        def send() -> dict[str, Any]:
            result: dict[str, Any] = self.objects.apply(body, dry_run=dry_run)
            return result

        if self._own_writes is None or dry_run:
            return send()
        return self._own_writes.write(str(meta.get("namespace") or ""),
                                      str(meta.get("name") or ""), send)

    def _owned_body(self, owner: CustomResource, child: Any) -> dict[str, Any]:
        """`child` as the API's dict, with a controller ownerReference to `owner` and,
        for a namespaced kind that names no namespace, the owner's."""
        spec, body = encode(child, self.client)
        resource = self.objects.resource(spec)
        meta = dict(body.get("metadata") or {})
        if resource.namespaced and not meta.get("namespace"):
            meta["namespace"] = owner.namespace
        meta["ownerReferences"] = [owner_reference(owner)]
        shard = owner.labels.get(self.shard_label) if self.shard_label else None
        if shard:  # children follow their owner to its member
            meta["labels"] = {**(meta.get("labels") or {}), str(self.shard_label): shard}
        body["metadata"] = meta
        return body

    def event(self, obj: CustomResource | Mapping[str, Any], warning: bool, reason: str,
              note: str) -> None:
        """Post a core Event on `obj` (shown by ``kubectl describe``); repeats aggregate."""
        body = obj.to_dict() if isinstance(obj, CustomResource) else dict(obj)
        self._recorder.event(body, warning=warning, reason=reason, note=note)


def owner_reference(owner: CustomResource) -> dict[str, Any]:
    """A controller ownerReference to `owner` (which must have been read from the API)."""
    if not owner.uid:
        raise ValueError(f"{owner.kind} {owner.name} has no uid: read it from the API first")
    return {"apiVersion": owner.api_version(), "kind": owner.kind, "name": owner.name,
            "uid": owner.uid, "controller": True, "blockOwnerDeletion": True}


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


def _merged(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386)."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merged(result.get(key), value)
    return result
