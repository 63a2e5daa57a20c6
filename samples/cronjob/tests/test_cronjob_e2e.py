"""End to end: the tutorial operator as deployed — its generated manifests applied, a
replica under gunicorn as its own ServiceAccount, the API server calling its webhooks.

The webhooks default and validate what the API server stores; the schema refuses what
it can check itself; the controller, with the generated RBAC only, reconciles.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cronjob_operator import operator
from kubernetes.client.exceptions import ApiException

from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

SAMPLE_DIR = str(Path(__file__).resolve().parents[1])
CRONJOBS = "/apis/batch.tutorial.kubebuilder.io/v1/namespaces/{ns}/cronjobs"
TEMPLATE = {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
    {"name": "tick", "image": "busybox:1.36", "command": ["date"]}]}}}}


@pytest.fixture
def deployed(cluster: TestCluster, namespace: Namespace) -> Iterator[LocalDeployment]:
    deployment = LocalDeployment(cluster, operator, app="cronjob_operator:operator",
                                 namespace=namespace.name, replicas=1,
                                 pythonpath=[SAMPLE_DIR])
    deployment.apply()
    try:
        with deployment:
            deployment.start()
            deployment.wait_serving()
            yield deployment
    finally:
        deployment.delete()


def post(ns: Namespace, name: str, spec: dict[str, Any], *,
         dry_run: bool = False) -> dict[str, Any]:
    body = {"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
            "metadata": {"name": name}, "spec": spec}
    result: dict[str, Any] = ns.api.request("POST", CRONJOBS.format(ns=ns.name), body=body,
                                            query={"dryRun": "All" if dry_run else None})
    return result


def refusal(ns: Namespace, name: str, spec: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as refused:
        post(ns, name, spec)
    message: str = json.loads(refused.value.body or "{}")["message"]
    return message


# --8<-- [start:e2e]
def test_the_deployed_operator_defaults_validates_and_reconciles(
        deployed: LocalDeployment, namespace: Namespace) -> None:
    try:
        # The API server picks up the patched CA bundle asynchronously.
        eventually(30, lambda: post(namespace, "probe", {"schedule": "* * * * *",
                                                         "jobTemplate": TEMPLATE}, dry_run=True),
                   message="the API server calls the webhooks over trusted TLS")
        # The validating webhook: a schedule that does not parse.
        message = refusal(namespace, "bad", {"schedule": "every minute", "jobTemplate": TEMPLATE})
        assert "spec.schedule: schedule 'every minute' needs 5 fields" in message, message
        # The schema: a bound the API server checks itself (after the webhooks mutated).
        message = refusal(namespace, "odd", {"schedule": "* * * * *", "jobTemplate": TEMPLATE,
                                             "successfulJobsHistoryLimit": 500})
        assert "successfulJobsHistoryLimit" in message and "100" in message, message
        # The mutating webhook fills in the history limits; the schema default the policy.
        created = post(namespace, "tick", {"schedule": "0 3 * * *", "jobTemplate": TEMPLATE})
        assert created["spec"]["successfulJobsHistoryLimit"] == 3
        assert created["spec"]["failedJobsHistoryLimit"] == 1
        assert created["spec"]["concurrencyPolicy"] == "Allow"

        def ready() -> dict[str, Any]:
            obj = namespace.get("batch.tutorial.kubebuilder.io/v1", "CronJob", "tick") or {}
            conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
            assert conditions.get("Ready", {}).get("status") == "True", conditions
            result: dict[str, Any] = conditions["Ready"]
            return result

        condition = eventually(60, ready, message="the deployed controller reconciled tick")
        assert condition["message"].startswith("next run at ")
        assert condition["message"].endswith("T03:00:00Z")
    except (AssertionError, ApiException) as err:
        raise AssertionError(f"{err}\n--- replica\n{deployed.logs()[-8000:]}") from None
# --8<-- [end:e2e]
