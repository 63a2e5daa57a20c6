"""An operator without webhooks, deployed from its generated manifests.

`LocalDeployment` applies what ``python -m operator_kit.manifests`` writes (no Service, no
webhook configurations, no certificate) and runs each replica as the Deployment runs
it — ``python -m operator_kit`` with ``OPERATOR_KIT_APP``, the operator's own command line
— as the generated ServiceAccount. A Memo becomes a ConfigMap; ``/livez`` and ``/readyz``
answer over HTTP on each replica's probe port and ``/metrics`` on its metrics port, the
ports a pod has as 8081 and 8080. The replicas are run from this module
(``OPERATOR_KIT_APP=tests.cluster.test_deploy_without_webhooks:operator``).
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
)
from operator_kit.localcluster import find_or_build
from operator_kit.manifests import operator_manifests, to_yaml
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment, Replica

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.cluster.test_deploy_without_webhooks"


@dataclass
class MemoSpec:
    text: str


class Memo(CustomResource):
    group = "nowebhooks.operator-kit.test"
    version = "v1"
    kind = "Memo"
    spec: MemoSpec


class MemoController(Controller[Memo]):
    """Keeps a ConfigMap per Memo holding its text."""

    resource = Memo
    owns = ("v1/ConfigMap",)

    def reconcile(self, memo: Memo, ctx: Context) -> Action:
        ctx.apply_owned(memo, {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": memo.name},
                               "data": {"text": memo.spec.text}})
        return Action.await_change()


operator = Operator("memo-operator", [MemoController()])
elected = Operator("memo-elected-operator", [MemoController()],
                   leader_election=LeaderElection())


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _create_memo(namespace: Namespace, name: str, text: str) -> None:
    body = Memo(name, MemoSpec(text=text), namespace=namespace.name).to_dict()
    namespace.api.request(
        "POST", f"/apis/{Memo.api_version()}/namespaces/{namespace.name}/memos", body=body)


def _reconciled(namespace: Namespace, name: str, text: str) -> None:
    def made() -> bool:
        config_map = namespace.get("v1", "ConfigMap", name) or {}
        owners = config_map.get("metadata", {}).get("ownerReferences", [])
        return (config_map.get("data") == {"text": text}
                and [o["kind"] for o in owners] == ["Memo"])

    eventually(60, made, message=f"the Memo {name} is reconciled into its ConfigMap")


def _serves_probes_and_metrics(replica: Replica, *, leads: bool) -> None:
    assert replica.probe_port and replica.metrics_port
    probes = f"http://127.0.0.1:{replica.probe_port}"
    eventually(30, lambda: _get(f"{probes}/readyz")[0] == 200,
               message=f"{replica.name} /readyz answers 200 on its probe port")
    assert _get(f"{probes}/livez")[0] == 200
    status, metrics = _get(f"http://127.0.0.1:{replica.metrics_port}/metrics")
    assert status == 200
    assert "controller_runtime_reconcile_total" in metrics
    if leads:
        assert 'controller_runtime_reconcile_total{cluster="",controller="memo",result="success"}' \
            in metrics
    assert _get(f"{probes}/metrics")[0] == 404, "metrics are on their own port"
    assert _get(f"http://127.0.0.1:{replica.metrics_port}/readyz")[0] == 404


def test_an_operator_without_webhooks_deploys_reconciles_and_serves_probes_and_metrics(
        cluster: TestCluster, namespace: Namespace) -> None:
    deployment = LocalDeployment(cluster, operator, app=f"{MODULE}:operator",
                                 namespace=namespace.name, pythonpath=[str(REPO)])
    kinds = [d["kind"] for d in deployment.documents]
    assert kinds == ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
                     "ClusterRoleBinding", "NetworkPolicy", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding"], "no Service, webhooks, Lease Role"
    assert deployment.replica_count == 1, "one replica without leader election"
    assert not deployment.gunicorn
    deployment.apply()
    try:
        with deployment:
            (replica,) = deployment.start()
            deployment.wait_serving()
            _create_memo(namespace, "hello", "hi there")
            _reconciled(namespace, "hello", "hi there")
            _serves_probes_and_metrics(replica, leads=True)
            assert not namespace.list("coordination.k8s.io/v1", "Lease")
            assert replica.stop() == 0, replica.output()
            output = replica.output()
            assert "gunicorn" not in output.lower(), output
            assert "certificate" not in output.lower(), output
    finally:
        deployment.delete()


def test_with_leader_election_two_replicas_run_one_leads_both_are_ready(
        cluster: TestCluster, namespace: Namespace) -> None:
    deployment = LocalDeployment(cluster, elected, app=f"{MODULE}:elected",
                                 namespace=namespace.name, pythonpath=[str(REPO)])
    assert deployment.replica_count == 2
    deployment.apply()
    try:
        with deployment:
            replicas = deployment.start()
            deployment.wait_serving()
            leader = eventually(30, deployment.leader, message="one replica leads")
            _create_memo(namespace, "elected", "from the leader")
            _reconciled(namespace, "elected", "from the leader")
            for replica in replicas:
                _serves_probes_and_metrics(replica, leads=replica is leader)
                metrics = _get(f"http://127.0.0.1:{replica.metrics_port}/metrics")[1]
                leading = [line for line in metrics.splitlines()
                           if line.startswith("leader_election_master_status{")
                           and line.endswith(" 1.0")]
                assert len(leading) == (1 if replica is leader else 0), (replica.name,
                                                                           leading)
    finally:
        deployment.delete()


def test_the_generated_deployment_passes_a_server_side_dry_run(
        cluster: TestCluster, namespace: Namespace) -> None:
    """The stream as kubectl reads it (the YAML too: ``:8081`` as a string)."""
    kubectl = find_or_build(log=False).kubectl
    if kubectl is None:
        pytest.fail("no kubectl next to the control plane's binaries")
    docs = operator_manifests(operator, app=f"{MODULE}:operator", namespace=namespace.name,
                              image="example.com/memo-operator:1.0.0",
                              namespace_document=False)
    deployment = to_yaml([d for d in docs if d["kind"] == "Deployment"])
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", cluster.kubeconfig, "apply", "--dry-run=server",
         "-o", "yaml", "-f", "-"], input=deployment, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    (container,) = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "operator_kit"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS"] == ":8081"
    assert env["OPERATOR_KIT_METRICS_BIND_ADDRESS"] == ":8080"
