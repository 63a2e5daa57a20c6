"""A server-mode member's reading of the other members' claims (RangeKeeper.claims and
.target), on Leases as another party might have written them. The protocol itself runs
against a real API server in tests/cluster/test_sharding_server.py."""

from __future__ import annotations

import threading
from typing import Any

from operator_kit.election.range_keeper import RangeKeeper
from operator_kit.election.shard_ranges import SLOTS, SLOTS_ANNOTATION, assign, encode_slots


class FakeInformer:
    def __init__(self, leases: list[dict[str, Any]]) -> None:
        self.leases = leases

    def objects(self) -> list[dict[str, Any]]:
        return self.leases


class FakeMembers:
    def __init__(self, alive: set[str], leases: list[dict[str, Any]]) -> None:
        self._alive = alive
        self.informer = FakeInformer(leases)

    def alive(self) -> set[str]:
        return set(self._alive)


def lease(name: str, holder: str, annotation: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotation is not None:
        meta["annotations"] = {SLOTS_ANNOTATION: annotation}
    return {"metadata": meta, "spec": {"holderIdentity": holder}}


def keeper(members: FakeMembers) -> RangeKeeper:
    return RangeKeeper(members, operator="op",  # type: ignore[arg-type]
                       identity="me", may_reconcile=lambda: True,
                       make=lambda *_: None,  # type: ignore[arg-type,return-value]
                       annotate=lambda _: "1", stop=threading.Event())


def test_only_live_members_leases_named_after_their_holder_claim_slots() -> None:
    members = FakeMembers({"a", "b"}, [
        lease("op-member-a", "a", encode_slots([1, 2])),
        lease("op-member-c", "c", encode_slots([3])),       # c is dead: no claim
        lease("op-member-x", "b", encode_slots([4])),       # not b's own Lease: ignored
        lease("op-member-me", "me", encode_slots([5])),     # its own: not another's claim
    ])
    assert keeper(members).claims() == {"a": frozenset({1, 2})}


def test_an_annotation_that_is_not_a_slot_mask_claims_every_slot() -> None:
    members = FakeMembers({"a"}, [lease("op-member-a", "a", "take-everything")])
    assert keeper(members).claims() == {"a": frozenset(range(SLOTS))}


def test_the_target_counts_this_member_among_the_live_ones() -> None:
    members = FakeMembers({"a", "b"}, [])
    assert keeper(members).target() == assign(["a", "b", "me"])["me"]
