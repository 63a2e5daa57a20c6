"""Errors users read: one line, the cause first, the fix where it is known."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import ApiError, error_message


def api_exception(status: int, reason: str, body: object) -> ApiException:
    err = ApiException(status=status, reason=reason)
    err.body = body if isinstance(body, str | bytes) else json.dumps(body)
    err.headers = {"Audit-Id": "0c2f", "Date": "Thu, 03 Dec 2026 07:00:00 GMT"}
    return err


def test_an_api_error_is_code_reason_and_the_status_message_without_headers() -> None:
    err = api_exception(404, "Not Found", {"kind": "Status", "message":
                                           'configmaps "x" not found', "code": 404})
    assert error_message(err) == '404 Not Found: configmaps "x" not found'
    assert str(ApiError.of(err)) == '404 Not Found: configmaps "x" not found'
    assert isinstance(ApiError.of(err), ApiException), "callers catching ApiException still do"


def test_a_forbidden_error_names_the_rule_that_grants_it() -> None:
    err = api_exception(403, "Forbidden", {"message": (
        'secrets "db" is forbidden: User "system:serviceaccount:ops:op" cannot get '
        'resource "secrets" in API group "" in the namespace "ops"')})
    assert error_message(err).endswith(
        "grant it with Rule([''], ['secrets'], ['get']) in the controller's `rules`, then "
        "regenerate the manifests")


def test_a_body_that_is_not_json_gives_its_first_line_and_a_message_is_one_line() -> None:
    assert error_message(api_exception(502, "Bad Gateway", b"<html>\nproxy</html>")) == \
        "502 Bad Gateway: <html>"
    multi = api_exception(422, "Unprocessable Entity", {"message": "a\n  b"})
    assert error_message(multi) == "422 Unprocessable Entity: a b"
    assert error_message(ValueError("first\nsecond")) == "ValueError: first"
