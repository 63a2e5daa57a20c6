"""Helpers of the fleet sample's cluster tests."""

from __future__ import annotations

from operator_kit.fleet.fanout import HUB_UID
from operator_kit.testing import TestCluster, eventually


def settle(members: dict[str, TestCluster], timeout: float = 120.0) -> None:
    """Wait until no member has a namespace a Team made (deleting those not on their way
    out): a namespace still terminating refuses what a next test would put in it."""
    for member in members.values():
        for space in member.api.get("/api/v1/namespaces", labelSelector=HUB_UID)["items"]:
            if not space["metadata"].get("deletionTimestamp"):
                member.api.request("DELETE", f"/api/v1/namespaces/{space['metadata']['name']}")
    for name, member in members.items():
        eventually(timeout, lambda m=member: not m.api.get(
            "/api/v1/namespaces", labelSelector=HUB_UID)["items"],
            message=f"the Teams' namespaces gone from {name}")
