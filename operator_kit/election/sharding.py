"""Sharding: spread the objects of controllers across every replica of an operator.

Without sharding one replica (the holder of the operator's Lease) reconciles everything.
With ``Operator(..., leader_election=LeaderElection(), sharding=Sharding())`` every
replica is a *member* and reconciles its share of the objects of the sharded
controllers; members coordinate only through the API server.

**Membership.** Each replica holds a Lease of its own, ``<operator>-member-<identity>``,
labelled ``operator-kit.io/member-of=<operator>``, renewed every ``retry_period`` by a
`operator_kit.election.leader.LeaderElector` — so a member is fenced exactly like the leader: one
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
member is *alive* until ``leaseDurationSeconds`` (capped at the operator's own
``lease_duration``) after this process last saw its Lease change (its own clock, as a
leader-election follower judges expiry; every member watches the member Leases from its
start, `Members`, so a new leader needs no fresh wait). A Lease counts only for the member
it is named after, and a Lease deleted by someone else is not a departure (`Members`). The
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

**Only the operator moves the label.** The generated manifests carry an admission policy
(``<operator>-shard-labels-<namespace>``) that refuses a change of either label, and an
object created with the assignment label, by anyone but the operator's ServiceAccount
(exactly ``system:serviceaccount:<namespace>:<operator>``, not a same-named account
elsewhere): a label edited by hand would give an object to a second member while the
first still reconciles it.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from operator_kit._stability import experimental
from operator_kit.api.rbac import Rule
from operator_kit.election.leader import LeaderElection

log = logging.getLogger("operator_kit.sharding")

LABEL_PREFIX = "shard.operator-kit.io/"
"""The default assignment label is ``shard.operator-kit.io/<operator name>``."""
MEMBER_OF = "operator-kit.io/member-of"
"""The label on member Leases: ``operator-kit.io/member-of=<operator name>``."""

MODE = "shard.operator-kit.io/mode"
"""The label (set when a member Lease is created) and annotation (set on a change) naming
the mode its member runs (`operator_kit.election.modes`)."""
MODES = ("auto", "labels", "server")
"""`Sharding.mode`: auto picks server where the API server filters by shard, else labels."""

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_IDENTITY = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class Sharding:
    """Which controllers are sharded, the assignment label, and the member Lease timings.

    **Experimental** (docs/stability.md): may change in a minor release; warns once.

    ``controllers``: the names of the sharded controllers (None: every controller); the
    others run on the leader only. ``label``: the label key that records the assignment
    (default ``shard.operator-kit.io/<operator>``). ``lease_duration``,
    ``renew_deadline``, ``retry_period``: the member Leases' timings, as in
    `LeaderElection`. ``virtual_nodes``: ring points per member (more: better balance).
    ``max_drains_in_flight``: how many objects may be moving at once. ``identity``: this
    member's name (default: the pod name or hostname plus a short random suffix).
    ``mode``: ``"labels"`` (the assignment label, above), ``"server"`` (the API server
    filters each member's share by hash range: Kubernetes' ``ShardedListAndWatch``;
    `operator_kit.election.range_keeper`; the operator refuses to start where the server
    does not filter) or ``"auto"`` (server where the API server filters, else labels).
    """

    controllers: Sequence[str] | None = None
    label: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    virtual_nodes: int = 200
    max_drains_in_flight: int = 100
    identity: str | None = None
    mode: str = "auto"

    def __post_init__(self) -> None:
        experimental("operator_kit.Sharding", stacklevel=3)  # past the dataclass' __init__
        if self.mode not in MODES:
            raise ValueError(f"Sharding mode {self.mode!r} is not one of "
                             f"{', '.join(map(repr, MODES))}")
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
