"""Server-side sharding (``Sharding(mode="server")``) with real member processes
(tests/cluster/shard_member.py) on a plane with ShardedListAndWatch (`sharded_cluster`).

The same member program, log and overlap checker as tests/cluster/test_sharding.py: no
two reconciles of one key may ever run at once, through a join, a clean leave and a kill.
No label is written: the API server sends each member only the objects in its slots.
A member paused past its Lease reconciles nothing it lost (fencing), as in label mode.
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from operator_kit import LeaderElection, Operator, Sharding
from operator_kit.election.shard_probe import INVALID_SELECTOR, refusal
from operator_kit.election.shard_ranges import (
    SLOTS,
    assign,
    owner,
    ranges_of,
    selector,
    slot_of,
    uid_hash,
)
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import WidgetController, widget_path
from .shard_member import LABEL
from .test_sharding import (
    DEADLINE,
    LEASE,
    Member,
    create_widgets,
    overlaps,
    pause_between_reconciles,
    runs,
    settled,
)


@pytest.fixture
def server_ns(sharded_cluster: TestCluster) -> Iterator[Namespace]:
    ns = sharded_cluster.namespace("sharding-server")
    yield ns
    ns.delete()


@pytest.fixture
def server_members(server_ns: Namespace) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()
        (Path(tempfile.gettempdir()) / f"shard-member-{member.identity}.out").write_text(
            "".join(member.lines))


def report(member: Member) -> tuple[int, int] | None:
    """(objects cached, slots served) as `member` last said."""
    for line in reversed(member.lines):
        if line.startswith("cache ") and " slots " in line:
            parts = line.split()
            return int(parts[1]), int(parts[-1])
    return None


def readyz(member: Member) -> str:
    """The sharding line of `member`'s ``/readyz``, as it last changed."""
    return next((line.split(" ", 1)[1].strip() for line in reversed(member.lines)
                 if line.startswith("readyz ")), "")


def slots(member: Member) -> int | None:
    last = report(member)
    return last[1] if last else None


def reconciled(log: Path) -> dict[str, list[tuple[str, float]]]:
    """key -> [(member, start)] of every reconcile that ended."""
    out: dict[str, list[tuple[str, float]]] = {}
    for run in runs(log):
        if run.end != float("inf"):
            out.setdefault(run.key, []).append((run.member, run.start))
    return out


def uids(ns: Namespace) -> dict[str, str]:
    return {f"{ns.name}/{w['metadata']['name']}": w["metadata"]["uid"]
            for w in ns.list("ctl.operator-kit.test/v1", "Widget")}


def test_members_share_by_hash_range_through_join_leave_and_kill_with_no_overlap(
        server_ns: Namespace, sharded_cluster: TestCluster, server_members: list[Member],
        tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    names = ["sa", "sb", "sc"]
    server_members += [Member(server_ns, sharded_cluster.kubeconfig, n, log, "--mode", "server")
                       for n in names]
    eventually(60, lambda: sum(slots(m) or 0 for m in server_members) == SLOTS
               and all(slots(m) for m in server_members),
               message="three members never served all 64 slots")
    for member in server_members:  # /readyz says the mode, and the member's share
        assert readyz(member).startswith("sharding: mode=server slots="), member.output()
    create_widgets(server_ns, 60)
    eventually(60, lambda: len(reconciled(log)) == 60)
    # No label written: the API server filtered; each member cached only its share.
    assert not [w for w in server_ns.list("ctl.operator-kit.test/v1", "Widget")
                if LABEL in (w["metadata"].get("labels") or {})]
    caches = eventually(10, lambda: (c := [(report(m) or (0, 0))[0] for m in server_members])
                        and sum(c) == 60 and c)
    assert all(0 < c < 60 for c in caches), caches

    # Join: a fourth member; widgets created while slots move are reconciled by their owner.
    before = assign(["sa", "sb", "sc"])
    server_members.append(Member(server_ns, sharded_cluster.kubeconfig, "sd", log,
                                 "--mode", "server"))
    create_widgets(server_ns, 20, prefix="during-join-")
    eventually(60, lambda: slots(server_members[3]) and sum(
        slots(m) or 0 for m in server_members) == SLOTS, message="the joiner got no slots")
    split = assign(["sa", "sb", "sc", "sd"])
    target = {key: owner(split, uid_hash(uid)) for key, uid in uids(server_ns).items()}

    def all_by_their_owner() -> bool:
        done = reconciled(log)
        left = {k: done.get(k) for k in target
                if not any(m == target[k] for m, _ in done.get(k, ()))}
        assert not left, f"not reconciled by their owner after the join: {left}"
        return True

    eventually(60, all_by_their_owner)
    time.sleep(3)  # room for a reconcile that should not happen
    done = reconciled(log)
    kept = [k for k, uid in uids(server_ns).items() if "during-join-" not in k
            and owner(before, uid_hash(uid)) == target[k]]
    moved = [k for k in target if "during-join-" not in k and k not in kept]
    # A member that keeps a slot keeps its objects' cache: not one is reconciled again.
    again = {k: done[k] for k in kept if len(done[k]) != 1}
    print(f"join: {len(kept)} objects kept, {len(again)} reconciled again; {len(moved)} moved")
    assert kept and not again, again
    # A moved object, and one created during the move, is reconciled once by its new owner.
    for key in [*moved, *(k for k in target if "during-join-" in k)]:
        assert [m for m, _ in done[key]].count(target[key]) == 1, (key, done[key])

    # Leave cleanly, then kill one: its slots are taken over after its Lease expires.
    server_members[1].process.send_signal(signal.SIGTERM)
    assert server_members[1].process.wait(30) == 0
    eventually(60, lambda: sum(slots(m) or 0 for m in (server_members[0], *server_members[2:]))
               == SLOTS, message="the slots of the member that left were not taken over")
    killed_at = time.time()
    server_members[2].process.kill()
    create_widgets(server_ns, 12, prefix="after-kill-")
    eventually(LEASE + 45, lambda: len(reconciled(log)) == 92)
    orphaned = assign(["sa", "sc", "sd"])["sc"]
    taken = [min(s for _, s in reconciled(log)[key]) - killed_at
             for key, uid in uids(server_ns).items()
             if "after-kill-" in key and slot_of(uid_hash(uid)) in orphaned]
    print(f"takeover after kill: {max(taken, default=0):.1f}s over {len(taken)} objects")
    assert max(taken, default=0) < LEASE + 30
    bad = overlaps(runs(log, {"sc": killed_at}))
    assert not bad, f"{len(bad)} overlapping reconciles, e.g. {bad[:3]}"


def test_a_member_paused_past_its_lease_in_server_mode_reconciles_nothing_it_lost(
        server_ns: Namespace, sharded_cluster: TestCluster, server_members: list[Member],
        tmp_path: Path) -> None:
    """SIGSTOP a member past its Lease: its slots move to the others; once resumed it
    starts no reconcile (fenced: its renew deadline passed) and exits; changes to its
    former objects are reconciled by their new owners, and nothing overlaps."""
    log = tmp_path / "runs.log"
    log.touch()
    names = ["pa", "pb", "pc"]
    server_members += [Member(server_ns, sharded_cluster.kubeconfig, n, log, "--mode",
                              "server", "--children") for n in names]
    eventually(60, lambda: all(slots(m) for m in server_members)
               and sum(slots(m) or 0 for m in server_members) == SLOTS,
               message="three members never served all 64 slots")
    create_widgets(server_ns, 90)
    eventually(60, lambda: len(reconciled(log)) == 90)
    paused = server_members[2]
    mine = {k for k, uid in uids(server_ns).items()
            if owner(assign(names), uid_hash(uid)) == paused.identity}
    assert mine <= {r.key for r in runs(log) if r.member == paused.identity}

    stopped = pause_between_reconciles(paused, log)
    eventually(LEASE + 30, lambda: sum(slots(m) or 0 for m in server_members[:2]) == SLOTS,
               message="the paused member's slots were not taken over")
    eventually(60, lambda: mine <= {r.key for r in runs(log) if r.member != paused.identity
                                    and r.start > stopped},
               message="the others reconcile the paused member's former objects")
    # Changes to its former objects, queued for it the moment it resumes (its watch).
    patched = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: server_ns.api.request(
            "PATCH", widget_path(server_ns, k.split("/")[1]), body={"spec": {"size": 2}},
            content_type="application/merge-patch+json"), sorted(mine)))
    paused.process.send_signal(signal.SIGCONT)
    resumed = time.time()
    code = paused.process.wait(DEADLINE + 5)
    late = [r for r in runs(log) if r.member == paused.identity and r.start > stopped]
    print(f"\npaused member (server mode): exited {time.time() - resumed:.1f}s after "
          f"resuming, {len(late)} reconciles after the pause; its {len(mine)} objects went "
          "to the others")
    assert code != 0, "a member that lost its Lease while paused exits non-zero"
    assert not late, late[:5]
    eventually(30, lambda: mine <= {r.key for r in runs(log) if r.member != paused.identity
                                    and r.start > patched},
               message="the others reconcile the changes to the paused member's objects")
    found = overlaps(runs(log))
    print(f"overlap checker: {len(runs(log))} reconciles, {len(found)} overlaps")
    assert not found, found[:5]


def test_a_member_in_label_mode_makes_the_whole_group_fall_back_with_no_overlap(
        server_ns: Namespace, sharded_cluster: TestCluster, server_members: list[Member],
        tmp_path: Path) -> None:
    """Two server-mode members, then one forced to label mode (as a member whose API
    server lacks the gate would be): the server-mode members see its Lease's mode,
    release their slots once their reconciles returned and run label mode; the label
    member reconciles nothing while a slot is served. Every object ends labelled and
    reconciled by its label owner; nothing overlaps."""
    log = tmp_path / "runs.log"
    log.touch()
    server_members += [Member(server_ns, sharded_cluster.kubeconfig, n, log, "--mode",
                              "server", "--work", "0.2") for n in ("ma", "mb")]
    eventually(60, lambda: sum(slots(m) or 0 for m in server_members) == SLOTS
               and all(slots(m) for m in server_members))
    create_widgets(server_ns, 40)
    eventually(60, lambda: len(reconciled(log)) == 40)
    # Changes in flight while the group switches: reconciled, each by one member at once.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: server_ns.api.request(
            "PATCH", widget_path(server_ns, k.split("/")[1]), body={"spec": {"size": 2}},
            content_type="application/merge-patch+json"), sorted(uids(server_ns))))
    joined = time.time()
    server_members.append(Member(server_ns, sharded_cluster.kubeconfig, "ml", log,
                                 "--mode", "labels", "--work", "0.2"))
    eventually(60, lambda: all(readyz(m) == "sharding: mode=labels" for m in server_members),
               message="the group did not fall back to label mode")
    assert any("run label mode" in line for line in server_members[0].lines)
    names = ["ma", "mb", "ml"]
    final = eventually(90, lambda: settled(server_ns, names), interval=0.5)
    changed = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: server_ns.api.request(
            "PATCH", widget_path(server_ns, k.split("/")[1]), body={"spec": {"size": 3}},
            content_type="application/merge-patch+json"), sorted(final)))
    eventually(60, lambda: all(any(r.member == final[k] and r.start > changed
                                   for r in runs(log) if r.key == k) for k in final),
               message="not every object reconciled by its label owner after the switch")
    found = overlaps(runs(log))
    switched = len([r for r in runs(log) if r.start > joined])
    print(f"\nmixed modes: the group fell back to label mode; {switched} reconciles since "
          f"the label member joined, {len(found)} overlaps")
    assert not found, found[:5]


def test_a_selector_the_api_server_refuses_is_told_from_one_it_serves(
        sharded_cluster: TestCluster, server_ns: Namespace) -> None:
    """What a member checks before it serves new slots (`refusal`): the gated 1.37.2
    server refuses a selector whose range ends before it starts, and serves ours."""
    path = f"/apis/ctl.operator-kit.test/v1/namespaces/{server_ns.name}/widgets"
    why = refusal(sharded_cluster.api, path, INVALID_SELECTOR)
    assert why is not None and "shard selector" in why, why
    assert refusal(sharded_cluster.api, path, selector(ranges_of(range(0, 64, 3)))) is None


def test_mode_server_where_the_api_server_does_not_filter_refuses_to_start(
        cluster: TestCluster, namespace: Namespace, widget_kind: type) -> None:
    operator = Operator(
        "shard-refused", [WidgetController(namespace.name)], namespace=namespace.name,
        leader_election=LeaderElection(lease_name="shard-refused"),
        sharding=Sharding(mode="server"))
    operator.use(cluster.client)
    with pytest.raises(RuntimeError, match=r"does not filter by shard.*ShardedListAndWatch"):
        operator.start()
    operator.stop(timeout=5)
