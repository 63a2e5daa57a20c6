"""One sharding mode per group: what each member runs, and the fall back to label mode.

Members of one operator may disagree on the mode: one forced to ``mode="labels"`` while
the others run server mode, one whose API server (behind a load balancer, mid-upgrade)
lacks ``ShardedListAndWatch``, a replica of an older release (label mode only). A
server-mode member reconciles the objects of its hash slots, a label-mode member those
labelled with its name: run side by side, both could reconcile one object. So:

- **Each member publishes its mode** on its member Lease: the label
  ``shard.operator-kit.io/mode`` (`MODE`) set when the Lease is created, an annotation of
  the same name once it changes. A Lease with neither is an older member's: label mode,
  unless it claims slots (``shard.operator-kit.io/slots``): server mode.
- **A server-mode member falls back** once it sees a live member in label mode (before
  claiming, after each claim is confirmed by its watch, and every round): it stops its
  slots' runners (their reconciles return first), publishes no slots and ``mode=labels``,
  and runs label mode from then on (`operator_kit.election.range_keeper`). Every
  server-mode member does the same, so the whole group ends in label mode, and stays
  there until its members restart.
- **A label-mode member waits** (`LabelGate`): it starts no reconcile while any live
  member claims slots, nor before its watch of the member Leases has seen its own Lease
  (so every claim written before it joined is seen); a claim written after that is
  written by a member whose watch then shows this member's Lease, and which withdraws
  the claim unserved. Its writes are fenced by the same gate.

So no object is reconciled by two members at once while the group changes mode; objects
wait (at most the fall back of the slowest server member: one round, 0.5 s, plus its
reconciles in flight) rather than run twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from operator_kit.election.shard_ranges import SLOTS, SLOTS_ANNOTATION, decode_slots
from operator_kit.election.sharder import Members
from operator_kit.election.sharding import MODE, member_lease

__all__ = ["MODE", "LabelGate", "lease_mode", "live_leases"]

log = logging.getLogger("operator_kit.sharding")

def lease_mode(meta: Mapping[str, Any]) -> str:
    """The mode a member Lease's metadata says its member runs (module docstring)."""
    annotations = meta.get("annotations") or {}
    said = annotations.get(MODE) or (meta.get("labels") or {}).get(MODE)
    if said in ("server", "labels"):
        return str(said)
    return "server" if SLOTS_ANNOTATION in annotations else "labels"


def live_leases(members: Members, operator: str,
                identity: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(member, its Lease's metadata) of every other live member, from its own Lease."""
    alive = members.alive()
    for lease in members.informer.objects():
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        meta = lease.get("metadata") or {}
        if holder and holder != identity and holder in alive \
                and meta.get("name") == member_lease(operator, holder):
            yield holder, meta


def claimed(meta: Mapping[str, Any], slots: int = SLOTS) -> frozenset[int]:
    """The slots a Lease claims (an annotation that is not a slot mask claims them all)."""
    raw = (meta.get("annotations") or {}).get(SLOTS_ANNOTATION)
    if raw is None:
        return frozenset()
    decoded = decode_slots(raw, slots)
    return frozenset(range(slots)) if decoded is None else decoded


class LabelGate:
    """A label-mode member's `may_reconcile`: its Lease's fence, and (module docstring)
    its Lease seen in its own watch and no live member claiming slots."""

    def __init__(self, members: Members, *, operator: str, identity: str,
                 fence: Callable[[], bool]) -> None:
        self._members = members
        self._operator = operator
        self._identity = identity
        self._fence = fence
        self._name = member_lease(operator, identity)
        self._said: str | None = None

    def __call__(self) -> bool:
        if not self._fence():
            return False
        why = self.waiting_for()
        if why != self._said:
            self._said = why
            if why:
                log.info("sharding %s: member %s (label mode) starts no reconcile yet: %s",
                         self._operator, self._identity, why)
            else:
                log.info("sharding %s: member %s (label mode) reconciles: no live member "
                         "serves hash slots", self._operator, self._identity)
        return not why

    def waiting_for(self) -> str:
        """Why this member may not reconcile yet ("" when it may)."""
        informer = self._members.informer
        if not informer.synced.is_set() or not any(
                o["metadata"].get("name") == self._name for o in informer.objects()):
            return "its watch of the member Leases has not shown its own Lease yet"
        serving = sorted(member for member, meta in live_leases(
            self._members, self._operator, self._identity) if claimed(meta))
        if serving:
            return (f"member(s) {', '.join(serving)} still serve hash slots (server mode); "
                    "they fall back to label mode once they see this member")
        return ""
