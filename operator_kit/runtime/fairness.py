"""Fairness between flows in the work queue: which flow a key belongs to, and which flow
is served next.

One team applying 5,000 objects must not make every other team's change wait behind
them. So the work queue (queueing.py) groups its ready keys into *flows* -- by default
the object's namespace; a controller may name a function of the object instead, a
tenant label say (`Fairness`) -- and its workers take keys from the flows in turn, by
*deficit round robin* (Shreedhar and Varghese, 1995; the API server's Priority and
Fairness queues the same way), within each priority level:

* the flows that have ready keys at a priority take turns, in the order each became
  active; a flow joining goes to the end of the round;
* each turn, a flow's credit grows by its *quantum* -- its weight, scaled so that the
  smallest weight is one key -- and it hands out one key per whole unit of credit; the
  fraction left carries over to its next turn, so weights 1 and 1.5 serve 2 keys to 3;
* a flow whose keys run out leaves the round, and its credit is forgotten.

What that promises: while a flood of keys waits in one flow, a key of another flow at
the same (or a higher) priority waits for at most one turn of every other active flow --
with weights of 1, one key each -- not for the flood. What it does not: within a flow,
keys stay first in, first out, so one flow's own backlog is as long as it is; priority
still comes first (a normal key of the flood goes before any low key of another flow);
and fairness shares the workers' turns, not their time: a flow whose reconciles take
longer takes more of the time.

The queue's other guarantees do not depend on flows: de-duplication, one worker per key,
delays and failure backoff happen before a key is ready, and the flow only decides its
place among the ready keys (`FairQueue`).

The flow of a key is decided as it is added (`ObjectFlows`): the namespace of a
``(namespace, name)`` key needs no read; a controller's function reads the object from
its primary cache. A function that raises, or returns anything but a ``str``, does not
lose the key: it goes to the default flow `DEFAULT_FLOW` (``""``, as cluster-scoped
objects and objects no longer cached), with one ERROR naming the function and the value
(per controller and cluster; later ones at DEBUG) and a count in
``operator_kit_workqueue_flow_errors_total``.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from operator_kit import metrics
from operator_kit.runtime.filters import function_name

__all__ = ["DEFAULT_FLOW", "FairQueue", "Fairness", "FlowPolicy", "ObjectFlows"]

log = logging.getLogger("operator_kit.controller")

T = TypeVar("T", bound=Hashable)
K_contra = TypeVar("K_contra", contravariant=True)

DEFAULT_FLOW = ""
"""The flow of cluster-scoped objects, of objects the cache no longer holds, of keys whose
flow function failed -- and of every key when fairness is off."""

FlowFunction = Callable[[dict[str, Any]], str]
"""Names the flow of an object: gets it as cached (a dict, after the controller's
`transform`), returns a ``str``."""


@dataclass(frozen=True, eq=False)
class Fairness:
    """How a controller's work queue shares its workers between flows (`Controller.fairness`).

    ``Fairness()``, the default, makes each namespace a flow; ``Fairness(flow=f)`` names
    the flow of each object with ``f(obj)`` (the object as cached, a dict), e.g. a tenant
    label::

        fairness = Fairness(
            flow=lambda obj: obj["metadata"].get("labels", {}).get("example.com/tenant", ""),
            weights={"platform": 3})

    ``weights`` gives a flow more turns than the others (3: three keys for every one of a
    flow of weight 1, the default); ``fairness = None`` on the controller turns fairness
    off (one first-in, first-out queue per priority, as before). A weight that is not a
    positive number is refused here, as the class is declared.
    """

    flow: FlowFunction | None = None
    weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.flow is not None and not callable(self.flow):
            raise TypeError(f"Fairness(flow=...) must be a function of the object returning "
                            f"its flow's name (a str), or None for the namespace; not "
                            f"{self.flow!r}")
        if not isinstance(self.weights, Mapping):
            raise TypeError(f"Fairness(weights=...) must map flow names to positive numbers, "
                            f"e.g. {{'team-a': 2}}; not {self.weights!r}")
        for flow, weight in self.weights.items():
            if not isinstance(flow, str):
                raise TypeError(f"Fairness(weights=...): flow names are str, not {flow!r}")
            if (isinstance(weight, bool) or not isinstance(weight, int | float)
                    or not math.isfinite(weight) or weight <= 0):
                raise ValueError(f"Fairness(weights=...): the weight of flow {flow!r} is "
                                 f"{weight!r}; give a positive number (its share of turns; "
                                 f"flows not named have 1)")
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))

    def quanta(self) -> Callable[[str], float]:
        """Each flow's quantum: its weight over the smallest weight (of those named and
        the default 1), so that every turn hands out at least one key."""
        smallest = min([1.0, *self.weights.values()])
        scaled = {flow: weight / smallest for flow, weight in self.weights.items()}
        default = 1.0 / smallest
        return lambda flow: scaled.get(flow, default)


class FlowPolicy(Protocol[K_contra]):
    """What the work queue asks of its flows: each key's flow and each flow's quantum."""

    def of(self, key: K_contra) -> str:
        """The flow `key` joins (never raises)."""

    def quantum(self, flow: str) -> float:
        """Keys `flow` may take per turn, at least 1 (fractions carry over)."""


class ObjectFlows:
    """A controller's flows over ``(namespace, name)`` keys, as its `Fairness` says:
    the namespace, or the flow function over the object `read` returns from the cache."""

    def __init__(self, fairness: Fairness, controller: str, cluster: str = metrics.HUB,
                 read: Callable[[tuple[str, str]], dict[str, Any] | None] = lambda key: None,
                 ) -> None:
        self.fairness = fairness
        self.controller = controller
        self.cluster = cluster
        self._read = read
        self.quantum = fairness.quanta()
        self._function = fairness.flow
        self._errors = metrics.FLOW_ERRORS.labels(controller, cluster)  # 0 from the start
        self._reported = False

    def of(self, key: tuple[str, str]) -> str:
        """The flow of `key`: never raises; `DEFAULT_FLOW` when it cannot be told."""
        function = self._function
        if function is None:
            return key[0]
        try:
            obj = self._read(key)
            if obj is None:
                return DEFAULT_FLOW  # deleted: its last reconcile only forgets it
            flow = function(obj)
        except Exception as err:  # noqa: BLE001 - reported below; the key still queues
            self._report(key, f"raised {type(err).__name__}: {err}")
            return DEFAULT_FLOW
        if isinstance(flow, str):
            return flow
        self._report(key, f"returned {_clip(repr(flow))} ({type(flow).__name__}), not a str")
        return DEFAULT_FLOW

    def _report(self, key: tuple[str, str], what: str) -> None:
        self._errors.inc()
        assert self._function is not None  # only a function can fail
        cluster = f" on cluster {self.cluster}" if self.cluster else ""
        log.log(logging.DEBUG if self._reported else logging.ERROR,
                "%s%s: fairness flow function %s %s for %s/%s: the key is queued in the "
                "default flow \"\" (its next errors are logged at DEBUG and counted in "
                "operator_kit_workqueue_flow_errors_total)", self.controller, cluster,
                function_name(self._function), what, key[0], key[1])
        self._reported = True


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _one(flow: str) -> float:
    return 1.0


class _Round(Generic[T]):
    """The ready items of one priority: a first-in, first-out list per flow, served by
    deficit round robin. An emptied flow keeps its place in `turns` until reached."""

    __slots__ = ("credit", "flows", "quantum", "size", "turns")

    def __init__(self, quantum: Callable[[str], float]) -> None:
        self.quantum = quantum
        self.flows: dict[str, OrderedDict[T, None]] = {}  # every flow in `turns`
        self.turns: deque[str] = deque()  # the first is the flow being served
        self.credit: dict[str, float] = {}  # a flow's credit left, if any
        self.size = 0

    def push(self, flow: str, item: T) -> None:
        items = self.flows.get(flow)
        if items is None:
            items = self.flows[flow] = OrderedDict()
            self.turns.append(flow)
        items[item] = None
        self.size += 1

    def remove(self, flow: str, item: T) -> None:
        del self.flows[flow][item]
        self.size -= 1

    def pop(self) -> T | None:
        turns, flows = self.turns, self.flows
        while turns:
            flow = turns[0]
            items = flows[flow]
            if not items:
                self._leave(flow)
                continue
            credit = self.credit.get(flow, 0.0)
            if credit < 1.0:  # its turn begins
                credit += self.quantum(flow)
            item = items.popitem(last=False)[0]
            self.size -= 1
            credit -= 1.0
            if not items:
                self._leave(flow)
            else:
                self.credit[flow] = credit
                if credit < 1.0:  # its turn ends; the fraction left carries over
                    turns.rotate(-1)
            return item
        return None

    def _leave(self, flow: str) -> None:
        """`flow`, first in turn, has no items: it leaves the round and its credit."""
        self.turns.popleft()
        del self.flows[flow]
        self.credit.pop(flow, None)


class FairQueue(Generic[T]):
    """The ready items of a work queue: highest priority first; within a priority, flows
    in turn by deficit round robin (each flow's `quantum`); within a flow, first in,
    first out. An item is in at most one place; `push` moves it.

    Every operation is O(1) but a new priority level (O(log levels)). With one flow (no
    fairness) it is the plain priority queue: first in, first out within a priority.
    """

    def __init__(self, quantum: Callable[[str], float] = _one) -> None:
        self._quantum = quantum
        self._rounds: dict[int, _Round[T]] = {}  # a priority with items -> its round
        self._heap: list[int] = []  # -priority of each level in _rounds (and stale ones)
        self._heaped: set[int] = set()  # the priorities in _heap, each once
        self._where: dict[T, tuple[int, str]] = {}  # item -> (priority, flow)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item: object) -> bool:
        return item in self._where

    def push(self, item: T, priority: int, flow: str) -> None:
        """Put `item` last in `flow` at `priority`, leaving the place it had."""
        self.remove(item)
        level = self._rounds.get(priority)
        if level is None:
            level = self._rounds[priority] = _Round(self._quantum)
            if priority not in self._heaped:
                self._heaped.add(priority)
                heapq.heappush(self._heap, -priority)
        level.push(flow, item)
        self._where[item] = (priority, flow)

    def remove(self, item: T) -> bool:
        """Take `item` out, wherever it is; whether it was there."""
        where = self._where.pop(item, None)
        if where is None:
            return False
        priority, flow = where
        level = self._rounds[priority]
        level.remove(flow, item)
        if not level.size:
            del self._rounds[priority]
        return True

    def pop(self) -> T | None:
        """The next item: the top priority's flow whose turn it is, its first item."""
        while self._heap:
            priority = -self._heap[0]
            level = self._rounds.get(priority)
            if level is None:  # emptied since
                heapq.heappop(self._heap)
                self._heaped.discard(priority)
                continue
            item = level.pop()
            assert item is not None  # a level in _rounds has items
            del self._where[item]
            if not level.size:
                del self._rounds[priority]
            return item
        return None

    def by_priority(self) -> dict[int, int]:
        """The number of items at each priority that has any."""
        return {priority: level.size for priority, level in self._rounds.items()}

    def flows(self) -> Iterator[tuple[str, int, T]]:
        """(flow, its items at one priority, the first of them) for each flow with items
        at each priority."""
        for level in list(self._rounds.values()):
            for flow, items in level.flows.items():
                if items:
                    yield flow, len(items), next(iter(items))
