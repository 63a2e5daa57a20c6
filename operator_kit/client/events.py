"""Core Events on objects, as ``kubectl describe`` shows them, aggregated like client-go.

The same reason and note on the same object are one Event whose ``count`` grows and
whose ``lastTimestamp`` moves, not a new object each time: the Event's name is derived
from the object's uid, the reason and the note, so a repeat (from any replica) finds
the existing Event by a 409 on create and patches its count instead.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import socket
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api

log = logging.getLogger("operator_kit.events")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Posts Events as `component` (the operator's name)."""

    def __init__(self, api: Api, component: str) -> None:
        self.api = api
        self.component = component
        self.host = socket.gethostname()

    def event(self, obj: dict[str, Any], *, warning: bool, reason: str, note: str) -> None:
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        digest = hashlib.sha256(
            f"{meta.get('uid')}\0{reason}\0{note}\0{warning}".encode()).hexdigest()[:12]
        name = f"{meta['name']}.{digest}"
        path = f"/api/v1/namespaces/{namespace}/events"
        now = _now()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                "name": meta["name"], "namespace": meta.get("namespace"),
                "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason, "message": note[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component, "reportingInstance": self.host,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            try:
                # Nobody reads the answer: it is not decoded (nor, on 409, the Status).
                self.api.request("POST", path, body=body, decode=False)
            except ApiException as err:
                if err.status != 409:
                    raise
                existing = self.api.get(f"{path}/{name}")
                self.api.request(
                    "PATCH", f"{path}/{name}",
                    body={"count": int(existing.get("count") or 1) + 1, "lastTimestamp": now,
                          "metadata": {"resourceVersion": existing["metadata"]["resourceVersion"]}},
                    content_type="application/merge-patch+json", decode=False)
        except ApiException as err:
            # Events are best effort: failing to record one must not fail a reconcile.
            log.warning("could not record event %s on %s/%s: %s %s",
                        reason, namespace, meta["name"], err.status, err.reason)
