"""What a server-mode member's stopped generation hands the next (`Carried`): the caches
of the slots it keeps, and the keys still waiting. The whole move runs against a real API
server in tests/cluster/test_sharding_server.py (0 kept objects reconciled again)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from operator_kit.client.transport import Resource
from operator_kit.election.generation import Carried, in_slots
from operator_kit.election.shard_ranges import selector, slot_of, slot_range, uid_hash
from operator_kit.runtime.queueing import WorkQueue
from operator_kit.runtime.watching import Informer, Informers, Key

WIDGETS = Resource("ctl.operator-kit.test", "v1", "widgets", "Widget", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)


def obj(name: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": str(uuid.uuid4()),
                         "resourceVersion": version}}


@dataclass
class StoppedRunner:
    """What `Carried.of` reads of a stopped runner."""

    primary: Informer
    name: str = "widgets"
    queue: WorkQueue[Key] = field(default_factory=lambda: WorkQueue("widgets"))
    refused: dict[Key, float] = field(default_factory=dict)

    @property
    def primaries(self) -> dict[str | None, Informer]:
        return {"ns": self.primary}


class NewRunner(StoppedRunner):
    def __init__(self, primary: Informer) -> None:
        super().__init__(primary)
        self.added: dict[Key, float] = {}

    def primary_of(self, key: Key) -> Informer:
        return self.primary

    def enqueue(self, key: Key, delay: float = 0.0, **_: Any) -> None:
        self.added[key] = delay


def generation(shard_selector: str) -> tuple[Informers, Informer, Informer]:
    informers = Informers(None, threading.Event())  # type: ignore[arg-type]
    primary = informers.informer(WIDGETS, namespace="ns", shard_selector=shard_selector)
    owned = informers.informer(CONFIG_MAPS, namespace="ns")
    return informers, primary, owned


def test_the_next_generation_starts_from_the_kept_slots_objects_and_every_owned_one() -> None:
    objects = [obj(f"w{i}") for i in range(200)]
    kept = frozenset(slot_of(uid_hash(o["metadata"]["uid"])) for o in objects[:50])
    old, old_primary, old_owned = generation(selector([slot_range(0)]))
    old_primary.store.replace({("ns", o["metadata"]["name"]): o for o in objects})
    old_owned.store.replace({("ns", "child"): obj("child")})
    carried = Carried.of([StoppedRunner(old_primary)], old)  # type: ignore[list-item]

    new, primary, owned = generation(selector([slot_range(1)]))
    assert carried.seed(new, kept) == len(primary)
    assert {o["metadata"]["name"] for o in primary.objects()} == {
        o["metadata"]["name"] for o in objects if in_slots(o, kept)}
    assert len(primary) >= 50 and len(primary) < 200
    assert [o["metadata"]["name"] for o in owned.objects()] == ["child"]  # carried whole


def test_keys_waiting_or_refused_at_the_stop_are_queued_again_if_their_slot_is_kept() -> None:
    waiting, refused, failed, settled = obj("waiting"), obj("refused"), obj("failed"), obj("ok")
    old, old_primary, _ = generation("old")
    old_primary.store.replace({("ns", o["metadata"]["name"]): o
                               for o in (waiting, refused, failed, settled)})
    runner = StoppedRunner(old_primary)
    runner.queue.add(("ns", "waiting"), delay=30.0)
    runner.queue.add_failure(("ns", "failed"))
    runner.queue.forget(("ns", "ok"))
    runner.queue.shut_down()
    runner.refused[("ns", "refused")] = 5.0  # a requeue_after asked for once shut down
    carried = Carried.of([runner], old)  # type: ignore[list-item]

    new, primary, _ = generation("new")
    everything = frozenset(range(64))
    carried.seed(new, everything)
    successor = NewRunner(primary)
    assert carried.requeue(successor) == 3  # type: ignore[arg-type]
    assert set(successor.added) == {("ns", "waiting"), ("ns", "refused"), ("ns", "failed")}
    assert 25 < successor.added[("ns", "waiting")] <= 30
    assert successor.added[("ns", "refused")] == 5.0

    lost = frozenset(everything - {slot_of(uid_hash(waiting["metadata"]["uid"]))})
    new, primary, _ = generation("new")
    carried.seed(new, lost)
    successor = NewRunner(primary)
    carried.requeue(successor)  # type: ignore[arg-type]
    assert ("ns", "waiting") not in successor.added  # its slot moved: its new owner's
