"""The installation's admission policies, through the real API server.

The generated manifests carry ValidatingAdmissionPolicies (`operator_kit.manifests._guard`):
the operator's ServiceAccount may change only the caBundles of its webhook configurations
and CRDs: not one other field, metadata included (an ownerReference it could add let
the garbage collector delete them). Every change here is a server-side dry-run as that
ServiceAccount (a token minted for it), so the API server runs authorization and
admission and stores nothing, except where the garbage collector is given its chance.
"""

from __future__ import annotations

import base64
import time
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


HOOK_CA = {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": CA}
CRD_CA = {"op": "add", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": CA}
GONE_NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "name": "no-such-namespace",
                  "uid": "6f1e8c57-0000-4000-8000-000000000000"}


def replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


def add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


# Every field of a webhook configuration the ServiceAccount's `patch` right reaches that
# the API server would accept (what it refuses as invalid, e.g. a second webhook of the
# same name, never gets to admission): each, alone, with a caBundle patch or not.
METADATA = {
    "an ownerReference (the garbage collector would delete it)": add(
        "/metadata/ownerReferences", [GONE_NAMESPACE]),
    "a finalizer (an uninstall would hang)": add("/metadata/finalizers", ["example.com/hold"]),
    "a label": add("/metadata/labels/example.com~1extra", "x"),
    "a label removed": {"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1name"},
    "an annotation": add("/metadata/annotations", {"example.com/note": "x"}),
    "generateName": add("/metadata/generateName", "x-"),
}
WEBHOOK = {
    "failurePolicy Ignore": replace("/webhooks/0/failurePolicy", "Ignore"),
    "other operations": replace("/webhooks/0/rules/0/operations", ["DELETE"]),
    "another rule": add("/webhooks/0/rules/-", {
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
        "resources": ["configmaps"]}),
    "a namespaceSelector": add("/webhooks/0/namespaceSelector",
                               {"matchLabels": {"nothing": "has-this"}}),
    "an objectSelector": add("/webhooks/0/objectSelector",
                             {"matchLabels": {"nothing": "has-this"}}),
    "matchPolicy Exact": replace("/webhooks/0/matchPolicy", "Exact"),
    "sideEffects NoneOnDryRun": replace("/webhooks/0/sideEffects", "NoneOnDryRun"),
    "a timeout": replace("/webhooks/0/timeoutSeconds", 1),
    "admissionReviewVersions": replace("/webhooks/0/admissionReviewVersions", ["v1", "v1beta1"]),
    "a matchCondition": add("/webhooks/0/matchConditions", [
        {"name": "never", "expression": "false"}]),
    "the webhook renamed": replace("/webhooks/0/name", "renamed.example.com"),
    "another Service": replace("/webhooks/0/clientConfig/service/name", "elsewhere"),
    "another Service namespace": replace("/webhooks/0/clientConfig/service/namespace",
                                         "elsewhere"),
    "another Service path": replace("/webhooks/0/clientConfig/service/path", "/other"),
    "another Service port": replace("/webhooks/0/clientConfig/service/port", 8443),
    "a URL instead of the Service": replace("/webhooks/0/clientConfig", {
        "url": "https://attacker.example.com/validate", "caBundle": CA}),
    "a webhook removed": {"op": "remove", "path": "/webhooks/0"},
    "no webhooks": {"op": "remove", "path": "/webhooks"},
}
MUTATING_ONLY = {"reinvocationPolicy IfNeeded": replace("/webhooks/0/reinvocationPolicy",
                                                          "IfNeeded")}
CRD_SPEC = {
    "a schema that keeps anything": add(
        "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-preserve-unknown-fields", True),
    "a version no longer served": replace("/spec/versions/1/served", False),
    "a version deprecated": add("/spec/versions/0/deprecated", True),
    "printer columns": replace("/spec/versions/0/additionalPrinterColumns", []),
    "no status subresource": {"op": "remove", "path": "/spec/versions/0/subresources"},
    "a short name": replace("/spec/names/shortNames", ["b"]),
    "a category": add("/spec/names/categories", ["all"]),
    "no conversion": replace("/spec/conversion", {"strategy": "None"}),
    "conversionReviewVersions": replace("/spec/conversion/webhook/conversionReviewVersions",
                                        ["v1", "v1beta1"]),
    "another conversion Service": replace(
        "/spec/conversion/webhook/clientConfig/service/name", "elsewhere"),
    "another conversion path": replace(
        "/spec/conversion/webhook/clientConfig/service/path", "/other"),
    "a conversion URL": replace("/spec/conversion/webhook/clientConfig", {
        "url": "https://attacker.example.com/convert", "caBundle": CA}),
}


def refused_changes() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """What the ServiceAccount may not do: (object, JSON patch) by description."""
    changes: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for kind, path in (("validating", VALIDATING), ("mutating", MUTATING), ("CRD", CRD)):
        for what, op in METADATA.items():
            changes[f"{kind}: {what}"] = (path, [op])
        changes[f"{kind}: {next(iter(METADATA))}, with a caBundle"] = (
            path, [HOOK_CA if path != CRD else CRD_CA, next(iter(METADATA.values()))])
    for what, op in WEBHOOK.items():
        changes[f"validating: {what}"] = (VALIDATING, [op])
    for what, op in {**WEBHOOK, **MUTATING_ONLY}.items():
        changes[f"mutating: {what}"] = (MUTATING, [op])
    for what, op in CRD_SPEC.items():
        changes[f"CRD: {what}"] = (CRD, [op])
    return changes


def test_the_service_account_may_change_only_the_ca_bundles(
        cluster: TestCluster, installed: LocalDeployment) -> None:
    account = Api(api_client(str(installed.kubeconfig())))
    # The policy is enforced a moment after it is created: wait for its first refusal.
    eventually(30, lambda: json_patch(account, VALIDATING, WEBHOOK["failurePolicy Ignore"]),
               message="the self-protection policy enforced")

    assert json_patch(account, VALIDATING, HOOK_CA) is None
    assert json_patch(account, MUTATING, HOOK_CA) is None
    assert json_patch(account, CRD, CRD_CA) is None

    identity = f"system:serviceaccount:{installed.namespace}:{installed.service_account}"
    refused = refused_changes()
    admitted = [what for what, (path, ops) in refused.items() if json_patch(account, path, *ops)
                is None]
    assert not admitted, f"admitted as the ServiceAccount: {admitted}"
    repointing = []  # also refused by the installation policy, whose refusal comes first
    for what, (path, ops) in refused.items():
        refusal = json_patch(account, path, *ops)
        assert refusal is not None
        if "would point it at another one" in refusal:
            repointing.append(what)
            continue
        assert f"the ServiceAccount {identity} may change only the caBundle" in refusal, (
            what, refusal)
        assert "self-protection admission policy of backup-operator" in refusal, (what, refusal)
    assert all("namespace" in what or "URL" in what for what in repointing), repointing

    # An administrator still may (the policy matches the ServiceAccount only).
    for what in ("validating: failurePolicy Ignore",
                 "CRD: an ownerReference (the garbage collector would delete it)",
                 "mutating: a finalizer (an uninstall would hang)"):
        path, ops = refused[what]
        assert json_patch(cluster.api, path, *ops) is None, what
    print(f"\nself-protection: 3 caBundle patches admitted, {len(refused)} other changes "
          "refused as the ServiceAccount (metadata, every webhook field, the CRD's spec; "
          f"{len(repointing)} of them re-point the object and were answered by the "
          "installation policy), the same changes admitted as an administrator")


def test_an_owner_reference_added_by_the_service_account_deletes_nothing(
        cluster: TestCluster, installed: LocalDeployment) -> None:
    """R4 for real, not a dry run: the garbage collector deleted the webhook
    configurations at once and the CRD after 0.5 s when the ServiceAccount could add an
    ownerReference to a Namespace that does not exist."""
    account = Api(api_client(str(installed.kubeconfig())))
    eventually(30, lambda: json_patch(account, VALIDATING, WEBHOOK["failurePolicy Ignore"]),
               message="the self-protection policy enforced")
    for path in (VALIDATING, MUTATING, CRD):
        with pytest.raises(ApiException) as refused:
            account.request("PATCH", path, body=[METADATA[next(iter(METADATA))]],
                            content_type="application/json-patch+json")
        assert refused.value.status == 403
    time.sleep(3)  # what the garbage collector needed
    for path in (VALIDATING, MUTATING, CRD):
        obj = cluster.api.get(path)
        assert not obj["metadata"].get("ownerReferences"), path
        assert obj["metadata"].get("deletionTimestamp") is None, path
