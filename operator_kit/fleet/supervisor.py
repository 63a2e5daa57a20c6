"""The fleet supervisor: the fleet controllers run on every member cluster, each apart.

::

    provider.clusters()  --every second-->  plan(running, wanted)
                                              | joined: Member(cluster).start()
                                              | left:   member.leave()  (threads joined)
    Member (thread fleet-<cluster>):
        Api(kubeconfig) -> Informers -> one ControllerRunner per fleet controller
        (informers, queue, workers: the hub's machinery, against that cluster's Api)

A `Member` owns everything that touches its cluster: its ApiClient and connection pool,
its informers (their caches and watch threads), and a `ControllerRunner` per fleet
controller whose reconciles get ``ctx.cluster`` set to the member's name and whose
Context reads and writes through that cluster's Api. Nothing is shared between members
but the controller objects, so an unreachable or slow cluster delays only its own
threads: its informers retry with backoff, its start retries until the cluster
answers, and the other members (and the hub) go on. A member is built in its own
thread, so even a connection that hangs never holds up the supervisor.

A cluster that leaves has its stop event set: its watches are interrupted, its workers
take no new keys and finish the reconciles in flight (bounded by ``shutdown_timeout``),
and its own thread joins every one of them and ends; the supervisor does not wait for
that (`Fleet.leaving` lists members still stopping), and the member is dropped with its
caches. `Fleet.stop` joins every member, leaving or not.

Runners are named ``<controller>@<cluster>``: their worker threads
(``reconcile-<controller>@<cluster>-<i>``) and logs say the cluster; their metrics keep
the controller's name in ``controller`` and have the member in ``cluster``
(`operator_kit.metrics`). A member that leaves drops its series once stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit._stability import experimental
from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import FencedApi, Refusal
from operator_kit.client.transport import Api, error_message
from operator_kit.fleet.fanout import FanOut
from operator_kit.fleet.providers import Cluster, ClusterProvider
from operator_kit.fleet.sharding import ClusterShards
from operator_kit.runtime.controller import Controller
from operator_kit.runtime.objects import Objects
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers

if TYPE_CHECKING:
    from operator_kit.operator import Operator

log = logging.getLogger("operator_kit.fleet")


@dataclass(frozen=True)
class Changes:
    """What the fleet must do to run `wanted` clusters where it runs others: the
    clusters to `join` and the names of those to `leave` (a changed cluster is in both:
    it leaves, then joins again)."""

    join: list[Cluster] = field(default_factory=list)
    leave: list[str] = field(default_factory=list)


def plan(running: Mapping[str, Cluster], wanted: Mapping[str, Cluster]) -> Changes:
    """The joins and leaves that turn `running` into `wanted` (both by name), sorted by
    name; a cluster whose kubeconfig or version changed leaves and joins again."""
    leave = sorted(name for name, cluster in running.items() if wanted.get(name) != cluster)
    join = [wanted[name] for name in sorted(wanted) if running.get(name) != wanted[name]]
    return Changes(join, leave)


class Member:
    """One member cluster: its Api, informers and a runner per fleet controller, all
    started and stopped in its own thread (``fleet-<cluster>``). With a `fence`, every
    write of its reconciles (Events aside) is refused once the fence gives a reason."""

    RETRY_CAP = 30.0
    CREDENTIALS_CHECK = 60.0
    """Seconds between checks that the member still takes its credentials (a
    SelfSubjectReview; a 401 sets ``operator_kit_fleet_member_credentials_failing``)."""

    def __init__(self, cluster: Cluster, controllers: Sequence[Controller[Any]], *,
                 field_manager: str, may_reconcile: Callable[[], bool],
                 shutdown_timeout: float, watch_stall_timeout: float,
                 on_left: Callable[[Member], None] | None = None,
                 fence: Refusal | None = None) -> None:
        self.cluster = cluster
        self.on_left = on_left
        """Called in the member's thread once it has stopped (the fleet drops its
        metric series there, unless the cluster has rejoined meanwhile)."""
        self.fence = fence
        self.name = cluster.name
        self.controllers = list(controllers)
        self.field_manager = field_manager
        self.may_reconcile = may_reconcile
        self.shutdown_timeout = shutdown_timeout
        self.watch_stall_timeout = watch_stall_timeout
        self.stop = threading.Event()
        self.runners: list[ControllerRunner] = []
        self.informers: Informers | None = None
        self.problem: str | None = "not started yet"
        """Why the member does not run its controllers (None once they run)."""
        self.clean = True
        self.credentials_problem: str | None = None
        """Set while the member's API server refuses the kubeconfig's credentials (401)."""
        self._api: Api | None = None
        self._thread = threading.Thread(target=self._run, name=f"fleet-{self.name}",
                                        daemon=True)

    def start(self) -> None:
        """Connect and run the controllers on this cluster, in the member's thread."""
        self._thread.start()

    def running(self) -> bool:
        """True once its controllers run on the cluster (their caches may still list)."""
        return bool(self.runners) and self.problem is None

    def synced(self) -> bool:
        """True once its controllers run and every one of their caches has listed."""
        return self.running() and all(runner.synced() for runner in self.runners)

    def alive(self) -> bool:
        """Whether the member's thread still runs."""
        return self._thread.is_alive()

    def threads(self) -> list[threading.Thread]:
        """The member's own thread and its workers' and watches' (those still alive)."""
        found = [self._thread]
        found += [t for t in threading.enumerate()
                  if any(t.name.startswith(f"reconcile-{r.name}-") for r in self.runners)]
        return [t for t in found if t.is_alive()]

    def stop_soon(self) -> None:
        """Tell the member to leave: its thread closes the watches, lets the reconciles in
        flight finish (bounded by ``shutdown_timeout``), joins every thread and ends."""
        self.stop.set()
        if self.informers is not None:
            self.informers.interrupt()

    def leave(self, timeout: float | None = None) -> bool:
        """`stop_soon`, then wait for the member's thread; True when it ended in time."""
        self.stop_soon()
        if self._thread.ident is not None:
            self._thread.join(self.shutdown_timeout + 5.0 if timeout is None else timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        delay = 1.0
        while not self.stop.is_set():
            try:
                self._build()
                break
            except Exception as err:  # noqa: BLE001 - retried with backoff; logged
                self.problem = f"cannot start on cluster {self.name}: {error_message(err)}"
                log.warning("fleet: %s (kubeconfig %s); retrying in %.0fs", self.problem,
                            self.cluster.kubeconfig, delay)
                self._close()
                if self.stop.wait(delay):
                    break
                delay = min(delay * 2, self.RETRY_CAP)
        if not self.stop.is_set():
            assert self.informers is not None
            self.informers.start()
            for runner in self.runners:
                runner.start()
            self.problem = None
            log.info("fleet: cluster %s joined: running %s", self.name,
                     ", ".join(r.name for r in self.runners))
            while not self.stop.wait(self.CREDENTIALS_CHECK):
                self._check_credentials()
        self._shut_down()

    def _check_credentials(self) -> bool:
        """Whether the member's API server still takes the kubeconfig's credentials (a
        SelfSubjectReview, which any authenticated user may create): a 401 sets
        ``operator_kit_fleet_member_credentials_failing{cluster}`` and logs once, until
        they work again; any other failure (unreachable) says nothing of them."""
        api = self._api
        if api is None:
            return True
        try:
            api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                        body={"apiVersion": "authentication.k8s.io/v1",
                              "kind": "SelfSubjectReview"}, timeout=5.0)
        except ApiException as err:
            if err.status != 401:
                return True
            if self.credentials_problem is None:
                self.credentials_problem = (
                    f"the API server of cluster {self.name} refuses the credentials of "
                    f"{self.cluster.kubeconfig} (401 Unauthorized): its token was revoked, "
                    "expired or cleaned up; give the provider a new kubeconfig")
                log.error("fleet: %s", self.credentials_problem)
            metrics.FLEET_MEMBER_CREDENTIALS_FAILING.labels(self.name).set(1)
            return False
        except Exception:  # noqa: BLE001 - unreachable: the watches report that
            return True
        if self.credentials_problem is not None:
            log.info("fleet: cluster %s takes its credentials again", self.name)
        self.credentials_problem = None
        metrics.FLEET_MEMBER_CREDENTIALS_FAILING.labels(self.name).set(0)
        return True

    def _build(self) -> None:
        workers = sum(c.max_concurrent_reconciles for c in self.controllers)
        watches = sum(1 + len(c.owns) + len(c.watches) for c in self.controllers)
        self._api = api = Api(self.cluster.api_client(pool_size=max(8, workers + watches + 4)))
        if not self._check_credentials():
            raise RuntimeError(str(self.credentials_problem))
        fan_outs = [c for c in self.controllers if isinstance(c, FanOut)]
        hub = {r: a for c in fan_outs for r, a in c.hub_routes().items()}  # fanout.py
        informers = Informers(api, self.stop, stall_timeout=self.watch_stall_timeout,
                              cluster=self.name, elsewhere=hub)
        # Writes through a fence; Events, as a sharded hub's, are not fenced (one late
        # Event is harmless, and a refused one would fail the reconcile's error path).
        writer = api if self.fence is None else FencedApi(api, self.fence)
        recorder = EventRecorder(api, self.field_manager)
        objects = Objects(writer, informers, field_manager=self.field_manager)
        runners = [controller.member_runner(
            self, writer, informers=informers, objects=objects, recorder=recorder,
            field_manager=self.field_manager, may_reconcile=self.may_reconcile)
            if isinstance(controller, FanOut) else
            ControllerRunner(controller, writer, field_manager=self.field_manager,
                             recorder=recorder, stop=self.stop, informers=informers,
                             objects=objects, may_reconcile=self.may_reconcile,
                             cluster=self.name)
            for controller in self.controllers]
        self.informers, self.runners = informers, runners

    def _shut_down(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        if self.informers is not None:
            self.informers.interrupt()
        for runner in self.runners:
            self.clean &= runner.shut_down(max(0.0, deadline - time.monotonic()))
        if self.informers is not None:
            self.informers.join(deadline)
        self._close()
        self.problem = "left the fleet"
        log.info("fleet: cluster %s left: its watches and workers stopped", self.name)
        if self.on_left is not None:
            self.on_left(self)

    def _close(self) -> None:
        if self._api is not None:
            try:
                self._api.client.close()
            except Exception:
                log.debug("fleet: closing the client of %s failed", self.name, exc_info=True)
            self._api = None


class Fleet:
    """Runs fleet controllers (``Controller.fleet = True``) on every member cluster that
    `provider` names, while clusters join and leave. **Experimental** (docs/stability.md).

    Standalone: ``Fleet("my-operator", [MyController()], KubeconfigDirectory(d))`` then
    `start` and `stop`. Beside an `Operator` (whose hub leaves its fleet controllers to
    the fleet): ``Fleet.of(operator, provider).run_with(operator)``. With `shards`
    (`Fleet.of` an operator with `Sharding`) it runs only the clusters this replica holds
    (`operator_kit.fleet.sharding`).
    """

    def __init__(self, name: str, controllers: Sequence[Controller[Any]],
                 provider: ClusterProvider, *, poll_interval: float = 1.0,
                 stop: threading.Event | None = None,
                 may_reconcile: Callable[[], bool] = lambda: True,
                 shutdown_timeout: float = 30.0, watch_stall_timeout: float = 90.0,
                 shards: ClusterShards | None = None) -> None:
        experimental("operator_kit.fleet")
        names = [c.name for c in controllers]
        if len(set(names)) != len(names):
            raise ValueError(f"fleet {name}: two controllers share a name in {names}; give "
                             "one a `name`")
        self.name = name
        self.controllers = list(controllers)
        self.provider = provider
        self.poll_interval = poll_interval
        self.stopping = threading.Event()
        """Set by `stop`; the fleet also stops once `stop` (the operator's event) is set."""
        self._parent = stop
        self.may_reconcile = may_reconcile
        self.shutdown_timeout = shutdown_timeout
        self.watch_stall_timeout = watch_stall_timeout
        self.shards = shards
        self._members: dict[str, Member] = {}
        self._leaving: list[Member] = []
        self._named: frozenset[str] | None = None  # the provider's last answer
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._reported: frozenset[str] = frozenset()

    @classmethod
    def of(cls, operator: Operator, provider: ClusterProvider, **options: Any) -> Fleet:
        """The fleet of `operator`'s fleet controllers: it stops when the operator stops
        (within `poll_interval`; `Operator.stop` stops it before it releases its Leases)
        and runs them only while the operator may reconcile (leads, under leader
        election). With `Sharding`, each replica runs the clusters placed on it instead
        (`operator_kit.fleet.sharding`). Its own `stop` leaves the operator running.

        A provider with a ``bind`` method (`KubeconfigSecrets`) is bound to the
        operator's Api, one with ``bind_operator`` to its name (for Events) and its
        ``insecure_kubeconfig`` (``--insecure-kubeconfig``: what the kubeconfigs of a
        source other than the operator's files may carry), and the operator's ``fleet``
        is set to the fleet, so that its
        manifests grant what the provider reads in the hub (`HubAccess`). A `FanOut`'s
        hub side runs in the operator, its member side on each member."""
        experimental("operator_kit.fleet")
        controllers = [c for c in operator.controllers if c.fleet or isinstance(c, FanOut)]
        if not controllers:
            raise ValueError(f"operator {operator.name} has no fleet controllers: set "
                             "`fleet = True` on the controllers to run on member clusters, "
                             "or subclass operator_kit.fleet.FanOut")
        fan_outs = [c.name for c in controllers if isinstance(c, FanOut)]
        if operator.sharding is not None and fan_outs:
            raise ValueError(
                f"operator {operator.name}: FanOut {', '.join(fan_outs)} cannot run with "
                "Sharding yet: each replica would run only the clusters it holds, so a hub "
                "object's reconcile would remove the other clusters' status entries and, "
                "when the object is deleted, leave its children on them. Run it with "
                "leader election alone (one replica runs every member)")
        bind = getattr(provider, "bind", None)
        if bind is not None:  # a provider that reads the hub reads it as the operator does
            bind(lambda: operator.api)
        bind_operator = getattr(provider, "bind_operator", None)
        if bind_operator is not None:  # its Events, and --insecure-kubeconfig
            bind_operator(operator.name, lambda: operator.insecure_kubeconfig)
        if operator.sharding is not None:
            options.setdefault("shards", ClusterShards(operator, operator.sharding))
            options.setdefault("may_reconcile", _always)  # each cluster's Lease decides
        options.setdefault("may_reconcile", operator.leading)
        fleet = cls(operator.name, controllers, provider, stop=operator.stopping,
                    shutdown_timeout=operator.shutdown_timeout,
                    watch_stall_timeout=operator.watch_stall_timeout, **options)
        operator.fleet = fleet  # its manifests grant what the provider reads in the hub
        for controller in controllers:
            if isinstance(controller, FanOut):
                controller.attach(fleet, lambda: operator.api)
        return fleet

    def members(self) -> dict[str, Member]:
        """The member clusters the fleet runs now, by name."""
        with self._lock:
            return dict(self._members)

    def named_clusters(self) -> frozenset[str] | None:
        """The clusters the provider named at its last answer, whether or not they run
        here now (one may still be joining, or rejoining after its kubeconfig changed);
        None before its first answer. A cluster it no longer names has left the fleet;
        one it names but that does not run is not gone, only unreachable for now."""
        with self._lock:
            return self._named

    def leaving(self) -> list[Member]:
        """Members that were told to leave and whose threads still stop."""
        with self._lock:
            return [m for m in self._leaving if m.alive()]

    def start(self) -> None:
        """Start following the provider (thread ``fleet-<name>``)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._supervise, name=f"fleet-{self.name}",
                                        daemon=True)
        self._thread.start()

    def sync(self) -> Changes:
        """Look at the provider once: start the clusters that joined, stop those that left.
        Nothing joins before the operator may reconcile (`may_reconcile`)."""
        try:
            wanted = self.provider.clusters()
        except Exception as err:  # noqa: BLE001 - the provider is asked again next second
            self._report([f"fleet {self.name}: the cluster provider failed: "
                          f"{error_message(err)}; the members stay as they are"])
            return Changes()
        self._report(list(getattr(self.provider, "problems", ())))
        with self._lock:
            self._named = frozenset(wanted)
            running = {name: m.cluster for name, m in self._members.items()}
            leaving = {m.name for m in self._leaving if m.alive()}
        if self.shards is not None:  # only the clusters whose Lease this replica holds
            wanted = self.shards.update(wanted, running, leaving)
        changes = plan(running, wanted if self.may_reconcile() else running)
        for name in changes.leave:  # no waiting: a member stops in its own thread
            with self._lock:
                member = self._members.pop(name)
                self._leaving.append(member)
            log.info("fleet %s: cluster %s leaves", self.name, name)
            member.stop_soon()
        with self._lock:
            self._leaving = [m for m in self._leaving if m.alive()]
            leaving = {m.name for m in self._leaving}
        for cluster in changes.join:
            if self._stopped():
                break
            if cluster.name in leaving:  # the cluster's last member drains first
                continue
            may_reconcile, fence = self.may_reconcile, None
            if self.shards is not None:
                fence = self.shards.fence(cluster.name)
                may_reconcile = self.shards.may_reconcile(cluster.name)
            member = Member(cluster, self.controllers, field_manager=self.name,
                            may_reconcile=may_reconcile,
                            shutdown_timeout=self.shutdown_timeout,
                            watch_stall_timeout=self.watch_stall_timeout,
                            on_left=self._left, fence=fence)
            with self._lock:
                self._members[cluster.name] = member
            log.info("fleet %s: cluster %s joins (kubeconfig %s)", self.name, cluster.name,
                     cluster.kubeconfig)
            member.start()
        return changes

    def _left(self, member: Member) -> None:
        """A member stopped: drop its cluster's metric series — under the lock, and only
        if no member of that name has joined since (whose series they now are)."""
        with self._lock:
            if member.name not in self._members:
                metrics.forget_cluster(member.name)

    def _report(self, problems: Sequence[str]) -> None:
        """Log each problem once, one line each, while it lasts."""
        for problem in problems:
            if problem not in self._reported:
                log.error("%s", problem)
        self._reported = frozenset(problems)

    def _stopped(self) -> bool:
        return self.stopping.is_set() or (self._parent is not None and self._parent.is_set())

    def _supervise(self) -> None:
        while not self._stopped():
            self.sync()
            self.stopping.wait(self.poll_interval)
        self._leave_all()

    def _leave_all(self) -> None:
        with self._lock:
            members = list(self._members.values()) + self._leaving
            self._members, self._leaving = {}, []
        for member in members:  # all at once: each bounded by shutdown_timeout
            member.stop_soon()
        for member in members:
            if not member.leave():
                log.warning("fleet %s: cluster %s's threads did not stop within %.0fs",
                            self.name, member.name, self.shutdown_timeout + 5.0)
        if self.shards is not None:  # the members stopped: now others may take them
            self.shards.stop()
        close = getattr(self.provider, "close", None)
        if close is not None:  # a provider's own watch (KubeconfigSecrets)
            close()

    def stop(self, timeout: float | None = None) -> None:
        """Stop every member (watches, workers) and the supervisor; join their threads."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(self.shutdown_timeout + 10.0 if timeout is None else timeout)
        else:
            self._leave_all()

    def run_with(self, operator: Operator) -> int:
        """Run `operator` (its hub controllers) with this fleet until it stops; its exit
        code."""
        self.start()
        try:
            return operator.run()
        finally:
            self.stop()


def _always() -> bool:
    return True
