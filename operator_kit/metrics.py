"""Every Prometheus metric operator_kit exports, in one place.

They live in prometheus_client's default registry (the one piece of global state the
project allows) and are served on ``/metrics``. Names follow Prometheus conventions:
``_total`` counters, ``_seconds`` histograms, and labels kept to bounded sets
(controller, resource, path, outcome) so cardinality never grows with objects.

Beside operator_kit's own names, the ones controller-runtime and client-go export are
here with the same labels and meaning, so dashboards and alerts written for Go
operators (kubebuilder's Grafana dashboards, the usual alert rules) work unchanged:
``controller_runtime_reconcile_total{controller,cluster,result}`` and its siblings,
``workqueue_*{name,controller,cluster}`` (name and controller both the queue's
controller; ``workqueue_depth`` also by ``priority``), ``leader_election_master_status``,
``controller_runtime_webhook_*{webhook}``, client-go's ``rest_client_requests_total``...
`Both` updates an operator_kit metric and its controller-runtime twin together, so the
two can never disagree.

Every series of a controller, and of a watch, also has a ``cluster`` label: the fleet
member it reconciles or watches (`operator_kit.fleet`), or ``""`` (`HUB`) on the
operator's own cluster — the name multicluster-runtime gives its local cluster, and
the value Prometheus stores as no label at all, so the hub's series are stored exactly
as controller-runtime's and dashboards written for those keep working; ``sum by
(controller)`` adds the members up, ``{cluster!=""}`` picks them. `forget_cluster` drops
a member's series when it leaves.

No ``_created`` series (one per counter and histogram child, doubling what a scrape
stores for a value nothing reads; controller-runtime exports none): importing this
module turns them off (`disable_created_metrics`). `exposition` is what ``/metrics`` serves.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

disable_created_metrics()  # type: ignore[no-untyped-call]  # (untyped upstream)


def exposition() -> bytes:
    """Every metric of the default registry in Prometheus' text format, without
    ``_created`` series: the body of ``/metrics``."""
    return generate_latest(REGISTRY)


class Both:
    """Metric children updated together (an operator_kit name and its controller-runtime
    twin): ``inc``, ``dec``, ``set`` and ``observe`` go to each."""

    def __init__(self, *children: Any) -> None:
        self._children = children

    def inc(self, amount: float = 1.0) -> None:
        for child in self._children:
            child.inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        for child in self._children:
            child.dec(amount)

    def set(self, value: float) -> None:
        for child in self._children:
            child.set(value)

    def observe(self, value: float) -> None:
        for child in self._children:
            child.observe(value)

# -- controllers -----------------------------------------------------------------------
RECONCILES = Counter(
    "operator_kit_controller_reconciles",
    "Reconciles run, by controller.",
    ["controller", "cluster"],
)
RECONCILE_ERRORS = Counter(
    "operator_kit_controller_reconcile_errors",
    "Reconciles (or finalizer cleanups) that raised, by controller.",
    ["controller", "cluster"],
)
RECONCILE_DURATION = Histogram(
    "operator_kit_controller_reconcile_duration_seconds",
    "Time spent in one reconcile, by controller.",
    ["controller", "cluster"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
QUEUE_DEPTH = Gauge(
    "operator_kit_controller_queue_depth",
    "Keys waiting in a controller's work queue (ready or delayed).",
    ["controller", "cluster"],
)
RETRIES = Counter(
    "operator_kit_controller_retries",
    "Keys requeued with failure backoff after an error, by controller.",
    ["controller", "cluster"],
)
IN_FLIGHT = Gauge(
    "operator_kit_controller_reconciles_in_flight",
    "Reconciles running now, by controller.",
    ["controller", "cluster"],
)

STUCK = Gauge(
    "operator_kit_controller_stuck_reconciles",
    "Reconciles that ran past the controller's reconcile_timeout and have not returned "
    "yet: their keys were released for a retry and their writes are refused, but their "
    "threads still run (a Python thread cannot be cancelled).",
    ["controller", "cluster"],
)
RECONCILE_TRIGGERS = Counter(
    "operator_kit_controller_reconcile_triggers",
    "What queued the reconciles that ran, by controller and trigger: primary, owned, "
    "watched, requeue, retry, resync (several triggers coalesced into one reconcile each "
    "count; see operator_kit.runtime.triggers).",
    ["controller", "cluster", "trigger"],
)
MAPPER_ERRORS = Counter(
    "operator_kit_mapper_errors",
    "Calls of a Watch mapper that raised or returned something naming no primary object "
    "(its valid keys were still queued), by controller and mapper (its qualified name).",
    ["controller", "cluster", "mapper"],
)

# -- controllers, as controller-runtime names them --------------------------------------
# result: success (done, or waiting for a change), error (raised; retried with backoff),
# requeue (the framework looks again soon: a stale cache, API throttling),
# requeue_after (the reconcile returned Action.requeue(seconds)).
RESULTS = ("success", "error", "requeue", "requeue_after")
CR_RECONCILES = Counter(
    "controller_runtime_reconcile",
    "Total number of reconciliations per controller, by result.",
    ["controller", "cluster", "result"],
)
CR_RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors",
    "Total number of reconciliation errors per controller.",
    ["controller", "cluster"],
)
CR_RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics",
    "Total number of reconciliation panics per controller: reconciles that raised "
    "something other than an API error (logged with a traceback).",
    ["controller", "cluster"],
)
CR_RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller.",
    ["controller", "cluster"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6,
             0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9,
             10, 15, 20, 25, 30, 40, 50, 60),
)
CR_RECONCILE_TIMEOUTS = Counter(
    "controller_runtime_reconcile_timeouts",
    "Total number of reconciliation timeouts per controller: reconciles that ran past "
    "reconcile_timeout (each also counts as an error).",
    ["controller", "cluster"],
)
CR_ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller.",
    ["controller", "cluster"],
)
CR_MAX_CONCURRENT = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller.",
    ["controller", "cluster"],
)


HUB = ""
"""The ``cluster`` label of the series of the operator's own cluster (not a fleet member)."""


def init_controller(controller: str, max_concurrent_reconciles: int,
                    cluster: str = HUB) -> None:
    """Give a controller's series their value before its first reconcile, as
    controller-runtime does: zero for each result, errors and panics (so ``rate()`` and
    alerts see them from the start), and its maximum of concurrent reconciles."""
    for result in RESULTS:
        CR_RECONCILES.labels(controller, cluster, result)
    CR_RECONCILE_ERRORS.labels(controller, cluster)
    CR_RECONCILE_PANICS.labels(controller, cluster)
    CR_RECONCILE_TIMEOUTS.labels(controller, cluster)
    CR_ACTIVE_WORKERS.labels(controller, cluster)
    CR_MAX_CONCURRENT.labels(controller, cluster).set(max_concurrent_reconciles)
    WORKQUEUE_RETRIES.labels(controller, controller, cluster)


def forget_cluster(cluster: str) -> None:
    """Drop every series of fleet member `cluster` (it left the fleet): a cluster that
    comes back starts from zero, and one gone for good leaves nothing behind. The
    ``workqueue_depth`` gauges and their siblings are read from the live queues, so they
    go with the member's queues, and the watch-failing ones with its informers."""
    if cluster == HUB:
        raise ValueError("forget_cluster: the hub's series stay (give a member's name)")
    for family in (RECONCILES, RECONCILE_ERRORS, RECONCILE_DURATION, QUEUE_DEPTH, RETRIES,
                   IN_FLIGHT, STUCK, RECONCILE_TRIGGERS, MAPPER_ERRORS, CR_RECONCILES,
                   CR_RECONCILE_ERRORS, CR_RECONCILE_PANICS, CR_RECONCILE_TIME,
                   CR_RECONCILE_TIMEOUTS, CR_ACTIVE_WORKERS, CR_MAX_CONCURRENT,
                   WORKQUEUE_ADDS, WORKQUEUE_QUEUE_DURATION, WORKQUEUE_WORK_DURATION,
                   WORKQUEUE_RETRIES, FLOW_ERRORS, WATCH_RESTARTS, CACHE_OBJECTS,
                   FLEET_MEMBER_CREDENTIALS_FAILING):
        family.remove_by_labels({"cluster": cluster})


# -- work queues, as controller-runtime labels them (name and controller: the controller) --
_QUEUE_BUCKETS = tuple(float(f"1e{e}") for e in range(-8, 2))  # 10ns .. 10s, as client-go
WORKQUEUE_ADDS = Counter(
    "workqueue_adds",
    "Total number of adds handled by workqueue (a key already waiting is not added again).",
    ["name", "controller", "cluster"],
)
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested "
    "(from when it is due, for a delayed key).",
    ["name", "controller", "cluster"],
    buckets=_QUEUE_BUCKETS,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ["name", "controller", "cluster"],
    buckets=_QUEUE_BUCKETS,
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries",
    "Total number of retries handled by workqueue (failure backoff, throttling).",
    ["name", "controller", "cluster"],
)


class QueueStats(Protocol):
    """What a work queue tells the gauges below when they are scraped."""

    name: str
    controller: str
    cluster: str

    def stats(self) -> tuple[dict[int, int], float, float] | None:
        """(ready keys by priority, seconds of work in progress, longest running
        seconds), or None once the queue is shut down."""


class _QueueGauges(Collector):
    """``workqueue_depth``, ``..._unfinished_work_seconds`` and
    ``..._longest_running_processor_seconds``, read from the live queues at scrape time
    (summed per name; the longest is the maximum), so they are never stale. The depth is
    by priority too: always the two the framework gives (0 and -100), and any other that
    has keys ready."""

    ALWAYS = (0, -100)  # queueing.NORMAL_PRIORITY, queueing.LOW_PRIORITY (a leaf: no import)

    def __init__(self) -> None:
        self._queues: weakref.WeakSet[QueueStats] = weakref.WeakSet()
        self._lock = threading.Lock()

    def track(self, queue: QueueStats) -> None:
        with self._lock:
            self._queues.add(queue)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["name", "controller", "cluster"]
        depth = GaugeMetricFamily(
            "workqueue_depth", "Current depth of workqueue by workqueue and priority: keys "
            "ready to be processed (not those waiting out a delay or a backoff).",
            labels=[*labels, "priority"])
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds", "How many seconds of work has been done "
            "that is in progress and hasn't been observed by work_duration. Large values "
            "indicate stuck threads.", labels=labels)
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds", "How many seconds has the "
            "longest running processor for workqueue been running.", labels=labels)
        totals: dict[tuple[str, str, str], tuple[dict[int, int], list[float]]] = {}
        with self._lock:
            queues = list(self._queues)
        for queue in queues:
            stats = queue.stats()
            if stats is None:
                continue
            ready, times = totals.setdefault((queue.name, queue.controller, queue.cluster),
                                             ({p: 0 for p in self.ALWAYS}, [0.0, 0.0]))
            for priority, count in stats[0].items():
                ready[priority] = ready.get(priority, 0) + count
            times[0] += stats[1]
            times[1] = max(times[1], stats[2])
        for (name, controller, cluster), (ready, (work, longest_seconds)) in sorted(
                totals.items()):
            for priority, count in sorted(ready.items(), reverse=True):
                depth.add_metric([name, controller, cluster, str(priority)], count)
            unfinished.add_metric([name, controller, cluster], work)
            longest.add_metric([name, controller, cluster], longest_seconds)
        yield depth
        yield unfinished
        yield longest


WORKQUEUE_GAUGES = _QueueGauges()
REGISTRY.register(WORKQUEUE_GAUGES)

# -- fairness between flows (operator_kit.runtime.fairness) ------------------------------
FLOW_ERRORS = Counter(
    "operator_kit_workqueue_flow_errors",
    "Keys whose fairness flow function raised or returned something other than a str "
    "(each was queued in the default flow), by controller.",
    ["controller", "cluster"],
)


class FlowStats(Protocol):
    """What a fair work queue tells the gauges below when they are scraped."""

    controller: str
    cluster: str

    def flow_stats(self) -> dict[str, tuple[int, float]] | None:
        """Each flow with ready keys: (its ready keys, seconds the oldest of them has
        waited); None once the queue is shut down."""


class _FlowGauges(Collector):
    """``operator_kit_workqueue_flows{controller,cluster}`` (flows with keys ready) and,
    by ``flow``, ``operator_kit_workqueue_flow_depth`` (ready keys) and
    ``operator_kit_workqueue_flow_oldest_seconds`` (how long its oldest ready key has
    waited: a starving flow's grows), read from the live queues at scrape time.

    Bounded however many flows (namespaces) there are: the `TOP` deepest flows and the
    `TOP` longest waiting are named, the rest summed (depth) or their longest (oldest)
    in ``flow="(other)"`` -- at most ``2 * TOP + 1`` series of each per controller. The
    default flow (cluster-scoped objects, failed flow functions) is ``flow="(default)"``;
    flow names are cut to `LONGEST` characters."""

    TOP = 10
    OTHER = "(other)"
    DEFAULT = "(default)"
    LONGEST = 100

    def __init__(self) -> None:
        self._queues: weakref.WeakSet[FlowStats] = weakref.WeakSet()
        self._lock = threading.Lock()

    def track(self, queue: FlowStats) -> None:
        with self._lock:
            self._queues.add(queue)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["controller", "cluster"]
        active = GaugeMetricFamily(
            "operator_kit_workqueue_flows", "Flows (namespaces, or what the controller's "
            "fairness names) with keys ready in the work queue.", labels=labels)
        depth = GaugeMetricFamily(
            "operator_kit_workqueue_flow_depth", "Keys ready in the work queue by flow: the "
            "deepest and the longest waiting flows by name, the rest as (other).",
            labels=[*labels, "flow"])
        oldest = GaugeMetricFamily(
            "operator_kit_workqueue_flow_oldest_seconds", "Seconds the oldest ready key of "
            "the flow has waited: the deepest and the longest waiting flows by name, the "
            "longest of the rest as (other).", labels=[*labels, "flow"])
        with self._lock:
            queues = list(self._queues)
        totals: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
        for queue in queues:
            stats = queue.flow_stats()
            if stats is None:
                continue
            flows = totals.setdefault((queue.controller, queue.cluster), {})
            for flow, (count, seconds) in stats.items():
                name = (flow or self.DEFAULT)[:self.LONGEST]
                was = flows.get(name, (0, 0.0))
                flows[name] = (was[0] + count, max(was[1], seconds))
        for (controller, cluster), flows in sorted(totals.items()):
            active.add_metric([controller, cluster], len(flows))
            for name, (count, seconds) in self.top(flows).items():
                depth.add_metric([controller, cluster, name], count)
                oldest.add_metric([controller, cluster, name], seconds)
        yield active
        yield depth
        yield oldest

    @classmethod
    def top(cls, flows: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
        """The `TOP` deepest and `TOP` longest waiting of `flows` by name, the rest as
        `OTHER` (their keys summed, their longest wait); `OTHER` only when there is a rest."""
        if len(flows) <= 2 * cls.TOP:
            return dict(flows)
        named = set(heapq.nlargest(cls.TOP, flows, key=lambda f: flows[f][0]))
        named.update(heapq.nlargest(cls.TOP, flows, key=lambda f: flows[f][1]))
        shown = {name: flows[name] for name in named}
        rest = [flows[name] for name in flows if name not in named]
        shown[cls.OTHER] = (sum(count for count, _ in rest), max(s for _, s in rest))
        return shown


WORKQUEUE_FLOW_GAUGES = _FlowGauges()
REGISTRY.register(WORKQUEUE_FLOW_GAUGES)

# -- watches ---------------------------------------------------------------------------
WATCH_RESTARTS = Counter(
    "operator_kit_watch_restarts",
    "Watches restarted, by resource and reason (expired, stalled, error, closed, relist).",
    ["resource", "cluster", "reason"],
)
CACHE_OBJECTS = Gauge(
    "operator_kit_cache_objects",
    "Objects held in a watch's cache, by resource.",
    ["resource", "cluster"],
)

class WatchHealth(Protocol):
    """What a watch tells the gauges below when they are scraped."""

    metric_resource: str
    metric_cluster: str

    def failing_for(self) -> float | None:
        """Seconds its list or watch has been failing (0.0 when healthy), or None when it
        does not run (not started, or stopped)."""


class _WatchGauges(Collector):
    """``operator_kit_watch_failing{resource,cluster}`` (1 while a watch of the resource
    cannot list or watch) and ``operator_kit_watch_failing_seconds{resource,cluster}``
    (for how long: the longest of its watches), read from the live informers at scrape
    time: a fleet member's watches apart from the hub's."""

    def __init__(self) -> None:
        self._watches: weakref.WeakSet[WatchHealth] = weakref.WeakSet()
        self._lock = threading.Lock()

    def track(self, watch: WatchHealth) -> None:
        with self._lock:
            self._watches.add(watch)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        failing = GaugeMetricFamily(
            "operator_kit_watch_failing", "1 while a watch of the resource fails to list "
            "or watch (its changes are missed until it works again), else 0.",
            labels=["resource", "cluster"])
        seconds = GaugeMetricFamily(
            "operator_kit_watch_failing_seconds", "Seconds the longest-failing watch of the "
            "resource has failed to list or watch (0 when all work).",
            labels=["resource", "cluster"])
        longest: dict[tuple[str, str], float] = {}
        with self._lock:
            watches = list(self._watches)
        for watch in watches:
            failing_for = watch.failing_for()
            if failing_for is not None:
                name = (watch.metric_resource, watch.metric_cluster)
                longest[name] = max(longest.get(name, 0.0), failing_for)
        for name, value in sorted(longest.items()):
            failing.add_metric(list(name), 1.0 if value > 0 else 0.0)
            seconds.add_metric(list(name), value)
        yield failing
        yield seconds


WATCH_GAUGES = _WatchGauges()
REGISTRY.register(WATCH_GAUGES)

# -- leader election -------------------------------------------------------------------
LEADER = Gauge(
    "operator_kit_leader",
    "1 while this replica holds the operator's Lease, else 0.",
    ["operator"],
)
LEADER_MASTER = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
    "backup, 1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
)

# -- sharding (operator_kit.election) --------------------------------------------------
SHARD_MEMBER = Gauge(
    "operator_kit_shard_member",
    "1 while this replica holds its member Lease (sharding), else 0.",
    ["operator"],
)
SHARD_MEMBERS = Gauge(
    "operator_kit_shard_members",
    "Alive members, as the sharder (on the leader) sees them.",
    ["operator"],
)
SHARD_OBJECTS = Gauge(
    "operator_kit_shard_objects",
    "Objects of the sharded kinds assigned to each member, as the sharder sees them.",
    ["operator", "member"],
)
SHARD_MOVES = Counter(
    "operator_kit_shard_moves_total",
    "Objects the sharder gave to a member other than the one they were assigned to.",
    ["operator"],
)
SHARD_DRAINS = Counter(
    "operator_kit_shard_drains_total",
    "Objects this member let go of when the sharder asked (the drain handshake).",
    ["operator"],
)
SHARD_MODE = Gauge(
    "operator_kit_shard_mode",
    "1 for the sharding mode this member runs: server (the API server filters each "
    "member's share by hash range) or labels (the sharder labels every object).",
    ["operator", "mode"],
)
SHARD_SLOTS = Gauge(
    "operator_kit_shard_slots",
    "Hash-space slots this member serves in server mode (of 64; its share is slots/64).",
    ["operator"],
)

# -- fleets (operator_kit.fleet) -------------------------------------------------------
FLEET_KUBECONFIGS_REFUSED = Gauge(
    "operator_kit_fleet_kubeconfigs_refused",
    "Kubeconfigs the fleet's provider refuses now (their clusters do not join), by what "
    "they carry: exec, auth-provider, files, proxy, insecure-tls; invalid: not a usable "
    "kubeconfig. One that carries several counts under each.",
    ["provider", "reason"],
)
FLEET_MEMBER_CREDENTIALS_FAILING = Gauge(
    "operator_kit_fleet_member_credentials_failing",
    "1 while a fleet member's API server refuses its kubeconfig's credentials (401), "
    "else 0.",
    ["cluster"],
)

# -- webhooks --------------------------------------------------------------------------
WEBHOOK_REQUESTS = Counter(
    "operator_kit_webhook_requests",
    "Webhook requests by path and outcome (allowed, denied, patched, converted, "
    "bad_request, error).",
    ["path", "outcome"],
)
CR_WEBHOOK_REQUESTS = Counter(
    "controller_runtime_webhook_requests",
    "Total number of admission requests by HTTP status code.",
    ["webhook", "code"],
)
CR_WEBHOOK_LATENCY = Histogram(
    "controller_runtime_webhook_latency_seconds",
    "Histogram of the latency of processing admission requests.",
    ["webhook"],
)
CR_WEBHOOK_IN_FLIGHT = Gauge(
    "controller_runtime_webhook_requests_in_flight",
    "Current number of admission requests being served.",
    ["webhook"],
)
WEBHOOK_READ_TIMEOUTS = Counter(
    "operator_kit_webhook_read_timeouts",
    "Connections closed because nothing complete arrived within OPERATOR_KIT_READ_TIMEOUT, "
    "by stage: connecting (TLS handshake), idle (no request began), request (partway).",
    ["stage"],
)
WEBHOOK_WRITE_TIMEOUTS = Counter(
    "operator_kit_webhook_write_timeouts",
    "Connections closed because their answer was not taken within "
    "OPERATOR_KIT_WRITE_TIMEOUT (a client that does not read).",
)
WEBHOOK_DURATION = Histogram(
    "operator_kit_webhook_duration_seconds",
    "Time to answer one webhook request, by path.",
    ["path"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

# -- API server requests (client-go's names, so its dashboards and alerts work) ---------
REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests",
    "Number of HTTP requests to the API server, partitioned by status code, method, and "
    "host (code is <error> when no answer came).",
    ["code", "method", "host"],
)
REST_CLIENT_REQUEST_RETRIES = Counter(
    "rest_client_request_retries",
    "Number of request retries, partitioned by status code, verb, and host (each attempt "
    "after the first, after a 429 or 5xx with Retry-After; code is that attempt's).",
    ["code", "verb", "host"],
)
REST_CLIENT_REQUEST_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds (to the response headers for a watch), broken down by "
    "verb and host.",
    ["verb", "host"],
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0),
)
