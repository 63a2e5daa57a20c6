"""End to end: the Backup operator as it would be deployed, every part working together.

The generated manifests are applied; two replicas run under gunicorn as the operator's
ServiceAccount, on one TLS port, sharing one certificate through the Secret; the API
server calls their webhooks through the generated configurations (an ExternalName
Service points at localhost). On failure the replicas' logs, the Events and the Lease
are shown. Everything it created is removed afterwards.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backup_operator import Backup, BackupSpec, operator
from kubernetes.client.exceptions import ApiException

from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

SAMPLE_DIR = str(Path(__file__).resolve().parents[1])


@pytest.fixture
def deployed(cluster: TestCluster, namespace: Namespace) -> Iterator[LocalDeployment]:
    deployment = LocalDeployment(cluster, operator, app="backup_operator:operator",
                                 namespace=namespace.name, replicas=2,
                                 pythonpath=[SAMPLE_DIR])
    deployment.apply()
    try:
        with deployment:
            deployment.start()
            deployment.wait_serving()
            yield deployment
            # Delete the Backups while a replica still runs their finalizer.
            path = f"/apis/example.com/v1/namespaces/{namespace.name}/backups"
            for item in cluster.api.get(path)["items"]:
                cluster.api.request("DELETE", f"{path}/{item['metadata']['name']}")
            eventually(60, lambda: not cluster.api.get(path)["items"],
                       message="Backups finalized")
    finally:
        deployment.delete()


def post(ns: Namespace, backup: Backup, *, dry_run: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = ns.api.request(
        "POST", f"/apis/example.com/v1/namespaces/{ns.name}/backups", body=backup.to_dict(),
        query={"dryRun": "All" if dry_run else None})
    return result


def get(ns: Namespace, name: str, version: str = "v1") -> dict[str, Any] | None:
    result: dict[str, Any] | None = ns.get(f"example.com/{version}", "Backup", name)
    return result


def reconciled(ns: Namespace, name: str) -> dict[str, Any] | None:
    obj = get(ns, name)
    status = (obj or {}).get("status", {})
    ready = obj and status.get("observedGeneration") == obj["metadata"]["generation"]
    return obj if ready and ns.get("batch/v1", "CronJob", name) else None


def post_mortem(deployment: LocalDeployment, ns: Namespace) -> str:
    events = "\n".join(f"{e['involvedObject']['kind']}/{e['involvedObject']['name']} "
                       f"{e['type']} {e['reason']}: {e['message']}"
                       for e in ns.list("v1", "Event"))
    return (f"\n--- Lease\n{json.dumps(deployment.lease(), indent=1)}\n--- Events\n{events}\n"
            f"--- replicas\n{deployment.logs()[-12000:]}")


def test_backup_operator_end_to_end(deployed: LocalDeployment, namespace: Namespace) -> None:
    try:
        run(deployed, namespace)
    except (AssertionError, ApiException) as err:
        raise AssertionError(f"{err}{post_mortem(deployed, namespace)}") from None
    # The API server's own calls never trip the webhook server's read deadline.
    assert "was not received within" not in deployed.logs()


def run(deployment: LocalDeployment, ns: Namespace) -> None:
    # The API server picks up the patched CA bundle asynchronously: wait until it calls
    # the webhooks successfully (a dry run passes both and stores nothing).
    eventually(30, lambda: post(ns, Backup("probe", BackupSpec(database="d", schedule="* * * * *"),
                                           namespace=ns.name), dry_run=True),
               message="the API server calls the webhooks over trusted TLS")
    # The validating webhook refuses a Backup with no schedule, with its message.
    with pytest.raises(ApiException) as refused:
        post(ns, Backup("broken", BackupSpec(database="orders", schedule=""), namespace=ns.name))
    assert "spec.schedule is required" in json.loads(refused.value.body)["message"]

    # The mutating webhook labels the others; the controller writes the CronJob and status.
    post(ns, Backup("nightly", BackupSpec(database="orders", schedule="0 3 * * *"),
                    namespace=ns.name))
    nightly = eventually(60, lambda: reconciled(ns, "nightly"), message="nightly reconciled")
    assert nightly["metadata"]["labels"]["example.com/managed"] == "true"
    assert nightly["status"]["conditions"][0]["status"] == "True"
    job = ns.get("batch/v1", "CronJob", "nightly")
    assert job is not None and job["spec"]["schedule"] == "0 3 * * *"

    # Conversion: a v1 object read as v2, and a v2 object read as v1, lose nothing.
    as_v2 = get(ns, "nightly", "v2")
    assert as_v2 is not None and as_v2["apiVersion"] == "example.com/v2"
    assert as_v2["spec"] == {"schedule": "0 3 * * *", "source": {"database": "orders"}}
    ns.api.request("POST", f"/apis/example.com/v2/namespaces/{ns.name}/backups", body={
        "apiVersion": "example.com/v2", "kind": "Backup", "metadata": {"name": "from-v2"},
        "spec": {"schedule": "15 1 * * *", "source": {"database": "users"}}})
    as_v1 = get(ns, "from-v2")
    assert as_v1 is not None and as_v1["spec"] == {"schedule": "15 1 * * *",
                                                    "database": "users"}

    # Exactly one replica holds the Lease, and only it has started its controllers.
    leader = eventually(30, deployment.leader, message="a replica holds the Lease")
    followers = [r for r in deployment.replicas if r is not leader]
    assert len(followers) == 1
    assert "started 1 controller" in leader.output()
    assert "started 1 controller" not in followers[0].output()

    # Killing the leader lets the other take over and keep reconciling.
    leader.signal(signal.SIGKILL)
    killed = time.monotonic()
    # The API server may still hold a keep-alive connection to the killed replica: a
    # webhook call on it is reset and the create fails once, as it would while a pod dies.
    eventually(30, lambda: post(ns, Backup(
        "after-failover", BackupSpec(database="orders", schedule="0 4 * * *"),
        namespace=ns.name)), message="create after failover")
    eventually(60, lambda: reconciled(ns, "after-failover"),
               message="reconciled by the new leader after the old one was killed")
    assert deployment.leader() is followers[0]
    took = time.monotonic() - killed
    assert took < 15 + 2 * 2.2 + 5, f"takeover took {took:.0f}s"

    # Deleting a Backup runs the finalizer's cleanup; the garbage collector removes the
    # CronJob it owned.
    eventually(30, lambda: "nightly" in (ns.get("v1", "ConfigMap", "backup-catalog") or {})
               .get("data", {}))
    ns.api.request("DELETE", f"/apis/example.com/v1/namespaces/{ns.name}/backups/nightly")
    eventually(60, lambda: get(ns, "nightly") is None, message="finalizer removed")
    catalog = ns.get("v1", "ConfigMap", "backup-catalog") or {}
    assert "nightly" not in catalog.get("data", {}), "cleanup removed its catalog entry"
    assert "after-failover" in catalog.get("data", {})
    eventually(90, lambda: ns.get("batch/v1", "CronJob", "nightly") is None,
               message="owned CronJob garbage collected")
