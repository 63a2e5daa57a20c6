"""The tutorial operator's manifests, written from its code."""

from __future__ import annotations

from cronjob_operator import operator

from operator_kit.manifests import operator_manifests


def test_the_manifests_let_the_operator_manage_jobs_and_call_its_webhooks() -> None:
    docs = operator_manifests(operator, app="cronjob_operator:operator",
                              namespace="cronjob-operator", image="cronjob-operator:0.1.0",
                              replicas=2)
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    role = by_kind[("ClusterRole", "cronjob-operator")]
    jobs = [r for r in role["rules"] if "jobs" in r["resources"]]
    assert jobs and {"create", "delete", "list", "watch"} <= set(jobs[0]["verbs"])
    crd = by_kind[("CustomResourceDefinition", "cronjobs.batch.tutorial.kubebuilder.io")]
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    paths = {w["clientConfig"]["service"]["path"]
             for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
             for w in by_kind[(kind, "cronjob-operator")]["webhooks"]}
    assert paths == {"/validate-cronjob", "/mutate-cronjob"}
