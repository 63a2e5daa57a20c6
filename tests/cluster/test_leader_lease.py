"""Leader election against the real API server: replicas are electors in threads, short timings."""

from __future__ import annotations

import copy
import dataclasses
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from operator_kit.client.transport import Api
from operator_kit.election.leader import LeaderElection, LeaderElector
from operator_kit.testing import Namespace, TestCluster, eventually

SHORT = LeaderElection(lease_duration=3, renew_deadline=2, retry_period=0.5)
LEASE = "leader-test"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
# A follower tries again 1 to 2.2 retry periods after its last try, plus a round trip.
TAKEOVER_BOUND = SHORT.retry_period * 2.2 + 0.5
# An expired (not released) Lease: a follower starts the expiry clock when it *sees* the last
# renewal (observedTime, as client-go), up to one pause after it was written, and takes the
# Lease at its first try after expiry, up to one pause later: lease_duration + two pauses.
EXPIRY_TAKEOVER_BOUND = SHORT.lease_duration + SHORT.retry_period * 2.2 + TAKEOVER_BOUND


class Replica:
    """One elector in a thread, as one operator process would run it."""

    def __init__(self, cluster: TestCluster, namespace: str, identity: str,
                 release_on_stop: bool = True) -> None:
        self.api = Api(cluster.client)
        self.stop = threading.Event()
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self.elector = LeaderElector(
            self.api, dataclasses.replace(SHORT, identity=identity),
            namespace=namespace, name=LEASE, operator=f"cluster-{identity}",
            on_started_leading=self._started, on_stopped_leading=self._stopped,
            release_on_stop=release_on_stop)
        self.thread = self.elector.start(self.stop)

    def _started(self) -> None:
        self.started_at = time.monotonic()

    def _stopped(self) -> None:
        assert not self.elector.is_leader()
        self.stopped_at = time.monotonic()

    def leads(self) -> bool:
        return self.elector.is_leader()

    def shut_down(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), f"{self.elector.identity}'s elector did not stop"


@pytest.fixture
def replica(cluster: TestCluster, namespace: Namespace) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def start(identity: str, **options: Any) -> Replica:
        started.append(r := Replica(cluster, namespace.name, identity, **options))
        return r

    yield start
    for r in started:
        r.shut_down()


class TwoLeaders:
    """Samples every replica's `is_leader()` in a thread; records any moment with two."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.seen: list[list[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="two-leaders", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            leaders = [r.elector.identity for r in self.replicas if r.leads()]
            if len(leaders) > 1:
                self.seen.append(leaders)

    def __enter__(self) -> TwoLeaders:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        assert not self.seen, f"two leaders at once: {self.seen[:3]}"


def lease(namespace: Namespace) -> dict[str, Any]:
    found = namespace.get("coordination.k8s.io/v1", "Lease", LEASE)
    assert found is not None, "no Lease"
    spec: dict[str, Any] = found["spec"]
    return spec


def only_leader(replicas: list[Replica]) -> Replica | None:
    leaders = [r for r in replicas if r.leads()]
    assert len(leaders) <= 1, f"two leaders: {[r.elector.identity for r in leaders]}"
    return leaders[0] if leaders else None


def the_leader(replicas: list[Replica]) -> Replica:
    """The one replica that leads and has started; AssertionError (not yet) when none."""
    leader = only_leader(replicas)
    assert leader is not None and leader.started_at is not None, "no replica leads yet"
    return leader


def closed_port_client(cluster: TestCluster) -> client.ApiClient:
    """An ApiClient like the cluster's, aimed at a loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = copy.copy(cluster.client.configuration)
    configuration.host = f"https://127.0.0.1:{port}"
    return client.ApiClient(configuration)


def test_exactly_one_of_three_replicas_leads_and_the_lease_names_it(
        replica: Callable[..., Replica], namespace: Namespace) -> None:
    replicas = [replica(f"replica-{i}") for i in range(3)]
    with TwoLeaders(replicas):
        leader = eventually(10, lambda: the_leader(replicas), message="a leader")
        deadline = time.monotonic() + 6 * SHORT.retry_period
        while time.monotonic() < deadline:
            assert only_leader(replicas) is leader
            time.sleep(0.05)
    spec = lease(namespace)
    assert spec["holderIdentity"] == leader.elector.identity
    assert spec["leaseDurationSeconds"] == 3
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
    followers = [r for r in replicas if r is not leader]
    assert all(r.started_at is None for r in followers)
    eventually(5, lambda: all(r.elector.holder == leader.elector.identity for r in followers))
    assert REGISTRY.get_sample_value(
        "operator_kit_leader", {"operator": f"cluster-{leader.elector.identity}"}) == 1


def test_a_stopped_leader_releases_and_a_follower_takes_over_within_about_two_retry_periods(
        replica: Callable[..., Replica], namespace: Namespace) -> None:
    first = replica("first")
    eventually(10, first.leads, message="first leads")
    followers = [replica("second"), replica("third")]
    eventually(5, lambda: all(r.elector.holder == "first" for r in followers))
    with TwoLeaders([first, *followers]):
        first.shut_down()
        released_at = time.monotonic()
        assert lease(namespace)["holderIdentity"] == ""
        successor = eventually(5, lambda: the_leader(followers), interval=0.01)
    assert successor.started_at is not None
    took = successor.started_at - released_at
    assert took <= TAKEOVER_BOUND, f"takeover took {took:.2f}s"
    assert first.stopped_at is None, "a release is not a loss"
    spec = lease(namespace)
    assert spec["holderIdentity"] == successor.elector.identity
    assert spec["leaseTransitions"] == 1


def test_a_leader_cut_off_from_the_api_server_stops_leading_before_its_lease_could_expire(
        replica: Callable[..., Replica], namespace: Namespace, cluster: TestCluster) -> None:
    leader = replica("cut-off")
    eventually(10, leader.leads, message="cut-off leads")
    followers = [replica("standby-1"), replica("standby-2")]
    eventually(5, lambda: all(r.elector.holder == "cut-off" for r in followers))
    with TwoLeaders([leader, *followers]):
        leader.api.client = closed_port_client(cluster)  # every request now fails
        cut_at = time.monotonic()
        eventually(SHORT.renew_deadline + 1, lambda: leader.stopped_at, interval=0.01,
                   message="the cut-off leader reporting the loss")
        successor = eventually(EXPIRY_TAKEOVER_BOUND + 1, lambda: the_leader(followers),
                               interval=0.01)
    assert leader.stopped_at is not None and successor.started_at is not None
    # It gave up within its renew deadline of the last renewal (which was before the cut) ...
    assert leader.stopped_at - cut_at <= SHORT.renew_deadline + 0.2
    assert not leader.leads() and not leader.thread.is_alive()
    assert REGISTRY.get_sample_value("operator_kit_leader", {"operator": "cluster-cut-off"}) == 0
    # ... and the Lease still named it until it expired for the others.
    assert successor.started_at - leader.stopped_at >= (
        SHORT.lease_duration - SHORT.renew_deadline - SHORT.retry_period)
    assert lease(namespace)["holderIdentity"] == successor.elector.identity


def test_a_replica_started_while_another_holds_the_lease_never_leads_until_it_expires(
        replica: Callable[..., Replica], namespace: Namespace) -> None:
    holder = replica("holder", release_on_stop=False)
    eventually(10, holder.leads, message="holder leads")
    newcomer = replica("newcomer")
    with TwoLeaders([holder, newcomer]):
        until = time.monotonic() + 2 * SHORT.lease_duration
        while time.monotonic() < until:
            assert not newcomer.leads() and newcomer.started_at is None
            time.sleep(0.05)
        assert lease(namespace)["holderIdentity"] == "holder"
        holder.shut_down()  # stops renewing, but leaves the Lease to expire
        stopped_at = time.monotonic()
        assert lease(namespace)["holderIdentity"] == "holder"
        eventually(EXPIRY_TAKEOVER_BOUND + 1, lambda: the_leader([newcomer]), interval=0.01)
    assert newcomer.started_at is not None
    waited = newcomer.started_at - stopped_at
    assert SHORT.lease_duration - SHORT.retry_period <= waited
    assert waited <= EXPIRY_TAKEOVER_BOUND, f"took {waited:.2f}s after the holder stopped"


def test_lease_transitions_count_holder_changes_and_acquire_time_marks_them(
        replica: Callable[..., Replica], namespace: Namespace) -> None:
    seen: list[dict[str, Any]] = []
    for identity in ("a", "b", "a-again"):
        r = replica(identity)
        eventually(10, r.leads, message=f"{identity} leads")
        first = lease(namespace)
        time.sleep(3 * SHORT.retry_period)
        renewed = lease(namespace)
        assert renewed["renewTime"] > first["renewTime"], "the leader renews"
        assert renewed["acquireTime"] == first["acquireTime"]
        seen.append(renewed)
        r.shut_down()
    assert [s["holderIdentity"] for s in seen] == ["a", "b", "a-again"]
    assert [s["leaseTransitions"] for s in seen] == [0, 1, 2]
    assert seen[0]["acquireTime"] < seen[1]["acquireTime"] < seen[2]["acquireTime"]
    released = lease(namespace)
    assert released["holderIdentity"] == "" and released["leaseTransitions"] == 2
