"""The read/write client: any kind, by the forms `operator_kit.kinds.Kind.of` accepts.

`Objects` is what ``ctx.get``, ``ctx.list``, ``ctx.owned``, ``ctx.create`` … call.

**Reads** are served from an informer's cache when one holds every object the read can
return, has synced, and keeps objects in full (not metadata only); every other read is
a request to the API server:

- ``get`` and ``list`` of a kind watched without a selector — a controller's primary
  kind, a kind in ``owns``, a kind in ``watches`` — in a namespace it watches: the cache;
- ``list`` with a label selector that *implies* the selector of a label-selected
  informer (a ``Watch`` or controller with ``label_selector``, a shard member's owned
  kinds): that cache. Implication is decided per requirement (`LabelSelector.implies`):
  each requirement of the informer's selector must follow from one of the query's on
  the same key — informer ``app=web``: ``app=web,tier=db`` and ``app in (web)`` read
  the cache; ``tier=db``, ``app in (web,db)`` or no selector are LISTs;
- anything else — a ``get`` of a kind watched only through label-selected informers
  (the object may exist outside the selector), an unwatched kind, another namespace, a
  field-selected informer — is a request to the API server. Index lookups
  (``index=(name, value)``) always read the cache the index was declared on, whatever
  its selector.

A label selector is checked as the API server checks it, before any request: one the
server would refuse is a ValueError carrying the server's message.

Reads decode what they return: a `CustomResource` class gives instances of it, a
kubernetes client model class gives that model, and a ``"group/version/Kind"`` string
gives the API's dict (a copy: changing it changes nothing in the cache).

**Writes** (create, patch, apply, delete, each with ``dry_run``) always go to the API
server. Within one reconcile, reads see the reconcile's own writes at once
(*read-your-writes*): what a write returned stands in for the cached copy until the
watch brings that version or a newer one.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit.api.kinds import Kind, KindSpec
from operator_kit.api.resources import CustomResource, InvalidResource
from operator_kit.api.shapes import json_copy
from operator_kit.client.fencing import FencedApi, Refusal
from operator_kit.client.transport import Api, Resource
from operator_kit.runtime.cache import OWNER, Key, LabelSelector, key_of
from operator_kit.runtime.watching import Informer, Informers

PatchType = Literal["merge", "strategic", "json"]
_PATCH_CONTENT = {"merge": "application/merge-patch+json",
                  "strategic": "application/strategic-merge-patch+json",
                  "json": "application/json-patch+json"}

_GONE: dict[str, Any] = {}
_Unseen = list[tuple[Informer, str]]  # (aliases: inside the class, `list` is the method)
"""Journal entry of an object this reconcile deleted (compared by identity)."""


_Items = list[Any]
_Dicts = list[dict[str, Any]]
_Caches = list[Informer]
# (aliases: inside the classes, `list` is the method)


class Objects:
    """Get, list, create, patch, apply and delete objects of any kind; see the module
    docstring for which reads come from the cache."""

    def __init__(self, api: Api, informers: Informers | None = None, *,
                 field_manager: str = "operator-kit", shard_selector: str | None = None) -> None:
        self.api = api
        self.informers = informers
        self.field_manager = field_manager
        # A shard member's: its owned caches select this label, and hold all it owns.
        self.shard_selector = shard_selector
        # What this session wrote: (resource, key) -> the object the API returned,
        # or _GONE; `session()` starts an empty one for each reconcile.
        self._journal: dict[tuple[Resource, Key], dict[str, Any]] = {}

    def session(self, refusal: Refusal | None = None) -> Objects:
        """The same client with a journal of its own (one per reconcile); with
        `refusal`, its writes are fenced by it (`operator_kit.client.fencing`)."""
        api = self.api if refusal is None else FencedApi(self.api, refusal)
        return Objects(api, self.informers, field_manager=self.field_manager,
                       shard_selector=self.shard_selector)

    # -- kinds -----------------------------------------------------------------------------

    def resource(self, kind: KindSpec) -> Resource:
        """The REST endpoint of `kind` (by discovery, once per kind); a clear LookupError
        when the API server does not serve it."""
        spec = Kind.of(kind)
        custom = spec.custom_resource
        if spec.defined_here and custom is not None and custom.api_version() == spec.api_version:
            return resource_of(custom)  # declared in code: no discovery needed
        try:
            return self.api.resource_for(spec.api_version, spec.kind)
        except LookupError as err:
            install = "" if spec.built_in else (
                f"; {spec.kind} is another party's kind: install its CRD (the software that "
                f"defines {spec.group}) first")
            raise LookupError(
                f"{spec}: {err}{self._served(spec)}. Check the group, version and kind (e.g. "
                "'batch/v1/Job', 'v1/ConfigMap'), that the API server serves that version "
                f"(kubectl api-resources){install}") from None

    def _served(self, spec: Kind) -> str:
        """What the API server serves of `spec`'s group, for an error message: its
        versions, and the kinds of the version asked for."""
        try:
            if spec.group:
                versions = [str(v["version"]) for v in
                            self.api.get(f"/apis/{spec.group}").get("versions") or ()]
            else:
                versions = [str(v) for v in self.api.get("/api").get("versions") or ()]
        except ApiException:
            return f" (the API server serves no group {spec.group!r})" if spec.group else ""
        if spec.version not in versions:
            return f" (it serves {spec.group or 'the core group'} in {', '.join(versions)})"
        try:
            listing = self.api.get(f"/apis/{spec.api_version}" if spec.group
                                   else f"/api/{spec.version}")
        except ApiException:
            return ""
        kinds = sorted({str(r["kind"]) for r in listing.get("resources") or ()
                        if "/" not in str(r.get("name", ""))})
        return f" (its kinds in {spec.api_version}: {', '.join(kinds[:20])})"

    # -- reads -----------------------------------------------------------------------------

    def get(self, kind: KindSpec, name: str, namespace: str | None = None) -> Any | None:
        """The object `name` (in `namespace`, for namespaced kinds), or None if it does
        not exist."""
        spec = Kind.of(kind)
        resource = self.resource(spec)
        namespace = namespace if resource.namespaced else None
        if resource.namespaced and not namespace:
            raise ValueError(f"get {spec} {name!r}: the kind is namespaced; give a namespace")
        key: Key = (namespace or "", name)
        informer = self._cache(resource, namespace)
        if informer is not None:
            raw = self._overlay_one(resource, key, informer.get(key))
        else:
            try:
                raw = self.api.request("GET", resource.path(namespace, name))
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
        return None if raw is None else decode(spec, raw, self.api.client)

    def list(self, kind: KindSpec, namespace: str | None = None,
             labels: Mapping[str, str] | str | None = None,
             index: tuple[str, str] | None = None) -> _Items:
        """The objects of `kind` (in `namespace`; None: every namespace the operator
        sees) matching `labels` (a dict, or a selector such as ``"tier in (a,b)"``),
        and filed under ``index=(name, value)`` when given; ordered by namespace and name."""
        spec = Kind.of(kind)
        resource = self.resource(spec)
        namespace = namespace if resource.namespaced else None
        selector = LabelSelector.of(labels) if labels is not None else None
        if index is not None:
            raws = []
            for informer in self._indexed(resource, index[0], spec, namespace):
                found = informer.store.by_index(index[0], str(index[1]), namespace, selector)
                raws += self._overlay_many(resource, found, informer,
                                           namespace or informer.namespace, selector, index)
            raws.sort(key=key_of)
        else:
            cache = self._cache(resource, namespace, selector)
            if cache is not None:
                found = cache.store.list(namespace, selector)
                raws = self._overlay_many(resource, found, cache, namespace, selector)
            else:
                raws = self._list_from_api(resource, namespace, selector)
        return [decode(spec, raw, self.api.client) for raw in raws]

    def unseen_writes(self) -> _Unseen:
        """(cache, resourceVersion) for each object this session wrote that a cache of the
        operator holds but has not seen at that version yet: what the next reconcile of
        the same object waits for (`operator_kit.runtime.consistency`)."""
        unseen: _Unseen = []
        for (resource, _key), written in self._journal.items():
            version = (written.get("metadata") or {}).get("resourceVersion")
            if written is _GONE or not version or not self.informers:
                continue
            unseen += [(informer, str(version)) for informer in self.informers.of(resource)
                       if informer.holds(written) and not informer.has_seen(str(version))]
        return unseen

    def owned(self, owner: Any, kind: KindSpec) -> _Items:
        """The objects of `kind` whose controller ownerReference is `owner` (in any form a
        read returns), from the cache of the owned kind, ordered by name."""
        spec = Kind.of(kind)
        owner_meta = metadata_of(owner, self.api.client)
        uid = owner_meta.get("uid")
        if not uid:
            raise ValueError("owned(): the owner has no uid; pass the object as read from "
                             "the API (the one reconcile got)")
        resource = self.resource(spec)
        where = owner_meta.get("namespace") if resource.namespaced else None
        candidates = self.informers.of(resource) if self.informers else []
        informers = [i for i in candidates if self.shard_selector is not None
                     and i.label_selector == self.shard_selector and not i.field_selector
                     and (i.namespace is None or i.namespace == where)]
        informers += [i for i in candidates if i.covers(where, metadata=True)]
        if not informers:
            raise LookupError(f"owned(…, {spec}): this operator does not cache every {spec} "
                              "there; name it in the controller's `owns`")
        informer = informers[0]
        found = informer.store.by_index(OWNER, str(uid))
        raws = self._overlay_many(resource, found, informer, None, None, (OWNER, str(uid)))
        if informer.metadata_only:  # Owns(..., metadata_only=True): metadata dicts
            return [json_copy(raw) for raw in raws]
        return [decode(spec, raw, self.api.client) for raw in raws]

    def _list_from_api(self, resource: Resource, namespace: str | None,
                       selector: LabelSelector | None) -> _Dicts:
        items: _Dicts = []
        token: str | None = None
        while True:
            page = self.api.request("GET", resource.path(namespace), query={
                "labelSelector": str(selector) if selector is not None else None,
                "limit": 500, "continue": token})
            for item in page.get("items") or ():
                item["apiVersion"], item["kind"] = resource.api_version, resource.kind
                items.append(item)
            token = page.get("metadata", {}).get("continue") or None
            if not token:
                return sorted(items, key=key_of)

    def _cache(self, resource: Resource, namespace: str | None,
               selector: LabelSelector | None = None) -> Informer | None:
        """The synced cache a read of `resource` in `namespace` matching `selector` may be
        served from: one holding every object of the kind there, else a label-selected
        one whose selector the query's implies; None: ask the API server."""
        if not self.informers:
            return None
        covering = self.informers.covering(resource, namespace)
        if covering is not None or selector is None:
            return covering
        for informer in self._selected(resource, namespace):
            held = informer_selector(informer)
            if held is not None and selector.implies(held):
                return informer
        return None

    def _selected(self, resource: Resource, namespace: str | None) -> _Caches:
        """The synced, full, label-selected (and not field-selected) informers of
        `resource` that watch `namespace` (or every namespace)."""
        return [i for i in (self.informers.of(resource) if self.informers else [])
                if i.label_selector and not i.field_selector and not i.metadata_only
                and (i.namespace is None or i.namespace == namespace) and i.synced.is_set()]

    def _indexed(self, resource: Resource, name: str, spec: Kind,
                 namespace: str | None) -> _Caches:
        """The caches holding index `name` of `resource` that a read in `namespace` (None:
        every namespace) looks in: one that watches every namespace, else the one of that
        namespace (none when it is not watched), else one per watched namespace."""
        indexed = [i for i in (self.informers.of(resource) if self.informers else [])
                   if name in i.store.indexes() and not i.metadata_only]
        everywhere = [i for i in indexed if i.namespace is None]
        if everywhere or (indexed and namespace is None):
            return everywhere[:1] or indexed
        if indexed:
            return [i for i in indexed if i.namespace == namespace]
        raise LookupError(f"{spec} has no index {name!r} in this operator's cache: declare "
                          f"it in a controller's `indexes` (Index({spec.kind}, function))")

    # -- read-your-writes --------------------------------------------------------------------

    def _overlay_one(self, resource: Resource, key: Key,
                     cached: dict[str, Any] | None) -> dict[str, Any] | None:
        written = self._journal.get((resource, key))
        if written is None:
            return cached
        if written is _GONE:
            return None
        return cached if cached is not None and _as_new(cached, written) else written

    def _overlay_many(self, resource: Resource, found: _Dicts, informer: Informer,
                      namespace: str | None, selector: LabelSelector | None,
                      index: tuple[str, str] | None = None) -> _Dicts:
        if not self._journal:
            return found
        result = {key_of(obj): obj for obj in found}
        for (written_resource, key), written in self._journal.items():
            if written_resource != resource:
                continue
            if written is _GONE:
                result.pop(key, None)
                continue
            cached = informer.store.get(key)
            if cached is not None and _as_new(cached, written):
                continue  # the cache caught up: what it holds (and whether it fits) stands
            fits = ((namespace is None or key[0] == namespace)
                    and (selector is None or selector.matches(written))
                    and (index is None or index[1] in informer.store.values_of(index[0],
                                                                               written)))
            if fits:
                result[key] = written
            else:
                result.pop(key, None)
        return [result[key] for key in sorted(result)]

    def _record(self, resource: Resource, written: Any) -> None:
        if isinstance(written, dict) and written.get("kind") == resource.kind:
            written.get("metadata", {}).pop("managedFields", None)
            self._journal[(resource, key_of(written))] = written

    # -- writes ------------------------------------------------------------------------------

    def create(self, obj: Any, *, dry_run: bool = False) -> Any:
        """Create `obj` (a CustomResource, a client model, or a dict with apiVersion and
        kind); returns what the API server made of it, in the form given."""
        spec, body = encode(obj, self.api.client)
        resource = self.resource(spec)
        meta = body.get("metadata") or {}
        created = self.api.request("POST", resource.path(meta.get("namespace")), body=body,
                                   query={"dryRun": "All" if dry_run else None})
        if not dry_run:
            self._record(resource, created)
        return obj_like(obj, created, self.api.client)

    def apply(self, obj: Any, *, dry_run: bool = False, force: bool = True) -> Any:
        """Server-side apply `obj` as this operator's field manager; the result, in the
        form given."""
        spec, body = encode(obj, self.api.client)
        resource = self.resource(spec)
        applied = self.api.apply(body, field_manager=self.field_manager, force=force,
                                 dry_run=dry_run)
        if not dry_run:
            self._record(resource, applied)
        return obj_like(obj, applied, self.api.client)

    def patch(self, kind: KindSpec, name: str, patch: Mapping[str, Any] | _Items,
              namespace: str | None = None, *, type: PatchType = "merge",
              subresource: str | None = None, dry_run: bool = False) -> Any:
        """Patch the object `name` (a merge patch by default; ``type="json"`` takes a
        list of JSON-patch operations); the object as it now is, decoded like a read."""
        spec = Kind.of(kind)
        resource = self.resource(spec)
        if type not in _PATCH_CONTENT:
            raise ValueError(f"patch type {type!r}: use 'merge', 'strategic' or 'json'")
        patched = self.api.request(
            "PATCH", resource.path(namespace if resource.namespaced else None, name,
                                   subresource),
            body=patch, content_type=_PATCH_CONTENT[type],
            query={"dryRun": "All" if dry_run else None})
        if not dry_run:
            self._record(resource, patched)
        return decode(spec, patched, self.api.client)

    def delete(self, kind: KindSpec, name: str, namespace: str | None = None, *,
               dry_run: bool = False,
               propagation: Literal["Background", "Foreground", "Orphan"] = "Background",
               ) -> bool:
        """Delete the object `name`; False if it did not exist. Its dependents go
        by `propagation` (the garbage collector's)."""
        spec = Kind.of(kind)
        resource = self.resource(spec)
        path = resource.path(namespace if resource.namespaced else None, name)
        try:
            # DeleteOptions in a body win over query parameters: dryRun goes in it too.
            options: dict[str, Any] = {"propagationPolicy": propagation}
            if dry_run:
                options["dryRun"] = ["All"]
            answer: Any = self.api.request("DELETE", path, body=options)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        if not dry_run:
            key: Key = ((namespace or "") if resource.namespaced else "", name)
            if isinstance(answer, dict) and answer.get("kind") == resource.kind:
                self._record(resource, answer)  # still there: finalizers hold it
            else:
                self._journal[(resource, key)] = _GONE
        return True


@functools.lru_cache(maxsize=256)
def _parsed_selector(text: str) -> LabelSelector | None:
    try:
        return LabelSelector.of(text)
    except ValueError:
        return None  # the API server refuses it too: that informer never syncs


def informer_selector(informer: Informer) -> LabelSelector | None:
    """The label selector `informer` watches with, parsed (None: none, or not valid)."""
    return _parsed_selector(informer.label_selector) if informer.label_selector else None


def resource_of(kind: type[CustomResource]) -> Resource:
    """The REST endpoint of a CustomResource class, without asking discovery."""
    group, _, version = kind.api_version().rpartition("/")
    return Resource(group, version, kind.plural, kind.kind, kind.namespaced)


# -- decoding and encoding ------------------------------------------------------------------

def decode(spec: Kind, raw: dict[str, Any], api_client: client.ApiClient) -> Any:
    """`raw` as `spec` asks: a CustomResource instance, a client model, or a dict copy.

    A CustomResource that does not match its type raises `InvalidResource`; so does a
    client model the API's dict does not fit (its error, with the object named)."""
    custom = spec.custom_resource
    if custom is not None:
        return custom.from_dict(raw)
    if spec.resource is not None:
        try:
            return decode_model(spec.resource, raw, api_client)
        except (TypeError, ValueError) as err:
            meta = raw.get("metadata") or {}
            where = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
            raise InvalidResource(f"{spec.kind} {where}: does not decode as "
                                  f"{spec.resource.__name__}: {err}") from err
    return json_copy(raw)


def metadata_of(obj: Any, api_client: client.ApiClient) -> Mapping[str, Any]:
    """The API's metadata dict of `obj`, in any form a read returns (a CustomResource, a
    dict, a client model): for the first two, the object's own (not a copy)."""
    if isinstance(obj, CustomResource):
        return obj.metadata
    if isinstance(obj, Mapping):
        return obj.get("metadata") or {}
    meta = getattr(obj, "metadata", None)
    return {} if meta is None else api_client.sanitize_for_serialization(meta) or {}


def identity(obj: Any, api_client: client.ApiClient) -> tuple[Kind, Mapping[str, Any]]:
    """The kind and the metadata dict of `obj`, in any form a read returns."""
    if isinstance(obj, CustomResource):
        return Kind.of(type(obj)), obj.metadata
    if isinstance(obj, Mapping):
        return Kind.of(f"{obj.get('apiVersion')}/{obj.get('kind')}"), obj.get("metadata") or {}
    return Kind.of(type(obj)), metadata_of(obj, api_client)


def with_metadata(obj: Any, metadata: dict[str, Any], api_client: client.ApiClient) -> Any:
    """A copy of `obj` (any form a read returns) whose metadata is `metadata`."""
    if isinstance(obj, CustomResource):
        updated = copy.copy(obj)
        updated.metadata = metadata
        return updated
    body = encode(obj, api_client)[1]
    return obj_like(obj, {**body, "metadata": metadata}, api_client)


def decode_model(model: type, raw: Mapping[str, Any], api_client: client.ApiClient) -> Any:
    """A kubernetes client model from the API's dict (client 36's models and 37's)."""
    from_dict = getattr(model, "from_dict", None)
    if callable(from_dict):  # kubernetes >= 37: pydantic models
        return from_dict(json_copy(dict(raw)))

    class _Response:
        data = json.dumps(raw)

    return api_client.deserialize(_Response(), model.__name__)


def encode(obj: Any, api_client: client.ApiClient) -> tuple[Kind, dict[str, Any]]:
    """The kind and the API's dict of `obj`: a CustomResource, a client model or a dict.

    A dict comes back as a new dict whose values are `obj`'s own (a shallow copy, not a
    deep one: a write sends it and keeps nothing of it, and `Context.apply_owned`
    replaces only its top-level keys), so that the caller's dict is never changed."""
    if isinstance(obj, CustomResource):
        return Kind.of(type(obj)), obj.to_dict()
    if isinstance(obj, Mapping):
        body = dict(obj)
        if not body.get("apiVersion") or not body.get("kind"):
            raise ValueError("the object needs an apiVersion and a kind, e.g. "
                             "{'apiVersion': 'batch/v1', 'kind': 'Job', 'metadata': ...}")
        return Kind.of(f"{body['apiVersion']}/{body['kind']}"), body
    if hasattr(type(obj), "openapi_types"):
        spec = Kind.of(type(obj))
        body = api_client.sanitize_for_serialization(obj)
        body.setdefault("apiVersion", spec.api_version)
        body.setdefault("kind", spec.kind)
        return spec, body
    raise TypeError(f"cannot write {type(obj).__name__}: give a CustomResource, a "
                    "kubernetes client model or a dict")


def obj_like(original: Any, raw: dict[str, Any], api_client: client.ApiClient) -> Any:
    """`raw` in the form `original` was given in."""
    if isinstance(original, CustomResource):
        return type(original).from_dict(raw)
    if isinstance(original, Mapping):
        return raw
    return decode_model(type(original), raw, api_client)


def _as_new(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether `a` is the same or a later version of the object than `b` (resourceVersions are
    opaque in the API, but etcd's are integers, which this relies on where it can)."""
    va = a.get("metadata", {}).get("resourceVersion")
    vb = b.get("metadata", {}).get("resourceVersion")
    try:
        return int(str(va)) >= int(str(vb))
    except ValueError:
        return bool(va == vb)

