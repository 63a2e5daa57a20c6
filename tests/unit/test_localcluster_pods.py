"""Why a Deployment's Pods are not Ready, in one message naming the Pod, what failed and
where its log is (`operator_kit.localcluster.pods`). Pod statuses as the kubelet writes
them; tests/cluster/test_node.py sees the same on a real node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operator_kit.localcluster import pods
from operator_kit.localcluster.pods import PodsError, problem, wait_available


def pod(*containers: dict[str, Any], scheduled: dict[str, str] | None = None,
        phase: str = "Pending") -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "True"}] if scheduled is None \
        else [{"type": "PodScheduled", "status": "False", **scheduled}]
    return {"metadata": {"name": "op-1", "namespace": "ops"},
            "status": {"phase": phase, "conditions": conditions,
                       "containerStatuses": list(containers)}}


NEVER_PULLED = {"name": "operator", "restartCount": 0, "ready": False, "state": {"waiting": {
    "reason": "ErrImageNeverPull",
    "message": 'Container image "operator-kit.local/op:1" is not present with pull policy '
               "of Never"}}}
CRASHING = {"name": "operator", "restartCount": 2, "ready": False,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                                  "message": "back-off 20s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
NOT_READY = {"name": "operator", "restartCount": 0, "ready": False,
             "state": {"running": {"startedAt": "2026-12-07T05:00:00Z"}}}
UNHEALTHY = {"type": "Warning", "reason": "Unhealthy", "lastTimestamp": "2026-12-07T05:01:00Z",
             "involvedObject": {"name": "op-1"},
             "message": "Readiness probe failed: HTTP probe failed with statuscode: 503"}


def test_an_image_the_node_does_not_have_is_named_with_where_to_look(tmp_path: Path) -> None:
    logs = tmp_path / "node" / "pod-logs" / "ops_op-1_uid" / "operator"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("")
    said = problem(pod(NEVER_PULLED), [], plane_dir=tmp_path, fatal_only=True)
    assert said is not None and "\n" not in said
    assert said.startswith("pod ops/op-1: container operator is waiting, ErrImageNeverPull: "
                           'Container image "operator-kit.local/op:1" is not present')
    assert "kubectl logs -n ops op-1 -c operator" in said and str(logs / "0.log") in said
    assert "kubectl describe pod -n ops op-1" in said
    assert str(tmp_path / "logs" / "kubelet.log") in said


def test_a_container_that_keeps_exiting_names_its_exit_and_its_previous_log() -> None:
    said = problem(pod(CRASHING), [], plane_dir=None, fatal_only=True)
    assert said is not None
    assert "CrashLoopBackOff" in said and "(it exited 1: Error; 2 restarts)" in said
    assert "kubectl logs -n ops op-1 -c operator --previous" in said


def test_a_running_pod_that_is_not_ready_is_named_with_its_failing_probe() -> None:
    assert problem(pod(NOT_READY, phase="Running"), [UNHEALTHY], plane_dir=None,
                   fatal_only=True) is None  # it may still become Ready: wait
    said = problem(pod(NOT_READY, phase="Running"), [UNHEALTHY], plane_dir=None,
                   fatal_only=False)
    assert said is not None
    assert said.startswith("pod ops/op-1: container operator runs but is not Ready; last "
                           "warning event Unhealthy: Readiness probe failed: HTTP probe "
                           "failed with statuscode: 503")


def test_a_pod_no_node_takes_is_named_with_the_schedulers_reason() -> None:
    said = problem(pod(scheduled={"reason": "Unschedulable",
                                  "message": "0/1 nodes are available: 1 Insufficient memory."}),
                   [], plane_dir=None, fatal_only=True)
    assert said is not None
    assert said.startswith("pod ops/op-1 was not scheduled: 0/1 nodes are available: 1 "
                           "Insufficient memory.")


class FakeApi:
    """The three reads `wait_available` makes, answered from fixed documents."""

    def __init__(self, pod_status: dict[str, Any], ready: int) -> None:
        self.pod, self.ready, self.reads = pod_status, ready, 0

    def get(self, path: str, **query: Any) -> Any:
        self.reads += 1
        if path.endswith("/deployments/op"):
            return {"metadata": {"generation": 1},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "op"}}},
                    "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                               "availableReplicas": self.ready}}
        if path.endswith("/pods"):
            assert query == {"labelSelector": "app=op"}
            return {"items": [self.pod]}
        return {"items": [UNHEALTHY]}


def test_waiting_ends_at_once_on_an_image_that_cannot_start() -> None:
    api = FakeApi(pod(NEVER_PULLED), ready=0)
    with pytest.raises(PodsError, match=r"^Deployment ops/op is not available: pod ops/op-1: "
                       "container operator is waiting, ErrImageNeverPull"):
        wait_available(api, "ops", "op", timeout=600)  # type: ignore[arg-type]
    assert api.reads == 3  # one look: no waiting out the timeout


def test_waiting_for_a_pod_that_never_becomes_ready_ends_with_its_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pods.time, "sleep", lambda seconds: None)
    with pytest.raises(PodsError, match=r"^Deployment ops/op is not available after 0s: pod "
                       "ops/op-1: container operator runs but is not Ready; last warning "
                       "event Unhealthy: Readiness probe failed"):
        wait_available(FakeApi(pod(NOT_READY, phase="Running"), ready=0),  # type: ignore[arg-type]
                       "ops", "op", timeout=0)


def test_an_available_deployment_is_returned() -> None:
    found = wait_available(FakeApi(pod(NOT_READY), ready=1), "ops", "op",  # type: ignore[arg-type]
                           timeout=0)
    assert found["status"]["availableReplicas"] == 1
