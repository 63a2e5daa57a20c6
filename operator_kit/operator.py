"""The Operator: runs controllers (under a Lease, when asked), serves probes, stops cleanly.

`Operator(name, controllers)` owns one API connection, one informer per watched kind
(controllers that watch the same kind with the same selectors share its cache, which
``ctx.get``/``ctx.list`` read too), one runner per controller, and the stop event every
thread watches. `start()` first checks that the API server serves every kind the
controllers own, watch or index, and says which one it does not. `run()` blocks until
SIGTERM or SIGINT, then stops: watches close, workers take no new keys, reconciles in
flight finish (bounded by ``shutdown_timeout``), threads are joined.

Under gunicorn (``OPERATOR_KIT_APP=module:operator gunicorn operator_kit.webhooks:app``)
the same controllers run in the worker process next to the webhooks, via
`serve_in_background()`; ``/livez``, ``/readyz`` and ``/metrics`` are on `app`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kubernetes import client

from operator_kit.api.kinds import Kind
from operator_kit.api.rbac import Rule, merge_rules
from operator_kit.api.resources import CustomResource
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api, api_client, current_namespace
from operator_kit.election import leader, range_keeper, sharder, sharding
from operator_kit.election.leader import LeaderElection, LeaderElector
from operator_kit.election.member import ShardMember
from operator_kit.election.sharder import Members, Membership, Sharder
from operator_kit.election.sharding import Sharding
from operator_kit.runtime.controller import Controller
from operator_kit.runtime.objects import Objects
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.scope import ShardScope
from operator_kit.runtime.transforms import Transform, drop_managed_fields
from operator_kit.runtime.watching import Informers
from operator_kit.serving import WebhookServing

if TYPE_CHECKING:
    from operator_kit.fleet.supervisor import Fleet
    from operator_kit.webhooks.certificates import ExternalCertificate
    from operator_kit.webhooks.server import Webhooks

log = logging.getLogger("operator_kit.operator")


class Operator(WebhookServing, ShardMember):
    """A named set of controllers that run together in one process."""

    def __init__(
        self,
        name: str,
        controllers: Sequence[Controller[Any]] = (),
        *,
        leader_election: LeaderElection | None = None,
        namespace: str | None = None,
        kubeconfig: str | None = None,
        shutdown_timeout: float = 30.0,
        watch_stall_timeout: float = 90.0,
        exit_on_lost_lease: bool = True,
        webhook_certificate: ExternalCertificate | None = None,
        sharding: Sharding | None = None,
        streaming_lists: bool | None = None,
        default_transform: Transform | None = drop_managed_fields,
    ) -> None:
        if sharding is not None and leader_election is None:
            raise ValueError("Operator sharding needs leader_election too: the elected "
                             "replica assigns the objects to members; pass "
                             "leader_election=LeaderElection()")
        self.name = name
        # None: the replicas keep their own certificate (operator_kit.webhooks.certkeeper).
        self.webhook_certificate = webhook_certificate
        self.leader_election = leader_election
        self.sharding = sharding
        self._membership: Membership | None = None
        self._sharder: Sharder | None = None
        self._members: Members | None = None
        self._ranges: range_keeper.RangeKeeper | None = None  # server mode's
        self.sharding_mode: str | None = None
        """``"server"`` or ``"labels"`` once a sharded operator started (`Sharding.mode`)."""
        self._namespace = namespace
        self.exit_on_lost_lease = exit_on_lost_lease
        self.lost_lease = False
        self._elector: LeaderElector | None = None
        self._elector_stop = threading.Event()
        self._elector_thread: threading.Thread | None = None
        self.controllers: list[Controller[Any]] = []
        self.fleet: Fleet | None = None
        """The fleet that runs its fleet controllers, set by `Fleet.of`: it starts and
        stops with the operator, and the manifests grant what its provider reads."""
        self.kubeconfig = kubeconfig
        self.insecure_kubeconfig: frozenset[str] = frozenset()
        """What a kubeconfig from a source other than the operator's own files (a fleet
        provider's Secret) may carry beyond the safe fields: categories of
        `operator_kit.client.kubeconfig_risks.RISKS`, set by ``--insecure-kubeconfig``."""
        self.shutdown_timeout = shutdown_timeout
        self.watch_stall_timeout = watch_stall_timeout
        self.streaming_lists = streaming_lists  # None: OPERATOR_KIT_STREAMING_LISTS, default on
        self.default_transform = default_transform
        self.stopping = threading.Event()
        self._api: Api | None = None
        self._informers: Informers | None = None
        self._runners: list[ControllerRunner] = []
        self._standby: list[ControllerRunner] = []  # made while following: warm_standby
        self._started = False
        self._lock = threading.Lock()
        self._webhooks: Webhooks | None = None
        self._reported_dead: list[str] = []
        self._tls_keeper: Any = None  # a certkeeper.CertificateKeeper once serving webhooks
        # Objects of its manifests it refers to by name at run time. A kustomize namePrefix
        # renames them, and the Deployment's environment then says the new names
        # (`operator_kit.cli.apply_environment`). The Lease and the certificate Secret,
        # which it creates itself, keep their names (both live in its namespace).
        self.webhook_service = name
        self.validating_configuration = name
        self.mutating_configuration = name
        for controller in controllers:
            self.add(controller)

    # -- declaring -------------------------------------------------------------------------

    def add(self, controller: Controller[Any]) -> Controller[Any]:
        """Add a controller before the operator starts, and return it; names must be unique."""
        if self._started:
            raise RuntimeError("add controllers before the operator starts")
        if any(c.name == controller.name for c in self.controllers):
            raise ValueError(f"two controllers named {controller.name!r}; give one a `name`")
        self.controllers.append(controller)
        return controller

    def custom_kinds(self) -> list[type[CustomResource]]:
        """The storage version of every custom kind the operator watches or serves, once
        each (the CRDs its manifests hold)."""
        seen: dict[str, type[CustomResource]] = {}
        candidates = [c.primary_kind().defined_resource for c in self.controllers]
        candidates += [r.kind for r in self.webhook_registrations() if r.kind is not None]
        for controller in self.controllers:
            candidates += [kind.defined_resource for kind in (
                *controller.owned_kinds(), *controller.watched_kinds())]
        for candidate in candidates:
            if candidate is None or candidate.external:
                continue  # not the operator's own kind: its CRD is someone else's
            storage = candidate.storage_version()
            name = f"{storage.plural}.{storage.group}"
            other = seen.setdefault(name, storage)
            if other.versions()[0] is not storage.versions()[0]:
                raise TypeError(
                    f"{other.versions()[0].__name__} and {storage.versions()[0].__name__} have "
                    f"the same plural {storage.plural!r} in {storage.group}, so one CRD {name!r}; "
                    'give one of them another plural (plural = "...")'
                )
        return [seen[name] for name in sorted(seen)]

    def rules(self, *, external_certificate: bool | None = None) -> list[Rule]:
        """Every RBAC rule this operator needs in its own cluster (the hub), merged per
        API group and resource. Fleet controllers (``fleet = True``) run on the member
        clusters, so their rules are not here but in ``--fleet-member``'s documents.

        `external_certificate` (default: whether `webhook_certificate` is set): the
        webhook certificate is a mounted Secret, so no Secret or caBundle is written."""
        rules: list[Rule] = []
        for controller in self.controllers:
            if not controller.fleet:
                rules.extend(controller.required_rules())
        if self.leader_election is not None:
            rules += leader.rules(self.leader_election.lease_name or self.name)
        if self.sharding is not None:
            rules += sharding.rules()  # patch, list and watch on the kinds: derived above,
            for controller in self.controllers:  # but for a kind it does not define
                primary = controller.primary_kind()
                if self.sharding.shards(controller.name) and not controller.fleet:
                    rules.append(Rule([primary.group], [primary.resource_name], ["patch"]))
        if external_certificate is None:
            external_certificate = self.webhook_certificate is not None
        rules.extend(self._webhook_rules(external_certificate))
        return merge_rules(rules)

    @property
    def namespace(self) -> str:
        """The namespace this operator runs in (its Lease lives there)."""
        if self._namespace is None:
            self._namespace = current_namespace(self.kubeconfig)
        return self._namespace

    @namespace.setter
    def namespace(self, value: str) -> None:
        self._namespace = value

    @property
    def elector(self) -> LeaderElector | None:
        """The running `LeaderElector` (None without leader election or before `start`)."""
        return self._elector

    @property
    def api(self) -> Api:
        """The operator's API client: from `use`, else made from the kubeconfig on first use (its
        connection pool sized for every worker and watch)."""
        if self._api is None:
            # One connection per worker and per watch, and a few for everything else.
            workers = sum(c.max_concurrent_reconciles for c in self.controllers)
            watches = sum(1 + len(c.owns) + len(c.watches) for c in self.controllers)
            pool = max(8, workers + watches + 4)
            if self.sharding is not None:  # the member Lease, its watch, the sharder's patches
                pool += 20
            self._api = Api(api_client(self.kubeconfig, pool_size=pool))
        return self._api

    def use(self, api_client_: client.ApiClient) -> None:
        """Run against this ApiClient instead of the kubeconfig (tests, embedding)."""
        self._api = Api(api_client_)

    # -- probes --------------------------------------------------------------------------

    def ready(self) -> bool:
        """Ready once every controller runs with synced caches, or while following a leader."""
        if self.stopping.is_set():
            return False
        if self._tls_keeper is not None and not self._tls_keeper.ready():
            return False
        from operator_kit.webhooks.tls import serving_problem  # the pair gunicorn serves

        if serving_problem() is not None:
            return False
        if self._membership is not None:  # a member: its Lease held, its caches synced
            return (self._membership.may_reconcile() and self._started
                    and all(runner.synced() for runner in self._runners))
        if self._started:
            return all(runner.synced() for runner in self._runners)
        elector = self._elector
        return elector is not None and elector.holder not in (None, elector.identity)

    def leading(self) -> bool:
        """True while this replica may reconcile (always, without leader election)."""
        return self._elector.may_reconcile() if self._elector else self._started

    def live(self) -> bool:
        """Alive while not stopping, or while stopping within the shutdown bound — and
        only while every worker and watch thread runs: one that died anyway (an
        exception no handler may catch, such as SystemExit in a reconcile) fails
        ``/livez``, so Kubernetes restarts the pod, and the log says which."""
        if self.stopping.is_set():
            return self._started
        dead = self.dead_threads()
        if dead and dead != self._reported_dead:
            log.critical("operator %s: thread(s) %s ended unexpectedly (see the error "
                         "above); reporting not alive so the pod is restarted", self.name,
                         ", ".join(dead))
        self._reported_dead = dead
        return not dead

    def dead_threads(self) -> list[str]:
        """Names of worker, watch and sharder threads that ended while the operator runs."""
        if not self._started or self.stopping.is_set():
            return []
        dead = [name for runner in self._runners for name in runner.dead_threads()]
        if self._informers is not None:
            dead += [f"watch-{i.resource.plural}" for i in self._informers.values()
                     if i.started and not i.alive()]
        if self._sharder is not None and not self._sharder.alive_thread():
            dead.append(f"sharder-{self.name}")
        if self._ranges is not None and not self._ranges.alive_thread():
            dead.append(f"ranges-{self.name}")
        return dead

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the controllers — at once, or once this replica holds the Lease."""
        if not self.controllers:
            raise RuntimeError(f"operator {self.name} has no controllers to run")
        foreign = getattr(self._tls_keeper, "foreign", None)
        if foreign:  # one installation per cluster (operator_kit.client.installation)
            log.error("operator %s: not starting the controllers: %s; restart this replica "
                      "once that is fixed", self.name, foreign)
            return
        self.check_kinds()
        if self.fleet is not None:  # members join only while this replica may reconcile
            self.fleet.start()
        if self.leader_election is None:
            self._start_controllers()
            return
        if self._elector is not None:
            return
        if self.sharding is not None:
            self._start_membership(self.sharding)
        config = self.leader_election
        self._elector = LeaderElector(
            self.api, config, namespace=config.namespace or self.namespace,
            name=config.lease_name or self.name, operator=self.name,
            on_started_leading=self._start_controllers,
            on_stopped_leading=self._lost_lease)
        log.info("operator %s: waiting to lead (lease %s/%s, identity %s)", self.name,
                 self._elector.namespace, self._elector.lease_name, self._elector.identity)
        if config.warm_standby:
            self._warm_up(self._elector.may_reconcile)
        self._elector_thread = self._elector.start(self._elector_stop)

    def check_kinds(self) -> None:
        """Raise a LookupError naming the controller and the kind when the API server
        does not serve a kind some controller reconciles (one it does not define), owns,
        watches or indexes."""
        objects = Objects(self.api)
        for controller in (c for c in self.controllers if not c.fleet):  # hub's only
            # Custom kinds too: a CRD that is not installed is named here, not later.
            primary = controller.primary_kind()  # another party's: it must be served now
            declared = [] if primary.defined_here else [("resource", primary)]
            declared += [("owns", k) for k in controller.owned_kinds()]
            declared += [("watches", k) for k in controller.watched_kinds()]
            declared += [("indexes", Kind.of(i.kind)) for i in controller.indexes.values()]
            if controller is self.controllers[0]:  # webhooks on another party's kinds
                declared += [("webhook " + r.path, r.target) for r in self.webhook_registrations()
                             if r.target is not None and not r.target.defined_here]
            for where, kind in declared:
                try:
                    objects.resource(kind.api_version + "/" + kind.kind)
                except LookupError as err:
                    raise LookupError(f"controller {controller.name}: {where}: {err}") from None

    def _lost_lease(self) -> None:
        """Fencing: a leader that could not renew in time stops at once and exits."""
        self.lost_lease = True
        self.stopping.set()
        if self._informers is not None:
            self._informers.interrupt()
        if self.exit_on_lost_lease:
            log.critical("operator %s lost its lease: exiting now so no reconcile can run "
                         "after another replica takes over", self.name)
            logging.shutdown()
            os._exit(1)
        log.critical("operator %s lost its lease: stopped reconciling", self.name)

    def _leader_controllers(self) -> list[Controller[Any]]:
        """The controllers the leader runs (or the only replica): all but the sharded and
        the fleet's (those run on the member clusters: operator_kit.fleet)."""
        config = self.sharding
        return [c for c in self.controllers
                if not c.fleet and (config is None or not config.shards(c.name))]

    def _warm_up(self, may_reconcile: Any) -> None:
        """Following, with `LeaderElection.warm_standby`: make the leader's runners now and
        start their informers, so their caches are synced before this replica leads. No
        handler is added and no worker runs until then: nothing is queued or written."""
        with self._lock:
            if self.stopping.is_set() or not self._leader_controllers():
                return  # every controller sharded: members only, nothing to warm up
            self._standby = self._make_runners(self._leader_controllers(), may_reconcile)
            self.informers.start()
        log.info("operator %s: warm standby: watching the kinds of %d controller(s) while "
                 "following, so that it reconciles at once when it leads", self.name,
                 len(self._standby))

    def _start_controllers(self) -> None:
        """On the leader (or alone): the controllers that are not sharded, and the sharder."""
        config = self.sharding
        may_reconcile = self._elector.may_reconcile if self._elector else _always
        self._run_controllers(self._leader_controllers(), may_reconcile)
        if config is not None and self.sharding_mode == "labels":
            self._start_sharder()  # (a server-mode member that falls back starts it then)

    def _make_runners(self, controllers: Sequence[Controller[Any]], may_reconcile: Any,
                      shard: ShardScope | None = None) -> list[ControllerRunner]:
        """A runner per controller on the shared informers, made but not started."""
        recorder = EventRecorder(self.api, self.name)
        # A member's reconciles write through a fence: none lands after its Lease lapsed.
        api = sharder.FencedApi(self.api, may_reconcile) if shard else self.api
        objects = Objects(api, self.informers, field_manager=self.name,
                          shard_selector=shard.selector() if shard else None)
        return [ControllerRunner(
            controller, api, field_manager=self.name, recorder=recorder,
            stop=self.stopping, informers=self.informers, objects=objects,
            may_reconcile=may_reconcile, shard=shard) for controller in controllers]

    def _run_controllers(self, controllers: Sequence[Controller[Any]],
                         may_reconcile: Any, shard: ShardScope | None = None) -> None:
        with self._lock:
            if self.stopping.is_set():
                return
            # The warm standby's runners: their caches listed while it followed, and
            # adding the handlers queues every cached key at low priority (from_list).
            warm = shard is None and bool(self._standby)
            runners = self._standby if warm else self._make_runners(controllers,
                                                                    may_reconcile, shard)
            if warm:
                self._standby = []
            self.informers.start()
            for runner in runners:
                runner.start()
            self._runners += runners
            self._started = True
        log.info("operator %s started %d controller(s)%s%s: %s", self.name, len(runners),
                 f" as shard member {shard.identity}" if shard else "",
                 " with warm caches" if warm else "", ", ".join(r.name for r in runners))

    @property
    def informers(self) -> Informers:
        """The operator's informers: the caches its controllers (and reads) share."""
        if self._informers is None:
            self._informers = self._new_informers(self.stopping)
        return self._informers

    def _new_informers(self, stop: threading.Event) -> Informers:
        return Informers(self.api, stop, stall_timeout=self.watch_stall_timeout,
                         streaming=self.streaming_lists, default_transform=self.default_transform)

    def wait_synced(self, timeout: float) -> bool:
        """Wait until every controller's caches have listed (`ready`); False after `timeout`
        seconds."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, timeout: float | None = None) -> bool:
        """Stop watching, let reconciles in flight finish (bounded), join every thread.

        True when every in-flight reconcile finished within the bound."""
        bound = self.shutdown_timeout if timeout is None else timeout
        self.stopping.set()
        if self._informers is not None:
            self._informers.interrupt()
        deadline = time.monotonic() + bound
        clean = True
        for runner in self._runners:
            clean &= runner.shut_down(max(0.0, deadline - time.monotonic()))
        if self._informers is not None:
            self._informers.join(deadline)
        if self._sharder is not None:
            self._sharder.join(max(0.1, deadline - time.monotonic()))
        if not clean:
            log.warning("operator %s: reconciles still running after %.0fs; exiting anyway",
                        self.name, bound)
        if self.fleet is not None:  # its members stop too, before the Leases go: no
            self.fleet.stop(max(1.0, deadline - time.monotonic()))  # overlap on a cluster
        # Release the Lease only now that no reconcile of ours can still be writing, so
        # the follower that takes over at once never overlaps with us.
        self._elector_stop.set()
        if self._elector_thread is not None:
            self._elector_thread.join(max(1.0, deadline - time.monotonic()))
        if self._ranges is not None:  # server mode: its generation's informers end
            self._ranges.stop(max(0.1, deadline - time.monotonic()))
        if self._membership is not None:  # likewise: its objects go to others at once
            self._membership.stop(deadline)
        log.info("operator %s stopped", self.name)
        return clean

    def serve_in_background(self) -> None:
        """Start the controllers without blocking (used in the gunicorn worker)."""
        from operator_kit.cli import apply_environment

        apply_environment(self)  # OPERATOR_KIT_NAMESPACE, OPERATOR_KIT_WATCH_NAMESPACE
        self.start()

    def main(self, argv: list[str] | None = None) -> int:
        """The operator's command line (`operator_kit.cli`): flags, probes, metrics, logs;
        ``--manifests [...]`` prints the manifests. Returns the exit code."""
        from operator_kit.cli import main

        return main(self, argv)

    def run(self) -> int:
        """Run until SIGTERM or SIGINT; then stop cleanly. Returns the exit code."""
        received: list[int] = []

        def on_signal(signum: int, _frame: Any) -> None:
            received.append(signum)
            self.stopping.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not self.stopping.wait(1.0):
                pass
            if received:
                log.info("operator %s: received %s, stopping", self.name,
                         signal.Signals(received[0]).name)
            clean = self.stop()
            return 1 if self.lost_lease or not clean else 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _always() -> bool:
    return True
