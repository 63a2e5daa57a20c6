"""The finalizer's writes: adding it before the first reconcile, removing it after
cleanup, and what to say when an object that no longer decodes cannot be cleaned up.

The state machine that decides when each runs is `ControllerRunner.finalize_or_reconcile`
(runner.py; its states are in controller.py). Every write here carries the
resourceVersion that was read, so a stale copy is a 409 (`Conflict`: requeue and read
the newer one), and goes through the runner's `OwnWrites` for the primary objects, so
its echo does not reconcile the object again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import METADATA_ONLY, Api, Resource
from operator_kit.runtime.cache import describe_object
from operator_kit.runtime.objects import metadata_of, with_metadata
from operator_kit.runtime.own_writes import OwnWrites
from operator_kit.runtime.watching import Key

log = logging.getLogger("operator_kit.controller")

# Tries of the finalizer's removal after cleanup, each after a 409 and a fresh read.
FINALIZER_REMOVAL_ATTEMPTS = 5


class Conflict(Exception):
    """Our copy of the object is stale (409): requeue and read the newer one.

    Raised by `ControllerRunner.finalize_or_reconcile`; the workers requeue on it, and
    `operator_kit.testing.reconcile_once` reports it."""


def remove_finalizer(raw: Mapping[str, Any], finalizer: str, api: Api, *,
                     resource: Resource, writes: OwnWrites, controller: str) -> None:
    """Remove `finalizer` once cleanup ran, from the version read. On a 409 (cleanup's
    own status write, say) only the removal is retried, on the object read again from
    the API server while it is the same uid with the finalizer; at last, `Conflict`."""
    meta, uid = raw["metadata"], raw["metadata"].get("uid")
    path = resource.path(meta.get("namespace"), meta["name"])
    for attempt in range(1, FINALIZER_REMOVAL_ATTEMPTS + 1):
        left = [f for f in meta.get("finalizers") or () if f != finalizer]
        send = functools.partial(api.request, "PATCH", path, body={"metadata": {
            "finalizers": left or None, "resourceVersion": meta.get("resourceVersion")}},
            content_type="application/merge-patch+json", accept=METADATA_ONLY)
        try:
            writes.write(meta.get("namespace") or "", meta["name"], send)
            return
        except ApiException as failure:
            if failure.status == 404:
                return  # already gone
            if failure.status != 409:
                raise
        if attempt < FINALIZER_REMOVAL_ATTEMPTS:
            meta = (api.get_or_none(path) or {}).get("metadata") or {}
            if meta.get("uid") != uid or finalizer not in (meta.get("finalizers") or ()):
                return  # gone, made again, or someone else removed it
            log.debug("%s: removing the finalizer of %s conflicted (attempt %d): "
                      "retrying the removal alone", controller, describe_object(raw), attempt)
    log.warning("%s: removing the finalizer of %s conflicted %d times (it keeps changing): "
                "requeued, so cleanup will run again", controller, describe_object(raw),
                FINALIZER_REMOVAL_ATTEMPTS)
    raise Conflict()


def set_finalizers(obj: Any, resource: Resource, finalizers: list[str], api: Api, *,
                   writes: OwnWrites) -> Any:
    """Write the finalizer list only if the object (any form a read returns, of
    `resource`) is still the version we read.

    The patch carries that version, so what the API server made is `obj` with the
    new metadata: only the metadata is asked back (`METADATA_ONLY`), not the whole
    object to decode again."""
    meta = metadata_of(obj, api.client)
    namespace, name = meta.get("namespace"), str(meta.get("name"))
    try:
        answer = writes.write(
            namespace or "", name, lambda: api.request(
                "PATCH", resource.path(namespace, name),
                body={"metadata": {"finalizers": finalizers or None,
                                   "resourceVersion": meta.get("resourceVersion")}},
                content_type="application/merge-patch+json", accept=METADATA_ONLY))
    except ApiException as err:
        if err.status == 409:
            raise Conflict() from err
        raise
    metadata = dict(answer.get("metadata") or {})
    metadata.pop("managedFields", None)  # as the cache holds it (watching.py)
    return with_metadata(obj, metadata, api.client)


def deletion_blocked_note(resource: Resource, key: Key, raw: Mapping[str, Any],
                          finalizer: str, err: Exception, reason: str) -> str:
    """Why an object that no longer decodes cannot go, and the command that unblocks it
    by hand (removing our finalizer)."""
    finalizers = raw["metadata"].get("finalizers") or []
    where = f" -n {key[0]}" if key[0] else ""
    command = (f"kubectl patch {resource} {key[1]}{where} --type=json "
               f"-p '[{{\"op\": \"remove\", \"path\": \"/metadata/finalizers/"
               f"{finalizers.index(finalizer)}\"}}]'")
    return (f"deletion is blocked: the object no longer matches {resource.kind} ({err}) "
            f"and cleanup could not run ({reason}); fix the object, or remove the "
            f"finalizer {finalizer} by hand: {command}")
