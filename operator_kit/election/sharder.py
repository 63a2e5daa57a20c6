"""Sharding at run time: a member's Lease and fenced writes, and the leader's assigner.

`Membership` holds this replica's member Lease (a `LeaderElector` of its own); `FencedApi`
refuses a member's writes once its Lease lapsed; `Members` watches every member's Lease;
`Sharder` — on the elected leader only — labels each object of the sharded kinds with its
member, as `operator_kit.election.sharding.plan` decides. See that module for the rules.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.client import fencing
from operator_kit.client.transport import Api, Resource
from operator_kit.election.leader import LeaderElector
from operator_kit.election.sharding import (
    MEMBER_OF,
    MODE,
    Patch,
    Placed,
    Ref,
    Ring,
    Sharding,
    member_identity,
    member_lease,
    plan,
)
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.watching import Informer, Informers

log = logging.getLogger("operator_kit.sharding")


# -- a member's side ---------------------------------------------------------------------

class FencedApi(fencing.FencedApi):
    """A member's reconciles' API: every request but a read is refused (`Fenced`) once
    the member may no longer reconcile. A reconcile that was running when the process
    was paused past its Lease cannot be stopped from outside, but once resumed, its next
    write fails instead of landing after another member took the object over."""

    def __init__(self, api: Api, allowed: Callable[[], bool]) -> None:
        super().__init__(api, lambda: None if allowed() else (
            "this member's Lease lapsed (it may no longer reconcile; another member may "
            "own the object now)"))


class Membership:
    """This replica's member Lease: held, renewed, fenced (a `LeaderElector` of its own
    Lease), released and deleted on a clean stop."""

    def __init__(self, api: Api, config: Sharding, *, operator: str, namespace: str,
                 on_joined: Callable[[], None], on_lost: Callable[[], None],
                 mode: str = "labels") -> None:
        self.identity = config.identity or member_identity()
        self.election = config.election(namespace, operator, self.identity)
        self._api = api
        self.elector = LeaderElector(
            api, self.election, namespace=namespace, name=self.election.lease_name,
            operator=operator, on_started_leading=on_joined, on_stopped_leading=on_lost,
            lease_labels={MEMBER_OF: operator, MODE: mode},  # modes.py
            gauge=metrics.SHARD_MEMBER.labels(operator))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = self.elector.start(self._stop)

    def may_reconcile(self) -> bool:
        return self.elector.may_reconcile()

    def stop(self, deadline: float) -> None:
        """Release and delete the Lease (call once this member's reconciles finished)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(1.0, deadline - time.monotonic()))
        path = (f"/apis/coordination.k8s.io/v1/namespaces/{self.elector.namespace}/leases/"
                f"{self.elector.lease_name}")
        try:
            self._api.request("DELETE", path, timeout=max(1.0, deadline - time.monotonic()))
        except Exception as err:  # noqa: BLE001 - released already: it expires at once
            if not (isinstance(err, ApiException) and err.status == 404):
                log.warning("member %s: could not delete its Lease: %s", self.identity, err)


# -- the sharder (on the leader) ---------------------------------------------------------

@dataclass
class ShardedKind:
    """A sharded primary kind and the kinds its objects own, as the sharder watches them."""

    resource: Resource
    namespace: str | None
    label_selector: str | None
    owned: list[Resource] = field(default_factory=list)


@dataclass
class _Seen:
    holder: str
    renew_time: str
    duration: float
    at: float
    deleted: bool = False


class Members:
    """Which members are alive, judged like a leader-election follower judges a Lease: a
    member is alive until its lease duration after this process last saw its Lease
    change (its own clock; a fresh observer waits a full duration). Every member runs one,
    from its start, so a member that becomes leader already knows how long each Lease
    has been silent: a member that died with the old leader is taken over one lease
    duration after its last renewal, not two.

    Anyone who may write Leases in the namespace could write a member Lease, so what one
    claims is believed only as far as it cannot do harm:

    - its ``leaseDurationSeconds`` is capped at `lease_duration` (the operator's own
      `Sharding.lease_duration`): a forged Lease that claims an hour and is never
      renewed holds its objects for one lease duration, as a member that died would;
    - a Lease counts only when its name is the member Lease of its holder
      (``<operator>-member-<holder>``): a Lease cannot keep another member alive;
    - a deleted Lease is not a departure: its member stays alive until its last seen
      renewal plus the lease duration (it may still be reconciling, and it re-creates
      its Lease at its next renewal); a clean stop releases the Lease (holder cleared)
      before deleting it, which is a departure at once."""

    LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)

    def __init__(self, informers: Informers, *, operator: str, namespace: str,
                 lease_duration: float = Sharding.lease_duration,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._informers = informers
        self._clock = clock
        self._operator = operator
        self._cap = lease_duration
        self.informer = informers.informer(self.LEASES, namespace=namespace,
                                           label_selector=f"{MEMBER_OF}={operator}")
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._ignored: set[str] = set()
        self.informer.add_handler(self._on_lease)

    def start(self) -> None:
        self._informers.start()

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _on_lease(self, event: WatchEvent) -> None:
        name = event.object["metadata"]["name"]
        if event.type == "DELETED":
            with self._lock:  # still alive until its duration is up; then forgotten
                seen = self._seen.get(name)
                if seen is not None:
                    self._seen[name] = replace(seen, deleted=True)
        else:
            spec = event.object.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and name != member_lease(self._operator, holder):
                if name not in self._ignored:
                    self._ignored.add(name)
                    log.warning("sharding %s: ignoring Lease %s: its holder %r is not the "
                                "member it is named after (a member's Lease is %s)",
                                self._operator, name, holder,
                                member_lease(self._operator, holder))
                holder = ""  # counts as released: it keeps no member alive
            renewed = str(spec.get("renewTime") or "")
            claimed = float(spec.get("leaseDurationSeconds") or 1)
            with self._lock:
                old = self._seen.get(name)
                if old is None or old.deleted or (old.holder, old.renew_time) != (
                        holder, renewed):
                    self._seen[name] = _Seen(holder, renewed, min(claimed, self._cap),
                                             self._clock())
        for listener in list(self._listeners):
            listener()

    def alive(self) -> set[str]:
        """The members whose Lease changed within its duration, by this process's clock."""
        now = self._clock()
        with self._lock:
            for name in [n for n, s in self._seen.items() if now >= s.at + s.duration
                         and (s.deleted or not s.holder)]:
                del self._seen[name]  # expired and gone or released: forget it
            return {s.holder for s in self._seen.values()
                    if s.holder and now < s.at + s.duration}


class Sharder:
    """Assigns the objects of the sharded kinds to the alive members (see the module
    docstring). One thread, ``sharder-<operator>``; patches go out a few at a time."""

    BATCH = 0.1
    """Seconds the sharder waits after an event for more, before it plans."""
    PATCHERS = 16
    """Label patches sent at once: one object each, so moving many objects takes their
    number over the API server's patch rate."""

    def __init__(self, api: Api, informers: Informers, config: Sharding, *, operator: str,
                 members: Members, kinds: Sequence[ShardedKind],
                 stop: threading.Event) -> None:
        self._api = api
        self._config = config
        self._operator = operator
        self._label = config.label_key(operator)
        self._drain = config.drain_label_key(operator)
        self._stop = stop
        self._wake = threading.Event()
        self._members_seen = members
        self._leases = members.informer
        self._primaries: list[tuple[Informer, ShardedKind]] = []
        self._children: list[Informer] = []
        self._resources: dict[str, Resource] = {}
        self._owner_kinds: dict[tuple[str, str], str] = {}  # (group, kind) -> resource
        seen_owned: set[tuple[Resource, str | None]] = set()
        for kind in kinds:
            informer = informers.informer(kind.resource, namespace=kind.namespace,
                                          label_selector=kind.label_selector,
                                          metadata_only=True)
            self._primaries.append((informer, kind))
            self._resources[str(kind.resource)] = kind.resource
            self._owner_kinds[(kind.resource.group, kind.resource.kind)] = str(kind.resource)
            for owned in kind.owned:
                where = kind.namespace if owned.namespaced else None
                if (owned, where) not in seen_owned:
                    seen_owned.add((owned, where))
                    self._children.append(informers.informer(owned, namespace=where,
                                                             metadata_only=True))
                    self._resources[str(owned)] = owned
        self._pending: dict[Ref, str] = {}  # patched at this resourceVersion, not yet seen
        self._last: dict[Ref, str] = {}  # the member an object was last seen with
        self._members = metrics.SHARD_MEMBERS.labels(operator)
        self._moves = metrics.SHARD_MOVES.labels(operator)
        self._counted: set[str] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._members_seen.on_change(self._wake.set)
        for informer in [*(i for i, _ in self._primaries), *self._children]:
            informer.add_handler(self._on_object)
        self._thread = threading.Thread(target=self._run, name=f"sharder-{self._operator}",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def alive_thread(self) -> bool:
        """False once the assigner's thread ended while it should run (`Operator.live`
        then fails ``/livez``: new objects would otherwise never be assigned)."""
        return self._thread is None or self._thread.is_alive() or self._stop.is_set()

    # -- what it sees ----------------------------------------------------------------------

    def _on_object(self, _event: WatchEvent) -> None:
        self._wake.set()

    def alive(self) -> set[str]:
        return self._members_seen.alive()

    def snapshot(self) -> tuple[list[Placed], list[Placed]]:
        primaries = [self._placed(str(kind.resource), raw, None)
                     for informer, kind in self._primaries for raw in informer.objects()]
        children: list[Placed] = []
        for informer in self._children:
            resource = str(informer.resource)
            for raw in informer.objects():
                owner = self._owner_of(raw)
                if owner is not None:
                    children.append(self._placed(resource, raw, owner))
        return primaries, children

    def _owner_of(self, raw: Mapping[str, Any]) -> Ref | None:
        meta = raw.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if not ref.get("controller"):
                continue
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            resource = self._owner_kinds.get((group, str(ref.get("kind"))))
            if resource is not None:
                namespace = meta.get("namespace") or "" if self._resources[resource].namespaced \
                    else ""
                return (resource, namespace, str(ref.get("name")))
        return None

    def _placed(self, resource: str, raw: Mapping[str, Any], owner: Ref | None) -> Placed:
        meta = raw.get("metadata") or {}
        labels = meta.get("labels") or {}
        return Placed((resource, meta.get("namespace") or "", meta["name"]),
                      str(meta.get("resourceVersion")), labels.get(self._label) or None,
                      self._drain in labels, owner)

    # -- acting ----------------------------------------------------------------------------

    def _run(self) -> None:
        with ThreadPoolExecutor(self.PATCHERS,
                                thread_name_prefix=f"sharder-{self._operator}-patch") as pool:
            while not self._stop.is_set():
                self._wake.wait(0.5)  # also wakes to notice expiries
                if self._stop.wait(self.BATCH):
                    return
                self._wake.clear()
                if not (self._leases.synced.is_set()
                        and all(i.synced.is_set() for i, _ in self._primaries)
                        and all(i.synced.is_set() for i in self._children)):
                    continue
                try:
                    self._round(pool)
                except Exception:
                    log.exception("sharder %s: a round failed", self._operator)

    def _round(self, pool: ThreadPoolExecutor) -> None:
        alive = self.alive()
        self._members.set(len(alive))
        primaries, children = self.snapshot()
        versions = {p.ref: p.resource_version for p in (*primaries, *children)}
        self._pending = {ref: rv for ref, rv in self._pending.items() if versions.get(ref) == rv}
        self._count(primaries, alive)
        # The member each object was last seen with (for moves_total); only objects that
        # still exist are kept.
        self._last = {p.ref: p.member or self._last.get(p.ref, "") for p in primaries}
        patches = [p for p in plan(Ring(alive, self._config.virtual_nodes), primaries, children,
                                   max_drains_in_flight=self._config.max_drains_in_flight)
                   if self._pending.get(p.ref) != p.resource_version]
        if not patches:
            return
        # Children before owners: the plan only assigns an owner once its children carry
        # the target, so running one round's patches in parallel keeps that order.
        for patch in patches:
            self._pending[patch.ref] = patch.resource_version
        list(pool.map(self._send, patches))
        self._wake.set()  # look again soon: the next step of a move may be due

    def _send(self, patch: Patch) -> None:
        resource = self._resources[patch.ref[0]]
        labels: dict[str, str | None] = {}
        if patch.member is not None:
            labels[self._label] = patch.member
        if patch.drain is not None:
            labels[self._drain] = "true" if patch.drain else None
        try:
            self._api.request("PATCH", resource.path(patch.ref[1] or None, patch.ref[2]),
                              body={"metadata": {"resourceVersion": patch.resource_version,
                                                 "labels": labels}},
                              content_type="application/merge-patch+json")
        except ApiException as err:
            if err.status not in (404, 409):  # 409/404: it changed or went; look again
                log.warning("sharder %s: %s %s/%s: %s %s", self._operator, patch.reason,
                            patch.ref[1], patch.ref[2], err.status, err.reason)
            self._pending.pop(patch.ref, None)
            return
        except Exception as err:  # noqa: BLE001 - the next round tries again
            log.warning("sharder %s: %s %s/%s: %s", self._operator, patch.reason,
                        patch.ref[1], patch.ref[2], err)
            self._pending.pop(patch.ref, None)
            return
        if patch.member is not None and patch.ref[0] in self._owner_kinds.values():
            last = self._last.get(patch.ref)
            if last and last != patch.member:
                self._moves.inc()
        log.debug("sharder %s: %s %s/%s", self._operator, patch.reason, patch.ref[1],
                  patch.ref[2])

    def _count(self, primaries: Collection[Placed], alive: Collection[str]) -> None:
        counts: dict[str, int] = {}
        for p in primaries:
            if p.member is not None:
                counts[p.member] = counts.get(p.member, 0) + 1
        for member in self._counted - set(counts) - set(alive):
            metrics.SHARD_OBJECTS.remove(self._operator, member)
        for member in set(alive) | set(counts):
            metrics.SHARD_OBJECTS.labels(self._operator, member).set(counts.get(member, 0))
        self._counted = set(alive) | set(counts)
