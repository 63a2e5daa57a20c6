"""The installation's admission policies, through the real API server.

The generated manifests carry ValidatingAdmissionPolicies (`operator_kit.manifests._guard`):
the operator's ServiceAccount may change only the caBundles of its webhook configurations
and CRDs. Every change here is a server-side dry-run ``--as`` that ServiceAccount (a
token minted for it), so the API server runs authorization and admission and stores
nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from backup_operator import operator
from kubernetes.client.exceptions import ApiException

from operator_kit import _pki
from operator_kit.client.transport import Api, api_client
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment
from tests.cluster.test_certificate_keeping import SAMPLE_DIR

VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/" \
    "backup-operator"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" \
    "backup-operator"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/backups.example.com"
CA = base64.b64encode(_pki.new_ca("a CA the keeper might write").cert_pem).decode()


@pytest.fixture
def installed(cluster: TestCluster, namespace: Namespace) -> Iterator[LocalDeployment]:
    deployed = LocalDeployment(cluster, operator, app="backup_operator:operator",
                               namespace=namespace.name, replicas=1, pythonpath=[SAMPLE_DIR])
    deployed.apply()
    try:
        yield deployed
    finally:
        deployed.delete()


def json_patch(api: Api, path: str, *ops: dict[str, Any]) -> str | None:
    """A dry-run JSON patch: None if admitted, else the API server's refusal."""
    try:
        api.request("PATCH", path, body=list(ops), query={"dryRun": "All"},
                    content_type="application/json-patch+json")
    except ApiException as err:
        assert err.status == 403, err
        return str(err)
    return None


def test_the_service_account_may_change_only_the_ca_bundles(
        cluster: TestCluster, installed: LocalDeployment) -> None:
    account = Api(api_client(str(installed.kubeconfig())))
    hook_ca = {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": CA}
    # The policy is enforced a moment after it is created: wait for its first refusal.
    eventually(30, lambda: json_patch(account, VALIDATING, {
        "op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}),
        message="the self-protection policy enforced")

    assert json_patch(account, VALIDATING, hook_ca) is None
    assert json_patch(account, MUTATING, hook_ca) is None
    assert json_patch(account, CRD, {
        "op": "add", "path": "/spec/conversion/webhook/clientConfig/caBundle",
        "value": CA}) is None

    refused = {
        "failurePolicy Ignore": (VALIDATING, {"op": "replace",
                                              "path": "/webhooks/0/failurePolicy",
                                              "value": "Ignore"}),
        "no operations": (MUTATING, {"op": "replace",
                                     "path": "/webhooks/0/rules/0/operations",
                                     "value": ["DELETE"]}),
        "a namespaceSelector": (VALIDATING, {
            "op": "add", "path": "/webhooks/0/namespaceSelector",
            "value": {"matchLabels": {"nothing": "has-this"}}}),
        "another Service": (VALIDATING, {
            "op": "replace", "path": "/webhooks/0/clientConfig/service/name",
            "value": "elsewhere"}),
        "a timeout": (MUTATING, {"op": "replace", "path": "/webhooks/0/timeoutSeconds",
                                 "value": 1}),
        "a webhook removed": (VALIDATING, {"op": "remove", "path": "/webhooks/0"}),
        "a schema that keeps anything": (CRD, {
            "op": "add",
            "path": "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-preserve-unknown-fields",
            "value": True}),
        "a version no longer served": (CRD, {"op": "replace",
                                             "path": "/spec/versions/0/served",
                                             "value": False}),
        "no conversion": (CRD, {"op": "replace", "path": "/spec/conversion",
                                "value": {"strategy": "None"}}),
    }
    for what, (path, op) in refused.items():
        refusal = json_patch(account, path, op)
        assert refusal is not None, f"{what}: admitted"
        assert "may change only the caBundle" in refusal, (what, refusal)
        assert f"self-protection-{installed.namespace}" in refusal, (what, refusal)

    # An administrator still may (the policy matches the ServiceAccount only).
    assert json_patch(cluster.api, VALIDATING, refused["failurePolicy Ignore"][1]) is None
    print(f"\nself-protection: 3 caBundle patches admitted, {len(refused)} other changes "
          "refused as the ServiceAccount, the same change admitted as an administrator")
