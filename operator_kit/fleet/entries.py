"""A member cluster's entry in a FanOut's hub object: ``status.clusters[name]``.

Each member's entry holds its Ready condition (`ready_entry`) and is written by
server-side apply as a field manager of the member's own (`status_manager`:
``<operator>@<cluster>``), so members writing at once never overwrite each other and
applying an empty status as that manager removes the entry (`write_entry`). The
`FanOut` controller (fanout.py) decides when to write which.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any

from operator_kit.api.conditions import Conditions
from operator_kit.api.resources import CustomResource
from operator_kit.api.validation import ListType
from operator_kit.client.transport import Api


@dataclasses.dataclass
class ClusterStatus:
    """One member cluster's entry in the hub object's status: its name and conditions."""

    name: str
    conditions: Conditions = dataclasses.field(default_factory=list)


ClusterStatuses = Annotated[list[ClusterStatus], ListType("map", keys=("name",))]
"""``status.clusters``: one `ClusterStatus` per member, a list-map keyed by ``name``,
so each cluster's entry is its own under server-side apply."""


def ready_entry(cluster: str, status: str, reason: str, message: str, generation: int | None,
                before: Mapping[str, Any] | None, now: dt.datetime | None = None,
                ) -> dict[str, Any]:
    """`cluster`'s ``status.clusters`` entry with its Ready condition as the API's dict;
    ``lastTransitionTime`` kept from `before` (the entry as it is) unless the status
    changes."""
    previous = next((c for c in (before or {}).get("conditions") or ()
                     if c.get("type") == "Ready"), None)
    when = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    since = previous["lastTransitionTime"] if previous is not None and previous.get(
        "status") == status and previous.get("lastTransitionTime") else \
        when.strftime("%Y-%m-%dT%H:%M:%SZ")
    condition: dict[str, Any] = {"type": "Ready", "status": status, "reason": reason,
                                 "message": message[:32768], "lastTransitionTime": since}
    if generation is not None:
        condition["observedGeneration"] = generation
    return {"name": cluster, "conditions": [condition]}


def same_entry(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Whether writing entry `b` over `a` would change nothing."""
    return a is not None and a.get("conditions") == b.get("conditions")


def unreachable_already(entry: Mapping[str, Any] | None, generation: int | None) -> bool:
    """Whether `entry` says Unreachable for this `generation` already (its member, or the
    hub side, said why: the message is not rewritten while the member stays down)."""
    ready = _ready(entry)
    return ready is not None and ready.get("reason") == "Unreachable" and ready.get(
        "status") == "Unknown" and ready.get("observedGeneration") == generation


def _ready(entry: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return next((c for c in (entry or {}).get("conditions") or ()
                 if c.get("type") == "Ready"), None)


def ready_reason(entry: Mapping[str, Any] | None) -> str | None:
    """The reason of `entry`'s Ready condition, if it has one."""
    ready = _ready(entry)
    return None if ready is None else ready.get("reason")


def entries(obj: CustomResource, field: str) -> dict[str, dict[str, Any]]:
    """The hub object's per-cluster entries as it was read, by cluster name."""
    status = obj.status_as_read() or {}
    return {str(e.get("name")): dict(e) for e in status.get(field) or () if e.get("name")}


def write_entry(api: Api, obj: CustomResource, field: str, cluster: str,
                entry: Mapping[str, Any] | None, operator: str) -> Any:
    """Server-side apply `cluster`'s entry of ``status.<field>`` on the hub object `obj`
    as field manager ``<operator>@<cluster>`` (`status_manager`); None removes the entry
    that manager wrote. Returns the hub object as written."""
    meta: dict[str, Any] = {"name": obj.name}
    if obj.namespace:
        meta["namespace"] = obj.namespace
    body: dict[str, Any] = {"apiVersion": obj.api_version(), "kind": obj.kind,
                            "metadata": meta}
    body["status"] = {field: [dict(entry)]} if entry is not None else {}
    return api.apply(body, field_manager=status_manager(operator, cluster),
                     subresource="status")


def status_manager(operator: str, cluster: str) -> str:
    """The field manager of `cluster`'s status entry: ``<operator>@<cluster>``."""
    return f"{operator}@{cluster}"
