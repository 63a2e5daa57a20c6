"""A fenced Api refuses writes, never reads, once its fence closes (client/fencing.py);
a worker that may no longer reconcile starts none."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import Fenced, FencedApi, fenced_like
from operator_kit.client.transport import Api
from operator_kit.election.sharder import FencedApi as MemberApi
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers
from tests.unit.test_event_priority import PotController, pot


class Recording(Api):
    """An Api that records what it would send instead of sending it."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **options: Any) -> Any:
        self.sent.append((method, path))
        return {}


def test_writes_pass_while_the_fence_is_open_and_are_refused_with_its_reason_once_closed(
        ) -> None:
    inner = Recording()
    reason: list[str] = []
    api = FencedApi(inner, lambda: reason[0] if reason else None)
    api.request("PATCH", "/a")
    reason.append("the reconcile ran past its reconcile_timeout (1s)")
    with pytest.raises(Fenced, match=r"POST /b refused: the reconcile ran past its "
                                     r"reconcile_timeout \(1s\)"):
        api.request("POST", "/b")
    for method in ("PUT", "DELETE", "patch"):
        with pytest.raises(Fenced):
            api.request(method, "/c")
    assert inner.sent == [("PATCH", "/a")]


def test_reads_go_through_a_closed_fence() -> None:
    inner = Recording()
    api = FencedApi(inner, lambda: "closed")
    api.request("GET", "/a")
    api.get("/b")  # Api's helpers call request, so they are fenced the same way
    with pytest.raises(Fenced):
        api.request("PATCH", "/c")
    assert inner.sent == [("GET", "/a"), ("GET", "/b")]


def test_fences_nest_so_a_timed_out_reconcile_of_a_fenced_member_is_refused_by_either(
        ) -> None:
    inner = Recording()
    member_may_reconcile = [True]
    timed_out: list[str] = []
    member = MemberApi(inner, lambda: member_may_reconcile[0])
    attempt = FencedApi(member, lambda: timed_out[0] if timed_out else None)
    attempt.request("PATCH", "/a")
    member_may_reconcile[0] = False
    with pytest.raises(Fenced, match="Lease lapsed"):
        attempt.request("PATCH", "/b")
    member_may_reconcile[0] = True
    timed_out.append("timed out")
    with pytest.raises(Fenced, match="timed out"):
        attempt.request("PATCH", "/c")
    assert inner.sent == [("PATCH", "/a")]


def test_a_second_clusters_api_fenced_like_a_reconciles_own_is_refused_by_each_of_its_fences(
        ) -> None:
    """A fleet member's reconcile writes its status entry on the hub: that write is
    refused whenever a write to its own cluster would be (FanOut, fleet/fanout.py)."""
    member, hub = Recording(), Recording()
    may_reconcile = [True]
    timed_out: list[str] = []
    own = FencedApi(MemberApi(member, lambda: may_reconcile[0]),
                    lambda: timed_out[0] if timed_out else None)
    other = fenced_like(hub, own)
    other.request("PATCH", "/a")
    other.request("GET", "/b")
    may_reconcile[0] = False
    with pytest.raises(Fenced, match="Lease lapsed"):
        other.request("PATCH", "/c")
    other.request("GET", "/d")  # reads still go through
    may_reconcile[0] = True
    timed_out.append("timed out")
    with pytest.raises(Fenced, match="timed out"):
        other.request("PATCH", "/e")
    assert hub.sent == [("PATCH", "/a"), ("GET", "/b"), ("GET", "/d")]
    assert member.sent == []


def test_an_api_fenced_like_an_unfenced_one_is_itself() -> None:
    hub = Recording()
    assert fenced_like(hub, Recording()) is hub


def test_a_worker_that_lost_the_lease_after_taking_a_key_starts_no_reconcile_and_keeps_it(
        ) -> None:
    """The check is made just before the reconcile, not only when the worker takes the key:
    the wait for the key's last writes to be seen (or a SIGSTOP) can outlast the Lease."""
    reconciled: list[str] = []

    class Counting(PotController):
        def reconcile(self, obj: Any, ctx: Any) -> Any:
            reconciled.append(obj.name)

    leading = [True]
    api, stop = Api(client.ApiClient()), threading.Event()
    runner = ControllerRunner(Counting(), api, field_manager="test",
                              recorder=EventRecorder(api, "test"), stop=stop,
                              informers=Informers(api, stop), may_reconcile=lambda: leading[0])
    stop.set()  # no waits: the runner is driven by hand
    runner.primaries[None].store.put(pot("a"))
    runner.queue.add(("ns", "a"))
    key = runner.queue.get(timeout=0)
    assert key == ("ns", "a")
    leading[0] = False  # lost between taking the key and reconciling it
    assert runner._process(key)
    runner.queue.done(key)
    assert reconciled == []
    assert runner.queue.get(timeout=0) == key, "kept for whoever leads next"
    leading[0] = True
    assert runner._process(key)
    assert reconciled == ["a"]
