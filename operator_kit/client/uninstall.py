"""Uninstalling an operator in the one order that cannot hang.

``kubectl delete -f -`` of the operator's manifest stream removes everything at once: the
Deployment goes together with the CRDs, so an object whose finalizer only the operator
removes is never cleaned up. Its CRD then waits for it (``Terminating``), and so does its
namespace, for ever. ``python -m operator_kit.manifests APP --namespace NS --uninstall``
(`uninstall`) instead:

1. deletes every object of each custom kind in the stream, in every namespace, **while
   the operator still runs**, and waits until they are gone: each one's cleanup runs and
   its finalizer is removed, as on any deletion;
2. only then deletes the stream's documents, last first: the admission policies and
   webhook configurations before the Deployment, the CRDs after it, the Namespace last.

When objects are still there after the timeout (the operator is not running, or its
cleanup keeps failing), nothing else is deleted — the operator must stay to finish —
and each such object is named with its finalizers and the two ways out: start the
operator again, or drop the finalizer by hand (`finalizer_patch_command`), which skips
its cleanup.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api


@dataclass(frozen=True)
class Leftover:
    """A custom object that was still there when the wait ran out."""

    kind: str
    plural: str
    group: str
    namespace: str | None
    name: str
    finalizers: tuple[str, ...]

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        held = (f"finalizers {', '.join(self.finalizers)}" if self.finalizers
                else "no finalizers (still being deleted)")
        return f"{self.kind} {where} is still there ({held})"


@dataclass
class Outcome:
    """What `uninstall` did: the custom objects it deleted, the documents it deleted,
    and — when it stopped — the objects left, with nothing else deleted."""

    objects_deleted: int = 0
    documents_deleted: list[str] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)


def finalizer_patch_command(obj: Leftover) -> str:
    """The kubectl command that removes `obj`'s finalizers (skipping their cleanup)."""
    where = f" -n {obj.namespace}" if obj.namespace else ""
    return (f"kubectl patch {obj.plural}.{obj.group} {obj.name}{where} --type=merge "
            "-p '{\"metadata\":{\"finalizers\":null}}'")


def deletion_order(docs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The stream's documents in the order to delete them: last first (the stream lists
    what others depend on first), the Namespace after everything in it."""
    ordered = list(reversed(list(docs)))
    return ([d for d in ordered if d["kind"] != "Namespace"]
            + [d for d in ordered if d["kind"] == "Namespace"])


def custom_kinds(docs: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(group, served version, plural, kind) of every CRD in the stream."""
    kinds = []
    for doc in docs:
        if doc["kind"] != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        versions = spec.get("versions") or []
        version = next((v["name"] for v in versions if v.get("storage")),
                       versions[0]["name"] if versions else "v1")
        kinds.append((spec["group"], version, spec["names"]["plural"],
                      spec["names"]["kind"]))
    return kinds


def uninstall(api: Api, docs: list[dict[str, Any]], *, timeout: float = 300.0,
              say: Callable[[str], None] = lambda _line: None,
              poll: float = 1.0) -> Outcome:
    """Delete the custom objects, wait for them, then the documents (see the module's
    docstring); `say` gets one line per step. A 404 is "already gone" throughout."""
    outcome = Outcome()
    deadline = time.monotonic() + timeout
    kinds = custom_kinds(docs)
    for group, version, plural, _kind in kinds:
        for item in _list(api, group, version, plural):
            meta = item["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            _delete(api, _object_path(group, version, plural, meta.get("namespace"),
                                      meta["name"]))
            outcome.objects_deleted += 1
    if outcome.objects_deleted:
        say(f"deleted {outcome.objects_deleted} custom object(s); waiting up to "
            f"{timeout:g}s for the operator to clean each one up")
    while True:
        left = [Leftover(kind, plural, group, item["metadata"].get("namespace"),
                         item["metadata"]["name"],
                         tuple(item["metadata"].get("finalizers") or ()))
                for group, version, plural, kind in kinds
                for item in _list(api, group, version, plural)]
        if not left:
            break
        if time.monotonic() >= deadline:
            outcome.leftovers = left
            return outcome
        time.sleep(poll)
    for doc in deletion_order(docs):
        resource = api.resource_for(doc["apiVersion"], doc["kind"])
        meta = doc["metadata"]
        if _delete(api, resource.path(meta.get("namespace"), meta["name"])):
            outcome.documents_deleted.append(f"{doc['kind']} {meta['name']}")
            say(f"deleted {doc['kind']} {meta['name']}")
    return outcome


def _object_path(group: str, version: str, plural: str, namespace: str | None,
                 name: str) -> str:
    base = f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}/{name}"


def _list(api: Api, group: str, version: str, plural: str) -> list[dict[str, Any]]:
    """Every object of the kind in every namespace; none when the kind is not served."""
    try:
        items: list[dict[str, Any]] = api.get(f"/apis/{group}/{version}/{plural}")["items"]
    except ApiException as err:
        if err.status == 404:
            return []
        raise
    return items


def _delete(api: Api, path: str) -> bool:
    """DELETE `path`; False when it was already gone."""
    try:
        api.request("DELETE", path, decode=False)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
