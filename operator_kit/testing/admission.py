"""AdmissionReviews as the API server sends them, for webhook tests with ``test_client()``.

`admission_review` builds the ``admission.k8s.io/v1`` AdmissionReview the API server
would POST for a request: the same keys, present or absent (or null) in the same cases —
checked against reviews a real API server sent (tests/cluster/test_webhooks_cluster.py)::

    review = admission_review("UPDATE", new, old, user_info={"username": "alice"})
    answer = webhooks.test_client().post("/validate", json=review).get_json()
    assert answer["response"]["allowed"] is False

`object` and `old_object` are CustomResources or the API's dicts. The request's kind,
resource, name and namespace come from them; ``uid`` is a fresh UUID unless given.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

from operator_kit.api.kinds import Kind
from operator_kit.api.resources import CustomResource

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

ADMIN = {"username": "operator-kit-admin", "groups": ["system:masters", "system:authenticated"]}
"""The user a kubeconfig made by ``python -m operator_kit.localcluster up`` acts as."""

_OPTIONS = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


def admission_review(
    operation: Operation,
    object: CustomResource | Mapping[str, Any] | None = None,
    old_object: CustomResource | Mapping[str, Any] | None = None,
    *,
    user_info: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    sub_resource: str | None = None,
    options: Mapping[str, Any] | None = None,
    field_manager: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """The AdmissionReview the API server sends for `operation` on `object` (CREATE,
    UPDATE), `old_object` (UPDATE, DELETE), as `user_info` (default `ADMIN`).

    `dry_run` is the request's ``dryRun`` (and ``dryRun: ["All"]`` in its options);
    `sub_resource` names a subresource written (``"status"``, ``"scale"``); `options`
    replaces the request's options object (CreateOptions, UpdateOptions, DeleteOptions,
    made from `dry_run` and `field_manager` by default; CONNECT needs them given)."""
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        raise ValueError(f"operation {operation!r}: use CREATE, UPDATE, DELETE or CONNECT")
    new = _as_dict(object, "object")
    old = _as_dict(old_object, "old_object")
    if operation in ("CREATE", "UPDATE") and new is None:
        raise ValueError(f"a {operation} review needs the object")
    if operation == "UPDATE" and old is None:
        raise ValueError("an UPDATE review needs old_object (the object before the update)")
    if operation == "DELETE" and old is None:
        raise ValueError("a DELETE review needs old_object (the object being deleted)")
    if operation == "CONNECT" and options is None:
        raise ValueError("a CONNECT review needs its options (e.g. PodExecOptions)")
    if operation == "CREATE" and old is not None:
        raise ValueError("a CREATE review has no old_object")
    subject = new if new is not None else old
    assert subject is not None
    given = object if object is not None else old_object
    kind = (Kind.of(type(given)) if isinstance(given, CustomResource)
            else Kind.of(f"{subject.get('apiVersion')}/{subject.get('kind')}"))
    group, _, version = kind.api_version.rpartition("/")
    gvk = {"group": group, "version": version, "kind": kind.kind}
    gvr = {"group": group, "version": version, "resource": kind.resource_name}
    meta = subject.get("metadata") or {}
    request: dict[str, Any] = {"uid": uid or str(uuid.uuid4()), "kind": gvk, "resource": gvr}
    if sub_resource:
        request["subResource"] = sub_resource
    request["requestKind"] = dict(gvk)
    request["requestResource"] = dict(gvr)
    if sub_resource:
        request["requestSubResource"] = sub_resource
    if meta.get("name"):
        request["name"] = meta["name"]
    if meta.get("namespace"):
        request["namespace"] = meta["namespace"]
    request["operation"] = operation
    request["userInfo"] = dict(ADMIN if user_info is None else user_info)
    request["object"] = new
    request["oldObject"] = old
    request["dryRun"] = dry_run
    if options is None:
        made: dict[str, Any] = {"kind": _OPTIONS[operation], "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            made["dryRun"] = ["All"]
        if field_manager and operation != "DELETE":
            made["fieldManager"] = field_manager
        options = made
    request["options"] = dict(options)
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def _as_dict(obj: CustomResource | Mapping[str, Any] | None, what: str) -> dict[str, Any] | None:
    if obj is None:
        return None
    if isinstance(obj, CustomResource):
        return obj.to_dict()
    if isinstance(obj, Mapping):
        if not obj.get("apiVersion") or not obj.get("kind"):
            raise ValueError(f"{what} needs an apiVersion and a kind")
        return dict(obj)
    raise TypeError(f"{what}: give a CustomResource or the API's dict, not "
                    f"{type(obj).__name__}")
