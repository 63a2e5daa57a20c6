"""A server-mode member's reading of the other members' claims (RangeKeeper.claims and
.target), on Leases as another party might have written them. The protocol itself runs
against a real API server in tests/cluster/test_sharding_server.py."""

from __future__ import annotations

import threading
from typing import Any

from operator_kit.election.modes import LabelGate, lease_mode
from operator_kit.election.range_keeper import RangeKeeper
from operator_kit.election.shard_probe import SelectorRefused
from operator_kit.election.shard_ranges import SLOTS, SLOTS_ANNOTATION, assign, encode_slots
from operator_kit.election.sharding import MODE


class FakeInformer:
    def __init__(self, leases: list[dict[str, Any]]) -> None:
        self.leases = leases
        self.synced = threading.Event()
        self.synced.set()

    def objects(self) -> list[dict[str, Any]]:
        return self.leases

    def wait_seen(self, version: str, timeout: float) -> bool:
        return True  # a claim shows at once


class FakeMembers:
    def __init__(self, alive: set[str], leases: list[dict[str, Any]]) -> None:
        self._alive = alive
        self.informer = FakeInformer(leases)

    def alive(self) -> set[str]:
        return set(self._alive)

    def on_change(self, listener: Any) -> None:
        pass


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


# -- one mode per group (operator_kit.election.modes) -------------------------------------

def member_lease_of(holder: str, *, labels: dict[str, str] | None = None,
                    annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"op-member-{holder}", "labels": labels or {},
                            "annotations": annotations or {}}
    return {"metadata": meta, "spec": {"holderIdentity": holder}}


def test_a_lease_says_its_members_mode_an_older_member_without_one_runs_labels() -> None:
    assert lease_mode({"labels": {MODE: "server"}}) == "server"
    assert lease_mode({"labels": {MODE: "server"}, "annotations": {MODE: "labels"}}) == "labels"
    assert lease_mode({}) == "labels"  # a release before modes: label mode only
    assert lease_mode({"annotations": {SLOTS_ANNOTATION: encode_slots([1])}}) == "server"


def test_a_server_mode_member_sees_the_live_members_in_label_mode() -> None:
    members = FakeMembers({"a", "b"}, [
        member_lease_of("a", labels={MODE: "server"}),
        member_lease_of("b", labels={MODE: "labels"}),
        member_lease_of("c", labels={MODE: "labels"}),  # dead: does not count
    ])
    assert keeper(members).in_label_mode() == ["b"]


def gate(members: FakeMembers) -> LabelGate:
    return LabelGate(members, operator="op", identity="me",  # type: ignore[arg-type]
                     fence=lambda: True)


def test_a_label_mode_member_waits_while_a_live_member_serves_slots() -> None:
    me = member_lease_of("me", labels={MODE: "labels"})
    serving = member_lease_of("a", labels={MODE: "server"},
                              annotations={SLOTS_ANNOTATION: encode_slots([3, 4])})
    members = FakeMembers({"a", "me"}, [me, serving])
    assert not gate(members)()
    assert "a still serve" in gate(members).waiting_for()
    serving["metadata"]["annotations"] = {SLOTS_ANNOTATION: encode_slots([]), MODE: "labels"}
    assert gate(members)()  # it released its slots: the label member may reconcile


def test_a_label_mode_member_waits_until_its_watch_shows_its_own_lease() -> None:
    members = FakeMembers({"me"}, [])
    assert "its own Lease" in gate(members).waiting_for()
    members.informer.leases.append(member_lease_of("me"))
    assert gate(members)()
    members.informer.synced.clear()
    assert not gate(members)()


def test_a_server_that_refuses_the_selector_of_the_slots_turns_the_member_to_label_mode(
        ) -> None:
    def make(slots: frozenset[int], carried: Any) -> Any:
        raise SelectorRefused("the API server refused the shard selector (400: too long)")

    written: list[dict[str, str]] = []
    fell_back = threading.Event()
    stop = threading.Event()
    ranges = RangeKeeper(FakeMembers(set(), []), operator="op",  # type: ignore[arg-type]
                         identity="me", may_reconcile=lambda: True, make=make,
                         annotate=lambda a: written.append(a) or "1", stop=stop,
                         on_fall_back=fell_back.set)
    ranges.start()
    try:
        assert fell_back.wait(5), "the member did not fall back to label mode"
    finally:
        stop.set()
    assert ranges.fell_back and ranges.held == frozenset() and ranges.alive_thread()
    assert written[-1] == {SLOTS_ANNOTATION: encode_slots([]), MODE: "labels"}
