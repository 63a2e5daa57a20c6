"""Fan-out: one custom resource on the hub, its children kept on every member cluster.

A `FanOut` controller watches its kind on the *hub* (the cluster the operator lives in)
and keeps, on each member cluster of the fleet, the children `FanOut.children` declares
for each object, with the state of every member written back on the hub object::

    hub: Team "payments" (status.clusters: [{name: east, conditions: [Ready ...]}, ...])
      |  one hub informer per member; queue key (cluster, object): a runner per member
      v
    member east:  Namespace payments, ConfigMap, RoleBinding  (labelled with the Team)
    member west:  the same, applied by west's own workers

The two sides, both built from the one controller object:

- **member side** (a `ControllerRunner` in each `Member`, named ``<name>@<cluster>``):
  its primary cache is the hub kind, watched from the hub (`Informers` ``elsewhere``);
  its other caches are the children on the member, selected by the label `HUB_UID`. A
  Team changing, or a child changed or deleted by hand, queues the Team in that member's
  queue only; its reconcile server-side applies the children on the member (``ctx`` is
  the member's, ``ctx.cluster`` its name), deletes the labelled children no longer
  declared, and writes the member's entry of ``status.clusters`` on the hub.
  A member reconcile skips an object without the finalizer yet, applies nothing to one
  being deleted, skips applies that cannot change a child (`LastApplies`), and after its
  applies looks at the hub object once more: deleted meanwhile, it deletes them again.
- **hub side** (the operator's own runner: ``fleet`` stays False), every
  ``status_interval``: adds `finalizer`, writes an ``Unreachable`` entry for members that
  cannot be reached (`member_problem`), queues the object on a member that answers again,
  removes the entries of clusters that left, and on deletion deletes the children on
  every member.

Per-cluster status without lost updates: ``status.clusters`` is a list-map keyed by
``name`` (`ClusterStatuses`), and each cluster's entry is written by server-side apply
with a field manager of its own (``<operator>@<cluster>``). The API server merges the
entries: two members writing at once never overwrite each other, and applying an empty
status as that manager removes the entry it owned (a cluster leaving).

Deletion: children on another cluster cannot carry an ownerReference to the hub object,
so `finalizer` is required. The hub side's cleanup deletes the labelled children on
every member that runs; a member it cannot reach keeps the finalizer (a Warning Event
``ChildrenNotDeleted`` names it, retried with backoff) until `orphan_after` seconds after
the deletion began, then the finalizer is removed anyway with a Warning Event
``ChildrenOrphaned`` that names the clusters and the label selector that finds the
children left there (None: wait for ever). Clusters that left the fleet are not asked.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kubernetes.client.exceptions import ApiException

from operator_kit.api.kinds import Kind, KindSpec
from operator_kit.api.rbac import Rule, merge_rules
from operator_kit.api.resources import CustomResource
from operator_kit.client.events import RULE as EVENTS_RULE
from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import fenced_like
from operator_kit.client.transport import Api, Resource, error_message
from operator_kit.fleet.entries import (
    ClusterStatus,
    ClusterStatuses,
    entries,
    ready_entry,
    ready_reason,
    same_entry,
    status_manager,
    unreachable_already,
    write_entry,
)
from operator_kit.runtime.context import Context
from operator_kit.runtime.controller import Action, Controller, Watch
from operator_kit.runtime.objects import Objects, encode, resource_of
from operator_kit.runtime.own_writes import LastApplies
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informer, Informers

if TYPE_CHECKING:
    from operator_kit.fleet.supervisor import Fleet, Member

log = logging.getLogger("operator_kit.fleet")

R = TypeVar("R", bound=CustomResource)

HUB_UID = "fleet.operator-kit.io/hub-uid"
"""Label on every child: the uid of the hub object it was made for."""
HUB_NAME = "fleet.operator-kit.io/hub-name"
"""Label on every child: the hub object's name."""
HUB_NAMESPACE = "fleet.operator-kit.io/hub-namespace"
"""Label on every child of a namespaced hub object: its namespace."""
HUB_KIND = "fleet.operator-kit.io/hub-kind"
"""Label on every child: the hub object's kind and group (``Team.example.com``)."""

FAILING_AFTER = 5.0
"""Seconds a member's watches must have failed before its entry says Unreachable."""


def child_labels(owner: CustomResource) -> dict[str, str]:
    """The labels that tie a child on a member cluster to `owner` on the hub."""
    if not owner.uid:
        raise ValueError(f"{owner.kind} {owner.name} has no uid: read it from the API first")
    labels = {HUB_UID: owner.uid, HUB_NAME: owner.name,
              HUB_KIND: f"{owner.kind}.{owner.group}" if owner.group else owner.kind}
    if owner.namespace:
        labels[HUB_NAMESPACE] = owner.namespace
    return labels


def hub_key(child: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The key of the hub object a child's labels name (none for an unlabelled one)."""
    labels = (child.get("metadata") or {}).get("labels") or {}
    name = labels.get(HUB_NAME)
    return [(labels.get(HUB_NAMESPACE) or "", name)] if name else []


NOT_RUNNING = "not running here yet (joining, or rejoining after its kubeconfig changed)"
"""Why a cluster the provider names, but which runs no member now, is unreachable."""


def member_problem(member: Member) -> str | None:
    """Why `member` cannot be reached now, or None: it did not start (`Member.problem`),
    or its own watches (not the hub's) have failed for `FAILING_AFTER` seconds."""
    if member.problem is not None:
        return member.problem
    informers = member.informers
    if informers is None:
        return "not started yet"
    own = [i for i in informers.values() if i.api is informers.api]
    failing = max((i.failing_for() or 0.0 for i in own), default=0.0)
    if failing >= FAILING_AFTER:
        return f"the watches on cluster {member.name} have failed for {failing:.0f}s"
    return None


class FanOut(Controller[R]):
    """A hub kind whose objects each declare children on every member cluster.

    Subclass it with ``resource`` (the hub kind; its status dataclass needs a
    ``clusters: ClusterStatuses`` field), ``finalizer``, ``child_kinds`` (the kinds
    `children` returns, so that a child changed or deleted by hand is put back) and
    `children`; run it with ``Fleet.of(operator, provider)``. ``orphan_after`` (seconds,
    default 300; None: for ever) bounds how long the deletion of a hub object waits for
    unreachable members; ``status_interval`` how often the hub side looks at the
    members. See the module docstring for the design. **Experimental** (docs/stability.md)."""

    child_kinds: Sequence[KindSpec] = ()
    status_field: str = "clusters"
    orphan_after: float | None = 300.0
    status_interval: float = 10.0

    def __init__(self) -> None:
        super().__init__()
        if not self.finalizer:
            raise ValueError(f"{type(self).__name__} needs a `finalizer`: children on member "
                             "clusters have no ownerReference to the hub object, so only the "
                             "finalizer's cleanup deletes them")
        if not self.child_kinds:
            raise ValueError(f"{type(self).__name__}.child_kinds must name the kinds "
                             "children() returns (e.g. 'v1/ConfigMap')")
        if self.namespace is not None:
            raise ValueError(f"{type(self).__name__}.namespace: a FanOut watches its kind in "
                             "every namespace of the hub; leave `namespace` None")
        resource = self.primary_kind().defined_resource
        if resource is None:
            raise TypeError(f"{type(self).__name__}.resource must be the operator's own "
                            "CustomResource: a FanOut writes its members' entries in its status")
        shape = resource.status_shape()
        if shape is None or self.status_field not in {f.json_name for f in shape.fields}:
            raise TypeError(f"{resource.kind}'s status needs a field "
                            f"`{self.status_field}: ClusterStatuses` (from operator_kit.fleet) "
                            "for the members' entries")
        self.attached: Fleet | None = None
        """The fleet it serves (set by `attach`)."""
        self._hub_api: Callable[[], Api] | None = None
        self._lock = threading.Lock()

    def children(self, obj: R, cluster: str) -> Sequence[Any]:
        """The children `obj` declares on member `cluster` (dicts, client models or
        CustomResources), applied in this order. Override it."""
        raise NotImplementedError(f"{type(self).__name__} must define children()")

    # -- wiring (Fleet.of and Member call these) ------------------------------------------

    def attach(self, fleet: Fleet, hub: Callable[[], Api]) -> None:
        """Serve `fleet`, whose hub `hub()` reaches (`Fleet.of` calls this with the
        operator's Api, read when the first member starts)."""
        with self._lock:
            self.attached, self._hub_api = fleet, hub

    def hub_routes(self) -> dict[Resource, Api]:
        """What a member's `Informers` watch on the hub: this kind."""
        return {resource_of(self.hub_kind()): self._hub()}

    def hub_kind(self) -> type[CustomResource]:
        """Its kind, the operator's own (checked when it was made)."""
        resource = self.primary_kind().defined_resource
        assert resource is not None
        return resource

    def member_runner(self, member: Member, api: Api, *, informers: Informers,
                      objects: Objects, recorder: EventRecorder, field_manager: str,
                      may_reconcile: Callable[[], bool]) -> ControllerRunner:
        """The member side's runner on `member` (its Api, informers, objects)."""
        side = MemberSide(self, member.name, self._hub(), field_manager, informers)
        return ControllerRunner(side, api, field_manager=field_manager, recorder=recorder,
                                stop=member.stop, informers=informers, objects=objects,
                                may_reconcile=may_reconcile, cluster=member.name)

    def member_rules(self) -> list[Rule]:
        """The RBAC rules the operator needs on each member cluster: the child kinds
        (applied, watched, pruned), Events, and ``bind`` on roles and cluster roles when
        a child is a RoleBinding or ClusterRoleBinding (Kubernetes refuses a binding that
        grants more than its creator holds, unless it may ``bind`` the role). The hub
        kind is not needed there: it is read and written on the hub."""
        rules = [Rule([kind.group], [kind.resource_name],
                      ["get", "list", "watch", "create", "patch", "delete"])
                 for kind in (Kind.of(k) for k in self.child_kinds)]
        if any(Kind.of(k).group == "rbac.authorization.k8s.io" and Kind.of(k).kind in (
                "RoleBinding", "ClusterRoleBinding") for k in self.child_kinds):
            rules.append(Rule(["rbac.authorization.k8s.io"], ["clusterroles", "roles"],
                              ["bind"]))
        return merge_rules([*rules, EVENTS_RULE])

    def _hub(self) -> Api:
        if self._hub_api is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a fleet: run it with "
                               "Fleet.of(operator, provider)")
        return self._hub_api()

    # -- hub side ---------------------------------------------------------------------------

    def reconcile(self, obj: R, ctx: Context) -> Action | None:
        """The hub side: say which members are unreachable, drop the entries of clusters
        that left; look again after ``status_interval``."""
        fleet = self.attached
        if fleet is None:
            raise RuntimeError(f"{type(self).__name__} runs on the hub without its fleet: "
                               "build the fleet with Fleet.of(operator, provider)")
        named, members = fleet.named_clusters(), fleet.members()
        if named is None:  # no answer from the provider yet: an absence means nothing
            return Action.requeue(min(self.status_interval, 1.0))
        current = entries(obj, self.status_field)
        for name in sorted(named | set(members)):
            member = members.get(name)
            problem = NOT_RUNNING if member is None else member_problem(member)
            if problem is None:  # the member's own workers write its entry
                if member is not None and ready_reason(current.get(name)) == "Unreachable":
                    self._requeue_on(member, obj)  # back: have its workers say so
                continue
            entry = ready_entry(name, "Unknown", "Unreachable", problem, obj.generation,
                                current.get(name))
            if not same_entry(current.get(name), entry) and not unreachable_already(
                    current.get(name), obj.generation):
                write_entry(ctx.api, obj, self.status_field, name, entry, ctx.field_manager)
        # Only a cluster the provider no longer names has left (one joining or rejoining
        # is named, but not running yet).
        for name in sorted(set(current) - named - set(members)):
            write_entry(ctx.api, obj, self.status_field, name, None, ctx.field_manager)
            ctx.log.info("%s: cluster %s left the fleet: its status entry removed",
                         self.name, name)
        return Action.requeue(self.status_interval)

    def _requeue_on(self, member: Member, obj: R) -> None:
        """Queue `obj` on `member`'s own runner of this controller."""
        for runner in member.runners:
            side = runner.controller
            if isinstance(side, MemberSide) and side.fanout is self:
                runner.enqueue((obj.namespace or "", obj.name))

    def cleanup(self, obj: R, ctx: Context) -> None:
        """The hub side's deletion: delete `obj`'s children on every member."""
        fleet = self.attached
        if fleet is None:
            raise RuntimeError(f"{type(self).__name__}: no fleet attached; its children "
                               "cannot be deleted (run it with Fleet.of(operator, provider))")
        selector = f"{HUB_UID}={obj.uid}"
        left: dict[str, str] = {}
        named, members = fleet.named_clusters(), fleet.members()
        if named is None:  # which clusters hold children is not known yet
            left["the fleet"] = "its cluster provider has not answered yet"
        # Every cluster the provider names, running or not: one not running yet (joining,
        # rejoining) keeps the finalizer until its children are deleted, as one unreachable.
        for name in sorted((named or frozenset()) | set(members)):
            member = members.get(name)
            problem = NOT_RUNNING if member is None else member_problem(member)
            if problem is None and member is not None and member.informers is not None:
                try:
                    delete_children(member.informers.api, self.child_kinds, selector)
                    continue
                except Exception as err:  # noqa: BLE001 - reported below
                    problem = error_message(err)
            left[name] = problem or "unreachable"
        if not left:
            return
        waited = _seconds_since(obj.deletion_timestamp)
        where = "; ".join(f"{name}: {why}" for name, why in left.items())
        if self.orphan_after is not None and waited >= self.orphan_after:
            ctx.event(obj, True, "ChildrenOrphaned",
                      f"gave up after {waited:.0f}s (orphan_after): children left on "
                      f"{', '.join(left)} ({where}); delete them there with "
                      f"kubectl delete -l {selector} {_kinds(self.child_kinds)} -A")
            return
        ctx.event(obj, True, "ChildrenNotDeleted",
                  f"cannot delete the children on {where}; retrying" + (
                      f" until {self.orphan_after:.0f}s after deletion began"
                      if self.orphan_after is not None else ""))
        raise MembersUnreachable(f"{obj.kind} {obj.name}: children not deleted on {where}")


class MembersUnreachable(Exception):
    """The deletion of a hub object waits for members it cannot reach (retried)."""


class MemberSide(Controller[Any]):
    """A `FanOut` as one member cluster runs it: the hub kind as its primary (watched on
    the hub), the labelled children on the member as watched kinds."""

    def __init__(self, fanout: FanOut[Any], cluster: str, hub: Api,
                 field_manager: str, informers: Informers | None = None) -> None:
        self.resource = fanout.resource
        self.name = fanout.name
        self.label_selector = fanout.label_selector
        self.field_selector = fanout.field_selector
        self.max_concurrent_reconciles = fanout.max_concurrent_reconciles
        self.on_error = fanout.on_error
        self.max_backoff = fanout.max_backoff
        self.reconcile_timeout = fanout.reconcile_timeout
        self.transform = fanout.transform
        self.watches = [Watch(kind, _map_to_hub, label_selector=HUB_UID)
                        for kind in fanout.child_kinds]
        super().__init__()
        self.fanout = fanout
        self.cluster = cluster
        self.hub = hub
        self.operator = field_manager
        self.informers = informers
        self.last_applies = LastApplies()
        """What this member last applied to each child (skips applies that cannot
        change anything)."""

    def required_rules(self) -> list[Rule]:
        """What it needs on the member: `FanOut.member_rules`."""
        return self.fanout.member_rules()

    def reconcile(self, obj: Any, ctx: Context) -> Action | None:
        """Apply `obj`'s children on this member, delete those no longer declared, and
        write this member's entry on the hub object."""
        fanout = self.fanout
        if fanout.finalizer not in obj.finalizers:
            return None  # the hub side adds it first; that change queues obj again
        current = entries(obj, fanout.status_field).get(self.cluster)
        # Its entry on the hub is written under its own writes' fences: a reconcile past
        # its timeout, whose writes to the member are refused, writes nothing there either.
        hub = fenced_like(self.hub, ctx.api)
        try:
            applied = apply_children(ctx, obj, fanout.children(obj, self.cluster),
                                     self.last_applies, self.informers)
            pruned = prune_children(ctx, fanout.child_kinds, f"{HUB_UID}={obj.uid}", applied,
                                    self.informers)
        except Exception as err:
            # Children applied before the failure are checked as after a whole pass (the
            # retry may find the hub object gone, and do nothing); the failure is what is
            # reported, whatever the check runs into.
            gone = False
            try:
                gone = self._delete_again_if_deleted(ctx, obj, self._hub_object(obj))
            except Exception:
                ctx.log.debug("%s: the check of %s %s after a failed pass failed", self.name,
                              obj.kind, obj.name, exc_info=True)
            # Refused by the member's API server: ApplyFailed. Not answered at all (a
            # connection error): Unreachable, as the hub side says it. Not on a hub object
            # that is gone or going: its 404 would hide the failure.
            refused = isinstance(err, ApiException) and err.status
            entry = ready_entry(self.cluster, "False" if refused else "Unknown",
                                "ApplyFailed" if refused else "Unreachable",
                                error_message(err), obj.generation, current)
            if not gone and not same_entry(current, entry):
                write_entry(hub, obj, fanout.status_field, self.cluster, entry,
                            self.operator)
            raise
        if pruned:
            ctx.log.info("%s: deleted on %s what %s %s no longer declares: %s", self.name,
                         self.cluster, obj.kind, obj.name, ", ".join(pruned))
        entry = ready_entry(self.cluster, "True", "Applied",
                            f"{len(applied)} children applied", obj.generation, current)
        # The hub object as it is after the applies (the status write answers with it): if
        # its deletion began meanwhile, the hub side's cleanup may have run before them.
        if same_entry(current, entry):
            latest = self._hub_object(obj)
        else:
            try:
                latest = write_entry(hub, obj, fanout.status_field, self.cluster, entry,
                                     self.operator)
            except ApiException as err:
                if err.status != 404:
                    raise
                latest = None
        self._delete_again_if_deleted(ctx, obj, latest)
        return None

    def _hub_object(self, obj: Any) -> dict[str, Any] | None:
        """`obj` as the hub has it now (None: gone)."""
        found: dict[str, Any] | None = self.hub.get_or_none(
            resource_of(type(obj)).path(obj.namespace, obj.name))
        return found

    def _delete_again_if_deleted(self, ctx: Context, obj: Any,
                                 latest: Mapping[str, Any] | None) -> bool:
        """If the hub object (`latest`) is gone or being deleted, delete its children on
        this member again (the hub side's cleanup may have run before this pass applied
        them) and say so."""
        meta = (latest or {}).get("metadata") or {}
        if meta.get("uid") == obj.uid and not meta.get("deletionTimestamp"):
            return False
        deleted = delete_children(ctx.api, self.fanout.child_kinds, f"{HUB_UID}={obj.uid}")
        ctx.log.info("%s: %s %s was deleted while its children were applied on %s: "
                     "deleted them again (%d)", self.name, obj.kind, obj.name,
                     self.cluster, deleted)
        return True


def _map_to_hub(child: Mapping[str, Any], objects: Objects) -> list[tuple[str, str]]:
    return hub_key(child)


def apply_children(ctx: Context, owner: CustomResource, children: Sequence[Any],
                   last: LastApplies | None = None,
                   informers: Informers | None = None) -> set[tuple[str, str, str]]:
    """Server-side apply each child (labelled with `owner`) through `ctx`; the
    (apiVersion/kind, namespace, name) of each. With `last` and `informers`, a child whose
    cached resourceVersion is still the one the last apply of the same body left is not
    applied again (`LastApplies`: nobody changed it since, so the apply could not)."""
    done: set[tuple[str, str, str]] = set()
    labels = child_labels(owner)
    for child in children:
        spec, body = encode(child, ctx.client)
        meta = dict(body.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        body["metadata"] = meta
        namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
        done.add((f"{spec.api_version}/{spec.kind}", namespace, name))
        if last is not None:
            cache = labelled_cache(informers, ctx.objects.resource(spec))
            current = cache.get((namespace, name)) if cache is not None else None
            if current is not None and last.unchanged(
                    body, (current.get("metadata") or {}).get("resourceVersion")):
                continue
        applied = ctx.apply(body)
        if last is not None:
            last.remember(body, applied)
    return done


def labelled_cache(informers: Informers | None, resource: Resource) -> Informer | None:
    """The member's synced cache of `resource`'s children (those with a `HUB_UID`
    label), or None."""
    found = [i for i in (informers.of(resource) if informers is not None else ())
             if i.label_selector == HUB_UID and i.synced.is_set()]
    return found[0] if found else None


def prune_children(ctx: Context, kinds: Sequence[KindSpec], selector: str,
                   keep: set[tuple[str, str, str]],
                   informers: Informers | None = None) -> list[str]:
    """Delete the children of `kinds` matching `selector` (``label=value``) that are not
    in `keep`; read from the member's cache of labelled children when `informers` has it
    synced (a child it still shows but that is gone already is skipped by the delete),
    else listed from the API server."""
    gone: list[str] = []
    label, _, value = selector.partition("=")
    for kind in kinds:
        spec = Kind.of(kind)
        resource = ctx.objects.resource(spec)
        cache = labelled_cache(informers, resource) if label == HUB_UID else None
        found = cache.objects() if cache is not None else ctx.api.get(
            resource.path(), labelSelector=selector).get("items") or ()
        for child in found:
            meta = child.get("metadata") or {}
            name, namespace = str(meta.get("name")), str(meta.get("namespace") or "")
            if (meta.get("labels") or {}).get(label) != value or meta.get(
                    "deletionTimestamp") or (
                    f"{spec.api_version}/{spec.kind}", namespace, name) in keep:
                continue
            if ctx.delete(spec, name, namespace or None):
                gone.append(f"{spec.kind} {namespace + '/' if namespace else ''}{name}")
    return gone


def delete_children(api: Api, kinds: Sequence[KindSpec], selector: str) -> int:
    """Delete every object of `kinds` matching `selector` through `api` (cluster-scoped
    ones last: a Namespace takes what is in it along); how many were deleted."""
    deleted = 0
    found = [(Kind.of(k), api.resource_for(Kind.of(k).api_version, Kind.of(k).kind))
             for k in kinds]
    for _, resource in sorted(found, key=lambda f: not f[1].namespaced):
        for child in api.get(resource.path(), labelSelector=selector).get("items") or ():
            meta = child.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            try:
                api.request("DELETE", resource.path(meta.get("namespace"), meta["name"]))
                deleted += 1
            except ApiException as err:
                if err.status != 404:
                    raise
    return deleted


def _seconds_since(timestamp: str | None) -> float:
    if not timestamp:
        return 0.0
    when = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (dt.datetime.now(dt.timezone.utc) - when).total_seconds()


def _kinds(kinds: Sequence[KindSpec]) -> str:
    return ",".join(Kind.of(k).kind.lower() for k in kinds)


__all__ = [
    "HUB_KIND",
    "HUB_NAME",
    "HUB_NAMESPACE",
    "HUB_UID",
    "ClusterStatus",
    "ClusterStatuses",
    "FanOut",
    "MembersUnreachable",
    "child_labels",
    "hub_key",
    "ready_entry",
    "status_manager",
]
