"""Admission and conversion webhooks: typed handlers on a Flask app that gunicorn serves.

The API server calls a webhook with a JSON *review* over HTTPS and expects a review back:
an ``admission.k8s.io/v1`` AdmissionReview for validating and mutating webhooks, an
``apiextensions.k8s.io/v1`` ConversionReview for a CRD's conversion webhook. `Webhooks`
is a `flask.Flask` app on which handlers are registered by path::

    webhooks = Webhooks()

    @webhooks.validate(Backup, "/validate-backup")
    def check(request: AdmissionRequest[Backup]) -> None:
        if request.object and not request.object.spec.schedule:
            raise Denied("spec.schedule is required")

    @webhooks.mutate(Backup, "/mutate-backup")
    def label(obj: Backup, request: AdmissionRequest[Backup]) -> Backup:
        obj.labels["example.com/managed"] = "true"
        return obj

    @webhooks.convert("/convert")
    def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
        ...

How one request flows (`Webhooks._view`):

1. *Transport checks*: POST only (405), ``Content-Type: application/json`` (415), a body
   of at most ``max_body_bytes`` for an admission review, ``max_conversion_body_bytes``
   for a conversion review (413 beyond them).
2. *Review checks*: the body is JSON, an object, the expected apiVersion and kind of
   review, with a ``request`` that has a ``uid``. Any failure is *bad input*: a 4xx with
   ``{"error": "<what was wrong>"}`` — never a 500 or a traceback. The API server then
   applies the webhook's failurePolicy. An admission object that does not decode as the
   registered kind (`CustomResource.from_dict`) is the object's fault, not the call's:
   it is denied with code 422 and the decoder's message (mutating webhooks run before
   the API server checks the schema, so this is often the first check it meets); an old
   object that does not decode stays a 400.
3. *The handler* runs. Returning allows; `Denied` denies with its message (kubectl shows
   it); any other exception is a bug in the handler: its traceback goes to the
   ``operator_kit.webhooks`` logger and the API server gets a generic denial that names
   the webhook and nothing else, so no internal detail or secret leaks into an answer.
4. *The answer*: the review with the request's uid echoed. A mutating handler returns the
   object changed; the RFC 6902 JSON patch from the object received to the object
   returned is computed here (`json_patch`) and sent base64-encoded; an unchanged
   object sends no patch. A conversion handler gets each object and the desired
   apiVersion; apiVersion is set for it on every result, and one failed object fails the
   whole review (the API server never sees a partial list).

Every request is counted in ``operator_kit_webhook_requests_total{path,outcome}`` and
timed in ``operator_kit_webhook_duration_seconds{path}``, and under controller-runtime's
names: ``controller_runtime_webhook_requests_total{webhook,code}`` (the HTTP status),
``..._latency_seconds{webhook}`` and ``..._requests_in_flight{webhook}``.

``gunicorn operator_kit.webhooks:app`` serves the object named by ``OPERATOR_KIT_APP``
(``MODULE:ATTR``): the module attribute ``app`` is resolved lazily (`load_app`), so
importing this module never imports the user's code. See `operator_kit.gunicorn_conf`
for the server settings.
"""

from __future__ import annotations

import base64
import builtins
import importlib
import json
import logging
import os
import reprlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import flask
from werkzeug.exceptions import (
    ClientDisconnected,
    HTTPException,
    MethodNotAllowed,
    RequestEntityTooLarge,
)

from operator_kit import metrics
from operator_kit.api.resources import CustomResource, InvalidResource
from operator_kit.metrics import WEBHOOK_DURATION, WEBHOOK_REQUESTS

__all__ = ["AdmissionRequest", "Denied", "Registration", "Webhooks"]

logger = logging.getLogger("operator_kit.webhooks")

K = TypeVar("K", bound=CustomResource)

ADMISSION_API_VERSION = "admission.k8s.io/v1"
CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"
APP_ENV = "OPERATOR_KIT_APP"
# An UPDATE's AdmissionReview carries the object and its old version, each up to the
# API server's 3 MiB request limit, plus the request's other fields.
DEFAULT_MAX_BODY_BYTES = 7 * 1024 * 1024
# A ConversionReview carries every object of a list (or a page of it) at once.
DEFAULT_MAX_CONVERSION_BODY_BYTES = 32 * 1024 * 1024

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


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


@dataclass(frozen=True)
class Registration:
    """One registered webhook: what it does, where, and for which kind (None: conversion).

    `Webhooks.registrations` lists them, so manifests (CRD conversion stanzas, webhook
    configurations) are written from the same registrations that serve requests.
    """

    type: Literal["validate", "mutate", "convert"]
    path: str
    kind: builtins.type[CustomResource] | None


ValidateHandler = Callable[[AdmissionRequest[K]], None]
MutateHandler = Callable[[K, AdmissionRequest[K]], K]
ConvertHandler = Callable[[dict[str, Any], str], dict[str, Any]]

_Answer = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


class _BadInput(Exception):
    """The request is not something a webhook can answer; `status` is the HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class _InvalidObject(_BadInput):
    """request.object does not decode as the kind: an answer, not a failed call.

    The API server calls mutating webhooks before it checks the CRD schema, so such an
    object (a value outside a Literal's choices, say) reaches us first; a 400 would show
    the client only "failed calling webhook ... for an unknown reason". A denial with
    code 422 shows it what is wrong with the object instead."""


class Webhooks(flask.Flask):
    """A Flask app serving admission and conversion webhooks; see the module docstring.

    `max_body_bytes` bounds the body of an admission review (default 7 MiB: an UPDATE
    holds the object twice), `max_conversion_body_bytes` that of a conversion review
    (default 32 MiB: it holds a whole list, or a page of it); 413 beyond them. Other
    routes (probes, metrics) may be added to the same app as to any Flask app.
    """

    def __init__(
        self,
        import_name: str = "operator_kit",
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_conversion_body_bytes: int = DEFAULT_MAX_CONVERSION_BODY_BYTES,
    ) -> None:
        super().__init__(import_name)
        for name, value in (("max_body_bytes", max_body_bytes),
                            ("max_conversion_body_bytes", max_conversion_body_bytes)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.max_body_bytes = max_body_bytes
        self.max_conversion_body_bytes = max_conversion_body_bytes
        # Bounds what werkzeug reads of a body without Content-Length (chunked): it stops
        # quietly at the limit, so one byte more tells an over-long body from a full one.
        self.config["MAX_CONTENT_LENGTH"] = max(max_body_bytes, max_conversion_body_bytes) + 1
        self._registrations: dict[str, Registration] = {}
        self.register_error_handler(HTTPException, self._http_error)

    # ------------------------------------------------------------------ registration

    def validate(
        self, kind: type[K], path: str
    ) -> Callable[[ValidateHandler[K]], ValidateHandler[K]]:
        """Register a validating webhook for `kind` at `path`.

        The handler gets the `AdmissionRequest`; returning allows, raising `Denied` denies.
        """

        def register(handler: ValidateHandler[K]) -> ValidateHandler[K]:
            def answer(review: dict[str, Any]) -> tuple[dict[str, Any], str]:
                request = _admission_request(kind, review)
                try:
                    handler(request)
                except Denied as denial:
                    return _admission_answer(request, _denial(denial.message)), "denied"
                except Exception:  # noqa: BLE001  (logged with its traceback there)
                    _log_handler_error(path, handler, request)
                    return _admission_answer(request, _denial(_internal(path))), "error"
                return _admission_answer(request, {"allowed": True}), "allowed"

            self._add_webhook(Registration("validate", path, kind), answer)
            return handler

        return register

    def mutate(self, kind: type[K], path: str) -> Callable[[MutateHandler[K]], MutateHandler[K]]:
        """Register a mutating webhook for `kind` at `path`.

        On CREATE and UPDATE the handler gets the object and the request and returns the
        object as it should be; other operations are allowed unchanged. `Denied` denies.
        """

        def register(handler: MutateHandler[K]) -> MutateHandler[K]:
            def answer(review: dict[str, Any]) -> tuple[dict[str, Any], str]:
                request = _admission_request(kind, review)
                if request.operation not in ("CREATE", "UPDATE"):
                    return _admission_answer(request, {"allowed": True}), "allowed"
                if request.object is None:
                    raise _BadInput(f"request.object is required for {request.operation}")
                try:
                    returned = handler(request.object, request)
                    if not isinstance(returned, kind):
                        raise TypeError(
                            f"mutating webhook handler {_name_of(handler)} returned "
                            f"{type(returned).__name__}; it must return the {kind.__name__}"
                        )
                    patch = json_patch(request.raw["object"], returned.to_dict())
                except Denied as denial:
                    return _admission_answer(request, _denial(denial.message)), "denied"
                except Exception:  # noqa: BLE001  (logged with its traceback there)
                    _log_handler_error(path, handler, request)
                    return _admission_answer(request, _denial(_internal(path))), "error"
                if not patch:
                    return _admission_answer(request, {"allowed": True}), "allowed"
                encoded = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
                response = {"allowed": True, "patchType": "JSONPatch", "patch": encoded}
                return _admission_answer(request, response), "patched"

            self._add_webhook(Registration("mutate", path, kind), answer)
            return handler

        return register

    def convert(self, path: str) -> Callable[[ConvertHandler], ConvertHandler]:
        """Register a CRD conversion webhook at `path`.

        The handler gets each object (a dict) and the desired apiVersion and returns the
        object in that version; apiVersion is set on the result for it. Objects already in
        the desired version are passed through without calling it.
        """

        def register(handler: ConvertHandler) -> ConvertHandler:
            def answer(review: dict[str, Any]) -> tuple[dict[str, Any], str]:
                return _convert_all(path, handler, review["request"])

            self._add_webhook(Registration("convert", path, None), answer)
            return handler

        return register

    def registrations(self) -> tuple[Registration, ...]:
        """Every webhook registered on this app, in registration order."""
        return tuple(self._registrations.values())

    def _add_webhook(self, registration: Registration, answer: _Answer) -> None:
        path = registration.path
        if not path.startswith("/"):
            raise ValueError(f"webhook path {path!r} must start with '/'")
        if path in self._registrations:
            raise ValueError(f"a webhook is already registered at {path}")
        self._registrations[path] = registration
        if registration.type == "convert":
            api_version, review = CONVERSION_API_VERSION, "ConversionReview"
            limit = self.max_conversion_body_bytes
        else:
            api_version, review = ADMISSION_API_VERSION, "AdmissionReview"
            limit = self.max_body_bytes
        self.add_url_rule(
            path,
            endpoint=f"webhook:{path}",
            view_func=self._view(path, answer, api_version, review, limit),
            methods=["POST"],
            provide_automatic_options=False,
        )

    # ------------------------------------------------------------------ serving

    def _view(
        self, path: str, answer: _Answer, api_version: str, review_kind: str, limit: int
    ) -> Callable[[], flask.Response]:
        in_flight = metrics.CR_WEBHOOK_IN_FLIGHT.labels(path)

        def view() -> flask.Response:
            started = time.perf_counter()
            outcome = "error"
            code = 500
            in_flight.inc()
            try:
                review = self._read_review(api_version, review_kind, limit)
                try:
                    body, outcome = answer(review)
                except _InvalidObject as invalid:
                    logger.info("webhook %s: denied: %s", path, invalid.message)
                    body, outcome = _review(ADMISSION_API_VERSION, "AdmissionReview", {
                        "uid": review["request"]["uid"], **_denial(invalid.message, 422)}), \
                        "denied"
                code = 200
                return _json(body, 200)
            except _BadInput as bad:
                outcome, code = "bad_request", bad.status
                logger.warning("webhook %s: bad request: %s", path, bad.message)
                return _json({"error": bad.message}, bad.status)
            except Exception:  # a bug here, not in a handler: still no traceback out
                logger.exception("webhook %s: unexpected error answering a request", path)
                return _json({"error": f"internal error in webhook {path}"}, 500)
            finally:
                in_flight.dec()
                elapsed = time.perf_counter() - started
                WEBHOOK_REQUESTS.labels(path, outcome).inc()
                WEBHOOK_DURATION.labels(path).observe(elapsed)
                metrics.CR_WEBHOOK_REQUESTS.labels(path, str(code)).inc()
                metrics.CR_WEBHOOK_LATENCY.labels(path).observe(elapsed)

        return view

    def _read_review(self, api_version: str, kind: str, limit: int) -> dict[str, Any]:
        request = flask.request
        if request.mimetype != "application/json":
            raise _BadInput(
                f"Content-Type must be application/json, got {request.mimetype or 'none'}", 415
            )
        too_large = f"body larger than {limit} bytes"
        length = request.content_length
        if length is not None and length > limit:
            raise _BadInput(too_large, 413)
        try:
            data = request.get_data(cache=False)
        except RequestEntityTooLarge:
            raise _BadInput(too_large, 413) from None
        except ClientDisconnected:  # werkzeug on Python 3.13: the body ended early
            raise _BadInput(
                f"the body ended before the {length} bytes announced: the client closed "
                "the connection, or did not send the body in time") from None
        if len(data) > limit:
            raise _BadInput(too_large, 413)
        if length is not None and len(data) < length:
            raise _BadInput(
                f"the body ended after {len(data)} of the {length} bytes announced: the "
                "client closed the connection, or did not send the body in time"
            )
        try:
            review = json.loads(data, parse_constant=_reject_constant)
        except ValueError as err:
            raise _BadInput(f"body is not JSON: {err}") from None
        except RecursionError:
            raise _BadInput("body is not JSON: nested too deeply") from None
        if not isinstance(review, dict):
            raise _BadInput(f"expected a JSON object (the {kind}), got {_json_type(review)}")
        got = (review.get("apiVersion"), review.get("kind"))
        if got != (api_version, kind):
            raise _BadInput(
                f"expected apiVersion {api_version} kind {kind}, got apiVersion "
                f"{_short.repr(got[0])} kind {_short.repr(got[1])}"
            )
        body = review.get("request")
        if not isinstance(body, dict):
            raise _BadInput(f"the {kind} has no request")
        uid = body.get("uid")
        if not isinstance(uid, str) or not uid:
            raise _BadInput("request.uid is missing")
        return review

    def _http_error(self, err: HTTPException) -> flask.Response:
        """Errors raised outside our views (unknown path, wrong method) as JSON too."""
        request = flask.request
        if request.path in self._registrations:
            WEBHOOK_REQUESTS.labels(request.path, "bad_request").inc()
            metrics.CR_WEBHOOK_REQUESTS.labels(request.path, str(err.code or 500)).inc()
        if isinstance(err, MethodNotAllowed):
            message = f"method {request.method} is not allowed on {request.path}; use POST"
        else:
            message = f"{err.name}: {err.description}"
        response = _json({"error": message}, err.code or 500)
        if isinstance(err, MethodNotAllowed) and err.valid_methods:
            response.headers["Allow"] = ", ".join(err.valid_methods)
        return response


# ---------------------------------------------------------------------- admission


def _admission_request(kind: type[K], review: dict[str, Any]) -> AdmissionRequest[K]:
    raw = review["request"]
    operation = raw.get("operation")
    if not isinstance(operation, str) or not operation:
        raise _BadInput("request.operation is missing")
    namespace = raw.get("namespace")
    return AdmissionRequest(
        uid=raw["uid"],
        kind=_mapping(raw, "kind"),
        resource=_mapping(raw, "resource"),
        operation=operation,
        object=_typed(kind, raw.get("object"), "request.object"),
        old_object=_typed(kind, raw.get("oldObject"), "request.oldObject"),
        user_info=_mapping(raw, "userInfo"),
        name=str(raw.get("name") or ""),
        namespace=str(namespace) if namespace else None,
        dry_run=raw.get("dryRun") is True,
        raw=raw,
    )


def _typed(kind: type[K], value: Any, where: str) -> K | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _BadInput(f"{where} is not an object, got {_json_type(value)}")
    try:
        return kind.from_dict(value)
    except InvalidResource as err:
        message = f"{where} is not a valid {kind.__name__}: {err}"
        if where == "request.object":
            raise _InvalidObject(message) from None
        raise _BadInput(message) from None


def _mapping(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _BadInput(f"request.{key} is not an object, got {_json_type(value)}")
    return value


def _admission_answer(request: AdmissionRequest[Any], response: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": request.uid, **response}
    if request.warnings:
        out["warnings"] = [str(w) for w in request.warnings]
    return _review(ADMISSION_API_VERSION, "AdmissionReview", out)


def _denial(message: str, code: int = 403) -> dict[str, Any]:
    reason = "Forbidden" if code == 403 else "Invalid"
    return {
        "allowed": False,
        "status": {"status": "Failure", "code": code, "reason": reason, "message": message},
    }


def _internal(path: str) -> str:
    return f"internal error in webhook {path}; see the operator's log"


def _log_handler_error(
    path: str, handler: Callable[..., Any], request: AdmissionRequest[Any]
) -> None:
    where = f"{request.namespace}/{request.name}" if request.namespace else request.name
    logger.exception(
        "webhook %s: handler %s raised on %s of %s %s (uid %s)",
        path,
        _name_of(handler),
        request.operation,
        request.kind.get("kind", "object"),
        where or "<unnamed>",
        request.uid,
    )


# ---------------------------------------------------------------------- conversion


def _convert_all(
    path: str, handler: ConvertHandler, request: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The ConversionReview answering `request`: every object converted, or a failure."""
    uid = request["uid"]
    desired = request.get("desiredAPIVersion")
    if not isinstance(desired, str) or not desired:
        raise _BadInput("request.desiredAPIVersion is missing")
    objects = request.get("objects")
    if not isinstance(objects, list):
        raise _BadInput("request.objects is missing or not a list")
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise _BadInput(f"request.objects[{i}] is not an object")
    converted: list[dict[str, Any]] = []
    for obj in objects:
        if obj.get("apiVersion") == desired:
            converted.append(obj)
            continue
        what = f"{_describe(obj)} to {desired}"
        try:
            out = handler(obj, desired)
            if not isinstance(out, dict):
                raise TypeError(
                    f"conversion webhook handler {_name_of(handler)} returned "
                    f"{type(out).__name__}; it must return a dict"
                )
        except Denied as denial:
            return _conversion_failure(uid, f"cannot convert {what}: {denial.message}"), "denied"
        except Exception:
            logger.exception(
                "webhook %s: handler %s raised converting %s", path, _name_of(handler), what
            )
            message = f"converting {what} failed: {_internal(path)}"
            return _conversion_failure(uid, message), "error"
        out = dict(out)
        out["apiVersion"] = desired
        out.setdefault("kind", obj.get("kind"))
        out.setdefault("metadata", obj.get("metadata"))
        converted.append(out)
    response = {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}}
    return _review(CONVERSION_API_VERSION, "ConversionReview", response), "converted"


def _conversion_failure(uid: str, message: str) -> dict[str, Any]:
    response = {"uid": uid, "result": {"status": "Failure", "message": message}}
    return _review(CONVERSION_API_VERSION, "ConversionReview", response)


def _describe(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name") or "<unnamed>"
    namespace = metadata.get("namespace")
    where = f"{namespace}/{name}" if namespace else str(name)
    return f"{obj.get('kind', 'object')} {where} ({obj.get('apiVersion')})"


# ---------------------------------------------------------------------- JSON patch


def json_patch(old: Any, new: Any) -> list[dict[str, Any]]:
    """The RFC 6902 JSON patch that turns JSON value `old` into `new`.

    Objects are compared key by key, recursively (``add``, ``remove``, ``replace``);
    anything else that differs — a scalar, a list, a change of type — is replaced
    whole. Keys are escaped as JSON pointers require (``~`` → ``~0``, ``/`` → ``~1``).
    Values are compared as JSON: ``1``, ``1.0`` and ``true`` all differ.
    """
    ops: list[dict[str, Any]] = []
    _diff(old, new, "", ops)
    return ops


def _diff(old: Any, new: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            child = f"{path}/{_escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                _diff(old[key], value, child, ops)
    elif not _same(old, new):
        ops.append({"op": "replace", "path": path, "value": new})


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


# ---------------------------------------------------------------------- helpers


def _review(api_version: str, kind: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "response": response}


def _json(body: Any, status: int) -> flask.Response:
    return flask.Response(json.dumps(body), status=status, mimetype="application/json")


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _name_of(handler: Callable[..., Any]) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))


# ---------------------------------------------------------------------- gunicorn entry


@dataclass(frozen=True)
class _Loaded:
    spec: str
    target: Any
    app: flask.Flask


_loaded: _Loaded | None = None
_load_lock = threading.Lock()


def load_app(spec: str | None = None) -> flask.Flask:
    """The Flask app of the object named by `spec` or ``$OPERATOR_KIT_APP`` (``MODULE:ATTR``).

    The object may be an Operator (its ``app`` or ``webhooks``) or a `Webhooks` (any Flask
    app). If it has a ``serve_in_background()`` method, that is called once, so an
    Operator's controllers start in the process that serves its webhooks. The result is
    cached for the life of the process; a second, different `spec` is an error.
    """
    global _loaded
    spec = spec or os.environ.get(APP_ENV, "")
    with _load_lock:
        if _loaded is not None:
            if spec and spec != _loaded.spec:
                raise RuntimeError(
                    f"this process already serves {_loaded.spec}; it cannot also serve {spec}"
                )
            return _loaded.app
        target = import_target(spec)
        app = _flask_app_of(spec, target)
        serve = getattr(target, "serve_in_background", None)
        if callable(serve):
            serve()
        _loaded = _Loaded(spec, target, app)
        return app


def loaded_target() -> Any | None:
    """The object `load_app` loaded in this process (the Operator), or None."""
    return _loaded.target if _loaded is not None else None


def import_target(spec: str, *, named_by: str = APP_ENV) -> Any:
    """Import the object named by `spec` (``MODULE:ATTR``); errors name `named_by`."""
    example = f"{APP_ENV}=backup_operator:operator"
    if not spec:
        raise RuntimeError(
            f"{APP_ENV} is not set: set it to MODULE:ATTR naming the Operator (or Webhooks "
            f"app) to serve, for example {example}"
        )
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RuntimeError(f"{named_by}={spec!r} must be MODULE:ATTR, for example {example}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise RuntimeError(
            f"{named_by}={spec}: cannot import {module_name} ({err}); install it or put its "
            "directory on PYTHONPATH (gunicorn --pythonpath DIR)"
        ) from err
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise RuntimeError(
                f"{named_by}={spec}: module {module_name} has no attribute {attr}; set "
                f"{APP_ENV} to MODULE:ATTR naming the Operator or Webhooks app"
            ) from None
    return target


def _flask_app_of(spec: str, target: Any) -> flask.Flask:
    if isinstance(target, flask.Flask):
        return target
    for attr in ("app", "webhooks"):
        candidate = getattr(target, attr, None)
        if isinstance(candidate, flask.Flask):
            return candidate
    raise RuntimeError(
        f"{APP_ENV}={spec} names a {type(target).__name__}, which is neither an Operator "
        "nor a Webhooks app; point it at one of those"
    )


def __getattr__(name: str) -> flask.Flask:
    # ``gunicorn operator_kit.webhooks:app`` reads ``app`` here, in the worker process.
    if name == "app":
        return load_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
