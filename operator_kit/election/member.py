"""An `Operator`'s side of sharding: joining as a member, and the runners of each mode.

Every replica of a sharded operator is a member (`operator_kit.election.sharding`): it
picks its mode at start (`operator_kit.election.shard_probe`), holds a member Lease that
names it (`operator_kit.election.modes`), and once the Lease is held runs the sharded
controllers — in server mode through a `RangeKeeper` (its hash slots), in label mode on
the objects labelled with its identity, behind a `LabelGate`. A server-mode member that
sees a label-mode one falls back (`ShardMember._fall_back`), and so the whole group runs
label mode. The leader runs the label sharder while the operator runs label mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from operator_kit import metrics
from operator_kit.client.transport import Api
from operator_kit.election import range_keeper, shard_probe, sharder
from operator_kit.election.modes import LabelGate
from operator_kit.election.sharding import Sharding
from operator_kit.runtime.controller import Controller
from operator_kit.runtime.objects import Objects
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.scope import ShardScope
from operator_kit.runtime.watching import Informers

log = logging.getLogger("operator_kit.operator")


class ShardMember:
    """The sharding half of `operator_kit.Operator` (module docstring); the attributes
    below are the Operator's."""

    name: str
    controllers: list[Controller[Any]]
    stopping: threading.Event
    sharding: Sharding | None
    sharding_mode: str | None
    _lock: threading.Lock
    _members: sharder.Members | None
    _membership: sharder.Membership | None
    _ranges: range_keeper.RangeKeeper | None
    _sharder: sharder.Sharder | None
    _runners: list[ControllerRunner]
    _started: bool

    if TYPE_CHECKING:  # the Operator's
        @property
        def api(self) -> Api: ...

        @property
        def namespace(self) -> str: ...

        @property
        def informers(self) -> Informers: ...

        def leading(self) -> bool: ...

        def _lost_lease(self) -> None: ...

        def _new_informers(self, stop: threading.Event) -> Informers: ...

        def _run_controllers(self, controllers: Sequence[Controller[Any]],
                             may_reconcile: Any, shard: ShardScope | None = None) -> None: ...

    def _start_membership(self, config: Sharding) -> None:
        """Every replica is a member: once its member Lease is held it runs the sharded
        controllers on its share, in the mode picked now."""
        unknown = set(config.controllers or ()) - {c.name for c in self.controllers}
        if unknown:
            raise ValueError(f"Sharding controllers names {', '.join(sorted(unknown))}, which "
                             f"operator {self.name} does not have; its controllers are "
                             f"{', '.join(c.name for c in self.controllers)}")
        # Fleet controllers run on the member clusters (operator_kit.fleet), never here.
        sharded = [c for c in self.controllers if config.shards(c.name) and not c.fleet]
        self.sharding_mode = mode = self._pick_mode(config, sharded)
        membership: sharder.Membership

        def joined() -> None:
            if mode == "server":
                self._start_ranges(config, sharded, membership)
            else:
                self._run_labels(config, sharded, membership)

        self._members = sharder.Members(self.informers, operator=self.name,
                                        namespace=self.namespace,
                                        lease_duration=config.lease_duration)
        self._members.start()
        membership = sharder.Membership(self.api, config, operator=self.name,
                                        namespace=self.namespace, on_joined=joined,
                                        on_lost=self._lost_lease, mode=mode)
        self._membership = membership
        log.info("operator %s: joining as shard member %s (lease %s)", self.name,
                 membership.identity, membership.election.lease_name)
        membership.start()

    def _pick_mode(self, config: Sharding, sharded: Sequence[Controller[Any]]) -> str:
        objects = Objects(self.api)
        return shard_probe.pick_mode(self.api, config.mode, self.name, {
            c.name: objects.resource(c.resource).path(c.watch_namespaces()[0])
            for c in sharded})

    def _run_labels(self, config: Sharding, sharded: Sequence[Controller[Any]],
                    membership: sharder.Membership) -> None:
        """Label mode: the runners on the objects labelled with this member, starting no
        reconcile while a live member serves hash slots (`LabelGate`)."""
        assert self._members is not None
        scope = ShardScope(config.label_key(self.name), config.drain_label_key(self.name),
                           membership.identity, self.name)
        gate = LabelGate(self._members, operator=self.name, identity=membership.identity,
                         fence=membership.may_reconcile)
        self._run_controllers(sharded, gate, scope)

    def _start_ranges(self, config: Sharding, sharded: Sequence[Controller[Any]],
                      membership: sharder.Membership) -> None:
        """Server mode: a `RangeKeeper` starts and stops generations of the sharded runners."""
        make = range_keeper.generations(
            self.api, sharded, field_manager=self.name, may_reconcile=membership.may_reconcile,
            stopping=self.stopping, informers=self._new_informers, started=self._add_runners,
            stopped=self._drop_runners)
        with self._lock:
            if self.stopping.is_set() or self._members is None:
                return
            self._ranges = range_keeper.RangeKeeper(
                self._members, operator=self.name, identity=membership.identity,
                may_reconcile=membership.may_reconcile, make=make,
                annotate=membership.elector.annotate, stop=self.stopping,
                on_fall_back=lambda: self._fall_back(config, sharded, membership))
            self._ranges.start()
            self._started = True

    def _fall_back(self, config: Sharding, sharded: Sequence[Controller[Any]],
                   membership: sharder.Membership) -> None:
        """The group runs label mode: this member released its slots (`RangeKeeper`) and
        runs label mode from now on, with the sharder if it leads."""
        self.sharding_mode = "labels"
        for each in ("labels", "server"):
            metrics.SHARD_MODE.labels(self.name, each).set(1 if each == "labels" else 0)
        self._run_labels(config, sharded, membership)
        if self.leading():
            self._start_sharder()

    def _start_sharder(self) -> None:
        """On the leader in label mode: the sharder (once)."""
        with self._lock:
            if self.stopping.is_set() or self._members is None or self.sharding is None \
                    or self._sharder is not None:
                return
            self._sharder = sharder.Sharder(
                self.api, self.informers, self.sharding, operator=self.name,
                members=self._members, kinds=self._sharded_kinds(self.sharding),
                stop=self.stopping)
            self._sharder.start()

    def _add_runners(self, runners: list[ControllerRunner]) -> bool:
        with self._lock:
            if self.stopping.is_set():
                return False
            self._runners += runners
            return True

    def _drop_runners(self, runners: list[ControllerRunner]) -> None:
        with self._lock:
            self._runners = [r for r in self._runners if r not in runners]

    @property
    def ranges(self) -> range_keeper.RangeKeeper | None:
        """This member's slots in server mode (None otherwise, or before it joined)."""
        return self._ranges

    @property
    def membership(self) -> sharder.Membership | None:
        """This replica's shard membership (None without sharding, or before start)."""
        return self._membership

    def ready_detail(self) -> str:
        """``/readyz``'s lines after its first: the sharding mode in use, and slots."""
        return range_keeper.readiness(self.sharding_mode, self._ranges)

    def _sharded_kinds(self, config: Sharding) -> list[sharder.ShardedKind]:
        objects = Objects(self.api)
        kinds = []
        for controller in self.controllers:
            if config.shards(controller.name) and not controller.fleet:  # per namespace
                kinds += [sharder.ShardedKind(
                    objects.resource(controller.resource), namespace,
                    controller.label_selector, [objects.resource(k.api_version + "/" + k.kind)
                                                for k in controller.owned_kinds()])
                    for namespace in controller.watch_namespaces()]
        return kinds
