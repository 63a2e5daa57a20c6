"""Waiting for a Deployment's Pods on the node, and saying why they are not Ready.

`wait_available` returns once a Deployment's Pods are all available; when they cannot
become so it raises `PodsError` with one message naming the Pod, what failed (an image
the node does not have, a container that exits, a probe that fails, a Pod no node takes)
and where its log is: ``kubectl logs`` (``--previous`` for a container that exited), the
container's log file under the node's ``pod-logs/``, the Pod's events, the kubelet's and
containerd's logs in the plane's folder. It does not wait out its timeout for what will
not fix itself: an image that is not on the node, a container that cannot be created or
keeps exiting ends the wait at once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operator_kit.client.transport import Api

# A container waiting for one of these will not start by waiting longer: the image is not
# on the node (imagePullPolicy Never, or a registry the node cannot reach), the container
# could not be made, or it exited and the kubelet backs off restarting it.
FATAL_REASONS = frozenset({
    "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
    "CrashLoopBackOff",
})


class PodsError(RuntimeError):
    """A Deployment's Pods did not become available; the message says which, why and
    where the logs are."""


def selector(deployment: dict[str, Any]) -> str:
    """The Deployment's ``spec.selector.matchLabels`` as a label selector."""
    labels = deployment.get("spec", {}).get("selector", {}).get("matchLabels", {})
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def logs_hint(namespace: str, pod: str, container: str, *, previous: bool,
              plane_dir: Path | None) -> str:
    """Where a container's log is: the kubectl command and, on the local node, the file."""
    command = (f"kubectl logs -n {namespace} {pod} -c {container}"
               f"{' --previous' if previous else ''}")
    files = sorted((plane_dir / "node" / "pod-logs").glob(
        f"{namespace}_{pod}_*/{container}/*.log")) if plane_dir else []
    return f"its log: {command}" + (f" (or {files[-1]})" if files else "")


def _node_logs(plane_dir: Path | None) -> str:
    if plane_dir is None:
        return ""
    return (f"; the node's: {plane_dir / 'logs' / 'kubelet.log'}, "
            f"{plane_dir / 'logs' / 'containerd.log'}")


def _last_event(events: list[dict[str, Any]], pod: str) -> str:
    mine = [e for e in events if e.get("involvedObject", {}).get("name") == pod
            and e.get("type") == "Warning"]
    if not mine:
        return ""
    last = max(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f"; last warning event {last.get('reason')}: {last.get('message', '').strip()}"


def problem(pod: dict[str, Any], events: list[dict[str, Any]], *, plane_dir: Path | None,
            fatal_only: bool) -> str | None:
    """What keeps `pod` from being Ready, as one line (None if nothing does). With
    `fatal_only`, only what will not fix itself by waiting (`FATAL_REASONS`, a Pod that
    failed or no node takes)."""
    meta, status = pod["metadata"], pod.get("status", {})
    name, namespace = meta["name"], meta["namespace"]
    where = f"pod {namespace}/{name}"
    describe = f"; its events: kubectl describe pod -n {namespace} {name}"
    conditions = {c.get("type"): c for c in status.get("conditions", [])}
    scheduled = conditions.get("PodScheduled", {})
    if scheduled.get("status") == "False":
        if fatal_only and scheduled.get("reason") != "Unschedulable":
            return None
        return (f"{where} was not scheduled: {scheduled.get('message', 'no node took it')}"
                f"{describe}{_node_logs(plane_dir)}")
    for container in status.get("containerStatuses", []):
        state, cname = container.get("state", {}), container["name"]
        restarts = container.get("restartCount", 0)
        last = container.get("lastState", {}).get("terminated")
        exited = (f" (it exited {last.get('exitCode')}: {last.get('reason')}"
                  f"{', ' + last['message'].strip() if last.get('message') else ''}; "
                  f"{restarts} restart{'s' if restarts != 1 else ''})" if last else "")
        waiting = state.get("waiting")
        if waiting and (waiting.get("reason") in FATAL_REASONS or not fatal_only):
            return (f"{where}: container {cname} is waiting, {waiting.get('reason')}: "
                    f"{waiting.get('message', '').strip() or 'no message'}{exited}; "
                    f"{logs_hint(namespace, name, cname, previous=bool(last), plane_dir=plane_dir)}"
                    f"{describe}{_node_logs(plane_dir)}")
        terminated = state.get("terminated")
        if terminated and (status.get("phase") == "Failed" or not fatal_only):
            return (f"{where}: container {cname} exited {terminated.get('exitCode')}: "
                    f"{terminated.get('reason')}; "
                    f"{logs_hint(namespace, name, cname, previous=False, plane_dir=plane_dir)}"
                    f"{describe}{_node_logs(plane_dir)}")
        if state.get("running") and not container.get("ready") and not fatal_only:
            return (f"{where}: container {cname} runs but is not Ready{exited}"
                    f"{_last_event(events, name)}; "
                    f"{logs_hint(namespace, name, cname, previous=False, plane_dir=plane_dir)}"
                    f"{describe}")
    if fatal_only:
        return None
    ready = conditions.get("Ready", {})
    return (f"{where} is {status.get('phase', 'Pending')}, not Ready: "
            f"{ready.get('message') or ready.get('reason') or 'no container status yet'}"
            f"{_last_event(events, name)}{describe}{_node_logs(plane_dir)}")


def wait_available(api: Api, namespace: str, name: str, *,
                   timeout: float, plane_dir: Path | None = None,
                   interval: float = 1.0) -> dict[str, Any]:
    """Until the Deployment `namespace`/`name` has every replica updated and available;
    returns it (read with `api`, e.g. ``TestCluster.api``).
    `PodsError` as soon as a Pod cannot start (`FATAL_REASONS`), or after `timeout`
    seconds, naming the Pod, what failed and where its log is (`plane_dir`: the local
    plane's folder, for the node's log files)."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    deadline = time.monotonic() + timeout
    while True:
        deployment: dict[str, Any] = api.get(path)
        status, wanted = deployment.get("status", {}), deployment["spec"].get("replicas", 1)
        if (status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
                and status.get("updatedReplicas") == wanted
                and status.get("availableReplicas") == wanted
                and status.get("replicas") == wanted):
            return deployment
        listed = api.get(pods, labelSelector=selector(deployment))["items"]
        current = [p for p in listed if not p["metadata"].get("deletionTimestamp")]
        expired = time.monotonic() >= deadline
        if current and (expired or any(problem(p, [], plane_dir=plane_dir, fatal_only=True)
                                       for p in current)):
            events = api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
            found = [m for p in current if (m := problem(p, events, plane_dir=plane_dir,
                                                         fatal_only=not expired))]
            if found:
                raise PodsError(f"Deployment {namespace}/{name} is not available"
                                f"{f' after {timeout:.0f}s' if expired else ''}: {found[0]}")
        if expired:
            raise PodsError(
                f"Deployment {namespace}/{name} is not available after {timeout:.0f}s and "
                f"has {'no Pods' if not current else 'no Pod with a problem to name'} "
                f"({status.get('availableReplicas', 0)} of {wanted} available): kubectl "
                f"describe deployment -n {namespace} {name}{_node_logs(plane_dir)}")
        time.sleep(interval)
