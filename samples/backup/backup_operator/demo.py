"""``python -m backup_operator.demo``: the Backup operator end to end on the cluster in KUBECONFIG.

Installs the operator's generated manifests, runs two replicas (gunicorn, as the
operator's ServiceAccount, sharing one webhook certificate, behind the generated
webhook configurations), creates a Backup and shows what the operator made of it: the
CronJob, the status, the Event. It also shows the validating webhook refusing a Backup
without a schedule. ``--keep-running`` leaves the replicas up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from backup_operator import Backup, BackupSpec, operator
from operator_kit.testing import TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

SAMPLE_DIR = str(Path(__file__).resolve().parents[1])


def show(title: str, value: Any) -> None:
    print(f"\n== {title}")
    print(value if isinstance(value, str) else json.dumps(value, indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="backup-operator",
                        help="where the operator runs (default: %(default)s)")
    parser.add_argument("--keep-running", action="store_true")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        print("error: set KUBECONFIG (ci/demo.sh starts a local control plane for you)",
              file=sys.stderr)
        return 2
    cluster = TestCluster(kubeconfig)
    deployment = LocalDeployment(cluster, operator, app="backup_operator:operator",
                                 namespace=args.namespace, replicas=2,
                                 pythonpath=[SAMPLE_DIR])
    print(f"installing {len(deployment.documents)} generated manifests "
          f"({', '.join(sorted({d['kind'] for d in deployment.documents}))})")
    deployment.apply()
    with deployment:
        deployment.start()
        deployment.wait_serving()
        leader = eventually(60, deployment.leader, message="a replica holds the Lease")
        print(f"replicas {', '.join(r.name for r in deployment.replicas)} serve webhooks on "
              f"https://localhost:{deployment.port}; {leader.name} leads")
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
        if args.keep_running:
            print("\nreplicas keep running; Ctrl-C stops them", flush=True)
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
    print("\nreplicas stopped; the local control plane keeps running "
          "(python -m operator_kit.localcluster down stops it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
