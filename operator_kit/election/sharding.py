"""Sharding: spread the objects of controllers across every replica of an operator.

Without sharding one replica (the holder of the operator's Lease) reconciles everything.
With ``Operator(..., leader_election=LeaderElection(), sharding=Sharding())`` every
replica is a *member* and reconciles its share of the objects of the sharded
controllers; members coordinate only through the API server.

**Membership.** Each replica holds a Lease of its own, ``<operator>-member-<identity>``,
labelled ``operator-kit.io/member-of=<operator>``, renewed every ``retry_period`` by a
`operator_kit.leader.LeaderElector` — so a member is fenced exactly like the leader: one
that has not renewed within ``renew_deadline`` (counted on its own monotonic clock from
when it *sent* its last successful renewal) stops starting reconciles at once and exits
the process. On a clean stop it releases and deletes its Lease only after its reconciles
have finished.

**The assignment is a label.** Each object of a sharded controller carries
``<label>=<member identity>`` (default label ``shard.operator-kit.io/<operator>``). A
member's informers for the sharded kind and its owned kinds select ``<label>=<its
identity>``: it caches, and reconciles, only its share. Children made with
``ctx.create(owner=)`` / ``ctx.apply_owned`` get their owner's label, so they follow it.

**The assigner** ("sharder") runs on the elected leader only. It watches the member
Leases and, metadata only, every object of the sharded kinds and their owned kinds. A
member is *alive* until ``leaseDurationSeconds`` after this process last saw its Lease
change (its own clock, as a leader-election follower judges expiry; every member watches
the member Leases from its start, `Members`, so a new leader needs no fresh wait). The
target of an object is a consistent-hash ring (`Ring`: ``virtual_nodes`` points per
alive member, sha1 of ``namespace/name``; 200 points keep each of 3 random members
within 27-40 % in 200 trials, where 100 points gave a worst share of 25.8 %), so a
member joining or leaving moves about 1/N of the objects. `plan` — a pure function —
decides the patches:

=====================================  ==================================================
object                                 patch
=====================================  ==================================================
unassigned, or its member is dead      children to the target first, then the object
assigned to another alive member       the drain handshake: set ``drain.<label>=true``
draining, at its target again          clear the drain label
at its target                          children that do not carry its label follow it
=====================================  ==================================================

Every patch carries the resourceVersion the sharder saw, so a racing write makes it fail
(409) instead of double-assigning; the next event brings the new state.

**The drain handshake.** The owning member sees the drain label in its own watch and
handles the key *through its queue* — one worker per key, so a reconcile of the key in
flight finishes first. Instead of reconciling it removes both labels (with the
resourceVersion as precondition) and forgets the key; the object leaves its watch. Only
then is the object unassigned, and only then does the sharder give it to its target. If
the old member dies mid-drain the sharder reassigns directly once its Lease expires —
which is after that member's renew deadline, so it can no longer start a reconcile.

**The rule: no object is reconciled by two members at once.** An object goes to a new
member only when nobody holds it: either the old member let go itself (after its last
reconcile of it returned) or the old member's Lease expired (after its fencing deadline).
A member reconciles an object only while its own cache shows the object labelled with
its identity and not draining; its cache moves forward only, so once it has seen the
drain label it never sees the object as its own again unless the sharder gives it back.
A reconcile already running when a member is paused past its Lease cannot be stopped
from outside; once resumed, its writes through the operator's API are refused
(`FencedApi`: Kubernetes writes only — a call to an external system is the reconcile's
own), it starts no new reconcile, and the process exits.

**Bounds.** A new object is assigned on the sharder's watch event: within its batching
pause (0.1 s) plus one patch. A dead member's objects start moving one Lease duration
after its last renewal was seen (plus at most 0.6 s); one label patch each,
`Sharder.PATCHERS` at a time, so the last of N follows N / (the API server's patch rate)
later. At most ``max_drains_in_flight`` objects are draining at once, so a join does not
storm. When the leader dies another member takes the Lease and
rebuilds the sharder's state from the labels (they are the truth; nothing is lost);
members keep reconciling what they own meanwhile, and new objects wait for the new
leader (lease duration plus a retry).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.api.rbac import Rule
from operator_kit.client.transport import Api, Resource
from operator_kit.election.leader import LeaderElection, LeaderElector
from operator_kit.runtime.watching import Informer, Informers, WatchEvent

log = logging.getLogger("operator_kit.sharding")

LABEL_PREFIX = "shard.operator-kit.io/"
"""The default assignment label is ``shard.operator-kit.io/<operator name>``."""
MEMBER_OF = "operator-kit.io/member-of"
"""The label on member Leases: ``operator-kit.io/member-of=<operator name>``."""

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_IDENTITY = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class Sharding:
    """Which controllers are sharded, the assignment label, and the member Lease timings.

    ``controllers``: the names of the sharded controllers (None: every controller); the
    others run on the leader only. ``label``: the label key that records the assignment
    (default ``shard.operator-kit.io/<operator>``). ``lease_duration``,
    ``renew_deadline``, ``retry_period``: the member Leases' timings, as in
    `LeaderElection`. ``virtual_nodes``: ring points per member (more: better balance).
    ``max_drains_in_flight``: how many objects may be moving at once. ``identity``: this
    member's name (default: the pod name or hostname plus a short random suffix).
    """

    controllers: Sequence[str] | None = None
    label: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    virtual_nodes: int = 200
    max_drains_in_flight: int = 100
    identity: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.controllers, str):
            raise TypeError(f"Sharding controllers must be a list of controller names, not "
                            f"the string {self.controllers!r}; write [{self.controllers!r}]")
        if self.controllers is not None:
            object.__setattr__(self, "controllers", tuple(self.controllers))
        try:
            LeaderElection(lease_duration=self.lease_duration,
                           renew_deadline=self.renew_deadline, retry_period=self.retry_period)
        except ValueError as err:
            raise ValueError(str(err).replace("LeaderElection", "Sharding", 1)) from None
        for name in ("virtual_nodes", "max_drains_in_flight"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Sharding {name} must be a whole number of at least 1, "
                                 f"not {value!r}")
        if self.label is not None and not _valid_label_key(self.label):
            raise ValueError(f"Sharding label {self.label!r} is not a label key: write "
                             "[prefix/]name, the name at most 63 letters, digits, '-', '_' "
                             "or '.', e.g. 'shard.example.com/my-operator'")
        if self.identity is not None and not _IDENTITY.match(self.identity):
            raise ValueError(f"Sharding identity {self.identity!r} must be usable as a label "
                             "value and in a Lease name: at most 63 lower-case letters, "
                             "digits and '-', starting and ending with a letter or digit")

    def label_key(self, operator: str) -> str:
        """The assignment label: `label`, or ``shard.operator-kit.io/<operator>``."""
        return self.label or LABEL_PREFIX + operator

    def drain_label_key(self, operator: str) -> str:
        """The label the assigner sets to ask a member to let an object go."""
        return "drain." + self.label_key(operator)

    def shards(self, controller: str) -> bool:
        """Whether the controller named `controller` is sharded."""
        return self.controllers is None or controller in self.controllers

    def election(self, namespace: str, operator: str, identity: str) -> LeaderElection:
        """The member Lease of `identity`, as a `LeaderElection`."""
        return LeaderElection(namespace=namespace, lease_name=member_lease(operator, identity),
                              lease_duration=self.lease_duration,
                              renew_deadline=self.renew_deadline,
                              retry_period=self.retry_period, identity=identity)


def _valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return bool(_LABEL_NAME.match(name)) and (not prefix or bool(_DNS_PREFIX.match(prefix)))


def member_identity() -> str:
    """``<pod name or hostname>-<6 random hex>``, lower case, usable as a label value."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "member"
    base = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:50].strip("-") or "member"
    return f"{base}-{secrets.token_hex(3)}"


def member_lease(operator: str, identity: str) -> str:
    return f"{operator}-member-{identity}"


def rules() -> list[Rule]:
    """The Lease RBAC members and the sharder need. Member Lease names are not known in
    advance (they carry a random suffix), so these verbs cannot be narrowed by name; they
    are granted in the operator's namespace only (a Role)."""
    return [Rule(["coordination.k8s.io"], ["leases"],
                 ["get", "list", "watch", "create", "update", "delete"])]


# -- the ring ----------------------------------------------------------------------------

def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "big")


class Ring:
    """A consistent-hash ring: `virtual_nodes` points per member; a key belongs to the
    member of the first point at or after its hash. Adding or removing one member of N
    moves only the keys between its points: about 1/N of them."""

    def __init__(self, members: Iterable[str], virtual_nodes: int = 200) -> None:
        self.members = frozenset(members)
        points = sorted((_hash(f"{member}#{i}"), member)
                        for member in self.members for i in range(virtual_nodes))
        self._hashes = [h for h, _ in points]
        self._owners = [m for _, m in points]

    def owner(self, key: str) -> str | None:
        """The member `key` belongs to (None: no members)."""
        if not self._hashes:
            return None
        return self._owners[bisect.bisect_left(self._hashes, _hash(key)) % len(self._hashes)]


def ring_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


# -- the decisions -----------------------------------------------------------------------

Ref = tuple[str, str, str]
"""(resource, namespace, name) of an object the sharder sees."""


@dataclass(frozen=True)
class Placed:
    """An object as the sharder sees it: its assignment label and, for a child, its
    controller owner (when that is an object of a sharded kind)."""

    ref: Ref
    resource_version: str
    member: str | None = None
    draining: bool = False
    owner: Ref | None = None


@dataclass(frozen=True)
class Patch:
    """A label patch: set the assignment to `member` (None: leave it), set or clear the
    drain label (None: leave it); `resource_version` is the precondition."""

    ref: Ref
    resource_version: str
    member: str | None = None
    drain: bool | None = None
    reason: str = ""


def plan(ring: Ring, primaries: Iterable[Placed], children: Iterable[Placed] = (), *,
         max_drains_in_flight: int = 100) -> list[Patch]:
    """The patches that move every object toward its target on `ring` (see the module
    docstring's table). Pure: the same members and objects give the same patches."""
    alive = ring.members
    if not alive:
        return []
    kids: dict[Ref, list[Placed]] = {}
    for child in children:
        if child.owner is not None:
            kids.setdefault(child.owner, []).append(child)
    objects = sorted(primaries, key=lambda p: p.ref)
    budget = max_drains_in_flight - sum(1 for p in objects if p.draining and p.member in alive)
    patches: list[Patch] = []
    for obj in objects:
        target = ring.owner(ring_key(obj.ref[1], obj.ref[2]))
        assert target is not None
        own = sorted(kids.get(obj.ref, ()), key=lambda c: c.ref)
        if obj.member is None or obj.member not in alive:
            strays = [c for c in own if c.member != target]
            if strays:  # children before their owner: the new member must see them
                patches += [Patch(c.ref, c.resource_version, target, reason="follow")
                            for c in strays]
            else:
                patches.append(Patch(obj.ref, obj.resource_version, target,
                                     False if obj.draining else None,
                                     "assign" if obj.member is None else "take over"))
        elif obj.member != target:
            if not obj.draining and budget > 0:
                budget -= 1
                patches.append(Patch(obj.ref, obj.resource_version, drain=True, reason="drain"))
        else:
            if obj.draining:
                patches.append(Patch(obj.ref, obj.resource_version, drain=False,
                                     reason="keep"))
            patches += [Patch(c.ref, c.resource_version, obj.member, reason="follow")
                        for c in own if c.member != obj.member]
    return patches


# -- a member's side ---------------------------------------------------------------------

class Fenced(RuntimeError):
    """A write refused because this member may no longer reconcile (its Lease lapsed)."""


class FencedApi(Api):
    """A member's reconciles' API: every request but a read is refused once the member
    may no longer reconcile. A reconcile that was running when the process was paused
    past its Lease cannot be stopped from outside, but once resumed, its next write
    fails instead of landing after another member took the object over."""

    def __init__(self, api: Api, allowed: Callable[[], bool]) -> None:
        self.__dict__.update(api.__dict__)  # the same client, connections and discovery
        self._allowed = allowed

    def request(self, method: str, path: str, **options: Any) -> Any:
        if method not in ("GET", "HEAD") and not self._allowed():
            raise Fenced(f"{method} {path} refused: this member's Lease lapsed (it may no "
                         "longer reconcile; another member may own the object now)")
        return super().request(method, path, **options)


class Membership:
    """This replica's member Lease: held, renewed, fenced (a `LeaderElector` of its own
    Lease), released and deleted on a clean stop."""

    def __init__(self, api: Api, config: Sharding, *, operator: str, namespace: str,
                 on_joined: Callable[[], None], on_lost: Callable[[], None]) -> None:
        self.identity = config.identity or member_identity()
        self.election = config.election(namespace, operator, self.identity)
        self._api = api
        self.elector = LeaderElector(
            api, self.election, namespace=namespace, name=self.election.lease_name,
            operator=operator, on_started_leading=on_joined, on_stopped_leading=on_lost,
            lease_labels={MEMBER_OF: operator},
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


class Members:
    """Which members are alive, judged like a leader-election follower judges a Lease: a
    member is alive until ``leaseDurationSeconds`` after this process last saw its Lease
    change (its own clock; a fresh observer waits a full duration). Every member runs one,
    from its start, so a member that becomes leader already knows how long each Lease
    has been silent: a member that died with the old leader is taken over one lease
    duration after its last renewal, not two."""

    LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)

    def __init__(self, informers: Informers, *, operator: str, namespace: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._informers = informers
        self._clock = clock
        self.informer = informers.informer(self.LEASES, namespace=namespace,
                                           label_selector=f"{MEMBER_OF}={operator}")
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.informer.add_handler(self._on_lease)

    def start(self) -> None:
        self._informers.start()

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _on_lease(self, event: WatchEvent) -> None:
        name = event.object["metadata"]["name"]
        with self._lock:
            if event.type == "DELETED":
                self._seen.pop(name, None)
            else:
                spec = event.object.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                renewed = str(spec.get("renewTime") or "")
                old = self._seen.get(name)
                if old is None or (old.holder, old.renew_time) != (holder, renewed):
                    self._seen[name] = _Seen(holder, renewed,
                                             float(spec.get("leaseDurationSeconds") or 1),
                                             self._clock())
        for listener in list(self._listeners):
            listener()

    def alive(self) -> set[str]:
        """The members whose Lease changed within its duration, by this process's clock."""
        now = self._clock()
        with self._lock:
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
