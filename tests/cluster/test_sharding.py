"""Sharding with real member processes (tests/cluster/shard_member.py) on a real API server.

Members append the start and end of every reconcile to one shared log; `overlaps` reads
it and finds any two reconciles of the same key that ran at the same time. Timings are
shortened (lease 8 s, renew deadline 6 s, retry 1 s): shorter, as in test_leader_election,
and a member busy with 750 objects on a machine at load 12 missed its 3 s renew deadline,
lost the leader Lease and exited (as it must), which these tests do not expect.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit.election.sharding import Ring, ring_key
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import create_widget, freeze, widget_path
from .shard_member import LABEL, OPERATOR

pytestmark = pytest.mark.usefixtures("widget_kind")

LEASE, DEADLINE, RETRY = 8.0, 6.0, 1.0
HANDOVER = 4.0
"""Seconds within which a member stopped cleanly has handed its objects over ("at once")."""
ROOT = Path(__file__).resolve().parents[2]
DRAIN = "drain." + LABEL
PATCH_RATE = 50
"""Label patches per second the assigner gets through at least, on the shared 2-core
machine (about 100 under a load average of 8; more when quiet)."""


class Member:
    """A member process whose output is collected line by line."""

    def __init__(self, ns: Namespace, kubeconfig: str, identity: str, log: Path,
                 *args: str) -> None:
        self.identity = identity
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.shard_member", ns.name, kubeconfig,
             identity, str(log), "--lease-duration", str(LEASE), "--renew-deadline",
             str(DEADLINE), "--retry-period", str(RETRY), *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                        name=f"member-{identity}", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def cache(self) -> tuple[int, int] | None:
        """(objects cached, of which not labelled ours) as last reported."""
        for line in reversed(self.lines):
            if line.startswith("cache "):
                _, objects, foreign = line.split()
                return int(objects), int(foreign)
        return None

    def output(self) -> str:
        return "".join(self.lines[-80:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)


@dataclass(frozen=True)
class Run:
    member: str
    key: str
    start: float
    end: float


def runs(log: Path, killed: dict[str, float] | None = None) -> list[Run]:
    """Every reconcile in the log; one a SIGKILL cut short ends at the kill."""
    open_: dict[tuple[str, str], float] = {}
    done: list[Run] = []
    for line in log.read_text().splitlines():
        what, member, key, at = line.split()
        if what in ("w", "W"):
            continue
        if what == "S":
            open_[(member, key)] = float(at)
        else:
            done.append(Run(member, key, open_.pop((member, key)), float(at)))
    for (member, key), start in open_.items():
        done.append(Run(member, key, start, (killed or {}).get(member, float("inf"))))
    return done


def open_runs(log: Path, member: str) -> set[str]:
    """The keys `member` has begun reconciling (an S line) and not finished (no E yet)."""
    begun: set[str] = set()
    for line in log.read_text().splitlines():
        what, who, key, _ = line.split()
        if who == member and what == "S":
            begun.add(key)
        elif who == member and what == "E":
            begun.discard(key)
    return begun


def pause_between_reconciles(member: Member, log: Path) -> float:
    """SIGSTOP `member` while it runs no reconcile; the time it was stopped.

    Every key was reconciled once, but an owned child's echo can still start one: stopped
    inside it, that reconcile would never end in the log (S with no E), and the overlap
    checker would count it as running for ever. Stop, look, and resume to try again."""
    for _ in range(50):
        freeze(member.process)
        stopped = time.time()
        if not open_runs(log, member.identity):
            return stopped
        member.process.send_signal(signal.SIGCONT)
        time.sleep(0.3)
    raise AssertionError(f"{member.identity} was never between reconciles")


def overlaps(found: list[Run]) -> list[tuple[Run, Run]]:
    """Pairs of reconciles of one key by two members that ran at the same time."""
    by_key: dict[str, list[Run]] = {}
    for run in found:
        by_key.setdefault(run.key, []).append(run)
    bad: list[tuple[Run, Run]] = []
    for key_runs in by_key.values():
        key_runs.sort(key=lambda r: r.start)
        latest = key_runs[0]
        for run in key_runs[1:]:
            if run.start < latest.end:
                bad.append((latest, run))
            if run.end > latest.end:
                latest = run
    return bad


def assignments(ns: Namespace) -> dict[str, tuple[str | None, bool]]:
    """key -> (the member label, draining) for every Widget."""
    found = {}
    for item in ns.list("ctl.operator-kit.test/v1", "Widget"):
        labels = item["metadata"].get("labels") or {}
        found[ring_key(ns.name, item["metadata"]["name"])] = (labels.get(LABEL),
                                                               DRAIN in labels)
    return found


def create_widgets(ns: Namespace, count: int, prefix: str = "w") -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: create_widget(ns, f"{prefix}{i}", size=1), range(count)))


def settled(ns: Namespace, members: list[str]) -> dict[str, str]:
    """Every Widget labelled with its ring target among `members`, none draining."""
    ring = Ring(members)
    current = assignments(ns)
    wrong = {k: v for k, v in current.items() if v != (ring.owner(k), False)}
    assert not wrong, f"{len(wrong)} not yet at their target, e.g. {list(wrong.items())[:3]}"
    return {k: str(v[0]) for k, v in current.items()}


def lease_holder(ns: Namespace) -> str | None:
    lease = ns.get("coordination.k8s.io/v1", "Lease", OPERATOR)
    return lease["spec"].get("holderIdentity") if lease else None


def start_members(members: list[Member], ns: Namespace, kubeconfig: str, names: list[str],
                  log: Path, *args: str) -> None:
    """Start `names`, the first alone until it holds the leader Lease (so it assigns)."""
    members.append(Member(ns, kubeconfig, names[0], log, *args))
    eventually(30, lambda: lease_holder(ns) == names[0])
    members += [Member(ns, kubeconfig, n, log, *args) for n in names[1:]]


@pytest.fixture
def members(namespace: Namespace, cluster: TestCluster) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()
        (Path(tempfile.gettempdir()) / f"shard-member-{member.identity}.out").write_text(
            "".join(member.lines))


def test_members_share_3000_objects_a_joiner_moves_few_and_killed_members_are_taken_over(
        namespace: Namespace, cluster: TestCluster, members: list[Member],
        tmp_path: Path) -> None:
    log = tmp_path / "reconciles.log"
    log.touch()
    names = ["m-0", "m-1", "m-2"]
    start_members(members, namespace, cluster.kubeconfig, names, log)
    eventually(30, lambda: len(namespace.list("coordination.k8s.io/v1", "Lease")) == 4)

    count = 3000
    started = time.monotonic()
    create_widgets(namespace, count)
    before = eventually(150, lambda: settled(namespace, names), interval=1.0)
    reconciled = eventually(60, lambda: len({r.key for r in runs(log)}) == count and runs(log))
    print(f"\n3 members: {count} objects assigned and reconciled in "
          f"{time.monotonic() - started:.1f}s")
    by_member = {n: len({r.key for r in reconciled if r.member == n}) for n in names}
    print(f"reconciled per member: {by_member}")
    assert all(n >= 0.25 * count for n in by_member.values()), by_member
    share = {n: sum(1 for m in before.values() if m == n) for n in names}
    for member in members:  # each caches exactly its share, nothing else
        eventually(10, lambda m=member: m.cache() == (share[m.identity], 0),
                   message=f"{member.identity}: cache {member.cache()}, share "
                           f"{share[member.identity]}")

    joined = time.monotonic()
    members.append(Member(namespace, cluster.kubeconfig, "m-3", log))
    after = eventually(120, lambda: settled(namespace, [*names, "m-3"]), interval=1.0)
    moved = [k for k in after if after[k] != before[k]]
    # The rate moves went at on this machine now (each is two patches and a hand-over):
    # the patch rate the takeovers below are held to when the machine is slower than
    # PATCH_RATE assumes.
    patch_rate = min(PATCH_RATE, len(moved) / (time.monotonic() - joined))
    print(f"a 4th member joined: {len(moved)} of {count} objects moved "
          f"({100 * len(moved) / count:.1f}%) at {patch_rate:.0f}/s")
    assert len(moved) <= 0.35 * count
    assert all(after[k] == "m-3" for k in moved)
    eventually(30, lambda: {k for k in moved} <= {r.key for r in runs(log) if r.member == "m-3"})

    killed: dict[str, float] = {}

    def kill(victim: Member, alive: list[str]) -> tuple[float, float]:
        """SIGKILL `victim`; seconds until the first object it held was reconciled by
        another member, and until the last, less the time its patches take."""
        current = settled(namespace, [*alive, victim.identity])
        orphans = {k for k, m in current.items() if m == victim.identity}
        victim.process.kill()
        killed[victim.identity] = time.time()
        # A wait, not the promise (asserted below from the reconciles): generous enough for
        # the patches at a third of the rate measured above.
        eventually(LEASE + 10 + 3 * len(orphans) / patch_rate,
                   lambda: settled(namespace, alive), interval=0.5)
        taken: dict[str, float] = {}

        def all_taken() -> bool:
            for run in runs(log, killed):
                if (run.key in orphans and run.member != victim.identity
                        and run.start > killed[victim.identity]):
                    taken[run.key] = min(taken.get(run.key, run.end), run.end)
            return len(taken) == len(orphans)

        eventually(40 + 3 * len(orphans) / patch_rate, all_taken, interval=0.5)
        first = min(taken.values()) - killed[victim.identity]
        took = max(taken.values()) - killed[victim.identity]
        print(f"SIGKILL of {victim.identity}: the others reconciled the first of its "
              f"{len(orphans)} objects after {first:.1f}s, all within {took:.1f}s "
              f"(lease {LEASE:g}s)")
        return first, took - len(orphans) / patch_rate

    # A member that is not the leader: the assigner sees its Lease expire and patches its
    # objects over, one patch each: the last waits for the patches before it.
    first, rest = kill(members[1], ["m-0", "m-2", "m-3"])
    assert first <= LEASE + 5 and rest <= LEASE + 5
    # The leader, which is also the assigner: another member takes the leader Lease
    # (its member Lease expires at the same time), rebuilds the assignment from the
    # labels, and gives the dead member's objects to the others — one more relist and
    # round of patches than above.
    first, rest = kill(members[0], ["m-2", "m-3"])
    assert first <= LEASE + 10 and rest <= LEASE + 10
    assert lease_holder(namespace) in ["m-2", "m-3"]

    found = overlaps(runs(log, killed))
    print(f"overlap checker: {len(runs(log))} reconciles, {len(found)} overlaps")
    assert not found, found[:5]


def test_a_member_paused_past_its_lease_reconciles_nothing_it_no_longer_owns(
        namespace: Namespace, cluster: TestCluster, members: list[Member],
        tmp_path: Path) -> None:
    log = tmp_path / "reconciles.log"
    log.touch()
    names = ["p-0", "p-1", "p-2"]
    start_members(members, namespace, cluster.kubeconfig, names, log, "--children")
    count = 300
    create_widgets(namespace, count)
    before = eventually(90, lambda: settled(namespace, names), interval=0.5)
    eventually(60, lambda: len({r.key for r in runs(log)}) == count)

    def children_follow() -> bool:  # each ConfigMap carries its owner's label
        cms = {ring_key(namespace.name, cm["metadata"]["name"]):
               (cm["metadata"].get("labels") or {}).get(LABEL)
               for cm in namespace.list("v1", "ConfigMap") if cm["metadata"]["name"][0] == "w"}
        assert len(cms) == count and all(cms[k] == m for k, m in before.items())
        return True

    eventually(30, children_follow)

    paused = members[2]
    mine = {k for k, m in before.items() if m == paused.identity}
    stopped = pause_between_reconciles(paused, log)
    after = eventually(LEASE + 20, lambda: settled(namespace, names[:2]), interval=0.5)
    assert all(after[k] != paused.identity for k in mine)

    def children_moved() -> bool:
        for key in mine:
            cm = namespace.get("v1", "ConfigMap", key.split("/")[1])
            assert (cm["metadata"].get("labels") or {}).get(LABEL) == after[key], key
        return True

    eventually(30, children_moved, message="children follow their owner to its new member")
    # Changes to its former objects, queued for it the moment it resumes.
    patched = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: namespace.api.request(
            "PATCH", widget_path(namespace, k.split("/")[1]), body={"spec": {"size": 2}},
            content_type="application/merge-patch+json"), sorted(mine)))
    paused.process.send_signal(signal.SIGCONT)
    resumed = time.time()
    code = paused.process.wait(DEADLINE + 5)
    late = [r for r in runs(log) if r.member == paused.identity and r.start > stopped]
    print(f"\npaused member: exited {time.time() - resumed:.1f}s after resuming, "
          f"{len(late)} reconciles after the pause; its {len(mine)} objects went to others")
    assert code != 0, "a member that lost its Lease while paused exits non-zero"
    assert not late, late[:5]
    eventually(30, lambda: mine <= {
        r.key for r in runs(log) if r.member != paused.identity and r.start > patched},
        message="the others reconcile the changes to the paused member's former objects")
    found = overlaps(runs(log))
    print(f"overlap checker: {len(runs(log))} reconciles, {len(found)} overlaps")
    assert not found, found[:5]


def test_a_member_stopped_cleanly_hands_its_objects_over_at_once(
        namespace: Namespace, cluster: TestCluster, members: list[Member],
        tmp_path: Path) -> None:
    log = tmp_path / "reconciles.log"
    log.touch()
    names = ["c-0", "c-1"]
    start_members(members, namespace, cluster.kubeconfig, names, log)
    create_widgets(namespace, 100)
    eventually(60, lambda: settled(namespace, names), interval=0.5)
    leaving = members[1]
    leaving.process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert leaving.process.wait(20) == 0, leaving.output()
    eventually(HANDOVER, lambda: settled(namespace, names[:1]), interval=0.2)
    print(f"\nSIGTERM: objects handed over {time.monotonic() - stopped:.1f}s after the stop")
    assert namespace.get("coordination.k8s.io/v1", "Lease", f"{OPERATOR}-member-c-1") is None
    assert not overlaps(runs(log))


def writes(log: Path, member: str, after: float) -> list[str]:
    """The keys of writes by `member` that began after `after` and went through (a write
    already sent when the process was frozen landed before the takeover, whenever its
    answer is read; one begun after it is refused by the fence and never completes)."""
    found = []
    began: dict[str, float] = {}
    for line in log.read_text().splitlines():
        what, who, key, at = line.split()
        if what == "w" and who == member:
            began[key] = float(at)
        if what == "W" and who == member and began.get(key, 0.0) > after:
            found.append(key)
    return found


def test_a_member_paused_mid_reconcile_past_its_lease_writes_nothing_after_resuming(
        namespace: Namespace, cluster: TestCluster, members: list[Member],
        tmp_path: Path) -> None:
    log = tmp_path / "reconciles.log"
    log.touch()
    names = ["q-0", "q-1"]
    workers = 4
    slow = ["--children", "--work", "1.5", "--workers", str(workers)]
    start_members(members, namespace, cluster.kubeconfig, names, log, *slow)
    eventually(30, lambda: len(namespace.list("coordination.k8s.io/v1", "Lease")) == 3)
    count = 40
    create_widgets(namespace, count)
    before = eventually(60, lambda: settled(namespace, names), interval=0.5)
    eventually(60, lambda: len({r.key for r in runs(log) if r.end < float("inf")}) == count)
    time.sleep(2)

    paused = members[1]
    mine = {k for k, m in before.items() if m == paused.identity}
    changed = time.time()
    with ThreadPoolExecutor(8) as pool:  # load: every object is reconciled again, slowly
        list(pool.map(lambda k: namespace.api.request(
            "PATCH", widget_path(namespace, k.split("/")[1]), body={"spec": {"size": 2}},
            content_type="application/merge-patch+json"), sorted(before)))

    def busy() -> list[Run]:
        """Reconciles of the changes running, once every worker is inside one: none
        is then between taking a key and starting its reconcile, where a stop would
        let a reconcile begin (and log its start) only after resuming."""
        found = [r for r in runs(log) if r.member == paused.identity and r.start > changed
                 and r.end == float("inf")]
        return found if len(found) == min(workers, len(mine)) else []

    in_flight = eventually(20, busy, interval=0.02)
    freeze(paused.process)  # mid-reconcile: before its write (1.5 s of work first)
    stopped = time.time()
    eventually(LEASE + 20, lambda: settled(namespace, names[:1]), interval=0.5)
    eventually(60, lambda: mine <= {r.key for r in runs(log)
                                    if r.member == names[0] and r.start > stopped
                                    and r.end < float("inf")})
    resumed = time.time()  # (before the signal: the member may log at once)
    paused.process.send_signal(signal.SIGCONT)
    code = paused.process.wait(DEADLINE + 5)
    cut = [r for r in runs(log) if r.member == paused.identity and r.start < stopped
           and r.end > resumed]
    late_writes = writes(log, paused.identity, resumed)
    late_starts = [r for r in runs(log) if r.member == paused.identity and r.start > stopped]
    print(f"\npaused mid-reconcile: {len(in_flight)} reconciles in flight at the pause, "
          f"{len(cut)} resumed after the takeover, {len(late_writes)} writes after resuming, "
          f"{len(late_starts)} reconciles started after the pause; exit code {code}")
    assert code != 0
    assert not late_writes and not late_starts
    cms = {cm["metadata"]["name"]: cm["data"] for cm in namespace.list("v1", "ConfigMap")
           if cm["metadata"]["name"][0] == "w"}
    assert all(cms[k.split("/")[1]] == {"size": "2", "by": names[0]} for k in mine), cms
    # The reconciles frozen mid-way overlap in time with the new owner's, but wrote
    # nothing once resumed (the fence); every other pair of reconciles is disjoint.
    found = overlaps([r for r in runs(log) if r not in cut])
    print(f"overlap checker: {len(runs(log))} reconciles, {len(found)} overlaps "
          f"besides the {len(cut)} fenced ones")
    assert not found, found[:5]


# -- the shard label belongs to the operator ---------------------------------------------

@pytest.fixture
def as_the_operator(namespace: Namespace, cluster: TestCluster,
                    tmp_path: Path) -> Iterator[str]:
    """The generated RBAC and shard-label policy of the members' operator, applied; a
    kubeconfig for its ServiceAccount. Everything cluster-scoped is deleted afterwards,
    the policy first, and waited out (the API server forgets a policy a moment later)."""
    from operator_kit import LeaderElection, Operator, Sharding
    from operator_kit.manifests import operator_manifests
    from operator_kit.testing.deploy import service_account_kubeconfig

    from .shard_member import RecordingController

    operator = Operator(OPERATOR, [RecordingController(namespace.name)],
                        leader_election=LeaderElection(lease_name=OPERATOR),
                        sharding=Sharding())
    docs = [d for d in operator_manifests(operator, app="tests.cluster.shard_member:none",
                                          namespace=namespace.name, image="unused")
            if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                             "RoleBinding")
            or d["metadata"]["name"] == f"{OPERATOR}-shard-labels-{namespace.name}"]
    assert [d["kind"] for d in docs][-2:] == ["ValidatingAdmissionPolicy",
                                              "ValidatingAdmissionPolicyBinding"]
    for doc in docs:
        cluster.api.apply(doc, field_manager="test")
    path = tmp_path / "operator.kubeconfig"
    service_account_kubeconfig(cluster, namespace.name, OPERATOR, path)
    try:
        yield str(path)
    finally:
        for doc in reversed(docs):
            if not doc["metadata"].get("namespace"):
                resource = cluster.api.resource_for(doc["apiVersion"], doc["kind"])
                cluster.api.request("DELETE", resource.path(None, doc["metadata"]["name"]))
        # Created unlabelled: the policy, until forgotten, refuses a labelled CREATE too.
        probe = create_widget(namespace, "policy-gone-probe")
        eventually(30, lambda: relabel(namespace, probe["metadata"]["name"], "y") is None,
                   message="the deleted shard-label policy forgotten")


def relabel(ns: Namespace, name: str, member: str, *, dry_run: bool = True) -> str | None:
    """Move a Widget's shard label by hand (as the test's administrator): None if
    admitted, else the refusal."""
    try:
        ns.api.request("PATCH", widget_path(ns, name), query={"dryRun": "All"} if dry_run
                       else None, body={"metadata": {"labels": {LABEL: member}}},
                       content_type="application/merge-patch+json")
    except ApiException as err:
        assert err.status == 403, err
        return str(err)
    return None


def test_a_label_moved_by_hand_while_there_is_no_leader_is_refused_and_nothing_overlaps(
        namespace: Namespace, cluster: TestCluster, members: list[Member], tmp_path: Path,
        as_the_operator: str) -> None:
    """The attack that gave two members one key (2.6 s and 1.5 s overlaps): kill the
    leader, then move objects' labels to another member while reconciles are in flight.
    The members run as the operator's ServiceAccount, with the generated RBAC and policy."""
    log = tmp_path / "reconciles.log"
    log.touch()
    names = ["r-0", "r-1", "r-2"]
    start_members(members, namespace, as_the_operator, names, log, "--work", "0.3")
    count = 60
    create_widgets(namespace, count)
    before = eventually(60, lambda: settled(namespace, names), interval=0.5)
    eventually(60, lambda: len({r.key for r in runs(log)}) == count)
    eventually(30, lambda: relabel(namespace, "w0", "r-9") is not None,
               message="the shard-label policy enforced")

    leader = members[0]
    leader.process.kill()
    killed = {leader.identity: time.time()}
    alive = names[1:]
    tried = refused = 0
    until = time.monotonic() + LEASE + 2  # the leaderless window, and a little after
    while time.monotonic() < until:
        for key, owner in before.items():
            if owner == leader.identity:
                continue
            name = key.split("/", 1)[1]
            # A change that makes its owner reconcile, then the hand-made move away.
            namespace.api.request("PATCH", widget_path(namespace, name),
                                  body={"spec": {"size": int(time.monotonic() * 10) % 50}},
                                  content_type="application/merge-patch+json")
            other = next(m for m in alive if m != owner)
            tried += 1
            refusal = relabel(namespace, name, other, dry_run=False)
            if refusal is not None:
                refused += 1
                assert "only the operator (its ServiceAccount system:serviceaccount:" \
                    f"{namespace.name}:{OPERATOR}) may set or change it" in refusal
    eventually(LEASE + 20, lambda: settled(namespace, alive), interval=0.5)
    found = overlaps(runs(log, killed))
    print(f"\nleaderless relabel attack: {refused} of {tried} hand-made label moves refused; "
          f"{len(runs(log))} reconciles, {len(found)} overlaps")
    assert refused == tried > 0
    assert not found, found[:5]


def test_a_forged_member_lease_holds_objects_one_lease_at_most_and_a_deleted_one_moves_none(
        namespace: Namespace, cluster: TestCluster, members: list[Member],
        tmp_path: Path) -> None:
    from operator_kit.election.sharding import MEMBER_OF, member_lease

    log = tmp_path / "reconciles.log"
    log.touch()
    names = ["f-0", "f-1", "f-2"]
    start_members(members, namespace, cluster.kubeconfig, names, log)
    count = 60
    create_widgets(namespace, count)
    before = eventually(60, lambda: settled(namespace, names), interval=0.5)

    # 1. Someone deletes a live member's Lease: it is not a departure (the member renews,
    #    re-creating it); none of its objects move, none start draining.
    victim = member_lease(OPERATOR, "f-1")
    leases = "/apis/coordination.k8s.io/v1/namespaces/" + namespace.name + "/leases"
    cluster.api.request("DELETE", f"{leases}/{victim}")
    deadline = time.monotonic() + LEASE + 3
    while time.monotonic() < deadline:
        assert settled(namespace, names) == before
        time.sleep(0.5)
    assert namespace.get("coordination.k8s.io/v1", "Lease", victim) is not None

    # 2. A forged member Lease (the documented name and label) that claims an hour and
    #    is never renewed: believed for the operator's own lease duration, then dead.
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    cluster.api.request("POST", leases, body={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": member_lease(OPERATOR, "ghost"), "labels": {MEMBER_OF: OPERATOR}},
        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3600,
                 "renewTime": now, "acquireTime": now}})
    forged = time.monotonic()
    eventually(20, lambda: any(m == "ghost" for m, _ in assignments(namespace).values()),
               message="the ghost, believed for a while, given objects")
    eventually(LEASE + 20, lambda: settled(namespace, names), interval=0.5)
    held = time.monotonic() - forged
    # ...and a Lease named for one member that claims another holder keeps nobody alive.
    cluster.api.request("POST", leases, body={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": member_lease(OPERATOR, "decoy"), "labels": {MEMBER_OF: OPERATOR}},
        "spec": {"holderIdentity": "phantom", "leaseDurationSeconds": 3600,
                 "renewTime": now, "acquireTime": now}})
    time.sleep(2)
    assert all(m in names for m, _ in assignments(namespace).values())
    print(f"\nforged member Lease: its objects back with real members after {held:.1f} s "
          f"(lease {LEASE:g} s, it claimed 3600 s); a deleted live member's Lease moved "
          f"0 of {sum(1 for m in before.values() if m == 'f-1')} objects")
