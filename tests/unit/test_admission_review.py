"""admission_review: reviews for webhook tests with test_client(), as the API server sends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from operator_kit import CustomResource
from operator_kit.testing import admission_review
from operator_kit.webhooks.server import AdmissionRequest, Denied, Webhooks


@dataclass
class ThingSpec:
    size: int


@dataclass
class ThingStatus:
    ready: bool = False


class Thing(CustomResource):
    group = "review.operator-kit.test"
    version = "v1"
    kind = "Thing"
    plural = "things"
    spec: ThingSpec
    status: ThingStatus


def served() -> tuple[Webhooks, list[AdmissionRequest[Thing]]]:
    seen: list[AdmissionRequest[Thing]] = []
    app = Webhooks()

    @app.validate(Thing, "/validate")
    def validate(request: AdmissionRequest[Thing]) -> None:
        seen.append(request)
        if request.object is not None and request.object.spec.size > 10:
            raise Denied("too big")

    return app, seen


def thing(size: int, name: str = "t") -> Thing:
    return Thing(name, ThingSpec(size), namespace="team-a")


def test_an_update_review_reaches_the_handler_typed_with_user_dry_run_and_subresource() -> None:
    app, seen = served()
    review = admission_review("UPDATE", thing(2), thing(1), user_info={"username": "alice"},
                              dry_run=True, sub_resource="status", uid="u-1")
    answer = app.test_client().post("/validate", json=review).get_json()
    assert answer["response"] == {"uid": "u-1", "allowed": True}
    request = seen[0]
    assert request.operation == "UPDATE" and request.dry_run
    assert request.object is not None and request.object.spec.size == 2
    assert request.old_object is not None and request.old_object.spec.size == 1
    assert request.user_info == {"username": "alice"}
    assert (request.name, request.namespace) == ("t", "team-a")
    assert request.raw["subResource"] == request.raw["requestSubResource"] == "status"
    assert request.resource == {"group": Thing.group, "version": "v1", "resource": "things"}
    assert request.raw["options"] == {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1",
                                      "dryRun": ["All"]}


def test_a_denied_create_answers_with_the_message() -> None:
    app, _ = served()
    answer = app.test_client().post("/validate", json=admission_review("CREATE", thing(11)))
    response = answer.get_json()["response"]
    assert response["allowed"] is False and response["status"]["message"] == "too big"


def test_a_delete_review_has_no_object_and_a_dict_works_like_the_resource() -> None:
    old = thing(1).to_dict()
    review = admission_review("DELETE", old_object=old)
    request = review["request"]
    assert request["object"] is None and request["oldObject"] == old
    assert request["options"] == {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    assert request["kind"] == {"group": Thing.group, "version": "v1", "kind": "Thing"}
    assert "subResource" not in request and request["dryRun"] is False
    assert request["uid"] != admission_review("DELETE", old_object=old)["request"]["uid"]


def test_a_create_from_generate_name_has_no_name_and_a_cluster_object_no_namespace() -> None:
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "ns-"}}
    request = admission_review("CREATE", obj, field_manager="kubectl")["request"]
    assert "name" not in request and "namespace" not in request
    assert request["resource"] == {"group": "", "version": "v1", "resource": "namespaces"}
    assert request["options"]["fieldManager"] == "kubectl"


@pytest.mark.parametrize(("args", "message"), [
    (("CREATE",), "a CREATE review needs the object"),
    (("UPDATE", thing(1)), "needs old_object"),
    (("DELETE", thing(1)), "a DELETE review needs old_object"),
    (("CREATE", thing(1), thing(1)), "a CREATE review has no old_object"),
    (("CONNECT", thing(1)), "a CONNECT review needs its options"),
    (("PATCH", thing(1)), "operation 'PATCH': use CREATE, UPDATE, DELETE or CONNECT"),
    (("CREATE", {"metadata": {}}), "object needs an apiVersion and a kind"),
])
def test_bad_arguments_say_what_is_missing(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        admission_review(*args)
