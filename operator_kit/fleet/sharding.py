"""Sharding a fleet: its member clusters spread over the operator's replicas.

With ``Operator(..., sharding=Sharding())`` every replica is a shard member (a member
Lease of its own, `operator_kit.election.sharder.Membership`). `Fleet.of` then runs on
each replica only the member clusters it holds, instead of every cluster on the leader::

    member Leases (alive)  --place()-->  cluster -> replica     (every replica computes it)
    cluster named ours     --> ClusterTenure: acquire Lease <operator>-cluster-<cluster>
    Lease held             --> Member(cluster) runs; its writes fenced by that Lease
    cluster named another  --> Member stops (reconciles in flight finish) --> Lease released
                               --> only then can the new owner acquire it

**Placement** (`place`, pure): the alive members are the same as object sharding's
(`operator_kit.election.sharder.Members`: a Lease counts for the member it is named after,
its claimed duration capped). Clusters are few, so a plain consistent-hash ring would
often give one replica two of three clusters and another none; `place` is rendezvous
hashing with bounded loads instead: each cluster, in name order, goes to the first member
in its own hash order (sha1 of ``member#cluster``) that still has room, so that the
loads differ by one at most. Every replica computes the same answer from the same
members and clusters; when their views differ for a moment the Leases still decide.

**The guarantee: no (cluster, object) reconciled by two replicas at once.** A replica
runs a cluster's controllers only while it holds that cluster's Lease, a
`LeaderElector` of its own (the member identity as holder, the `Sharding` timings):

- it tries to acquire the Lease only while `place` names it, and only once no member of
  that cluster is still stopping in this process;
- a member's reconciles start only while the cluster Lease and the member Lease are
  both within their renew deadlines, and every write through its Context (Events
  aside, as on a sharded hub) is refused (`operator_kit.client.fencing.FencedApi`) once
  either may have lapsed;
- when `place` names another replica (or the cluster leaves the fleet) the member
  stops: its watches close, its workers finish the reconciles in flight (bounded by
  ``shutdown_timeout``) and are joined; only then is the Lease released, and only then
  can the new owner take it (the drain comes first, as for objects);
- a replica that dies stops renewing: the new owner takes the Lease once the holder is
  a member whose member Lease expired (so its fence has closed) or the cluster Lease has
  not changed for a whole lease duration (by the new owner's clock). A forged Lease —
  claiming an hour, say, for a holder that never renews it — therefore holds its cluster
  for one lease duration at most (the cap object sharding uses).

A reconcile that outlives ``shutdown_timeout`` cannot be stopped from outside (a Python
thread): the Lease is released anyway, and its further writes are refused. Deleting a
cluster Lease by hand while a cluster moves voids the guarantee, as for the leader's.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.fencing import Refusal
from operator_kit.client.transport import Api, error_message
from operator_kit.election.leader import LeaderElection, LeaderElector
from operator_kit.election.sharder import Members
from operator_kit.election.sharding import Sharding
from operator_kit.fleet.providers import Cluster

if TYPE_CHECKING:
    from operator_kit.operator import Operator

log = logging.getLogger("operator_kit.fleet")

CLUSTER_OF = "operator-kit.io/cluster-of"
"""The label on cluster Leases: ``operator-kit.io/cluster-of=<operator name>``."""


def cluster_lease(operator: str, cluster: str) -> str:
    """The name of the Lease whose holder runs `cluster`: ``<operator>-cluster-<cluster>``."""
    return f"{operator}-cluster-{cluster}"


def _score(member: str, cluster: str) -> int:
    return int.from_bytes(hashlib.sha1(f"{member}#{cluster}".encode()).digest()[:8], "big")


def preference(members: Iterable[str], cluster: str) -> list[str]:
    """The members in `cluster`'s own hash order (rendezvous hashing): its first choice
    first. One member leaving or joining changes no other member's order."""
    return sorted(set(members), key=lambda member: (-_score(member, cluster), member))


def place(members: Iterable[str], clusters: Iterable[str]) -> dict[str, str]:
    """Each cluster's member: in name order, each cluster goes to the first member of its
    `preference` that still has room, so that every member ends with ``floor(clusters /
    members)`` or one more. Pure: the same members and clusters give the same answer,
    whatever their order. No members: no cluster is placed."""
    alive = sorted(set(members))
    names = sorted(set(clusters))
    if not alive:
        return {}
    low = len(names) // len(alive)
    high = len(names) - low * len(alive)  # how many members may hold one more than `low`
    load = dict.fromkeys(alive, 0)
    placed: dict[str, str] = {}
    for cluster in names:
        member = next(m for m in preference(alive, cluster)
                      if load[m] < low or (load[m] == low and high > 0))
        if load[member] == low:
            high -= 1
        placed[cluster] = member
        load[member] += 1
    return placed


class _NoGauge:
    """Cluster Leases are not the operator's leadership: they set no leader gauge."""

    def set(self, _value: float) -> None:
        return None


class ClusterTenure:
    """This replica's hold on one cluster's Lease, from the first attempt to acquire it
    until it is released (a `LeaderElector` in thread ``leader-<lease>``, which renews
    it; it does not release it when stopped: `finish` does, once the cluster's member
    has stopped)."""

    def __init__(self, api: Api, config: Sharding, *, operator: str, namespace: str,
                 cluster: str, identity: str) -> None:
        self.cluster = cluster
        self.lease = cluster_lease(operator, cluster)
        self.giving_up = False
        """Set once this replica should no longer run the cluster (placed elsewhere,
        left the fleet, or its Lease was lost): its member stops, then `finish`."""
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._finishing: threading.Thread | None = None
        election = LeaderElection(namespace=namespace, lease_name=self.lease,
                                  lease_duration=config.lease_duration,
                                  renew_deadline=config.renew_deadline,
                                  retry_period=config.retry_period, identity=identity)
        self.elector = LeaderElector(
            api, election, namespace=namespace, name=self.lease, operator=operator,
            on_started_leading=lambda: None, on_stopped_leading=self._lost,
            release_on_stop=False, lease_labels={CLUSTER_OF: operator}, gauge=_NoGauge())
        self._thread = self.elector.start(self._stop)

    def _lost(self) -> None:
        self.giving_up = True

    def holds(self) -> bool:
        """Whether this replica holds the Lease now (within its renew deadline)."""
        return self.elector.may_reconcile()

    def finish_soon(self) -> None:
        """`finish` in a thread of its own (``fleet-release-<cluster>``), once."""
        with self._lock:
            if self._finishing is not None:
                return
            self._finishing = threading.Thread(target=self.finish,
                                               name=f"fleet-release-{self.cluster}",
                                               daemon=True)
        self._finishing.start()

    def finish(self) -> None:
        """Stop renewing (or trying to acquire) and release the Lease if held. Call only
        once no member of the cluster runs in this process."""
        self._stop.set()
        self._thread.join(self.elector.config.renew_deadline + 1.0)
        self.elector.release()
        self.finished.set()


class ClusterShards:
    """Which of the fleet's clusters this replica runs (see the module docstring): asked
    by the fleet supervisor at each look (`update`), it places the clusters over the
    alive members, acquires the Leases of this replica's clusters, lets go of the others
    once their members stopped, and fences each member's writes (`fence`)."""

    def __init__(self, operator: Operator, config: Sharding,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._operator = operator
        self._config = config
        self._clock = clock
        self._members: Members | None = None
        self._tenures: dict[str, ClusterTenure] = {}
        self._unchanged: dict[str, tuple[str, float]] = {}  # lease -> (version, first seen)
        self._seen_alive: set[str] = set()  # members seen alive: their absence is a death
        self._lock = threading.Lock()
        self.placement: dict[str, str] = {}
        """The placement at the last look: cluster -> member identity."""

    @property
    def identity(self) -> str | None:
        """This replica's member identity (None before its membership started)."""
        membership = self._operator.membership
        return membership.identity if membership is not None else None

    def _member_alive(self) -> bool:
        membership = self._operator.membership
        return membership is not None and membership.may_reconcile()

    def update(self, clusters: Mapping[str, Cluster], running: Collection[str],
               leaving: Collection[str]) -> dict[str, Cluster]:
        """The clusters this replica should run now, of `clusters` (the provider's):
        those it holds the Lease of, but none whose member is still `leaving`. `running`
        and `leaving` name this process's members; a Lease is released only once its
        cluster is in neither."""
        identity = self.identity
        alive: set[str] = set()
        if identity is not None and self._member_alive():
            if self._members is None:
                self._members = Members(self._operator.informers, operator=self._operator.name,
                                        namespace=self._operator.namespace,
                                        lease_duration=self._config.lease_duration)
            alive = self._members.alive() | {identity}
            self._seen_alive |= alive
        self.placement = place(alive, clusters)
        mine = {name for name, member in self.placement.items() if member == identity}
        with self._lock:
            for name in sorted(mine - set(self._tenures)):
                assert identity is not None
                log.info("fleet %s: cluster %s is placed on this replica (%s); acquiring "
                         "its Lease", self._operator.name, name, identity)
                self._tenures[name] = ClusterTenure(
                    self._operator.api, self._config, operator=self._operator.name,
                    namespace=self._operator.namespace, cluster=name, identity=identity)
            tenures = dict(self._tenures)
        held: dict[str, Cluster] = {}
        for name, tenure in tenures.items():
            if tenure.finished.is_set():
                with self._lock:
                    if self._tenures.get(name) is tenure:
                        del self._tenures[name]
                continue
            if name not in mine and not tenure.giving_up:
                tenure.giving_up = True
                log.info("fleet %s: cluster %s is placed on %s now; stopping it here "
                         "before releasing its Lease", self._operator.name, name,
                         self.placement.get(name, "no replica"))
            if tenure.giving_up:
                if name not in running and name not in leaving:
                    tenure.finish_soon()
            elif tenure.holds():
                if name not in leaving:
                    held[name] = clusters[name]
            else:
                self._take_if_abandoned(tenure, alive)
        return held

    def fence(self, cluster: str) -> Refusal:
        """The fence of the member of `cluster` about to start: None while this replica
        holds the cluster's Lease and its member Lease, else why its writes are refused."""
        with self._lock:
            tenure = self._tenures[cluster]

        def refusal() -> str | None:
            if not tenure.holds():
                return (f"this replica no longer holds Lease {tenure.lease} of cluster "
                        f"{cluster} (another replica may reconcile it now)")
            if not self._member_alive():
                return ("this replica's member Lease lapsed (another replica may "
                        f"reconcile cluster {cluster} now)")
            return None

        return refusal

    def may_reconcile(self, cluster: str) -> Callable[[], bool]:
        """Whether the member of `cluster` may start a reconcile: its `fence` is open."""
        fence = self.fence(cluster)
        return lambda: fence() is None

    def _take_if_abandoned(self, tenure: ClusterTenure, alive: set[str]) -> None:
        """Clear the holder of a Lease held by a replica that was an alive member and is
        no more (its member Lease expired, so its fence closed; and the cluster Lease has
        not changed for a retry period and a second, in case this replica's watch of the
        member Leases lags), or that has not changed for a whole lease duration (capping
        what it claims). The write carries the version read: a renewal in between wins."""
        holder = tenure.elector.holder
        if holder is None or holder == tenure.elector.identity:
            return
        path = (f"/apis/coordination.k8s.io/v1/namespaces/{tenure.elector.namespace}/leases/"
                f"{tenure.lease}")
        try:
            lease: dict[str, Any] = dict(self._operator.api.request(
                "GET", path, timeout=self._config.retry_period))
        except Exception as err:  # noqa: BLE001 - looked at again at the next update
            log.debug("fleet: reading Lease %s: %s", tenure.lease, error_message(err))
            return
        version = str((lease.get("metadata") or {}).get("resourceVersion"))
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        now = self._clock()
        seen = self._unchanged.get(tenure.lease)
        if seen is None or seen[0] != version:
            self._unchanged[tenure.lease] = seen = (version, now)
        silent = now - seen[1]
        if not holder:
            return  # free: the elector takes it
        # Gone: seen alive once, and its member Lease has expired since (a member not yet
        # seen — one that just joined, say — is not gone; its Lease expires as any).
        gone = (holder in self._seen_alive and holder not in alive
                and silent >= self._config.retry_period + 1.0)
        if not (gone or silent >= self._config.lease_duration):
            return
        why = ("is not an alive member" if gone else
               f"has not renewed it for {silent:.0f}s")
        spec.update(holderIdentity="", leaseDurationSeconds=1)
        meta = {k: v for k, v in (lease.get("metadata") or {}).items() if k != "managedFields"}
        try:
            self._operator.api.request("PUT", path, body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}, timeout=self._config.retry_period)
        except ApiException as err:
            if err.status != 409:
                log.warning("fleet: could not free Lease %s: %s", tenure.lease,
                            error_message(err))
            return
        except Exception as err:  # noqa: BLE001 - tried again at the next update
            log.warning("fleet: could not free Lease %s: %s", tenure.lease, error_message(err))
            return
        log.warning("fleet %s: freed Lease %s of cluster %s: its holder %r %s",
                    self._operator.name, tenure.lease, tenure.cluster, holder, why)

    def stop(self) -> None:
        """Release every Lease (call once every member of this process stopped)."""
        with self._lock:
            tenures = list(self._tenures.values())
            self._tenures = {}
        for tenure in tenures:
            tenure.giving_up = True
            tenure.finish_soon()
        for tenure in tenures:
            tenure.finished.wait(self._config.renew_deadline + 2.0)

    def held(self) -> list[str]:
        """The clusters whose Lease this replica holds now."""
        with self._lock:
            return sorted(n for n, t in self._tenures.items() if t.holds())
