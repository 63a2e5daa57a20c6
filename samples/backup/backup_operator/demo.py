"""``python -m backup_operator.demo``: the Backup operator end to end on the cluster in KUBECONFIG.

Installs the operator's generated manifests and runs two replicas, then creates a Backup
and shows what the operator made of it: the CronJob, the status, the Event. It also
shows the validating webhook refusing a Backup without a schedule.

Two modes; the first line printed says which ran:

- ``--image REF`` (ci/demo.sh on a plane with a node): the generated Deployment,
  unchanged but for its image, runs the replicas as real Pods from the image REF already
  on the node; the API server calls their webhooks through the Service. The Pods keep
  running after the demo.
- otherwise: the replicas run as processes on this host (`LocalDeployment`: gunicorn, as
  the operator's ServiceAccount, sharing one webhook certificate, behind the generated
  webhook configurations, the Service pointing at this host). ``--keep-running`` leaves
  them up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from backup_operator import Backup, BackupSpec, operator
from operator_kit.localcluster.pods import wait_available
from operator_kit.manifests import operator_manifests
from operator_kit.testing import TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

SAMPLE_DIR = str(Path(__file__).resolve().parents[1])
APP = "backup_operator:operator"


def show(title: str, value: Any) -> None:
    print(f"\n== {title}")
    print(value if isinstance(value, str) else json.dumps(value, indent=2))


def lease_holder(cluster: TestCluster, namespace: str) -> str | None:
    election = operator.leader_election
    name = (election.lease_name if election else "") or operator.name
    path = (f"/apis/coordination.k8s.io/v1/namespaces/"
            f"{(election.namespace if election else None) or namespace}/leases/{name}")
    lease = cluster.api.get_or_none(path)
    holder: str | None = (lease or {}).get("spec", {}).get("holderIdentity")
    return holder


@contextmanager
def as_pods(cluster: TestCluster, namespace: str, image: str) -> Iterator[str]:
    """The generated manifests applied with `image`: the replicas are the Deployment's
    Pods on the node (``localcluster up --node``, the image loaded by ``image``)."""
    documents = operator_manifests(operator, app=APP, namespace=namespace, image=image)
    print(f"mode: a real node: the operator runs as Pods from the image {image}")
    print(f"installing {len(documents)} generated manifests "
          f"({', '.join(sorted({d['kind'] for d in documents}))})")
    cluster.ensure_namespace(namespace)
    for doc in documents:
        if doc["kind"] == "CustomResourceDefinition":
            cluster.install_crd(doc)
        elif doc["kind"] != "Namespace":
            cluster.api.apply(doc, field_manager="backup-operator-demo")
    name = next(d for d in documents if d["kind"] == "Deployment")["metadata"]["name"]
    started = time.monotonic()
    kubeconfig = Path(os.environ["KUBECONFIG"])
    found = wait_available(cluster.api, namespace, name, timeout=300,
                           plane_dir=kubeconfig.parent if kubeconfig.name == "kubeconfig"
                           else None)
    leader = eventually(60, lambda: lease_holder(cluster, namespace),
                        message="a Pod holds the Lease")
    pods = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods",
                           labelSelector="app.kubernetes.io/name=" + operator.name)["items"]
    named = ", ".join(f"{p['metadata']['name']} ({p['status'].get('podIP', '?')})"
                      for p in pods if not p["metadata"].get("deletionTimestamp"))
    print(f"{found['status']['availableReplicas']} Pods Ready through their probes "
          f"{time.monotonic() - started:.0f}s after the apply: {named}; {leader} leads; "
          "the API server calls their webhooks through the Service")
    yield (f"the Pods keep running (kubectl get pods -n {namespace}); "
           "python -m operator_kit.localcluster down stops the plane and its node")


@contextmanager
def as_processes(cluster: TestCluster, namespace: str, keep_running: bool) -> Iterator[str]:
    """The replicas as processes on this host (`LocalDeployment`)."""
    deployment = LocalDeployment(cluster, operator, app=APP, namespace=namespace, replicas=2,
                                 pythonpath=[SAMPLE_DIR])
    print("mode: processes on this host: the Deployment's command runs here, as the "
          "operator's ServiceAccount (no node: see ci/demo.sh)")
    print(f"installing {len(deployment.documents)} generated manifests "
          f"({', '.join(sorted({d['kind'] for d in deployment.documents}))})")
    deployment.apply()
    with deployment:
        deployment.start()
        deployment.wait_serving()
        leader = eventually(60, deployment.leader, message="a replica holds the Lease")
        print(f"replicas {', '.join(r.name for r in deployment.replicas)} serve webhooks on "
              f"https://localhost:{deployment.port}; {leader.name} leads")
        yield ("replicas stopped; the local control plane keeps running "
               "(python -m operator_kit.localcluster down stops it)")
        if keep_running:
            print("\nreplicas keep running; Ctrl-C stops them", flush=True)
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="backup-operator",
                        help="where the operator runs (default: %(default)s)")
    parser.add_argument("--keep-running", action="store_true",
                        help="processes: leave the replicas up until Ctrl-C")
    parser.add_argument("--image", default=None,
                        help="run the replicas as Pods from this image, already on the "
                        "cluster's node (ci/demo.sh builds and loads it)")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        print("error: set KUBECONFIG (ci/demo.sh starts a local control plane for you)",
              file=sys.stderr)
        return 2
    cluster = TestCluster(kubeconfig)
    mode = (as_pods(cluster, args.namespace, args.image) if args.image
            else as_processes(cluster, args.namespace, args.keep_running))
    with mode as farewell:
        demo = cluster.ensure_namespace("backup-demo")
        path = f"/apis/example.com/v1/namespaces/{demo.name}/backups"
        try:
            cluster.api.request("DELETE", f"{path}/nightly")
            eventually(30, lambda: demo.get("example.com/v1", "Backup", "nightly") is None)
        except ApiException as err:
            if err.status != 404:
                raise
        eventually(30, lambda: cluster.api.request(
            "POST", path, query={"dryRun": "All"},
            body=Backup("probe", BackupSpec(database="d", schedule="* * * * *")).to_dict()),
            message="the API server calls the webhooks over trusted TLS")
        try:
            cluster.api.request("POST", path, body=Backup(
                "broken", BackupSpec(database="orders", schedule="")).to_dict())
        except ApiException as err:
            show("a Backup without a schedule is refused by the validating webhook",
                 json.loads(err.body)["message"])
        cluster.api.request("POST", path, body=Backup(
            "nightly", BackupSpec(database="orders", schedule="0 3 * * *")).to_dict())

        def reconciled() -> Any:
            obj = demo.get("example.com/v1", "Backup", "nightly")
            return obj if obj and obj.get("status", {}).get("observedGeneration") else None

        backup = eventually(60, reconciled, message="Backup nightly reconciled")
        job = demo.get("batch/v1", "CronJob", "nightly")
        events = [e for e in demo.list("v1", "Event")
                  if e["involvedObject"]["name"] == "nightly"]
        show("Backup nightly (labels set by the mutating webhook)", backup["metadata"]["labels"])
        show("its status", backup["status"])
        show("the CronJob it owns", {"schedule": job["spec"]["schedule"],
                                      "ownerReferences": job["metadata"]["ownerReferences"]})
        show("its Events", "\n".join(f"{e['type']} {e['reason']}: {e['message']}"
                                     for e in events))
        v2 = demo.get("example.com/v2", "Backup", "nightly")
        show("read as example.com/v2 (through the conversion webhook)", v2["spec"])
    print(f"\n{farewell}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
