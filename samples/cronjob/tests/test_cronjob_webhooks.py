"""The tutorial's webhooks: defaulting and validation, through the Flask app."""

from __future__ import annotations

import base64
import json
from typing import Any

from cronjob_operator.webhooks import register

from operator_kit.webhooks import Webhooks


def review(spec: dict[str, Any], name: str = "tick") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": "batch.tutorial.kubebuilder.io", "version": "v1",
                     "kind": "CronJob"},
            "resource": {"group": "batch.tutorial.kubebuilder.io", "version": "v1",
                         "resource": "cronjobs"},
            "name": name, "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
                       "metadata": {"name": name, "namespace": "default"}, "spec": spec},
            "oldObject": None,
        },
    }


def answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
    app = Webhooks()
    register(app)
    response = app.test_client().post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    result: dict[str, Any] = response.get_json()["response"]
    return result


SPEC = {"schedule": "*/1 * * * *", "jobTemplate": {"spec": {"template": {}}}}


# --8<-- [start:defaulting]
def test_defaulting_fills_in_the_history_limits() -> None:
    result = answer("/mutate-cronjob", review(SPEC))
    patch = json.loads(base64.b64decode(result["patch"]))
    assert {(op["path"], op["value"]) for op in patch} == {
        ("/spec/successfulJobsHistoryLimit", 3), ("/spec/failedJobsHistoryLimit", 1)}


def test_defaulting_keeps_limits_that_are_set() -> None:
    result = answer("/mutate-cronjob", review({**SPEC, "successfulJobsHistoryLimit": 0,
                                               "failedJobsHistoryLimit": 5}))
    assert result["allowed"] and "patch" not in result
# --8<-- [end:defaulting]


def test_validation_allows_a_good_cron_job() -> None:
    assert answer("/validate-cronjob", review(SPEC))["allowed"]


def test_validation_names_every_problem() -> None:
    result = answer("/validate-cronjob", review({"schedule": "every minute",
                                                 "jobTemplate": {}}, name="x" * 53))
    assert not result["allowed"]
    message = result["status"]["message"]
    assert "metadata.name: must be no more than 52 characters" in message
    assert "spec.schedule: schedule 'every minute' needs 5 fields" in message
    assert "spec.jobTemplate.spec: required" in message
