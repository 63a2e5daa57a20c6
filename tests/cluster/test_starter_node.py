"""A generated project deployed as a user deploys it, on a real node: ``make image`` builds
its image without Docker and loads it into the node, ``make deploy`` applies its overlay
and the operator runs as Pods from that image, a sample is admitted by the Pods' webhooks
and reconciled by the leading Pod, and ``make undeploy`` leaves nothing of it behind.

It starts a plane with a node of its own (skipped where none can run, failing when
``OPERATOR_KIT_TEST_REQUIRE_NODE`` is set, as in CI's node stage).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit.localcluster import LocalCluster
from operator_kit.localcluster.pods import PodsError, wait_available
from operator_kit.testing import TestCluster, eventually
from tests.cluster.test_node import machine, post_mortem
from tests.cluster.test_starter import finish, make, new_project, project_env

__all__ = ["machine"]  # the fixture, shared with test_node

pytestmark = pytest.mark.node

GROUP = "gadgets.starter.test"


def test_make_image_and_make_deploy_run_the_project_as_pods_on_a_node(
        machine: None, tmp_path: Path) -> None:
    folder = tmp_path / "plane"
    plane = LocalCluster(folder)
    project = new_project(tmp_path, "gadget-operator", GROUP, "Gadget")
    namespace = "gadgets"
    try:
        kubeconfig = plane.up(node=True, timeout=300)
        cluster = TestCluster(str(kubeconfig))
        kubectl = plane.binaries().kubectl
        assert kubectl is not None
        env = dict(project_env(project), KUBECONFIG=str(kubeconfig))
        args = (f"KUBECTL={kubectl}", f"NAMESPACE={namespace}", f"PLANE={folder}")
        started = time.monotonic()
        built = finish(make(project, "image", *args, env=env), timeout=900)
        assert built.rstrip().splitlines()[-1] == "gadget-operator:0.1.0", built
        print(f"make image: {time.monotonic() - started:.0f}s")

        finish(make(project, "deploy", *args, env=env))
        started = time.monotonic()
        try:
            deployment = wait_available(cluster.api, namespace, "gadget-operator",
                                        timeout=300, plane_dir=folder)
            print(f"make deploy: available after {time.monotonic() - started:.0f}s")
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            assert container["image"] == "gadget-operator:0.1.0"
            pods = {p["metadata"]["name"] for p in cluster.api.get(
                f"/api/v1/namespaces/{namespace}/pods")["items"]}
            lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gadget-operator"
            leader = eventually(60, lambda: cluster.api.get(lease)["spec"].get(
                "holderIdentity"), interval=1, message="a Pod holds the Lease")
            assert leader in pods

            # The sample, admitted by the Pods' webhooks (failurePolicy Fail: no Pod, no
            # Gadget) and reconciled by the leading Pod: its ConfigMap and Ready.
            applied = subprocess.run(
                [str(kubectl), "apply", "-n", namespace, "-f",
                 f"config/samples/{GROUP}_v1_gadget.yaml"], cwd=project, env=env,
                capture_output=True, text=True, check=False)
            assert applied.returncode == 0, applied.stderr
            gadget = f"/apis/{GROUP}/v1/namespaces/{namespace}/gadgets/gadget-sample"

            def ready() -> bool:
                conditions = cluster.api.get(gadget).get("status", {}).get("conditions", [])
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            eventually(120, ready, interval=1, message="the sample reconciled by the Pod")
            assert cluster.exists(f"/api/v1/namespaces/{namespace}/configmaps/"
                                  "gadget-gadget-sample")
        except (AssertionError, ApiException, PodsError) as err:
            raise AssertionError(f"{err}\n{post_mortem(cluster, plane, namespace)}") from None

        undeployed = finish(make(project, "undeploy", *args, "UNDEPLOY_TIMEOUT=60", env=env))
        assert "deleted 1 custom object(s)" in undeployed, undeployed
        assert f"uninstalled gadget-operator from namespace {namespace}" in undeployed
        eventually(120, lambda: not cluster.exists(f"/api/v1/namespaces/{namespace}"),
                   interval=1, message="the namespace and its Pods gone")
        left = [path for path in (
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{GROUP}",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
            "gadget-operator",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
            "gadget-operator",
        ) if cluster.exists(path)]
        assert not left, left
        labelled = "app.kubernetes.io/name=gadget-operator"
        for kind in ("clusterroles", "clusterrolebindings"):
            found = cluster.api.get(f"/apis/rbac.authorization.k8s.io/v1/{kind}",
                                    labelSelector=labelled)["items"]
            assert not found, [o["metadata"]["name"] for o in found]
        assert not cluster.api.get("/api/v1/pods", labelSelector=labelled)["items"]
    finally:
        plane.down()
