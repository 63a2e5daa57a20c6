"""The admission review on the wire: the request a handler sees, its answer, and bad input.

`AdmissionRequest` is one ``admission.k8s.io/v1`` request with its objects typed as the
registered kind; `Denied` is what a handler raises to deny (or, in a conversion handler, to
fail the review). `admission_request` reads a review's request, raising `BadInput` (a 4xx
answer) for what no webhook can answer and `InvalidObject` for an object that does not
decode as the kind (denied with code 422); `admission_answer` and `denial_response` write
the answer. The server (`operator_kit.webhooks.server`) calls these; they know nothing of HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from operator_kit.api.kinds import Kind
from operator_kit.api.resources import InvalidResource

__all__ = ["AdmissionRequest", "BadInput", "Denied", "InvalidObject", "admission_answer",
           "admission_request", "denial_response", "wrap_review"]

K = TypeVar("K")  # the registered kind's form: a CustomResource, a client model or a dict

ADMISSION_API_VERSION = "admission.k8s.io/v1"


class Denied(Exception):
    """Raised by a handler to deny the request; `message` is what kubectl shows.

    In a conversion handler it fails the review with the message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class AdmissionRequest(Generic[K]):
    """One admission request, with the objects typed as the registered kind.

    `object` is None on DELETE, `old_object` is None on CREATE. `raw` is the request
    exactly as the API server sent it (``options``, ``subResource``, ...). `warn` adds a
    warning that the API server passes on to the client (kubectl prints it).
    """

    uid: str
    kind: dict[str, Any]
    resource: dict[str, Any]
    operation: str
    object: K | None
    old_object: K | None
    user_info: dict[str, Any]
    name: str
    namespace: str | None
    dry_run: bool
    raw: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        """Add a warning to the answer, whether the request is allowed or denied."""
        self.warnings.append(message)


class BadInput(Exception):
    """The request is not something a webhook can answer; `status` is the HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class InvalidObject(BadInput):
    """request.object does not decode as the kind: an answer, not a failed call.

    The API server calls mutating webhooks before it checks the CRD schema, so such an
    object (a value outside a Literal's choices, say) reaches us first; a 400 would show
    the client only "failed calling webhook ... for an unknown reason". A denial with
    code 422 shows it what is wrong with the object instead."""


def admission_request(kind: Kind, review: dict[str, Any],
                      decode: Callable[[Kind, dict[str, Any]], Any]) -> AdmissionRequest[Any]:
    """The review's request, its objects decoded as `kind` by `decode` (the form the kind
    was registered in: its CustomResource class, a client model or the API's dict)."""
    raw = review["request"]
    operation = raw.get("operation")
    if not isinstance(operation, str) or not operation:
        raise BadInput("request.operation is missing")
    namespace = raw.get("namespace")
    return AdmissionRequest(
        uid=raw["uid"],
        kind=_mapping(raw, "kind"),
        resource=_mapping(raw, "resource"),
        operation=operation,
        object=_typed(kind, decode, raw.get("object"), "request.object"),
        old_object=_typed(kind, decode, raw.get("oldObject"), "request.oldObject"),
        user_info=_mapping(raw, "userInfo"),
        name=str(raw.get("name") or ""),
        namespace=str(namespace) if namespace else None,
        dry_run=raw.get("dryRun") is True,
        raw=raw,
    )


def _typed(kind: Kind, decode: Callable[[Kind, dict[str, Any]], Any], value: Any,
           where: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadInput(f"{where} is not an object, got {json_type(value)}")
    try:
        return decode(kind, value)
    except InvalidResource as err:
        form = kind.resource.__name__ if kind.resource is not None else kind.kind
        message = f"{where} is not a valid {form}: {err}"
        if where == "request.object":
            raise InvalidObject(message) from None
        raise BadInput(message) from None


def _mapping(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"request.{key} is not an object, got {json_type(value)}")
    return value


def admission_answer(request: AdmissionRequest[Any], response: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": request.uid, **response}
    if request.warnings:
        out["warnings"] = [str(w) for w in request.warnings]
    return wrap_review(ADMISSION_API_VERSION, "AdmissionReview", out)


def denial_response(message: str, code: int = 403) -> dict[str, Any]:
    reason = "Forbidden" if code == 403 else "Invalid"
    return {
        "allowed": False,
        "status": {"status": "Failure", "code": code, "reason": reason, "message": message},
    }


def internal_error(path: str) -> str:
    return f"internal error in webhook {path}; see the operator's log"


def wrap_review(api_version: str, kind: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "response": response}


def json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def handler_name(handler: Callable[..., Any]) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))
