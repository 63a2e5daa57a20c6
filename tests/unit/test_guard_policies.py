"""The admission policies' shape: exact identities, CREATE covered, whole-object comparison.

What the policies admit and refuse is tested through the real API server
(tests/cluster/test_guard.py, test_guard_shard_labels.py, test_manifests_cluster.py); these
check what the generator writes, and that a Helm chart renders the same identity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backup_operator import operator as backup_operator

from operator_kit.manifests import operator_manifests, write_helm_chart
from operator_kit.manifests._guard import guard_policies
from tests.unit.test_helm import rendered
from tests.unit.test_helm_chart import BACKUP_APP


def policies(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """name -> {"policy": ..., "binding": ...} of the admission policies in `docs`."""
    out: dict[str, dict[str, Any]] = {}
    for doc in docs:
        if doc["kind"] == "ValidatingAdmissionPolicy":
            out.setdefault(doc["metadata"]["name"], {})["policy"] = doc
        elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
            out.setdefault(doc["metadata"]["name"], {})["binding"] = doc
    return out


def sharded() -> list[dict[str, Any]]:
    return guard_policies(
        "report-operator", "team-a", "reports:operator", account="report-operator",
        validating=["report-operator"], mutating=[], crds=["reports.example.com"],
        ca_bundle_crds=["reports.example.com"], keeps_ca_bundles=True,
        shard=["shard.operator-kit.io/report-operator",
               "drain.shard.operator-kit.io/report-operator"],
        sharded=[("example.com", "reports"), ("", "configmaps")])


def expressions(doc: dict[str, Any]) -> list[str]:
    spec = doc["spec"]
    return [e[key] for part in ("matchConditions", "variables", "validations")
            for e in spec.get(part, ()) for key in ("expression", "messageExpression")
            if key in e]


def test_the_policies_that_name_the_operator_take_its_service_account_as_their_parameter(
        ) -> None:
    found = policies(sharded())
    assert sorted(found) == ["report-operator-installation-team-a",
                             "report-operator-self-protection-team-a",
                             "report-operator-shard-labels-team-a"]
    for name in ("report-operator-self-protection-team-a",
                 "report-operator-shard-labels-team-a"):
        assert found[name]["policy"]["spec"]["paramKind"] == {"apiVersion": "v1",
                                                              "kind": "ServiceAccount"}
        assert found[name]["binding"]["spec"]["paramRef"] == {
            "name": "report-operator", "namespace": "team-a",
            "parameterNotFoundAction": "Deny"}
        identity = ("request.userInfo.username == 'system:serviceaccount:' + "
                    "params.metadata.namespace + ':' + params.metadata.name")
        assert identity in found[name]["policy"]["spec"]["matchConditions"][0]["expression"]
    assert "paramKind" not in found["report-operator-installation-team-a"]["policy"]["spec"]


def test_no_policy_trusts_an_account_by_its_name_alone() -> None:
    for doc in sharded():
        if doc["kind"] == "ValidatingAdmissionPolicy":
            for expression in expressions(doc):
                assert "endsWith(':" not in expression, expression
                assert "startsWith('system:serviceaccount:')" not in expression, expression


def test_the_shard_label_policy_covers_create_as_well_as_update() -> None:
    policy = policies(sharded())["report-operator-shard-labels-team-a"]["policy"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {r["resources"][0] for r in rules} == {"reports", "configmaps"}
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in rules)
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"].startswith("request.operation == 'UPDATE' && ")


def test_self_protection_compares_everything_but_the_ca_bundles() -> None:
    policy = policies(sharded())["report-operator-self-protection-team-a"]["policy"]
    hooks, crds = (v["expression"] for v in policy["spec"]["validations"])
    # What may differ: the caBundles, and what the API server itself rewrites on a write.
    server = "['managedFields', 'resourceVersion', 'generation']"
    assert f"dyn(object.metadata).all(k, k in {server} ||" in hooks
    assert f"dyn(object.metadata).all(k, k in {server} ||" in crds
    assert "dyn(w.clientConfig).all(k, k in ['caBundle'] ||" in hooks
    assert ("dyn(object.spec.conversion.webhook.clientConfig).all(k, k in ['caBundle'] ||"
            in crds)
    assert "dyn(object).all(k, k in ['metadata', 'webhooks'] ||" in hooks
    assert "dyn(object).all(k, k in ['metadata', 'spec'] ||" in crds
    for field in ("ownerReferences", "finalizers", "labels", "annotations"):
        assert field not in hooks + crds, f"{field} is compared like any other field"


def test_the_helm_chart_binds_the_service_account_of_the_namespace_it_renders_into(
        tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP)
    for args, namespace in ((["--namespace", "team-a"], "team-a"),
                            (["--namespace", "team-a", "--set", "namespace=team-b"],
                             "team-b")):
        docs = rendered(tmp_path / "chart", tmp_path, *args)
        bound = [d["spec"]["paramRef"] for d in docs if "paramRef" in d.get("spec", {})]
        assert bound == [{"name": "backup-operator", "namespace": namespace,
                          "parameterNotFoundAction": "Deny"}], bound
        account = next(d for d in docs if d["kind"] == "ServiceAccount")
        assert account["metadata"]["namespace"] == namespace


def test_the_stream_binds_the_service_account_it_creates() -> None:
    docs = operator_manifests(backup_operator, app=BACKUP_APP, namespace="team-c",
                              image="example.com/backup-operator:1")
    (account,) = (d for d in docs if d["kind"] == "ServiceAccount")
    bound = [d["spec"]["paramRef"] for d in docs if "paramRef" in d.get("spec", {})]
    assert bound == [{"name": account["metadata"]["name"], "namespace": "team-c",
                      "parameterNotFoundAction": "Deny"}]
