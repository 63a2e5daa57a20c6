"""What a sharded controller runner is told about its share (`ShardScope`).

A member of a sharded operator (`operator_kit.election.sharding`) watches only the
objects labelled with its identity, and lets go of one the sharder marked as draining
by removing both labels. The runner needs only this much of sharding, so the runtime
does not depend on the election layer above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operator_kit import metrics
from operator_kit.client.transport import Api

__all__ = ["ShardScope"]


@dataclass(frozen=True)
class ShardScope:
    """What a member's controller runner needs: whose objects it watches, and how it lets
    go of one that is draining."""

    label: str
    drain_label: str
    identity: str
    operator: str = ""

    def selector(self, base: str | None = None) -> str:
        mine = f"{self.label}={self.identity}"
        return f"{base},{mine}" if base else mine

    def draining(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return self.drain_label in labels

    def let_go(self, api: Api, path: str, obj: Mapping[str, Any]) -> None:
        """Remove both labels, if `obj` is still the version read (else ApiException 409)."""
        meta = obj.get("metadata") or {}
        api.request("PATCH", path, body={"metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": {self.label: None, self.drain_label: None}}},
            content_type="application/merge-patch+json")
        metrics.SHARD_DRAINS.labels(self.operator).inc()
