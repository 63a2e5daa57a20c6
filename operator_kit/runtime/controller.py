"""Controllers: make the world match each object of one kind, one object at a time.

Reconciling is *level-based*: `Controller.reconcile` gets the current object (from the
informer's cache) and makes everything it is responsible for match it. It is never told
what changed — only that something may have — so a missed, repeated or coalesced
notification cannot make it wrong; it just looks again.

How a change reaches `reconcile`, top to bottom::

    Informer (watching.py)  list + watch each kind into its cache (cache.py); events
        │  WatchEvent         primary: its key; owned: its controller owner's key;
        │                     watched: the keys its mapper returns — each source's
        │                     filters (filters.py) decide what passes
        ▼
    WorkQueue (queueing.py)  de-duplicates keys; one worker per key at a time; delays;
        │  key                 higher priority first (`Controller.priority`: what a
        │                      list brought is low, a live change normal)
        ▼
    ControllerRunner._process  (runner.py) the finalizer state machine, then reconcile with a
                               fresh Context (context.py), then requeue / failure
                               backoff / forget

The finalizer, when a controller names one, follows four states:

    not deleting, finalizer absent   → add it (a merge patch carrying resourceVersion,
                                       so it is added exactly once), then reconcile
    not deleting, finalizer present  → reconcile
    deleting, finalizer present      → cleanup(); if it returns, remove the finalizer
                                       (failing → keep it, retry with backoff)
    deleting, finalizer absent       → nothing to do

A change that touches only ``status`` (and bookkeeping metadata) does not queue the
object again (the primary's default filter), so a controller writing its own status
does not reconcile in a loop.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from operator_kit.api.kinds import Kind, KindSpec
from operator_kit.api.rbac import Rule
from operator_kit.api.resources import InvalidResource
from operator_kit.client.events import RULE as EVENTS_RULE
from operator_kit.runtime.cache import LabelSelector
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.context import Context
from operator_kit.runtime.fairness import Fairness, ObjectFlows
from operator_kit.runtime.filters import Filter, function_name
from operator_kit.runtime.objects import Objects, decode
from operator_kit.runtime.queueing import LOW_PRIORITY, NORMAL_PRIORITY
from operator_kit.runtime.transforms import Transform

log = logging.getLogger("operator_kit.controller")

R = TypeVar("R")  # what reconcile gets: a CustomResource, a client model or a dict


@dataclass(frozen=True)
class Action:
    """What to do after a reconcile: look again after a delay, or wait for a change."""

    requeue_after: float | None = None

    @classmethod
    def requeue(cls, seconds: float) -> Action:
        """Reconcile this object again after `seconds`, even if nothing changes."""
        if seconds < 0:
            raise ValueError("requeue delay must be >= 0")
        return cls(float(seconds))

    @classmethod
    def await_change(cls) -> Action:
        """Reconcile this object again only when it (or something it owns) changes."""
        return cls(None)


@dataclass(frozen=True)
class Owns:
    """A kind whose objects this controller makes, each with a controller
    ownerReference to its primary: a change to one reconciles that primary.

    ``Owns("batch/v1/Job", filters=[generation_changed])``; a plain kind in ``owns``
    means ``Owns(kind)``. With ``metadata_only=True`` only the objects' metadata is
    watched and cached (``ctx.owned`` then returns metadata-only dicts): for a
    controller that only needs to know what exists, it is a fraction of the memory.
    `transform` changes each object before it is cached, e.g.
    ``transform=drop_fields("data")`` (`operator_kit.runtime.transforms`)."""

    kind: KindSpec
    filters: Sequence[Filter] = ()
    metadata_only: bool = False
    transform: Transform | None = None


Mapper = Callable[[Any, Objects], Iterable[Any] | None]
"""Maps a changed object of a watched kind to the primaries to reconcile; gets the
object (decoded like a read of its kind) and the operator's cached reads (`Objects`).

It returns a list (any iterable) of names (``str``, in the changed object's namespace),
``(namespace, name)`` keys (two ``str``; a namespaced primary needs the namespace) or
objects of the primary's kind (its `CustomResource` class, or a dict with its ``kind``,
an ``apiVersion`` of its group and ``metadata.name``); ``None`` or ``[]`` when there is
nothing to reconcile. Anything else — a ``str`` by itself (it is not iterated into
letters), the changed object or another kind's, a malformed key — names no primary: the
runner logs it (an ERROR naming the mapper, the value's type and what is accepted, once
per mapper; later ones at DEBUG), counts it in ``operator_kit_mapper_errors_total``, and
still queues the result's valid items (operator_kit.runtime.mapping)."""


@dataclass(frozen=True)
class Watch:
    """A related kind — not owned — whose changes reconcile the primaries `mapper`
    returns: a list of names (in the changed object's namespace), ``(namespace, name)``
    keys, or the primary objects themselves (see `Mapper`; a bare ``str`` or an object
    of another kind is an error, logged and counted). Keys of primaries that do not
    exist, or that the controller does not watch, are ignored.

    E.g. the Backups that reference a changed Secret, through an index on Backups::

        indexes = {"secret": Index(Backup, lambda b: b.spec.secret_name)}
        watches = [Watch("v1/Secret", lambda secret, objects: objects.list(
            Backup, secret["metadata"]["namespace"],
            index=("secret", secret["metadata"]["name"])))]
    """

    kind: KindSpec
    mapper: Mapper
    filters: Sequence[Filter] = ()
    metadata_only: bool = False
    label_selector: str | None = None
    transform: Transform | None = None
    """Changes each object before it is cached (`operator_kit.runtime.transforms`)."""


@dataclass(frozen=True)
class Index:
    """A named index over a cached kind: `function` maps an object (decoded like a read
    of `kind`) to the value (or values) it is found under with
    ``ctx.list(kind, index=(name, value))``. The kind must be the primary, owned or
    watched."""

    kind: KindSpec
    function: Callable[[Any], str | Iterable[str] | None]

    def over_cache(self, api_client: Any) -> Callable[[dict[str, Any]], list[str]]:
        """This index's function over the cache's dicts: decodes each like a read of its
        kind. It names this `Index` (``__wrapped__``), so controllers sharing one
        declaration share the index."""
        spec = Kind.of(self.kind)

        def values(raw: dict[str, Any]) -> list[str]:
            found = self.function(decode(spec, raw, api_client))
            if found is None:
                return []
            if isinstance(found, str):
                return [found]
            return [str(value) for value in found]

        values.__qualname__ = function_name(self.function)
        values.__wrapped__ = self  # type: ignore[attr-defined]
        return values


class Controller(Generic[R]):
    """Subclass, name the `resource`, and write `reconcile`.

    ``resource`` is the kind it reconciles, in any form a kind is named
    (`operator_kit.api.kinds`): a `CustomResource` class — the operator's own kind, whose
    CRD its manifests hold, or another party's declared ``external = True`` (no CRD is
    generated for it); a ``"group/version/Kind"`` string (``"apps/v1/Deployment"``,
    ``"v1/Namespace"``, ``"cert-manager.io/v1/Certificate"``); or a kubernetes client
    model class (``V1Deployment``). Reconcile gets each object in that form (the
    instance, the API's dict, the model), as ``ctx.get`` returns it. Scope and plural
    come from the API server's discovery when the operator starts; a kind it does not
    serve fails the start, naming the kind.

    Class attributes configure it (all optional but `resource`):

    - ``writes_status``: whether reconcile writes the primary's status subresource (its
      RBAC rule); default: True for the operator's own kinds, False for any other;

    - ``owns``: kinds whose changes reconcile their controller owner — CustomResource
      classes, ``"batch/v1/Job"`` strings, client model classes, or `Owns` with
      filters; they are cached, and ``ctx.owned(obj, kind)`` reads them;
    - ``watches``: related kinds (`Watch`) whose changes reconcile the primaries a
      mapper returns; cached too;
    - ``indexes``: named `Index` functions over a cached kind, for
      ``ctx.list(kind, index=(name, value))``;
    - ``filters``: which changes of a primary object reconcile it (default
      `operator_kit.filters.spec_changed`; see that module's table);
    - ``skip_own_echoes``: when True, the watch's echo of the controller's own
      ``apply_owned`` does not reconcile the owner again (default False, as in
      controller-runtime: ported code relies on that echo);
    - ``finalizer`` (a name; then `cleanup` runs before the object goes),
      ``namespace`` (None: all; a name; or several names, a list or set: one watch
      per namespace of the primary and of each namespaced owned and watched kind),
      ``label_selector``, ``field_selector``,
      ``max_concurrent_reconciles``, ``on_error`` (first retry delay after a failure,
      doubling up to ``max_backoff``), ``rules`` (extra RBAC rules reconcile needs)
      and ``name`` (default: the kind, lower case);
    - ``reconcile_timeout`` (seconds; default None: no timeout, as controller-runtime's
      ``ReconciliationTimeout``): a reconcile running longer is abandoned — its key is
      released for a retry with backoff, its Context's further writes are refused
      (`operator_kit.Fenced`), a replacement worker keeps the
      concurrency, and what it returns at last is discarded. A thread cannot be
      cancelled, so the abandoned one runs on until its call returns, beside the
      retry (`operator_kit.runtime.timeouts`).
    - ``fleet``: when True, the controller runs on every member cluster of a fleet
      (`operator_kit.fleet`), not on the hub; ``ctx.cluster`` names the member.
    - ``transform``: a function applied to each primary object before it is cached
      (`operator_kit.runtime.transforms`; after the operator's default, which drops
      ``managedFields``): what reconcile gets is what it returns.
    - ``fairness``: how the work queue shares the workers between flows (`Fairness`;
      default: each namespace a flow, served in turn, so one namespace's flood does not
      delay another's change); None: one first-in, first-out queue per priority.
    """

    resource: KindSpec
    writes_status: bool | None = None
    owns: Sequence[KindSpec | Owns] = ()
    watches: Sequence[Watch] = ()
    indexes: Mapping[str, Index] = {}
    filters: Sequence[Filter] | None = None
    skip_own_echoes: bool = False
    finalizer: str | None = None
    namespace: str | Collection[str] | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    max_concurrent_reconciles: int = 1
    on_error: float = 5.0
    max_backoff: float = 300.0
    reconcile_timeout: float | None = None
    rules: Sequence[Rule] = ()
    name: str = ""
    transform: Transform | None = None
    fleet: bool = False
    fairness: Fairness | None = Fairness()

    def __init__(self) -> None:
        primary = self.primary_kind()
        if not self.name:
            self.name = primary.kind.lower()
        if self.max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")
        if self.reconcile_timeout is not None and not self.reconcile_timeout > 0:
            raise ValueError(f"{type(self).__name__}.reconcile_timeout must be a number of "
                             f"seconds above 0, or None for no timeout (not "
                             f"{self.reconcile_timeout!r})")
        if self.fairness is not None and not isinstance(self.fairness, Fairness):
            raise TypeError(f"{type(self).__name__}.fairness must be a Fairness(flow=..., "
                            f"weights=...) or None (off), not {self.fairness!r}")
        for watch in self.watches:
            if not isinstance(watch, Watch) or not callable(watch.mapper):
                raise TypeError(f"{type(self).__name__}.watches takes Watch(kind, mapper) "
                                f"entries, not {watch!r}")
        # A selector the API server would refuse fails here, not as a watch retrying a 400.
        for where, selector in [("label_selector", self.label_selector),
                                *((f"watches[{i}].label_selector", w.label_selector)
                                  for i, w in enumerate(self.watches))]:
            if selector is not None:
                try:
                    LabelSelector.of(selector)
                except ValueError as err:
                    raise ValueError(f"{type(self).__name__}.{where}: {err}") from None
        cached = {self.primary_kind(), *self.owned_kinds(), *self.watched_kinds()}
        for name, index in self.indexes.items():
            if not isinstance(index, Index):
                raise TypeError(f"{type(self).__name__}.indexes[{name!r}] must be an "
                                "Index(kind, function)")
            if Kind.of(index.kind) not in cached:
                raise ValueError(
                    f"{type(self).__name__}.indexes[{name!r}] is over {Kind.of(index.kind)}, "
                    "which this controller does not cache: name it in `owns` or `watches`")

    def reconcile(self, obj: R, ctx: Context) -> Action | None:
        """Make the world match `obj`. Return an `Action` (or None: wait for a change);
        raise to retry with backoff."""
        raise NotImplementedError(f"{type(self).__name__} must define reconcile()")

    def priority(self, event: WatchEvent) -> int:
        """The work queue priority of the reconcile `event` asks for; higher goes first.

        Every source's events come here: the primary kind's, an owned kind's, a watched
        kind's (``event.object["kind"]`` says which), after their filters. The default,
        as controller-runtime's priority queue: `LOW_PRIORITY` (-100) for what a list
        brought (``event.from_list``: the initial list after a start or a failover, a
        relist), `NORMAL_PRIORITY` (0) for a live change, so a new or changed object is
        reconciled before the backlog of a restart. Override it to put some objects
        first, and call ``super().priority(event)`` for the rest. A key waiting in the
        queue keeps the highest priority it was asked with."""
        return LOW_PRIORITY if event.from_list else NORMAL_PRIORITY

    def cleanup(self, obj: R, ctx: Context) -> None:
        """Undo what reconcile did outside the cluster; runs once the object is being
        deleted, before the finalizer is removed. Raise to keep the finalizer and retry."""

    def cleanup_invalid(self, raw: dict[str, Any], ctx: Context,
                        error: InvalidResource) -> None:
        """Clean up an object being deleted that no longer decodes (`raw` is the API's
        dict; `error` says what does not fit). Return to have the finalizer removed;
        raise (the default) to keep it: deletion stays blocked, and every retry posts a
        Warning Event and a log line with the command that removes the finalizer."""
        raise InvalidResource(f"cleanup needs a {self.primary_kind().kind}; define "
                              f"{type(self).__name__}.cleanup_invalid to clean up from the "
                              "raw object")

    def watch_namespaces(self) -> list[str | None]:
        """The namespaces its watches are in, sorted: ``[None]`` for every namespace."""
        if self.namespace is None or isinstance(self.namespace, str):
            return [self.namespace]
        names = sorted(set(self.namespace))
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ValueError(f"{type(self).__name__}.namespace: {self.namespace!r} names no "
                             "namespace; give None (all), a name, or several names")
        return list(names)

    def primary_kind(self) -> Kind:
        """The `Kind` this controller reconciles (its `resource`)."""
        spec = getattr(self, "resource", None)
        if spec is None:
            raise TypeError(f"{type(self).__name__}.resource must name the kind it reconciles: "
                            "a CustomResource class, a 'group/version/Kind' string such as "
                            "'apps/v1/Deployment' or 'v1/Namespace', or a kubernetes client "
                            "model class such as kubernetes.client.V1Deployment")
        try:
            return Kind.of(spec)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{type(self).__name__}.resource: {err}") from None

    def status_written(self) -> bool:
        """Whether reconcile writes the primary's status: ``writes_status`` when set, else
        True for a kind the operator defines and False for any other (a built-in kind's
        status belongs to Kubernetes; another party's CRD to its own controller)."""
        if self.writes_status is not None:
            return bool(self.writes_status)
        return self.primary_kind().defined_here

    def primary_transform(self) -> Transform | None:
        """``transform`` as declared: a function of the object (a function assigned in
        the class body is not made a method of the controller)."""
        declared = inspect.getattr_static(self, "transform", None)
        if isinstance(declared, staticmethod):
            declared = declared.__func__
        if declared is not None and not callable(declared):
            raise TypeError(f"{type(self).__name__}.transform must be a function of the "
                            f"object (a dict) returning the object to cache, not {declared!r}")
        return declared  # type: ignore[no-any-return]

    def owned(self) -> list[Owns]:
        """``owns`` with every entry as an `Owns`."""
        return [spec if isinstance(spec, Owns) else Owns(spec) for spec in self.owns]

    def owned_kinds(self) -> list[Kind]:
        """The `Kind` of each entry in `owns`, in order."""
        return [Kind.of(owned.kind) for owned in self.owned()]

    def watched_kinds(self) -> list[Kind]:
        """The `Kind` of each `Watch` in `watches`, in order."""
        return [Kind.of(watch.kind) for watch in self.watches]

    def required_rules(self) -> list[Rule]:
        """What this controller needs: its kind, its status, finalizers, owned kinds
        (which it makes and may delete) and watched kinds (which it reads)."""
        kind = self.primary_kind()
        group, plural = kind.group, kind.resource_name
        if kind.defined_here:
            verbs = ["get", "list", "watch", "patch", "update"]
        else:  # another party's kind: read it; patch only to add and remove the finalizer
            verbs = ["get", "list", "watch", *(["patch"] if self.finalizer else [])]
        rules = [Rule([group], [plural], verbs)]
        if self.status_written():
            rules.append(Rule([group], [f"{plural}/status"], ["get", "patch", "update"]))
        if self.owns:
            # Owner references with blockOwnerDeletion need update on the owner's
            # finalizers where the OwnerReferencesPermissionEnforcement plugin is on.
            rules.append(Rule([group], [f"{plural}/finalizers"], ["update"]))
        for owned in self.owned_kinds():
            # Server-side apply creates or patches; ctx.delete removes old children.
            rules.append(Rule([owned.group], [owned.resource_name],
                              ["get", "list", "watch", "create", "patch", "delete"]))
        for watched in self.watched_kinds():
            rules.append(Rule([watched.group], [watched.resource_name],
                              ["get", "list", "watch"]))
        rules.append(EVENTS_RULE)
        rules.extend(self.rules)
        return rules


def event_priority(controller: Controller[Any], event: WatchEvent) -> int:
    """``controller.priority(event)``; if that raises or gives something other than an
    int, the event still queues its keys, at `NORMAL_PRIORITY` (logged)."""
    try:
        priority = controller.priority(event)
    except Exception:
        log.exception("%s: priority() failed for a %s event: queued at normal priority",
                      controller.name, event.type)
        return NORMAL_PRIORITY
    if isinstance(priority, int) and not isinstance(priority, bool):
        return priority
    log.error("%s: priority() returned %r for a %s event, not an int: queued at normal "
              "priority", controller.name, priority, event.type)
    return NORMAL_PRIORITY


def queue_flows(controller: Controller[Any], labels: tuple[str, str],
                read: Callable[[tuple[str, str]], dict[str, Any] | None]) -> ObjectFlows | None:
    """The flows of `controller`'s work queue (`labels`: its controller and cluster), as
    its ``fairness`` says, reading objects with `read`; None when fairness is off."""
    fairness = controller.fairness
    return None if fairness is None else ObjectFlows(fairness, *labels, read=read)


def checked_result(result: object) -> Action | None:
    """What reconcile returned, if it is an Action or None; else a TypeError saying so."""
    if result is None or isinstance(result, Action):
        return result
    hint = (" — the method itself, not its result: call it, e.g. Action.requeue(30)"
            if callable(result) else "")
    raise TypeError(f"reconcile returned {result!r} ({type(result).__name__}){hint}; "
                    "return an Action — Action.requeue(seconds) or Action.await_change() "
                    "— or None (wait for a change)")
