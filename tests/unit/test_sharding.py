"""The sharding ring and the sharder's decisions: pure functions, no cluster."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
    Sharding,
)
from operator_kit.election.sharder import Members
from operator_kit.election.sharding import (
    Patch,
    Placed,
    Ring,
    member_identity,
    plan,
    ring_key,
)
from operator_kit.manifests import operator_manifests
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.watching import Informers

KEYS = [ring_key("ns", f"obj-{i}") for i in range(10_000)]
W = "widgets.ctl.operator-kit.test"
CM = "configmaps"


def shares(ring: Ring, keys: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        owner = ring.owner(key)
        assert owner is not None
        counts[owner] = counts.get(owner, 0) + 1
    return counts


# -- the ring ----------------------------------------------------------------------------

def test_ring_is_stable_across_instances_and_member_order() -> None:
    a = Ring(["m-a", "m-b", "m-c"])
    b = Ring(["m-c", "m-a", "m-b"])
    assert [a.owner(k) for k in KEYS[:500]] == [b.owner(k) for k in KEYS[:500]]


def test_ring_without_members_owns_nothing() -> None:
    assert Ring([]).owner("ns/x") is None


@pytest.mark.parametrize("members", [3, 4, 5])
def test_ring_balances_every_member_within_a_quarter_of_a_fair_share(members: int) -> None:
    for trial in range(20):  # random identities, as members get them
        names = [member_identity() for _ in range(members)]
        counts = shares(Ring(names), KEYS)
        fair = len(KEYS) / members
        assert min(counts.values()) >= 0.75 * fair, (trial, counts)
        assert max(counts.values()) <= 1.35 * fair, (trial, counts)


def test_a_member_joining_moves_about_one_in_n_and_only_to_itself() -> None:
    for trial in range(20):
        names = [member_identity() for _ in range(3)]
        before, after = Ring(names), Ring([*names, "newcomer-1"])
        moved = [k for k in KEYS if before.owner(k) != after.owner(k)]
        assert all(after.owner(k) == "newcomer-1" for k in moved)
        assert 0.15 <= len(moved) / len(KEYS) <= 0.35, (trial, len(moved))


def test_a_member_leaving_moves_only_its_own_keys() -> None:
    names = ["m-a", "m-b", "m-c", "m-d"]
    before, after = Ring(names), Ring(names[:3])
    moved = [k for k in KEYS if before.owner(k) != after.owner(k)]
    assert moved and all(before.owner(k) == "m-d" for k in moved)


# -- the decisions -----------------------------------------------------------------------

def obj(name: str, member: str | None = None, draining: bool = False, rv: str = "1") -> Placed:
    return Placed((W, "ns", name), rv, member, draining)


def child(name: str, owner: str, member: str | None = None) -> Placed:
    return Placed((CM, "ns", name), "7", member, False, (W, "ns", owner))


RING = Ring(["m-a", "m-b"])


def target(name: str) -> str:
    owner = RING.owner(ring_key("ns", name))
    assert owner is not None
    return owner


def other(name: str) -> str:
    return "m-b" if target(name) == "m-a" else "m-a"


def test_unassigned_objects_are_assigned_to_their_target_with_their_version() -> None:
    assert plan(RING, [obj("x", rv="42")]) == [Patch((W, "ns", "x"), "42", target("x"),
                                                     reason="assign")]


def test_nothing_is_assigned_without_members() -> None:
    assert plan(Ring([]), [obj("x")]) == []


def test_objects_at_their_target_need_nothing() -> None:
    assert plan(RING, [obj(f"o{i}", target(f"o{i}")) for i in range(50)]) == []


def test_an_object_of_a_dead_member_is_taken_over_directly() -> None:
    assert plan(RING, [obj("x", "gone-member")]) == [
        Patch((W, "ns", "x"), "1", target("x"), reason="take over")]


def test_a_draining_object_of_a_dead_member_is_taken_over_and_its_drain_cleared() -> None:
    assert plan(RING, [obj("x", "gone-member", draining=True)]) == [
        Patch((W, "ns", "x"), "1", target("x"), False, reason="take over")]


def test_an_object_of_another_alive_member_is_asked_to_drain_never_reassigned() -> None:
    assert plan(RING, [obj("x", other("x"))]) == [
        Patch((W, "ns", "x"), "1", drain=True, reason="drain")]


def test_a_draining_object_waits_for_its_member_to_let_go() -> None:
    assert plan(RING, [obj("x", other("x"), draining=True)]) == []


def test_a_draining_object_back_at_its_target_keeps_its_member() -> None:
    assert plan(RING, [obj("x", target("x"), draining=True)]) == [
        Patch((W, "ns", "x"), "1", drain=False, reason="keep")]


def test_drains_in_flight_are_bounded() -> None:
    names = [f"o{i}" for i in range(200)]
    wrong = [obj(n, other(n)) for n in names]
    assert len(plan(RING, wrong, max_drains_in_flight=10)) == 10
    already = [obj(n, other(n), draining=True) for n in names[:4]] + wrong[4:]
    assert len(plan(RING, already, max_drains_in_flight=10)) == 6


def test_children_move_before_their_owner() -> None:
    t = target("x")
    first = plan(RING, [obj("x")], [child("x", "x", "gone-member"), child("x-2", "x", t)])
    assert first == [Patch((CM, "ns", "x"), "7", t, reason="follow")]
    second = plan(RING, [obj("x")], [child("x", "x", t), child("x-2", "x", t)])
    assert second == [Patch((W, "ns", "x"), "1", t, reason="assign")]


def test_children_follow_an_owner_at_its_target() -> None:
    t = target("x")
    assert plan(RING, [obj("x", t)], [child("x", "x")]) == [
        Patch((CM, "ns", "x"), "7", t, reason="follow")]


def test_children_of_an_owner_still_owned_elsewhere_stay() -> None:
    assert plan(RING, [obj("x", other("x"), draining=True)], [child("x", "x", other("x"))]) == []


def test_plan_is_a_pure_function_of_its_inputs() -> None:
    objects = [obj(f"o{i}", [None, "m-a", "m-b", "dead"][i % 4]) for i in range(100)]
    assert plan(RING, objects) == plan(RING, list(reversed(objects)))


# -- configuration -----------------------------------------------------------------------

def test_sharding_needs_leader_election() -> None:
    with pytest.raises(ValueError, match="needs leader_election"):
        Operator("op", sharding=Sharding())
    Operator("op", sharding=Sharding(), leader_election=LeaderElection())


def test_sharding_timings_are_checked_like_leader_election() -> None:
    with pytest.raises(ValueError, match=r"^Sharding lease_duration"):
        Sharding(lease_duration=5, renew_deadline=5)


@pytest.mark.parametrize("bad", [{"label": "no spaces/x y"}, {"virtual_nodes": 0},
                                 {"identity": "Under_Score"}, {"controllers": "widget"}])
def test_bad_sharding_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError), match=r"^Sharding"):
        Sharding(**bad)  # type: ignore[arg-type]


def test_default_labels_name_the_operator() -> None:
    assert Sharding().label_key("op") == "shard.operator-kit.io/op"
    assert Sharding().drain_label_key("op") == "drain.shard.operator-kit.io/op"


def test_member_identities_are_label_values() -> None:
    identity = member_identity()
    assert Sharding(identity=identity).identity == identity


# -- what it derives ---------------------------------------------------------------------

@dataclass
class PartSpec:
    size: int


class Part(CustomResource):
    group = "parts.example.com"
    version = "v1"
    kind = "Part"
    spec: PartSpec


class PartController(Controller[Part]):
    resource = Part
    owns = ("v1/ConfigMap",)

    def reconcile(self, obj: Part, ctx: Context) -> Action:
        return Action.await_change()


def sharded_operator() -> Operator:
    return Operator("parts", [PartController()], leader_election=LeaderElection(),
                    sharding=Sharding())


def test_sharding_derives_three_replicas_a_budget_and_the_member_lease_role() -> None:
    docs = operator_manifests(sharded_operator(), app="m:operator", namespace="ns", image="i")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert any(d["kind"] == "PodDisruptionBudget" for d in docs)
    role = next(d for d in docs if d["kind"] == "Role")
    leases = [r for r in role["rules"] if r["resources"] == ["leases"]]
    assert any(not r.get("resourceNames") and set(r["verbs"]) >= {
        "create", "delete", "get", "list", "update", "watch"} for r in leases), leases
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    for resource in ("parts", "configmaps"):  # the sharder labels both
        rule = next(r for r in cluster_role["rules"] if r["resources"] == [resource])
        assert {"list", "watch", "patch"} <= set(rule["verbs"])


def test_replicas_stay_settable_with_sharding() -> None:
    docs = operator_manifests(sharded_operator(), app="m:operator", namespace="ns",
                              image="i", replicas=5)
    assert next(d for d in docs if d["kind"] == "Deployment")["spec"]["replicas"] == 5


def test_sharding_an_unknown_controller_is_refused_at_start() -> None:
    operator = Operator("parts", [PartController()], leader_election=LeaderElection(),
                        sharding=Sharding(controllers=["gadget"]))
    with pytest.raises(ValueError, match="gadget, which operator parts does not have"):
        operator._start_membership(operator.sharding)  # type: ignore[arg-type]


# -- who is alive ------------------------------------------------------------------------

def lease(name: str, holder: str, renewed: str, duration: int = 4) -> WatchEvent:
    return WatchEvent("MODIFIED", {"metadata": {"name": name}, "spec": {
        "holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}})


def watching(now: list[float], **options: float) -> Members:
    """A `Members` of operator "op" on the clock `now[0]`, fed by hand (no API server)."""
    return Members(Informers(None, threading.Event()),  # type: ignore[arg-type]
                   operator="op", namespace="ns", clock=lambda: now[0], **options)


def test_a_member_is_alive_until_its_lease_duration_after_it_was_last_seen_to_change() -> None:
    now = [100.0]
    members = watching(now)
    members._on_lease(lease("op-member-a", "a", "t1"))
    members._on_lease(lease("op-member-b", "b", "t1"))
    now[0] = 103.0
    members._on_lease(lease("op-member-a", "a", "t2"))  # a renews; b is silent
    members._on_lease(lease("op-member-b", "b", "t1"))  # the same record again: no change
    assert members.alive() == {"a", "b"}
    now[0] = 104.0
    assert members.alive() == {"a"}
    members._on_lease(lease("op-member-a", "", "t3"))  # released on a clean stop
    assert members.alive() == set()
    members._on_lease(WatchEvent("DELETED", {"metadata": {"name": "op-member-a"}}))
    assert members.alive() == set()


def test_a_member_whose_clock_is_off_is_judged_by_the_observers_clock_alone() -> None:
    """Its renewTime stamps (its wall clock: years ahead, or behind) are never compared
    with anything: it is alive while its Lease keeps changing, dead a lease duration
    after it stopped, on the observer's monotonic clock."""
    now = [100.0]
    members = watching(now)
    members._on_lease(lease("op-member-ahead", "ahead", "2099-01-01T00:00:00.000001Z"))
    members._on_lease(lease("op-member-behind", "behind", "1970-01-01T00:00:00.000001Z"))
    now[0] = 103.0
    members._on_lease(lease("op-member-behind", "behind", "1970-01-01T00:00:00.000002Z"))
    assert members.alive() == {"ahead", "behind"}
    now[0] = 104.0  # "ahead" stopped renewing 4 s ago (its stamps still say 2099)
    assert members.alive() == {"behind"}


def test_a_lease_claiming_longer_than_the_operators_lease_duration_is_believed_for_that_long(
        ) -> None:
    now = [100.0]
    members = watching(now, lease_duration=15)
    members._on_lease(lease("op-member-ghost", "ghost", "t1", duration=3600))  # forged
    now[0] = 114.9
    assert members.alive() == {"ghost"}
    now[0] = 115.0
    assert members.alive() == set(), "never renewed: dead after 15 s, not an hour"


def test_a_lease_counts_only_for_the_member_it_is_named_after() -> None:
    now = [100.0]
    members = watching(now)
    members._on_lease(lease("op-member-a", "a", "t1"))
    members._on_lease(lease("op-member-forged", "a", "t1"))  # keeps "a" alive? no
    members._on_lease(lease("not-a-member-lease", "b", "t1"))
    now[0] = 104.0
    members._on_lease(lease("op-member-forged", "a", "t2"))
    assert members.alive() == set(), "only a's own Lease says whether a lives"


def test_a_deleted_lease_of_a_member_that_still_renews_is_not_a_departure() -> None:
    now = [100.0]
    members = watching(now)
    members._on_lease(lease("op-member-a", "a", "t1"))
    now[0] = 102.0
    members._on_lease(WatchEvent("DELETED", {"metadata": {"name": "op-member-a"}}))
    assert members.alive() == {"a"}, "deleted by someone else: a may still reconcile"
    now[0] = 103.0
    members._on_lease(WatchEvent("ADDED", {"metadata": {"name": "op-member-a"}, "spec": {
        "holderIdentity": "a", "renewTime": "t2", "leaseDurationSeconds": 4}}))
    now[0] = 106.0
    assert members.alive() == {"a"}, "re-created at its next renewal: still alive"
    members._on_lease(WatchEvent("DELETED", {"metadata": {"name": "op-member-a"}}))
    now[0] = 107.0
    assert members.alive() == set(), "gone for good: dead its lease duration after t2"
    assert not members._seen, "and forgotten: members that come and go leave nothing behind"
