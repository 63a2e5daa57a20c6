"""The reconcile contract, as a user sees it: wrong return values, dying threads, API
errors in one line, objects that no longer decode, and what patch_status means."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pytest

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    InvalidResource,
    LeaderElection,
    Operator,
    Sharding,
)
from operator_kit.client.events import occurrences
from operator_kit.election.sharder import Sharder
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import (
    Recorder,
    RequestCounter,
    Widget,
    WidgetStatus,
    create_widget,
    widget_path,
)

pytestmark = pytest.mark.usefixtures("widget_kind")


def events(ns: Namespace, reason: str) -> list[dict[str, Any]]:
    """The Events with `reason`, through the core API (as kubectl describe reads them:
    ``message`` is the note; the events.k8s.io ``series`` is there too)."""
    return list(ns.list("v1", "Event", fieldSelector=f"reason={reason}"))


class Returning(Controller[Widget]):
    """Returns whatever `results` says for an object's name; None for the rest."""

    resource = Widget
    max_concurrent_reconciles = 2
    on_error = 0.5

    def __init__(self, namespace: str, results: dict[str, Any]) -> None:
        super().__init__()
        self.namespace = namespace
        self.results = results
        self.recorder = Recorder()

    def reconcile(self, obj: Widget, ctx: Context) -> Any:
        self.recorder.record(obj.name, time.monotonic())
        result = self.results.get(obj.name)
        if isinstance(result, BaseException):
            raise result
        return result


def test_a_reconcile_returning_a_non_action_fails_with_a_type_error_and_workers_go_on(
        cluster: TestCluster, namespace: Namespace, run_operator: Any) -> None:
    controller = Returning(namespace.name, {"bad1": Action.requeue, "bad2": 30})
    operator: Operator = run_operator(controller)
    create_widget(namespace, "bad1")
    create_widget(namespace, "bad2")
    eventually(20, lambda: controller.recorder.count("bad1") >= 2
               and controller.recorder.count("bad2") >= 2, message="retried with backoff")
    for name in ("good1", "good2", "good3"):
        create_widget(namespace, name)
    eventually(20, lambda: all(controller.recorder.count(n) for n in ("good1", "good2",
                                                                       "good3")),
               message="both workers still run after two bad returns")
    notes = eventually(20, lambda: [e["message"] for e in events(namespace, "ReconcileError")
                                    if e["involvedObject"]["name"] == "bad1"])
    assert "TypeError: reconcile returned <bound method Action.requeue" in notes[0]
    assert "call it, e.g. Action.requeue(30)" in notes[0]
    bad2 = [e["message"] for e in events(namespace, "ReconcileError")
            if e["involvedObject"]["name"] == "bad2"]
    assert bad2 and "reconcile returned 30 (int)" in bad2[0]
    assert operator.live() and not operator.dead_threads()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_thread_that_dies_anyway_fails_livez_and_is_named(
        cluster: TestCluster, namespace: Namespace, run_operator: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    controller = Returning(namespace.name, {"fatal": SystemExit("sys.exit() in a reconcile")})
    controller.max_concurrent_reconciles = 1
    operator: Operator = run_operator(controller)
    probes = operator.webhooks.test_client()
    assert probes.get("/livez").status_code == 200
    with caplog.at_level(logging.CRITICAL, "operator_kit.operator"):
        create_widget(namespace, "fatal")
        eventually(20, lambda: operator.dead_threads() == ["reconcile-widget-0"])
        response = probes.get("/livez")
    assert response.status_code == 503
    assert any("reconcile-widget-0" in r.getMessage() for r in caplog.records)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sharder_thread_that_dies_fails_livez_and_is_named(
        cluster: TestCluster, namespace: Namespace, run_operator: Any,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The leader's assigner: were it gone silently, no new object would ever be assigned.
    def dies(self: Sharder) -> None:
        raise SystemExit("the sharder's loop ended")

    monkeypatch.setattr(Sharder, "_run", dies)
    timings = {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 0.5}
    with caplog.at_level(logging.CRITICAL, "operator_kit.operator"):
        operator: Operator = run_operator(
            Returning(namespace.name, {}), name="sharded-livez", namespace=namespace.name,
            leader_election=LeaderElection(lease_name="sharded-livez", identity="solo",
                                           **timings),
            sharding=Sharding(identity="solo", **timings))
        eventually(30, lambda: operator.dead_threads() == ["sharder-sharded-livez"],
                   message="the dead sharder thread is reported")
        response = operator.webhooks.test_client().get("/livez")
    assert response.status_code == 503
    assert any("sharder-sharded-livez" in r.getMessage() for r in caplog.records)


class Failing(Controller[Widget]):
    """Creates a ConfigMap whose name the API server refuses: the same 422 every time."""

    resource = Widget
    on_error = 0.2
    max_backoff = 0.4

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        ctx.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "Not_A_Valid_Name", "namespace": obj.namespace}})


def test_a_repeated_api_error_is_one_event_in_one_line_whose_count_rises(
        cluster: TestCluster, namespace: Namespace, run_operator: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, "operator_kit.controller"):
        run_operator(Failing(namespace.name))
        create_widget(namespace, "w")
        event = eventually(30, lambda: next(
            e for e in events(namespace, "ReconcileError") if occurrences(e) >= 3))
    assert len(events(namespace, "ReconcileError")) == 1, "one Event, not one per retry"
    note = event["message"]
    assert note.startswith("422 Unprocessable Entity: ConfigMap \"Not_A_Valid_Name\" is invalid")
    assert len(note) < 300 and "\n" not in note and "Audit-Id" not in note
    logged = [r for r in caplog.records if "reconcile of" in r.getMessage()]
    # One line each; the error in its own field (zap's `error`), not inside the message.
    assert logged and all("\n" not in r.getMessage() and "\n" not in r.error
                          and r.error.startswith("422 Unprocessable Entity") for r in logged)


# -- an object being deleted that no longer decodes -------------------------------------------

@dataclass
class StrictSpec:
    size: int
    color: str  # added by an "upgrade": the stored objects do not have it


class StrictWidget(CustomResource):
    group = Widget.group
    version = Widget.version
    kind = Widget.kind
    plural = Widget.plural
    spec: StrictSpec
    status: WidgetStatus


FINALIZER = "contract.operator-kit.test/cleanup"


class Upgraded(Controller[StrictWidget]):
    resource = StrictWidget
    finalizer = FINALIZER
    on_error = 0.3
    max_backoff = 0.6

    def __init__(self, namespace: str, can_clean_up: bool) -> None:
        super().__init__()
        self.namespace = namespace
        self.can_clean_up = can_clean_up
        self.cleaned: list[str] = []

    def reconcile(self, obj: StrictWidget, ctx: Context) -> None:
        pass

    def cleanup_invalid(self, raw: dict[str, Any], ctx: Context,
                        error: InvalidResource) -> None:
        if not self.can_clean_up:
            super().cleanup_invalid(raw, ctx, error)
        self.cleaned.append(raw["metadata"]["name"])


def test_an_undecodable_object_being_deleted_says_deletion_is_blocked_and_how_to_unblock(
        cluster: TestCluster, namespace: Namespace, run_operator: Any) -> None:
    create_widget(namespace, "old", finalizers=[FINALIZER])
    run_operator(Upgraded(namespace.name, can_clean_up=False))
    namespace.api.request("DELETE", widget_path(namespace, "old"))
    blocked = eventually(30, lambda: next(e for e in events(namespace, "DeletionBlocked")
                                          if occurrences(e) >= 2))
    note = blocked["message"]
    assert "deletion is blocked" in note and "spec.color: required field is missing" in note
    assert (f"kubectl patch widgets.{Widget.group} old -n {namespace.name} --type=json "
            "-p '[{\"op\": \"remove\", \"path\": \"/metadata/finalizers/0\"}]'") in note
    assert cluster.exists(widget_path(namespace, "old")), "the finalizer holds it"
    # The command it gives, sent as the API request kubectl would make:
    namespace.api.request("PATCH", widget_path(namespace, "old"),
                          body=[{"op": "remove", "path": "/metadata/finalizers/0"}],
                          content_type="application/json-patch+json")
    eventually(20, lambda: not cluster.exists(widget_path(namespace, "old")))


def test_cleanup_invalid_lets_the_namespace_of_an_undecodable_object_be_deleted(
        cluster: TestCluster, run_operator: Any) -> None:
    namespace = cluster.namespace("undecodable")
    create_widget(namespace, "old", finalizers=[FINALIZER])
    controller = Upgraded(namespace.name, can_clean_up=True)
    run_operator(controller)
    namespace.delete(wait=True, timeout=60)
    assert controller.cleaned == ["old"]


# -- what patch_status means ------------------------------------------------------------------

@dataclass
class GadgetSpec:
    size: int = 1


class Gadget(CustomResource):
    group = "contract.operator-kit.test"
    version = "v1"
    kind = "Gadget"
    spec: GadgetSpec


class StatusWriter(Controller[Widget]):
    resource = Widget

    def __init__(self, namespace: str, write: Any) -> None:
        super().__init__()
        self.namespace = namespace
        self.write = write
        self.results: list[Any] = []

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        try:
            self.results.append(self.write(obj, ctx))
        except Exception as err:  # noqa: BLE001 - the test looks at what was raised
            self.results.append(err)


def test_patch_status_dataclass_is_exact_dict_merges_and_no_change_sends_nothing(
        cluster: TestCluster, namespace: Namespace) -> None:
    def write(obj: Widget, ctx: Context) -> Any:
        merged = ctx.patch_status(obj, {"observed_size": 5, "observed_generation": 1})
        cleared = ctx.patch_status(merged, WidgetStatus(observed_size=None,
                                                        observed_generation=1))
        again = ctx.patch_status(cleared, WidgetStatus(observed_generation=1))
        merged_again = ctx.patch_status(again, {"observed_generation": 1})
        return merged, cleared, again, merged_again

    controller = StatusWriter(namespace.name, write)
    operator = Operator("contract-test", [controller])
    operator.use(cluster.client)
    counter = RequestCounter(operator)
    operator.start()
    try:
        create_widget(namespace, "w")
        eventually(20, lambda: controller.results)
    finally:
        operator.stop(timeout=10)
    merged, cleared, again, merged_again = controller.results[0]
    assert (merged.status.observed_size, merged.status.observed_generation) == (5, 1)
    assert cleared.status.observed_size is None, "a dataclass field that is None is cleared"
    assert again is cleared and merged_again is cleared, "no change: the same object back"
    status_writes = [p for m, p in counter.sent if p.endswith("/status")]
    assert len(status_writes) == 2, counter.sent
    stored = namespace.api.get(widget_path(namespace, "w"))["status"]
    assert stored == {"observed_generation": 1}


def test_patching_the_same_obj_twice_writes_what_the_second_patch_says(
        cluster: TestCluster, namespace: Namespace) -> None:
    # The second patch is compared with what the first wrote, not with `obj`'s status
    # from before it: clearing a field and setting it back to the value `obj` still
    # holds is a write (a reconcile that marks work in progress, then done).
    def write(obj: Widget, ctx: Context) -> Any:
        ctx.patch_status(obj, {"observed_size": None})
        return ctx.patch_status(obj, {"observed_size": 3})

    create_widget(namespace, "w")
    namespace.api.request("PATCH", widget_path(namespace, "w") + "/status",
                          body={"status": {"observed_size": 3}},
                          content_type="application/merge-patch+json")
    controller = StatusWriter(namespace.name, write)
    operator = Operator("contract-test", [controller])
    operator.use(cluster.client)
    operator.start()
    try:
        eventually(20, lambda: controller.results)
    finally:
        operator.stop(timeout=10)
    assert not isinstance(controller.results[0], Exception), controller.results[0]
    stored = namespace.api.get(widget_path(namespace, "w"))["status"]
    assert stored == {"observed_size": 3}, "set again after the clear: written, not skipped"


def test_patch_status_of_a_kind_without_status_is_a_type_error_before_any_request(
        cluster: TestCluster, namespace: Namespace) -> None:
    from operator_kit.client.events import EventRecorder
    from operator_kit.runtime.context import Context as Ctx

    cluster.install_crd(Gadget)
    created = namespace.api.request(
        "POST", f"/apis/{Gadget.api_version()}/namespaces/{namespace.name}/gadgets",
        body=Gadget("g", GadgetSpec(), namespace=namespace.name).to_dict())
    gadget = Gadget.from_dict(created)
    from operator_kit.client.transport import Api

    api = Api(cluster.client)
    sent: list[str] = []
    original = api.request
    api.request = lambda *a, **k: sent.append(a[1]) or original(*a, **k)  # type: ignore
    ctx = Ctx(api, field_manager="t", recorder=EventRecorder(api, "t"), controller="t")
    with pytest.raises(TypeError, match="Gadget declares no status"):
        ctx.patch_status(gadget, {"x": 1})
    assert sent == []


# -- a label storm: reconciles that change nothing write no status ------------------------------

def settled(recorder: Recorder, quiet: float = 1.5) -> int:
    """Wait until nothing has been reconciled for `quiet` seconds; the total count then."""
    while True:
        count = len(recorder.calls)
        time.sleep(quiet)
        if len(recorder.calls) == count:
            return count


def test_a_label_storm_over_reconciled_objects_writes_no_status_no_event_and_no_apply(
        cluster: TestCluster, namespace: Namespace, run_operator: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from operator_kit.client.transport import request_counts

    from .conftest import WidgetController

    count = 200
    controller = WidgetController(namespace.name)
    controller.max_concurrent_reconciles = 4
    run_operator(controller)
    names = [f"w{i:03}" for i in range(count)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: create_widget(namespace, n), names))

        def all_observed() -> bool:
            items = namespace.list(Widget.api_version(), Widget.kind)
            return len(items) == count and all(
                (item.get("status") or {}).get("observed_generation") == 1 for item in items)

        eventually(120, all_observed, message="every widget reconciled, its status written")
        settled(controller.recorder)
        before = request_counts()
        reconciled = {name: controller.recorder.count(name) for name in names}
        list(pool.map(lambda n: namespace.api.request(
            "PATCH", widget_path(namespace, n), body={"metadata": {"labels": {"storm": "1"}}},
            content_type="application/merge-patch+json"), names))
        eventually(60, lambda: all(controller.recorder.count(n) > reconciled[n] for n in names),
                   message="every relabelled widget reconciled again")
        settled(controller.recorder)
    sent = request_counts() - before
    storm_reconciles = sum(controller.recorder.count(n) - reconciled[n] for n in names)
    prefix = f"/api/v1/namespaces/{namespace.name}"
    status_writes = sum(n for (verb, path), n in sent.items()
                        if verb != "GET" and path.endswith("/status"))
    applies = sum(n for (verb, path), n in sent.items()
                  if verb == "PATCH" and path.startswith(f"{prefix}/configmaps/"))
    event_writes = sum(n for (verb, path), n in sent.items() if verb != "GET" and path.startswith(
        f"/apis/events.k8s.io/v1/namespaces/{namespace.name}/events"))
    assert storm_reconciles >= count
    assert status_writes == 0, f"status writes that changed nothing: {sent}"
    assert event_writes == 0, f"Events during a storm that failed nothing: {sent}"
    # Nor is the owned ConfigMap's server-side apply: its resourceVersion is still the one
    # the last apply of the identical body left, so applying it again cannot change it.
    assert applies == 0, f"applies that could change nothing: {sent}"
    print(f"\nlabel storm: {count} relabels -> {storm_reconciles} reconciles, "
          f"{status_writes} status writes, {applies} applies")
