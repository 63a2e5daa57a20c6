"""Leader election on a Lease, against an in-memory Lease store and a clock the test moves."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit.api.rbac import Rule
from operator_kit.client.transport import Api
from operator_kit.election.leader import LeaderElection, LeaderElector, default_identity, rules

NAMESPACE, NAME = "ops", "my-operator"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAME}"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
DEFAULTS = LeaderElection()  # 15 s lease, 10 s renew deadline, 2 s retry period


# -- test doubles --------------------------------------------------------------------------


class FakeTime:
    """A monotonic clock that moves only when the test advances it, and sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._cond = threading.Condition()
        self._sleeping: dict[int | None, float] = {}  # thread ident -> when it wakes

    def clock(self) -> float:
        with self._cond:
            return self.now

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        me = threading.get_ident()
        with self._cond:
            self._sleeping[me] = self.now + seconds
            self._cond.notify_all()
            while self.now < self._sleeping[me] and not stop.is_set():
                self._cond.wait(0.005)
            del self._sleeping[me]
        return stop.is_set()

    def advance(self, seconds: float, *threads: threading.Thread) -> None:
        """Move time on; then wait until each thread sleeps until later again, or ended."""
        with self._cond:
            self.now += seconds
            self._cond.notify_all()
            for _ in range(1000):
                if all(not t.is_alive() or self._sleeping.get(t.ident, -math.inf) > self.now
                       for t in threads):
                    return
                self._cond.wait(0.005)
        raise AssertionError("an elector thread did not go back to sleep")

    def run(self, seconds: float, *threads: threading.Thread, step: float = 0.25,
            check: Callable[[], None] = lambda: None) -> None:
        """Advance `seconds` in steps, calling `check` after each."""
        for _ in range(round(seconds / step)):
            self.advance(step, *threads)
            check()


class LeaseServer:
    """One Lease in memory with the API server's resourceVersion rules (409 on a stale write)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self._version = 0
        self._lock = threading.Lock()
        self.before: Callable[[str, Any], None] = lambda method, body: None

    def request(self, method: str, path: str, *, body: Any = None, timeout: Any = None,
                **_: Any) -> Any:
        self.before(method, body)
        with self._lock:
            if method == "GET":
                assert path == LEASE_PATH
                if self.lease is None:
                    raise ApiException(status=404, reason="Not Found")
                return copy.deepcopy(self.lease)
            if method == "POST":
                assert path == LEASE_PATH.rpartition("/")[0]
                assert "resourceVersion" not in body["metadata"]
                if self.lease is not None:
                    raise ApiException(status=409, reason="AlreadyExists")
                return self._store(body)
            if method == "PUT":
                assert path == LEASE_PATH
                if self.lease is None:
                    raise ApiException(status=404, reason="Not Found")
                sent = body["metadata"].get("resourceVersion")
                assert sent, "an update must carry the resourceVersion it read"
                if sent != self.lease["metadata"]["resourceVersion"]:
                    raise ApiException(status=409, reason="Conflict")
                return self._store(body)
        raise AssertionError(f"unexpected {method} {path}")

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"] = {**body["metadata"], "name": NAME, "namespace": NAMESPACE,
                                  "resourceVersion": str(self._version)}
        assert isinstance(self.lease["spec"]["leaseDurationSeconds"], int)
        return copy.deepcopy(self.lease)

    def write(self, **spec: Any) -> None:
        """Another replica (or a person) writes the Lease."""
        with self._lock:
            meta = {"name": NAME, "namespace": NAMESPACE}
            self._store({"metadata": meta, "spec": {**(self.spec or {}), **spec}})

    @property
    def spec(self) -> dict[str, Any] | None:
        return None if self.lease is None else dict(self.lease["spec"])


class Link:
    """One replica's connection to the server: it can fail or hang on its own."""

    def __init__(self, server: LeaseServer) -> None:
        self.server = server
        self.fail: BaseException | None = None
        self.hang: threading.Event | None = None
        self.hanging = threading.Event()
        self.calls: list[tuple[str, float]] = []

    def request(self, method: str, path: str, **options: Any) -> Any:
        self.calls.append((method, options["timeout"]))
        if self.hang is not None:
            self.hanging.set()
            self.hang.wait()
        if self.fail is not None:
            raise self.fail
        return self.server.request(method, path, **options)


@dataclass
class Candidate:
    elector: LeaderElector
    link: Link
    time: FakeTime
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    stopped: list[bool] = field(default_factory=list)  # is_leader() seen by on_stopped_leading
    thread: threading.Thread | None = None

    @property
    def running(self) -> threading.Thread:
        assert self.thread is not None
        return self.thread

    def wait_leading(self) -> None:
        assert self.started.wait(5), f"{self.elector.identity} did not start leading"
        self.time.advance(0, self.running)


@pytest.fixture
def time_() -> FakeTime:
    return FakeTime()


@pytest.fixture
def server() -> LeaseServer:
    return LeaseServer()


@pytest.fixture
def candidate(time_: FakeTime, server: LeaseServer) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(identity: str, config: LeaderElection = DEFAULTS, *, start: bool = True,
             **options: Any) -> Candidate:
        link = Link(server)
        holder: list[Candidate] = []
        elector = LeaderElector(
            cast(Api, link), dataclasses.replace(config, identity=identity),
            namespace=NAMESPACE, name=NAME, operator=f"unit-{identity}",
            on_started_leading=lambda: holder[0].started.set(),
            on_stopped_leading=lambda: holder[0].stopped.append(holder[0].elector.is_leader()),
            clock=time_.clock, wait=time_.wait, **options)
        made.append(c := Candidate(elector, link, time_))
        holder.append(c)
        if start:
            c.thread = elector.start(c.stop)
        return c

    yield make
    for c in made:
        c.stop.set()
        if c.link.hang is not None:
            c.link.hang.set()
        if c.thread is not None:
            c.thread.join(5)
            assert not c.thread.is_alive(), f"{c.elector.identity}'s thread did not end"


def gauge(identity: str) -> float | None:
    return REGISTRY.get_sample_value("operator_kit_leader", {"operator": f"unit-{identity}"})


# -- configuration -------------------------------------------------------------------------


def test_defaults_are_client_gos() -> None:
    assert (DEFAULTS.lease_duration, DEFAULTS.renew_deadline, DEFAULTS.retry_period) == (
        15.0, 10.0, 2.0)


def test_followers_keep_warm_caches_unless_told_not_to() -> None:
    assert DEFAULTS.warm_standby is True  # unlike controller-runtime's opt-in EnableWarmup
    assert LeaderElection(warm_standby=False).warm_standby is False


@pytest.mark.parametrize(("timings", "complaint"), [
    ({"lease_duration": 10, "renew_deadline": 10}, "lease_duration .* greater than renew_dead"),
    ({"lease_duration": 5}, "lease_duration .* greater than renew_deadline"),
    ({"renew_deadline": 2.4}, r"renew_deadline .* greater than retry_period \* 1.2"),
    ({"retry_period": 0}, "retry_period must be .* greater than zero"),
    ({"renew_deadline": -1}, "renew_deadline must be .* greater than zero"),
    ({"lease_duration": 0}, "lease_duration must be .* greater than zero"),
])
def test_invalid_timings_are_rejected_naming_the_rule_and_the_defaults(
        timings: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint) as raised:
        dataclasses.replace(DEFAULTS, **timings)
    assert "lease_duration=15, renew_deadline=10, retry_period=2" in str(raised.value)


def test_an_empty_identity_is_rejected() -> None:
    with pytest.raises(ValueError, match="identity must not be empty"):
        LeaderElection(identity="")


def test_identity_is_the_pod_name_else_host_and_random_suffix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "op-7d9f-x2")
    assert default_identity() == "op-7d9f-x2"
    monkeypatch.delenv("POD_NAME")
    first, second = default_identity(), default_identity()
    assert first != second
    assert re.fullmatch(r".+_[0-9a-f]{16}", first)


def test_rules_grant_create_on_leases_and_get_update_on_its_own_lease_only() -> None:
    assert rules("op") == [
        Rule(["coordination.k8s.io"], ["leases"], ["create"]),
        Rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["op"])]


# -- acquiring -----------------------------------------------------------------------------


def test_a_free_lease_is_created_naming_us(candidate: Callable[..., Candidate],
                                           server: LeaseServer) -> None:
    a = candidate("a")
    a.wait_leading()
    assert a.elector.is_leader() and a.elector.may_reconcile()
    spec = server.spec
    assert spec is not None
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["acquireTime"]) and spec["acquireTime"] == spec["renewTime"]
    assert gauge("a") == 1


def test_the_leader_renews_every_retry_period_keeping_acquire_time(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    a = candidate("a")
    a.wait_leading()
    first = server.spec
    assert first is not None
    renewals: list[str] = []
    for _ in range(5):
        time_.advance(DEFAULTS.retry_period, a.running)
        spec = server.spec
        assert spec is not None and spec["holderIdentity"] == "a"
        assert spec["acquireTime"] == first["acquireTime"]
        assert spec["leaseTransitions"] == 0
        renewals.append(spec["renewTime"])
    assert renewals == sorted(set(renewals)) and renewals[0] > first["renewTime"]
    assert a.elector.is_leader()
    assert all(0 < timeout <= DEFAULTS.renew_deadline for _, timeout in a.link.calls)


def test_a_lease_its_holder_keeps_renewing_is_never_taken(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    server.write(holderIdentity="other", leaseDurationSeconds=15, leaseTransitions=3,
                 renewTime="2026-01-01T00:00:00.000000Z")
    beats = iter(range(10**6))

    def other_renews(method: str, _body: Any) -> None:
        if method == "GET":
            server.write(renewTime=f"2026-01-01T00:00:00.{next(beats):06d}Z")

    server.before = other_renews
    b = candidate("b")
    time_.run(60, b.running, check=lambda: assert_not_leader(b))
    assert server.spec is not None and server.spec["holderIdentity"] == "other"
    assert b.elector.holder == "other"
    assert not b.started.is_set() and gauge("b") == 0


def assert_not_leader(c: Candidate) -> None:
    assert not c.elector.is_leader(), f"{c.elector.identity} leads"


def test_an_abandoned_lease_is_taken_a_lease_duration_after_we_first_saw_it(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    # renewTime says "long ago", but only our own observation counts: wait a full duration.
    server.write(holderIdentity="gone", leaseDurationSeconds=15, leaseTransitions=4,
                 acquireTime="2000-01-01T00:00:00.000000Z",
                 renewTime="2000-01-01T00:00:00.000000Z")
    b = candidate("b")
    time_.advance(0, b.running)
    first_seen = time_.now
    taken_at = None
    for _ in range(100):
        time_.advance(0.25, b.running)
        if b.elector.is_leader():
            taken_at = time_.now
            break
    assert taken_at is not None, "never took the expired lease"
    assert first_seen + 15 <= taken_at <= first_seen + 15 + 2 * 2.2 + 0.25
    spec = server.spec
    assert spec is not None
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 5
    assert spec["acquireTime"] > "2000-01-01T00:00:00.000000Z"


def test_a_released_lease_is_taken_at_once(
        candidate: Callable[..., Candidate], server: LeaseServer) -> None:
    server.write(holderIdentity="", leaseDurationSeconds=1, leaseTransitions=2)
    b = candidate("b")
    b.wait_leading()
    assert server.spec is not None
    assert server.spec["holderIdentity"] == "b" and server.spec["leaseTransitions"] == 3


def test_losing_the_create_race_means_someone_else_won(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    def rival_creates_first(method: str, _body: Any) -> None:
        if method == "POST":
            server.before = lambda method, body: None
            server.write(holderIdentity="rival", leaseDurationSeconds=15, leaseTransitions=0)

    server.before = rival_creates_first
    b = candidate("b")
    time_.run(10, b.running, check=lambda: assert_not_leader(b))
    assert b.elector.holder == "rival"
    assert server.spec is not None and server.spec["holderIdentity"] == "rival"


def test_two_candidates_never_lead_at_once_and_the_survivor_takes_over_after_the_loss(
        candidate: Callable[..., Candidate], time_: FakeTime) -> None:
    a = candidate("a")
    a.wait_leading()
    b = candidate("b")

    def at_most_one() -> None:
        assert not (a.elector.is_leader() and b.elector.is_leader()), "two leaders"

    time_.run(30, a.running, b.running, check=at_most_one)
    assert a.elector.is_leader() and not b.started.is_set()
    a.link.fail = OSError("network unreachable")
    lost_at = None
    for _ in range(200):
        time_.advance(0.25, a.running, b.running)
        at_most_one()
        if lost_at is None and a.stopped:
            lost_at = time_.now
        if b.elector.is_leader():
            break
    assert lost_at is not None and b.elector.is_leader()
    assert time_.now > lost_at + (DEFAULTS.lease_duration - DEFAULTS.renew_deadline) - 0.5


# -- losing --------------------------------------------------------------------------------


def test_renewal_failures_past_the_renew_deadline_lose_the_lease(
        candidate: Callable[..., Candidate], time_: FakeTime) -> None:
    a = candidate("a")
    a.wait_leading()
    acquired_at = time_.now
    a.link.fail = OSError("connection refused")
    time_.run(DEFAULTS.renew_deadline - 0.25, a.running)
    assert a.elector.is_leader() and not a.stopped
    time_.advance(0.25, a.running)
    assert time_.now == acquired_at + DEFAULTS.renew_deadline
    a.running.join(5)
    assert not a.running.is_alive(), "run() must return after losing the lease"
    assert a.stopped == [False], "on_stopped_leading once, after is_leader turned False"
    assert not a.elector.is_leader() and gauge("a") == 0


def test_is_leader_turns_false_at_the_deadline_even_while_the_elector_is_stuck(
        candidate: Callable[..., Candidate], time_: FakeTime) -> None:
    short = LeaderElection(lease_duration=3, renew_deadline=2, retry_period=0.5)
    a = candidate("a", short)
    a.wait_leading()
    a.link.hang = threading.Event()
    time_.advance(0.5)  # the renewal starts, and hangs
    assert a.link.hanging.wait(5)
    time_.advance(1.25)
    assert a.elector.is_leader()
    time_.advance(0.25)  # the renew deadline: 2 s after the last successful renewal
    assert not a.elector.is_leader() and not a.elector.may_reconcile()
    assert a.running.is_alive() and not a.stopped  # the thread has not noticed yet
    # The request is bounded by the time that was left: the thread notices soon after.
    a.running.join(5)
    assert not a.running.is_alive() and a.stopped == [False]


def test_a_write_by_another_replica_ends_leadership_at_once(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime,
        caplog: pytest.LogCaptureFixture) -> None:
    a = candidate("a")
    a.wait_leading()
    server.write(holderIdentity="intruder")
    with caplog.at_level(logging.INFO, logger="operator_kit.leader"):
        time_.advance(DEFAULTS.retry_period, a.running)
    assert a.stopped == [False] and not a.elector.is_leader()
    assert a.elector.holder == "intruder"
    assert "new leader observed: intruder" in caplog.text
    assert "lost lease ops/my-operator: the Lease was taken over" in caplog.text


def test_a_conflicting_renewal_ends_leadership(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    a = candidate("a")
    a.wait_leading()
    puts = iter(range(2))

    def others_write_between_read_and_update(method: str, _body: Any) -> None:
        if method == "PUT" and next(puts, 2) == 1:  # the update after the re-read
            server.write(renewTime="2026-01-01T00:00:00.000000Z")

    server.before = others_write_between_read_and_update
    server.write(renewTime="2026-01-01T00:00:00.000001Z")  # makes the optimistic PUT stale
    time_.advance(DEFAULTS.retry_period, a.running)
    assert a.stopped == [False] and not a.elector.is_leader()


def test_a_renewal_whose_answer_was_lost_is_recovered_by_reading_the_lease(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    a = candidate("a")
    a.wait_leading()
    real = server.request

    def answer_lost(method: str, path: str, **options: Any) -> Any:
        real(method, path, **options)
        server.request = real  # type: ignore[method-assign]
        raise TimeoutError("read timed out")

    server.request = answer_lost  # type: ignore[method-assign]
    calls = len(a.link.calls)
    time_.advance(DEFAULTS.retry_period, a.running)
    # The optimistic update landed but its answer was lost; a re-read finds the Lease
    # still ours (at a resourceVersion we never saw) and renews from there.
    assert [m for m, _ in a.link.calls[calls:]] == ["PUT", "GET", "PUT"]
    assert a.elector.is_leader() and not a.stopped
    time_.advance(DEFAULTS.retry_period, a.running)
    assert [m for m, _ in a.link.calls[calls + 3:]] == ["PUT"]
    assert a.elector.is_leader()


# -- releasing -----------------------------------------------------------------------------


def test_stopping_releases_the_lease_for_a_follower_to_take_at_once(
        candidate: Callable[..., Candidate], server: LeaseServer) -> None:
    a = candidate("a")
    a.wait_leading()
    a.stop.set()
    a.running.join(5)
    assert not a.running.is_alive()
    spec = server.spec
    assert spec is not None
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert not a.elector.is_leader() and a.stopped == [] and gauge("a") == 0
    b = candidate("b")
    b.wait_leading()
    assert server.spec is not None and server.spec["leaseTransitions"] == 1


def test_release_clears_the_holder_and_ends_the_elector(
        candidate: Callable[..., Candidate], server: LeaseServer, time_: FakeTime) -> None:
    a = candidate("a")
    a.wait_leading()
    assert a.elector.release() is True
    assert not a.elector.is_leader()
    assert server.spec is not None and server.spec["holderIdentity"] == ""
    assert a.elector.release() is False
    time_.advance(DEFAULTS.retry_period, a.running)
    assert not a.running.is_alive() and a.stopped == []
    assert server.spec["holderIdentity"] == ""  # never renewed after the release


def test_without_release_on_stop_the_lease_is_left_to_expire(
        candidate: Callable[..., Candidate], server: LeaseServer) -> None:
    a = candidate("a", release_on_stop=False)
    a.wait_leading()
    a.stop.set()
    a.running.join(5)
    assert server.spec is not None and server.spec["holderIdentity"] == "a"
    assert a.elector.release() is True
    assert server.spec is not None and server.spec["holderIdentity"] == ""


def test_a_leader_whose_start_fails_releases_and_reports_the_loss(
        time_: FakeTime, server: LeaseServer) -> None:
    stopped: list[bool] = []
    tried = threading.Event()

    def broken_start() -> None:
        tried.set()
        raise RuntimeError("cannot start controllers")

    elector = LeaderElector(
        cast(Api, Link(server)), LeaderElection(identity="a"), namespace=NAMESPACE,
        name=NAME, operator="unit-a", on_started_leading=broken_start,
        on_stopped_leading=lambda: stopped.append(True), clock=time_.clock, wait=time_.wait)
    stop = threading.Event()
    thread = elector.start(stop)
    try:
        assert tried.wait(5)
        for _ in range(100):
            time_.advance(0.5, thread)
            if stopped:
                break
        assert stopped == [True]
        thread.join(5)
        assert not thread.is_alive()
        assert server.spec is not None and server.spec["holderIdentity"] == ""
    finally:
        stop.set()
        thread.join(5)
