"""operator_kit.webhooks: admission and conversion reviews in and out, bad input, the entry point.

Requests go through Flask's test client, so every path a real request takes (routing,
content type, body limits, error handlers) is exercised in-process.
"""

from __future__ import annotations

import base64
import copy
import importlib
import io
import json
import logging
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import types
from dataclasses import dataclass, field
from http.client import HTTPSConnection
from pathlib import Path
from typing import Any

import flask
import pytest
from flask.testing import FlaskClient
from prometheus_client import REGISTRY

import operator_kit.webhooks as webhooks_module
import operator_kit.webhooks.loader as loader_module
from operator_kit.api.resources import CustomResource
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.server import (
    AdmissionRequest,
    Denied,
    Registration,
    Webhooks,
    json_patch,
)

# ---------------------------------------------------------------------- a kind and an app


@dataclass
class WidgetSpec:
    schedule: str
    database: str = ""
    retain: int = 7
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class WidgetStatus:
    last_run: str | None = None


class Widget(CustomResource):
    group = "wh.example.com"
    version = "v1"
    kind = "Widget"
    spec: WidgetSpec
    status: WidgetStatus


@dataclass
class GizmoSpec:
    size: int


@dataclass
class Dimensions:
    size: int


@dataclass
class GizmoSpecV2:
    dimensions: Dimensions


class Gizmo(CustomResource):
    """A kind in two versions, for the conversion webhook registered with its kind."""

    group = "wh.example.com"
    version = "v1"
    kind = "Gizmo"
    spec: GizmoSpec


class GizmoV2(CustomResource, version_of=Gizmo):
    version = "v2"
    spec: GizmoSpecV2


SECRET = "s3cr3t-token-value"
converted: list[dict[str, Any]] = []
seen: list[AdmissionRequest[Widget]] = []


def make_app() -> Webhooks:
    app = Webhooks(max_body_bytes=64 * 1024)

    @app.validate(Widget, "/validate")
    def validate(request: AdmissionRequest[Widget]) -> None:
        seen.append(request)
        obj = request.object
        if obj is None:
            return
        if obj.spec.database == "explode":
            raise RuntimeError(f"connection string postgres://admin:{SECRET}@db failed")
        if obj.spec.retain > 30:
            request.warn("spec.retain above 30 costs money")
        if not obj.spec.schedule:
            raise Denied("spec.schedule is required")

    @app.mutate(Widget, "/mutate")
    def mutate(obj: Widget, request: AdmissionRequest[Widget]) -> Widget:
        seen.append(request)
        if obj.spec.database == "explode":
            raise KeyError(SECRET)
        if obj.spec.database == "forbidden":
            raise Denied("database 'forbidden' is reserved")
        if obj.spec.database == "wrong-type":
            return None  # type: ignore[return-value]
        if obj.spec.database == "as-is":
            return obj
        obj.labels["wh.example.com/managed"] = "true"
        obj.spec.tags["a/b~c"] = "escaped"
        request.warn("labelled")
        return obj

    @app.convert("/convert")
    def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
        spec = obj.get("spec", {})
        if spec.get("size") == "explode":
            raise ValueError(f"token {SECRET}")
        if spec.get("size") == "refuse":
            raise Denied("size 'refuse' has no v2 form")
        if spec.get("size") == "not-a-dict":
            return "nope"  # type: ignore[return-value]
        if desired_api_version.endswith("/v2"):
            out = dict(obj)
            out["spec"] = {"dimensions": {"size": spec.get("size")}}
            return out
        out = dict(obj)
        out["spec"] = {"size": spec.get("dimensions", {}).get("size")}
        return out

    @app.convert("/convert-gizmo", kind=GizmoV2)  # any version class names the kind
    def convert_gizmo(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
        converted.append(obj)
        spec = obj["spec"]  # no checks: the webhook decoded the object before
        if desired_api_version == GizmoV2.api_version():
            if spec["size"] == 13:
                raise RuntimeError(f"a bug, with token {SECRET}")
            return {**obj, "spec": {"dimensions": {"size": spec["size"]}}}
        return {**obj, "spec": {"size": spec["dimensions"]["size"]}}

    return app


@pytest.fixture
def app() -> Webhooks:
    seen.clear()
    converted.clear()
    return make_app()


@pytest.fixture
def http(app: Webhooks) -> FlaskClient:
    return app.test_client()


def widget(spec: dict[str, Any] | None = None, name: str = "w1", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "wh.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "team-a", "uid": "obj-uid", **meta},
        "spec": {"schedule": "@daily", "database": "orders"} if spec is None else spec,
    }


def admission(
    obj: dict[str, Any] | None = None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    uid: str = "req-1",
    dry_run: bool = False,
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "wh.example.com", "version": "v1", "kind": "Widget"},
            "resource": {"group": "wh.example.com", "version": "v1", "resource": "widgets"},
            "name": "w1",
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["devs"]},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions"},
        },
    }


def conversion(objects: list[Any], desired: str = "wh.example.com/v2") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "conv-1", "desiredAPIVersion": desired, "objects": objects},
    }


def gadget(spec: dict[str, Any], name: str = "g1", version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": f"wh.example.com/{version}", "kind": "Gadget",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def gizmo(spec: Any, name: str = "g1", version: str = "v1") -> dict[str, Any]:
    return {**gadget(spec, name, version), "kind": "Gizmo"}


def post(http: FlaskClient, path: str, body: Any) -> Any:
    response = http.post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """A minimal RFC 6902 applier (add, remove, replace), to check what we send."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not tokens:
            assert op["op"] == "replace"
            doc = copy.deepcopy(op["value"])
            continue
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if op["op"] == "remove":
            assert last in parent, f"remove of missing {op['path']}"
            del parent[last]
        elif op["op"] == "replace":
            assert last in parent, f"replace of missing {op['path']}"
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "add":
            parent[last] = copy.deepcopy(op["value"])
        else:
            raise AssertionError(op)
    return doc


def requests_total(path: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "operator_kit_webhook_requests_total", {"path": path, "outcome": outcome}
    )
    return value or 0.0


def error_of(answer: Any) -> str:
    """The message of an error answer: a metav1 Status, which the API server shows."""
    body = answer.get_json() if hasattr(answer, "get_json") else answer
    assert {k: v for k, v in body.items() if k != "message"} == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "reason": body["reason"], "code": body["code"]}, body
    assert body["reason"] and body["code"] >= 400
    return str(body["message"])


def cr_requests_total(path: str, code: str) -> float:
    value = REGISTRY.get_sample_value(
        "controller_runtime_webhook_requests_total", {"webhook": path, "code": code})
    return value or 0.0


def duration_count(path: str) -> float:
    value = REGISTRY.get_sample_value("operator_kit_webhook_duration_seconds_count", {"path": path})
    return value or 0.0


# ---------------------------------------------------------------------- validate


def test_validate_allows_when_the_handler_returns_and_echoes_the_uid(http: FlaskClient) -> None:
    answer = post(http, "/validate", admission(widget(), uid="abc-123"))
    assert answer == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc-123", "allowed": True},
    }


def test_validate_denies_with_the_message_of_denied_as_403_forbidden(http: FlaskClient) -> None:
    answer = post(http, "/validate", admission(widget({"schedule": ""})))
    assert answer["response"] == {
        "uid": "req-1",
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": "spec.schedule is required",
        },
    }


def test_the_validate_handler_gets_the_request_with_typed_objects(http: FlaskClient) -> None:
    old = widget({"schedule": "@hourly", "database": "orders"})
    post(http, "/validate", admission(widget(), operation="UPDATE", old=old, dry_run=True))
    (request,) = seen
    assert request.uid == "req-1"
    assert request.operation == "UPDATE"
    assert isinstance(request.object, Widget) and request.object.spec.schedule == "@daily"
    assert isinstance(request.old_object, Widget)
    assert request.old_object.spec.schedule == "@hourly"
    assert request.user_info == {"username": "alice", "groups": ["devs"]}
    assert (request.name, request.namespace, request.dry_run) == ("w1", "team-a", True)
    assert request.kind["kind"] == "Widget"
    assert request.resource["resource"] == "widgets"
    assert request.raw["options"] == {"kind": "CreateOptions"}


def test_a_delete_request_has_the_old_object_and_no_object(http: FlaskClient) -> None:
    answer = post(http, "/validate", admission(None, operation="DELETE", old=widget()))
    assert answer["response"]["allowed"] is True
    (request,) = seen
    assert request.object is None and isinstance(request.old_object, Widget)


def test_warnings_are_sent_with_the_answer(http: FlaskClient) -> None:
    spec = {"schedule": "@daily", "retain": 40}
    allowed = post(http, "/validate", admission(widget(spec)))
    assert allowed["response"]["allowed"] is True
    assert allowed["response"]["warnings"] == ["spec.retain above 30 costs money"]
    denied = post(http, "/validate", admission(widget({"schedule": "", "retain": 40})))
    assert denied["response"]["allowed"] is False
    assert denied["response"]["warnings"] == ["spec.retain above 30 costs money"]


def test_a_handler_that_raises_is_an_internal_error_500_and_its_traceback_is_logged(
    http: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Not a 403 denial, which reads like RBAC: the API server applies the failurePolicy.
    before = requests_total("/validate", "error")
    before_500 = cr_requests_total("/validate", "500")
    with caplog.at_level(logging.ERROR, logger="operator_kit.webhooks"):
        response = http.post(
            "/validate", json=admission(widget({"schedule": "x", "database": "explode"})))
    assert response.status_code == 500
    # a metav1 Status, from which the API server's client reads the message
    assert error_of(response) == "internal error in webhook /validate; see the operator's log"
    assert response.get_json()["reason"] == "InternalError"
    assert SECRET not in response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)
    (record,) = [r for r in caplog.records if r.name == "operator_kit.webhooks"]
    assert record.exc_info is not None and "RuntimeError" in caplog.text
    assert "CREATE" in record.getMessage() and "team-a/w1" in record.getMessage()
    assert requests_total("/validate", "error") == before + 1
    assert cr_requests_total("/validate", "500") == before_500 + 1


# ---------------------------------------------------------------------- mutate


def test_mutate_sends_the_json_patch_from_the_received_object_to_the_returned_one(
    http: FlaskClient,
) -> None:
    received = widget()
    answer = post(http, "/mutate", admission(received))
    response = answer["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert response["warnings"] == ["labelled"]
    ops = json.loads(base64.b64decode(response["patch"]))
    patched = apply_patch(received, ops)
    assert patched["metadata"]["labels"] == {"wh.example.com/managed": "true"}
    assert patched["spec"]["tags"] == {"a/b~c": "escaped"}
    assert {op["path"] for op in ops} == {"/metadata/labels", "/spec/tags"}


def test_mutate_patches_only_what_changed_and_keeps_unknown_fields(http: FlaskClient) -> None:
    received = widget({"schedule": "@daily", "tags": {"x": "1"}, "futureField": [1, 2]})
    received["metadata"]["labels"] = {"team": "a"}
    received["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    answer = post(http, "/mutate", admission(received, operation="UPDATE", old=widget()))
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert sorted(ops, key=lambda o: o["path"]) == [
        {"op": "add", "path": "/metadata/labels/wh.example.com~1managed", "value": "true"},
        {"op": "add", "path": "/spec/tags/a~1b~0c", "value": "escaped"},
    ]


def test_an_unchanged_object_sends_no_patch(http: FlaskClient) -> None:
    answer = post(http, "/mutate", admission(widget({"schedule": "x", "database": "as-is"})))
    assert answer["response"] == {"uid": "req-1", "allowed": True}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_mutate_allows_other_operations_without_calling_the_handler(
    http: FlaskClient, operation: str
) -> None:
    answer = post(http, "/mutate", admission(None, operation=operation, old=widget()))
    assert answer["response"] == {"uid": "req-1", "allowed": True}
    assert seen == []


def test_mutate_can_deny(http: FlaskClient) -> None:
    answer = post(http, "/mutate", admission(widget({"schedule": "x", "database": "forbidden"})))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == "database 'forbidden' is reserved"
    assert "patch" not in answer["response"]


@pytest.mark.parametrize("database", ["explode", "wrong-type"])
def test_a_mutate_handler_that_raises_or_returns_no_object_is_an_internal_error_500(
    http: FlaskClient, caplog: pytest.LogCaptureFixture, database: str
) -> None:
    with caplog.at_level(logging.ERROR, logger="operator_kit.webhooks"):
        response = http.post(
            "/mutate", json=admission(widget({"schedule": "x", "database": database})))
    assert response.status_code == 500
    assert error_of(response) == "internal error in webhook /mutate; see the operator's log"
    assert SECRET not in response.get_data(as_text=True)
    assert caplog.records and caplog.records[-1].exc_info is not None
    if database == "wrong-type":
        assert "must return the Widget" in caplog.text


def test_mutate_without_an_object_on_create_is_bad_input(http: FlaskClient) -> None:
    response = http.post("/mutate", json=admission(None))
    assert response.status_code == 400
    assert error_of(response) == "request.object is required for CREATE"


# ---------------------------------------------------------------------- JSON patch


@pytest.mark.parametrize(
    ("old", "new", "ops"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({}, {"a": {"b": 1}}, [{"op": "add", "path": "/a", "value": {"b": 1}}]),
        ({"a": 1, "b": 2}, {"b": 2}, [{"op": "remove", "path": "/a"}]),
        ({"a": {"b": 1}}, {"a": {"b": 2}}, [{"op": "replace", "path": "/a/b", "value": 2}]),
        ({"a/b": 1}, {"a/b": 2}, [{"op": "replace", "path": "/a~1b", "value": 2}]),
        ({"~x": 1}, {}, [{"op": "remove", "path": "/~0x"}]),
        ({}, {"~/": 1}, [{"op": "add", "path": "/~0~1", "value": 1}]),
        ({"l": [1, 2]}, {"l": [1, 2, 3]}, [{"op": "replace", "path": "/l", "value": [1, 2, 3]}]),
        ({"l": [{"a": 1}]}, {"l": [{"a": 1}]}, []),
        ({"v": 1}, {"v": True}, [{"op": "replace", "path": "/v", "value": True}]),
        ({"v": 1}, {"v": 1.0}, [{"op": "replace", "path": "/v", "value": 1.0}]),
        ({"v": None}, {"v": {}}, [{"op": "replace", "path": "/v", "value": {}}]),
        ({"v": {"a": 1}}, {"v": "a"}, [{"op": "replace", "path": "/v", "value": "a"}]),
        ([1], [2], [{"op": "replace", "path": "", "value": [2]}]),
    ],
)
def test_json_patch_diffs_objects_key_by_key_and_replaces_the_rest(
    old: Any, new: Any, ops: list[dict[str, Any]]
) -> None:
    assert json_patch(old, new) == ops
    assert apply_patch(old, ops) == new


def test_json_patch_applied_to_the_old_document_gives_the_new_one() -> None:
    old = {
        "metadata": {"name": "a", "labels": {"x": "1", "y/z": "2"}, "annotations": {"k": "v"}},
        "spec": {"n": 1, "list": [1, {"a": 2}], "nested": {"deep": {"er": [None]}}, "gone": 1},
    }
    new = {
        "metadata": {"name": "a", "labels": {"y/z": "3", "~t": "4"}},
        "spec": {"n": 2, "list": [1, {"a": 3}], "nested": {"deep": {"er": [None], "x": {}}}},
        "status": {"ok": True},
    }
    assert apply_patch(old, json_patch(old, new)) == new


# ---------------------------------------------------------------------- convert


def test_convert_converts_each_object_and_sets_its_api_version(http: FlaskClient) -> None:
    objects = [
        {"apiVersion": "wh.example.com/v1", "kind": "Gadget", "metadata": {"name": n}, "spec": s}
        for n, s in (("a", {"size": 1}), ("b", {"size": 2}))
    ]
    answer = post(http, "/convert", conversion(objects))
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1"
    assert answer["kind"] == "ConversionReview"
    response = answer["response"]
    assert response["uid"] == "conv-1"
    assert response["result"] == {"status": "Success"}
    assert [o["apiVersion"] for o in response["convertedObjects"]] == ["wh.example.com/v2"] * 2
    assert [o["spec"] for o in response["convertedObjects"]] == [
        {"dimensions": {"size": 1}},
        {"dimensions": {"size": 2}},
    ]
    assert [o["metadata"]["name"] for o in response["convertedObjects"]] == ["a", "b"]


def test_objects_already_in_the_desired_version_pass_through(http: FlaskClient) -> None:
    obj = {"apiVersion": "wh.example.com/v2", "kind": "Gadget", "metadata": {"name": "g"},
           "spec": {"size": "explode"}}
    answer = post(http, "/convert", conversion([obj]))
    assert answer["response"]["convertedObjects"] == [obj]


@pytest.mark.parametrize(
    ("size", "message", "outcome"),
    [
        (
            "explode",
            "converting Gadget ns/bad (wh.example.com/v1) to wh.example.com/v2 failed: "
            "internal error in webhook /convert; see the operator's log",
            "error",
        ),
        (
            "not-a-dict",
            "converting Gadget ns/bad (wh.example.com/v1) to wh.example.com/v2 failed: "
            "internal error in webhook /convert; see the operator's log",
            "error",
        ),
        (
            "refuse",
            "cannot convert Gadget ns/bad (wh.example.com/v1) to wh.example.com/v2: "
            "size 'refuse' has no v2 form",
            "denied",
        ),
    ],
)
def test_one_failed_object_fails_the_whole_review_naming_it(
    http: FlaskClient, size: str, message: str, outcome: str
) -> None:
    before = requests_total("/convert", outcome)
    good = {"apiVersion": "wh.example.com/v1", "kind": "Gadget", "metadata": {"name": "good"},
            "spec": {"size": 1}}
    bad = {
        "apiVersion": "wh.example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "bad", "namespace": "ns"},
        "spec": {"size": size},
    }
    answer = post(http, "/convert", conversion([good, bad, good]))
    assert answer["response"] == {
        "uid": "conv-1",
        "result": {"status": "Failure", "message": message},
    }
    assert SECRET not in json.dumps(answer)
    assert requests_total("/convert", outcome) == before + 1


def test_with_its_kind_a_converter_converts_between_the_kinds_versions(
    http: FlaskClient,
) -> None:
    answer = post(http, "/convert-gizmo", conversion([gizmo({"size": 1}), gizmo({"size": 2})]))
    assert answer["response"]["result"] == {"status": "Success"}
    assert [o["spec"] for o in answer["response"]["convertedObjects"]] == [
        {"dimensions": {"size": 1}}, {"dimensions": {"size": 2}}]
    back = conversion([gizmo({"dimensions": {"size": 3}}, version="v2")], "wh.example.com/v1")
    (obj,) = post(http, "/convert-gizmo", back)["response"]["convertedObjects"]
    assert obj == gizmo({"size": 3})


SERVED = "wh.example.com/v1, wh.example.com/v2"


@pytest.mark.parametrize("desired", ["wh.example.com/v9", "apps/v1", "v1", "other.example.org/v2"])
def test_with_its_kind_an_unknown_desired_version_fails_naming_the_versions_served(
    http: FlaskClient, desired: str
) -> None:
    # The API server only asks for versions the CRD lists; anyone else is told which.
    before = requests_total("/convert-gizmo", "denied")
    answer = post(http, "/convert-gizmo", conversion([gizmo({"size": 1})], desired))
    assert answer["response"] == {"uid": "conv-1", "result": {
        "status": "Failure",
        "message": f"desiredAPIVersion {desired} is not a version of Gizmo: it serves {SERVED}"}}
    assert converted == []
    assert requests_total("/convert-gizmo", "denied") == before + 1


@pytest.mark.parametrize(
    ("desired", "message"),
    [
        ("apps/v1", "desiredAPIVersion 'apps/v1' is not the group/version of a custom resource "
                    "(a group with a dot, a version: example.com/v1)"),
        ("v1", "desiredAPIVersion 'v1' is not the group/version of a custom resource "),
        ("wh.example.com", "desiredAPIVersion 'wh.example.com' is not the group/version of "),
        ("other.example.org/v2",
         "cannot convert request.objects[0], Gadget ns/g1 (wh.example.com/v1), to "
         "other.example.org/v2: a conversion never changes the group (wh.example.com to "
         "other.example.org)"),
    ],
)
def test_without_a_kind_the_desired_version_must_be_a_group_version_of_the_objects_group(
    http: FlaskClient, desired: str, message: str
) -> None:
    answer = post(http, "/convert", conversion([gadget({"size": 1})], desired))
    assert answer["response"]["result"]["status"] == "Failure"
    assert answer["response"]["result"]["message"].startswith(message)


def test_without_a_kind_a_version_of_the_group_is_not_checked_further(
    http: FlaskClient,
) -> None:
    # What the kind serves is unknown here; Webhooks.convert(path, kind=...) checks it.
    answer = post(http, "/convert", conversion([gadget({"size": 1})], "wh.example.com/v9"))
    assert answer["response"]["result"] == {"status": "Success"}


def _without(obj: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != key}


MALFORMED = [
    ("not an object", [gizmo({"size": 1}), 3],
     "request.objects[1] is not an object, got a number"),
    ("no apiVersion", [_without(gizmo({"size": 1}), "apiVersion")],
     "request.objects[0], Gizmo ns/g1, has no apiVersion"),
    ("apiVersion not a string", [{**gizmo({"size": 1}), "apiVersion": 1}],
     "request.objects[0], Gizmo ns/g1, has no apiVersion (got a number)"),
    ("no kind", [_without(gizmo({"size": 1}), "kind")],
     "request.objects[0], object ns/g1 (wh.example.com/v1), has no kind"),
    ("no metadata", [_without(gizmo({"size": 1}), "metadata")],
     "request.objects[0], Gizmo <unnamed> (wh.example.com/v1), has no metadata object"),
    ("metadata not an object", [{**gizmo({"size": 1}), "metadata": "g1"}],
     "request.objects[0], Gizmo <unnamed> (wh.example.com/v1), has no metadata object "
     "(got a string)"),
    ("another group", [gizmo({"size": 1}), {**gizmo({"size": 1}), "apiVersion": "x.example/v1"}],
     "cannot convert request.objects[1], Gizmo ns/g1 (x.example/v1), to wh.example.com/v2: a "
     "conversion never changes the group (x.example to wh.example.com)"),
]

MALFORMED_FOR_THE_KIND = [
    ("a spec that is not an object", [gizmo(5)],
     "request.objects[0] is not a valid Gizmo wh.example.com/v1: Gizmo ns/g1: spec: expected "
     "object, got int 5"),
    ("a field of the wrong type", [gizmo({"size": 1}), gizmo({"size": "big"}, "g2")],
     "request.objects[1] is not a valid Gizmo wh.example.com/v1: Gizmo ns/g2: spec.size: "
     "expected int, got str 'big'"),
    ("no spec", [_without(gizmo({"size": 1}), "spec")],
     "request.objects[0] is not a valid Gizmo wh.example.com/v1: Gizmo ns/g1: spec: required "
     "field is missing"),
    ("in the desired version but malformed", [gizmo({"size": 1}, version="v2")],
     "request.objects[0] is not a valid Gizmo wh.example.com/v2: Gizmo ns/g1: spec.dimensions: "
     "required field is missing"),
    ("another kind", [gadget({"size": 1})],
     "request.objects[0], Gadget ns/g1 (wh.example.com/v1), is not a Gizmo"),
    ("a version the kind does not have", [gizmo({"size": 1}, version="v7")],
     f"request.objects[0], Gizmo ns/g1 (wh.example.com/v7), is not in a version of Gizmo: it "
     f"serves {SERVED}"),
]


@pytest.mark.parametrize(
    ("path", "objects", "message"),
    [("/convert-gizmo", *case[1:]) for case in MALFORMED + MALFORMED_FOR_THE_KIND]
    + [("/convert", *case[1:]) for case in MALFORMED],
    ids=[f"kind-{case[0]}" for case in MALFORMED + MALFORMED_FOR_THE_KIND]
    + [f"no-kind-{case[0]}" for case in MALFORMED],
)
def test_a_malformed_object_fails_the_review_with_what_is_wrong_before_any_handler_runs(
    http: FlaskClient, caplog: pytest.LogCaptureFixture, path: str, objects: list[Any],
    message: str,
) -> None:
    # The object's fault, not the handler's: no "internal error", no traceback anywhere.
    if path == "/convert":
        message = message.replace("Gizmo ns", "Gadget ns").replace("Gizmo <", "Gadget <")
        objects = [{**o, "kind": "Gadget"} if isinstance(o, dict) and "kind" in o else o
                   for o in objects]
    before = requests_total(path, "denied")
    with caplog.at_level(logging.INFO, logger="operator_kit.webhooks"):
        answer = post(http, path, conversion(objects))
    assert answer["response"] == {"uid": "conv-1",
                                  "result": {"status": "Failure", "message": message}}
    assert converted == []
    assert not [r for r in caplog.records if r.exc_info]
    assert requests_total(path, "denied") == before + 1


def test_without_a_kind_a_spec_the_handler_chokes_on_is_an_internal_error(
    http: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing says what a Gadget's spec is: register the converter with kind= to have it
    # decoded (the Gizmo case above).
    with caplog.at_level(logging.ERROR, logger="operator_kit.webhooks"):
        answer = post(http, "/convert", conversion([gadget(5)]))  # type: ignore[arg-type]
    assert "internal error in webhook /convert" in answer["response"]["result"]["message"]
    assert caplog.records[-1].exc_info is not None


def test_with_its_kind_a_bug_on_a_well_formed_object_is_an_internal_error_logged_in_full(
    http: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    before = requests_total("/convert-gizmo", "error")
    with caplog.at_level(logging.ERROR, logger="operator_kit.webhooks"):
        answer = post(http, "/convert-gizmo", conversion([gizmo({"size": 13})]))
    assert answer["response"]["result"] == {
        "status": "Failure",
        "message": "converting Gizmo ns/g1 (wh.example.com/v1) to wh.example.com/v2 failed: "
                   "internal error in webhook /convert-gizmo; see the operator's log"}
    assert SECRET not in json.dumps(answer)
    (record,) = [r for r in caplog.records if r.name == "operator_kit.webhooks"]
    assert record.exc_info is not None and "RuntimeError" in caplog.text
    assert requests_total("/convert-gizmo", "error") == before + 1


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        ({"spec": {"dimensions": {"size": 1}}}, None),
        ({"metadata": None, "spec": {}}, "return metadata as an object"),
        ({"kind": "Gadget", "spec": {}}, "it must keep the kind 'Gizmo'"),
    ],
)
def test_a_result_keeps_the_objects_kind_and_metadata(
    caplog: pytest.LogCaptureFixture, returned: dict[str, Any], error: str | None
) -> None:
    app = Webhooks()
    app.convert("/convert", kind=Gizmo)(lambda obj, desired: dict(returned))
    with caplog.at_level(logging.ERROR, logger="operator_kit.webhooks"):
        answer = post(app.test_client(), "/convert", conversion([gizmo({"size": 1})]))
    if error is None:
        (obj,) = answer["response"]["convertedObjects"]
        assert obj == gizmo({"dimensions": {"size": 1}}, version="v2")
    else:
        assert "internal error" in answer["response"]["result"]["message"]
        assert error in caplog.text


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda r: r.pop("desiredAPIVersion"), "request.desiredAPIVersion is missing"),
        (lambda r: r.update(desiredAPIVersion=7), "request.desiredAPIVersion is missing"),
        (lambda r: r.update(objects={}), "request.objects is missing or not a list"),
    ],
)
def test_a_malformed_conversion_request_is_bad_input(
    http: FlaskClient, change: Any, error: str
) -> None:
    review = conversion([{"apiVersion": "wh.example.com/v1", "spec": {"size": 1}}])
    change(review["request"])
    response = http.post("/convert", json=review)
    assert response.status_code == 400
    assert error_of(response) == error


# ---------------------------------------------------------------------- bad input


def _body(value: Any) -> bytes:
    return json.dumps(value).encode()


def _without(key: str) -> bytes:
    review = admission(widget())
    del review["request"][key]
    return _body(review)


BAD_INPUT = [
    ("not JSON", "POST", "/validate", b"{not json", "application/json", 400, "body is not JSON: "),
    (
        "not UTF-8",
        "POST",
        "/validate",
        b'{"a": "\xff"}',
        "application/json",
        400,
        "body is not JSON: ",
    ),
    ("NaN", "POST", "/validate", b'{"a": NaN}', "application/json", 400, "NaN is not valid JSON"),
    (
        "nested too deeply",
        "POST",
        "/validate",
        b"[" * 30_000 + b"]" * 30_000,
        "application/json",
        400,
        "body is not JSON: ",
    ),
    (
        "an array",
        "POST",
        "/validate",
        b"[1]",
        "application/json",
        400,
        "expected a JSON object (the AdmissionReview), got an array",
    ),
    (
        "a conversion review sent to an admission webhook",
        "POST",
        "/validate",
        _body(conversion([])),
        "application/json",
        400,
        "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got apiVersion "
        "'apiextensions.k8s.io/v1' kind 'ConversionReview'",
    ),
    (
        "an admission review sent to a conversion webhook",
        "POST",
        "/convert",
        _body(admission(widget())),
        "application/json",
        400,
        "expected apiVersion apiextensions.k8s.io/v1 kind ConversionReview, got apiVersion "
        "'admission.k8s.io/v1' kind 'AdmissionReview'",
    ),
    (
        "v1beta1",
        "POST",
        "/validate",
        _body({**admission(widget()), "apiVersion": "admission.k8s.io/v1beta1"}),
        "application/json",
        400,
        "got apiVersion 'admission.k8s.io/v1beta1'",
    ),
    (
        "no request",
        "POST",
        "/mutate",
        _body({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        "application/json",
        400,
        "the AdmissionReview has no request",
    ),
    (
        "no uid",
        "POST",
        "/validate",
        _without("uid"),
        "application/json",
        400,
        "request.uid is missing",
    ),
    (
        "no operation",
        "POST",
        "/validate",
        _without("operation"),
        "application/json",
        400,
        "request.operation is missing",
    ),
    (
        "an old object that does not parse",
        "POST",
        "/mutate",
        _body(admission(widget(), operation="UPDATE", old=widget({"database": "d"}))),
        "application/json",
        400,
        "request.oldObject is not a valid Widget: Widget team-a/w1: spec.schedule",
    ),
    (
        "an object that is not an object",
        "POST",
        "/validate",
        _body(admission([1, 2])),  # type: ignore[arg-type]
        "application/json",
        400,
        "request.object is not an object, got an array",
    ),
    (
        "a body over the limit",
        "POST",
        "/validate",
        b" " * (64 * 1024 + 1),
        "application/json",
        413,
        "body of 65537 bytes over the 65536-byte (64 KiB) limit of an admission review; "
        "Webhooks.max_body_bytes sets it",
    ),
    (
        "the wrong content type",
        "POST",
        "/validate",
        _body(admission(widget())),
        "text/plain",
        415,
        "Content-Type must be application/json, got text/plain",
    ),
    (
        "GET instead of POST",
        "GET",
        "/validate",
        b"",
        None,
        405,
        "method GET is not allowed on /validate; use POST",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "data", "content_type", "status", "error"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_gets_a_4xx_with_a_json_error_saying_what_was_wrong(
    http: FlaskClient,
    method: str,
    path: str,
    data: bytes,
    content_type: str | None,
    status: int,
    error: str,
) -> None:
    before = requests_total(path, "bad_request")
    headers = {"Content-Type": content_type} if content_type else {}
    response = http.open(path, method=method, data=data, headers=headers)
    assert response.status_code == status
    assert response.mimetype == "application/json"
    message = error_of(response)
    assert response.get_json()["code"] == status
    assert error in message
    assert "Traceback" not in message
    assert requests_total(path, "bad_request") == before + 1
    if status == 405:
        assert response.headers["Allow"] == "POST"
    # ... and the server keeps serving
    assert post(http, path, admission(widget()) if path != "/convert" else conversion([]))


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_an_object_that_does_not_decode_is_denied_with_what_is_wrong(
    http: FlaskClient, path: str
) -> None:
    # Mutating webhooks run before the API server checks the schema: the client must see
    # the object's fault (as kubectl shows a denial), not "failed calling webhook".
    before = requests_total(path, "denied")
    response = http.post(path, data=_body(admission(widget({"schedule": "x", "retain": "many"}))),
                         headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    answer = response.get_json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422 and answer["status"]["reason"] == "Invalid"
    assert answer["status"]["message"].startswith(
        "request.object is not a valid Widget: Widget team-a/w1: spec.retain: expected int")
    assert requests_total(path, "denied") == before + 1


def test_a_chunked_body_over_the_limit_is_refused(http: FlaskClient) -> None:
    response = http.post(
        "/validate",
        input_stream=io.BytesIO(b" " * 100 * 1024),
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},  # as gunicorn sets it
    )
    assert response.status_code == 413
    assert error_of(response) == ("body over the 65536-byte (64 KiB) limit of an admission "
                                  "review; Webhooks.max_body_bytes sets it")
    assert response.get_json()["reason"] == "RequestEntityTooLarge"


def test_a_body_shorter_than_its_content_length_is_a_400_that_says_so(
    http: FlaskClient,
) -> None:
    # What the app sees when the client hung up, or its connection was closed because the
    # body did not arrive in time (operator_kit.gunicorn_worker): not "body is not JSON".
    response = http.post(
        "/validate",
        input_stream=io.BytesIO(b'{"apiVersion": "adm'),
        headers={"Content-Type": "application/json"},
        environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": "500"},
    )
    assert response.status_code == 400
    assert error_of(response) == (
        "the body ended after 19 of the 500 bytes announced: the client closed "
        "the connection, or did not send the body in time")


def test_a_conversion_review_has_its_own_larger_limit_as_it_carries_a_whole_list(
    http: FlaskClient,
) -> None:
    objects = [{"apiVersion": "wh.example.com/v1", "kind": "Widget", "metadata": {"name": f"w{i}"},
                "spec": {"schedule": "@daily", "database": "x" * 1000}} for i in range(100)]
    review = conversion(objects)
    assert len(json.dumps(review)) > 64 * 1024  # over the admission limit of this app
    response = http.post("/convert", json=review)
    assert response.status_code == 200
    assert len(response.get_json()["response"]["convertedObjects"]) == 100
    big_widget = widget({"schedule": "@daily", "database": "x" * 70_000})
    assert http.post("/validate", json=admission(big_widget)).status_code == 413

    small = Webhooks(max_conversion_body_bytes=1024)
    small.convert("/convert")(lambda obj, desired: obj)
    response = small.test_client().post("/convert", json=review)
    assert response.status_code == 413
    assert error_of(response) == (
        f"body of {len(json.dumps(review))} bytes over the 1024-byte (1 KiB) limit of a "
        "conversion review; Webhooks.max_conversion_body_bytes sets it")


def test_the_default_limits_fit_what_the_api_server_can_send() -> None:
    app = Webhooks()
    assert app.max_body_bytes >= 2 * 3 * 1024 * 1024  # an UPDATE: object and oldObject
    assert app.max_conversion_body_bytes > app.max_body_bytes


def test_an_unknown_path_is_a_json_404(http: FlaskClient) -> None:
    response = http.post("/nowhere", json={})
    assert response.status_code == 404
    assert error_of(response).startswith("Not Found")


# ---------------------------------------------------------------------- metrics


def test_every_answer_is_counted_by_outcome_and_timed(http: FlaskClient) -> None:
    cases = [
        ("/validate", admission(widget()), "allowed"),
        ("/validate", admission(widget({"schedule": ""})), "denied"),
        ("/mutate", admission(widget()), "patched"),
        ("/mutate", admission(widget({"schedule": "x", "database": "as-is"})), "allowed"),
        ("/convert", conversion([gadget({})]), "converted"),
        ("/convert", conversion([gadget({})], "wh.example.com/v2/x"), "denied"),
    ]
    for path, review, outcome in cases:
        before, timed = requests_total(path, outcome), duration_count(path)
        post(http, path, review)
        assert requests_total(path, outcome) == before + 1, (path, outcome)
        assert duration_count(path) == timed + 1


# ---------------------------------------------------------------------- registration


def test_two_webhooks_cannot_share_a_path(app: Webhooks) -> None:
    with pytest.raises(ValueError, match="already registered at /validate"):
        app.convert("/validate")(lambda obj, version: obj)


def test_a_path_must_start_with_a_slash(app: Webhooks) -> None:
    with pytest.raises(ValueError, match="must start with '/'"):
        app.validate(Widget, "validate")(lambda request: None)


def test_registrations_list_every_webhook_for_the_manifests(app: Webhooks) -> None:
    assert app.registrations() == (
        Registration("validate", "/validate", Widget),
        Registration("mutate", "/mutate", Widget),
        Registration("convert", "/convert", None),
        Registration("convert", "/convert-gizmo", Gizmo),  # the root, whichever was given
    )


def test_a_converters_kind_must_be_a_custom_resource_class(app: Webhooks) -> None:
    with pytest.raises(TypeError, match="kind must be a CustomResource class, got '/x'"):
        app.convert(Gizmo, "/x")  # type: ignore[arg-type]


def test_webhooks_is_a_flask_app_that_can_serve_other_routes(app: Webhooks) -> None:
    assert isinstance(app, flask.Flask)
    app.add_url_rule("/livez", "livez", lambda: "ok")
    assert app.test_client().get("/livez").get_data(as_text=True) == "ok"


# ---------------------------------------------------------------------- the gunicorn entry


class FakeOperator:
    def __init__(self, app: Webhooks) -> None:
        self.app = app
        self.started = 0

    def serve_in_background(self) -> None:
        self.started += 1


@pytest.fixture
def fresh_loader(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.setattr(loader_module, "_loaded", None)
    module = types.ModuleType("wh_target")
    module.webhooks = make_app()  # type: ignore[attr-defined]
    module.operator = FakeOperator(make_app())  # type: ignore[attr-defined]
    module.other = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wh_target", module)
    return module


def test_app_is_the_webhooks_app_named_by_operator_kit_app(
    fresh_loader: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPERATOR_KIT_APP", "wh_target:webhooks")
    assert webhooks_module.app is fresh_loader.webhooks
    assert webhooks_module.loaded_target() is fresh_loader.webhooks


def test_app_of_an_operator_is_its_app_and_its_controllers_start_once(
    fresh_loader: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPERATOR_KIT_APP", "wh_target:operator")
    first = webhooks_module.app
    assert first is fresh_loader.operator.app
    assert webhooks_module.app is first
    assert fresh_loader.operator.started == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "OPERATOR_KIT_APP is not set: set it to MODULE:ATTR"),
        ("wh_target", "OPERATOR_KIT_APP='wh_target' must be MODULE:ATTR"),
        ("no_such_module_xyz:app", "OPERATOR_KIT_APP=no_such_module_xyz:app: cannot import"),
        ("wh_target:missing", "module wh_target has no attribute missing"),
        ("wh_target:other", "names a object, which is neither an Operator nor a Webhooks app"),
    ],
)
def test_a_wrong_operator_kit_app_is_a_clear_error(
    fresh_loader: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    value: str | None,
    message: str,
) -> None:
    if value is None:
        monkeypatch.delenv("OPERATOR_KIT_APP", raising=False)
    else:
        monkeypatch.setenv("OPERATOR_KIT_APP", value)
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _ = webhooks_module.app


def test_other_module_attributes_are_still_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        _ = webhooks_module.no_such_thing


# ---------------------------------------------------------------------- gunicorn_conf


def load_conf(monkeypatch: pytest.MonkeyPatch, **env: str) -> types.ModuleType:
    for name in (
        "OPERATOR_KIT_TLS_CERT",
        "OPERATOR_KIT_TLS_KEY",
        "OPERATOR_KIT_TLS_DIR",
        "OPERATOR_KIT_INSECURE_HTTP",
        "OPERATOR_KIT_BIND",
        "KUBERNETES_SERVICE_HOST",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("operator_kit.gunicorn_conf", None)
    return importlib.import_module("operator_kit.gunicorn_conf")


def test_gunicorn_conf_serves_tls_from_the_installed_certificate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    files = WebhookCertificate.generate_for("localhost", ["localhost"]).install(tmp_path / "tls")
    conf = load_conf(
        monkeypatch,
        OPERATOR_KIT_TLS_CERT=os.environ["OPERATOR_KIT_TLS_CERT"],
        OPERATOR_KIT_TLS_KEY=os.environ["OPERATOR_KIT_TLS_KEY"],
    )
    assert (conf.certfile, conf.keyfile) == (str(files.cert), str(files.key))
    assert (conf.workers, conf.worker_class, conf.threads) == (
        1, "operator_kit.webhooks.gunicorn_worker.ThreadWorker", 8)
    assert conf.reuse_port is True and conf.accesslog is None
    assert conf.bind == ["127.0.0.1:8443"]
    assert conf.wsgi_app == "operator_kit.webhooks:app"


def test_gunicorn_conf_finds_tls_files_in_a_directory_and_binds_all_addresses_in_a_pod(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cert = WebhookCertificate.generate_for("localhost", ["localhost"])
    cert.install(tmp_path, point_server=False)
    conf = load_conf(
        monkeypatch, OPERATOR_KIT_TLS_DIR=str(tmp_path), KUBERNETES_SERVICE_HOST="10.0.0.1"
    )
    assert conf.certfile == str(tmp_path / "tls.crt")
    assert conf.keyfile == str(tmp_path / "tls.key")
    assert conf.bind == ["0.0.0.0:8443"]


def test_gunicorn_conf_refuses_to_start_without_tls_files_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for env, says in (({}, r"webhooks need TLS.*OPERATOR_KIT_TLS_DIR"),
                      ({"OPERATOR_KIT_TLS_DIR": str(tmp_path)}, r"missing: .*tls\.crt")):
        with pytest.raises(SystemExit) as exit:
            load_conf(monkeypatch, **env)
        assert exit.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("operator_kit.gunicorn_conf: error: ")
        assert re.search(says, err), err


def test_gunicorn_conf_serves_plain_http_only_when_asked_explicitly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conf = load_conf(monkeypatch, OPERATOR_KIT_INSECURE_HTTP="1", OPERATOR_KIT_BIND="127.0.0.1:0")
    assert conf.certfile is None and conf.keyfile is None
    assert conf.bind == ["127.0.0.1:0"]


OPERATOR_MODULE = """
from operator_kit.webhooks.server import AdmissionRequest, Denied, Webhooks
from operator_kit.api.resources import CustomResource
from dataclasses import dataclass
from pathlib import Path

MARKS = Path(__file__).parent / "marks"


@dataclass
class WidgetSpec:
    schedule: str


class Widget(CustomResource):
    group = "wh.example.com"
    version = "v1"
    kind = "Widget"
    spec: WidgetSpec


class Operator:
    def __init__(self):
        self.webhooks = Webhooks()

    def serve_in_background(self):
        with MARKS.open("a") as f:
            f.write("started\\n")

    def stop(self):
        with MARKS.open("a") as f:
            f.write("stopped\\n")


operator = Operator()


@operator.webhooks.validate(Widget, "/validate")
def validate(request: AdmissionRequest[Widget]) -> None:
    if not request.object.spec.schedule:
        raise Denied("spec.schedule is required")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_gunicorn_serves_the_operator_over_tls_and_stops_it_on_exit(tmp_path: Path) -> None:
    (tmp_path / "wh_gunicorn_operator.py").write_text(textwrap.dedent(OPERATOR_MODULE))
    cert = WebhookCertificate.generate_for("localhost", ["localhost"], ip_addresses=["127.0.0.1"])
    files = cert.install(tmp_path / "tls")
    port = free_port()
    env = {
        **os.environ,
        "OPERATOR_KIT_APP": "wh_gunicorn_operator:operator",
        "OPERATOR_KIT_TLS_DIR": str(tmp_path / "tls"),
        "OPERATOR_KIT_BIND": f"127.0.0.1:{port}",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
    }
    env.pop("OPERATOR_KIT_TLS_CERT", None)
    env.pop("OPERATOR_KIT_TLS_KEY", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        context = ssl.create_default_context(cafile=str(files.ca))
        deadline = time.monotonic() + 20
        while True:
            try:
                connection = HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
                connection.request(
                    "POST",
                    "/validate",
                    body=json.dumps(admission({"spec": {"schedule": ""}})),
                    headers={"Content-Type": "application/json"},
                )
                break
            except OSError:
                assert server.poll() is None, server.communicate()[0].decode()
                assert time.monotonic() < deadline, "gunicorn did not start listening"
                time.sleep(0.1)
        answer = json.loads(connection.getresponse().read())
        connection.close()
        assert answer["response"]["status"]["message"] == "spec.schedule is required"
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=30)[0].decode()
    assert server.returncode == 0, output
    assert (tmp_path / "marks").read_text() == "started\nstopped\n", output
