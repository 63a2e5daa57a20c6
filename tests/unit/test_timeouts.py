"""Reconcile timeouts (runtime/timeouts.py): who settles an attempt, and the fence.

The watchdog's decisions are a function of the clock (`Watchdog.expire(now)`), so they
are tested here without threads; tests/cluster/test_controller_faults.py runs them
against a real API server.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operator_kit import Controller
from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import Fenced
from operator_kit.runtime.context import Context
from operator_kit.runtime.timeouts import Attempt, Watchdog
from tests.unit.test_fencing import Recording
from tests.unit.test_webhooks import Widget, widget


def watchdog(timeout: float | None, *, max_spares: int = 1,
             name: str = "timeouts") -> Watchdog:
    return Watchdog(name, timeout=timeout, max_spares=max_spares, stop=threading.Event(),
                    start_worker=lambda name: None, on_timeout=lambda a, r: None)


def stuck(name: str) -> float:
    return REGISTRY.get_sample_value("operator_kit_controller_stuck_reconciles",
                                     {"controller": name, "cluster": ""}) or 0.0


def test_without_a_timeout_nothing_is_tracked_timed_out_or_started() -> None:
    dog = watchdog(None)
    attempt = dog.begin(("ns", "a"))
    assert dog.expire(attempt.started + 10_000) == []
    assert dog.next_deadline() is None
    assert dog.start() is None
    assert attempt.refusal() is None
    assert dog.finish(attempt)


def test_an_attempt_past_its_deadline_is_timed_out_once_and_its_result_discarded() -> None:
    dog = watchdog(2.0, name="timeouts-once")
    attempt = dog.begin(("ns", "hangs"))
    other = dog.begin(("ns", "quick"))
    assert dog.next_deadline() == pytest.approx(attempt.started + 2.0)
    assert dog.expire(attempt.started + 1.9) == []
    assert attempt.refusal() is None  # it may still write
    assert dog.finish(other)  # returned in time: the worker settles it

    expired = dog.expire(attempt.started + 2.1)
    assert [(a.key, replaced) for a, replaced in expired] == [(("ns", "hangs"), True)]
    reason = attempt.refusal()
    assert reason is not None and "ns/hangs" in reason and "reconcile_timeout (2s)" in reason
    assert dog.expire(attempt.started + 100) == [], "timed out once, not at every pass"
    assert dog.abandoned() == 1 and stuck("timeouts-once") == 1
    assert dog.next_deadline() is None  # nothing left running in time

    assert not dog.finish(attempt, RuntimeError("late")), "its result counts for nothing"
    assert dog.abandoned() == 0 and stuck("timeouts-once") == 0


def test_an_attempt_that_finished_can_no_longer_time_out() -> None:
    dog = watchdog(1.0)
    attempt = dog.begin(("", "cluster-scoped"))
    assert dog.finish(attempt)
    assert dog.expire(attempt.started + 5) == []
    assert attempt.refusal() is None


def test_the_same_key_retried_while_the_abandoned_attempt_runs_is_tracked_on_its_own(
        ) -> None:
    dog = watchdog(1.0)
    first = dog.begin(("ns", "a"))
    [(expired, _)] = dog.expire(first.started + 1.5)
    assert expired is first
    retry = dog.begin(("ns", "a"))  # another worker took the released key
    assert not dog.finish(first)  # the abandoned one returns while the retry runs
    assert dog.next_deadline() == pytest.approx(retry.started + 1.0)
    assert retry.refusal() is None and dog.finish(retry)


def test_replacements_are_bounded_so_threads_stay_bounded_when_everything_hangs() -> None:
    dog = watchdog(1.0, max_spares=2)
    attempts: list[Attempt] = []
    threads = [threading.Thread(target=lambda: None) for _ in range(3)]
    for i, thread in enumerate(threads):  # three workers, each hung on its own key
        attempt = dog.begin(("ns", f"k{i}"))
        attempt.thread = thread
        attempts.append(attempt)
    expired = dog.expire(max(a.started for a in attempts) + 2)
    assert sorted(replaced for _, replaced in expired) == [False, True, True]
    assert all(a.refusal() for a in attempts), "all are fenced, replaced or not"
    assert len(dog.replaced()) == 2


def test_a_replaced_worker_retires_once_its_reconcile_returns() -> None:
    dog = watchdog(1.0)
    attempt = dog.begin(("ns", "a"))  # in this thread
    dog.expire(attempt.started + 2)
    assert dog.replaced() == {threading.current_thread()}
    assert not dog.finish(attempt)
    assert dog.retire(), "this worker was replaced: it exits"
    assert not dog.retire(), "once"
    assert dog.replaced() == {threading.current_thread()}, "not a dead thread once it exits"


def test_nothing_is_replaced_once_the_operator_stops() -> None:
    dog = watchdog(1.0)
    attempt = dog.begin(("ns", "a"))
    dog.stop.set()
    assert [replaced for _, replaced in dog.expire(attempt.started + 2)] == [False]


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_reconcile_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    class Timed(Controller[Widget]):
        resource = Widget
        reconcile_timeout = timeout

    with pytest.raises(ValueError, match="reconcile_timeout must be a number of seconds "
                                         "above 0, or None"):
        Timed()


def test_the_default_is_no_timeout() -> None:
    class Plain(Controller[Widget]):
        resource = Widget

    assert Plain().reconcile_timeout is None


class Answering(Recording):
    """Records each request and answers with the object written (an Event's body for an
    Event, the Widget otherwise), with a resourceVersion, as the API server would."""

    def request(self, method: str, path: str, **options: Any) -> Any:
        super().request(method, path, **options)
        body = options.get("body")
        answer = dict(body) if "/events" in path and isinstance(body, dict) else widget()
        answer["metadata"] = {**(answer.get("metadata") or {}), "resourceVersion": "7"}
        return answer


def test_a_timed_out_reconciles_context_refuses_writes_and_events_but_still_reads(
        ) -> None:
    api = Answering()
    base = Context(api, field_manager="op", recorder=EventRecorder(api, "op"),
                   controller="widget")
    obj = Widget.from_dict(widget())
    reason: list[str] = []
    ctx = base.for_object(obj, lambda: reason[0] if reason else None)
    ctx.patch(Widget, "w1", {"spec": {"retain": 1}})
    ctx.event(obj, False, "Fine", "before the timeout")
    sent_before = list(api.sent)
    reason.append("the reconcile of team-a/w1 ran past its reconcile_timeout (1s)")

    def refused(write: Any) -> str:
        with pytest.raises(Fenced) as caught:
            write()
        return str(caught.value)

    assert "reconcile_timeout (1s)" in refused(
        lambda: ctx.patch(Widget, "w1", {"spec": {"retain": 2}}))
    assert "reconcile_timeout (1s)" in refused(lambda: ctx.patch_status(obj, {"last_run": "x"}))
    assert "reconcile_timeout (1s)" in refused(lambda: ctx.delete(Widget, "w1"))
    assert refused(lambda: ctx.event(obj, True, "Late", "after it")).startswith(
        "Event Late on team-a/w1 refused: the reconcile of team-a/w1 ran past")
    ctx.api.request("GET", "/apis/wh.example.com/v1/namespaces/team-a/widgets/w1")
    assert api.sent == [*sent_before,
                        ("GET", "/apis/wh.example.com/v1/namespaces/team-a/widgets/w1")]
    # The controller's own context (the next reconcile's source) is not fenced.
    base.for_object(obj).patch(Widget, "w1", {"spec": {"retain": 3}})
    assert api.sent[-1][0] == "PATCH"
