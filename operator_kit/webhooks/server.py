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

    @webhooks.convert("/convert", kind=Backup)
    def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
        ...

How one request flows (`Webhooks._view`):

1. *Transport checks*: POST only (405), ``Content-Type: application/json`` (415), a body
   of at most ``max_body_bytes`` for an admission review, ``max_conversion_body_bytes``
   for a conversion review (413 beyond them, naming the limit and the setting). A body
   of 256 KiB or more must then fit in the *body budget* (``body_budget_bytes``: the bytes
   of such bodies answered at once) within 2 s (at most half the read timeout), else 503
   with ``Retry-After``; its share
   is given back once the answer is written (`operator_kit.webhooks.limits`). Memory is
   bounded that way, and the generated Deployment's memory limit is derived from it.
2. *Review checks*: the body is JSON, an object, the expected apiVersion and kind of
   review, with a ``request`` that has a ``uid``. Any failure is *bad input*: a 4xx with
   a metav1 Status whose message says what was wrong (the API server shows it; from
   another body it would show "unknown") — never a 500 or a traceback. The API server then
   applies the webhook's failurePolicy. An admission object that does not decode as the
   registered kind (`CustomResource.from_dict`) is the object's fault, not the call's:
   it is denied with code 422 and the decoder's message (mutating webhooks run before
   the API server checks the schema, so this is often the first check it meets); an old
   object that does not decode stays a 400.
3. *The handler* runs. Returning allows; `Denied` denies with its message (kubectl shows
   it); any other exception is a bug in the handler: its traceback goes to the
   ``operator_kit.webhooks`` logger and the API server gets HTTP 500 with a metav1
   Status whose message names the webhook and nothing else (no internal detail or
   secret leaks into an answer). The API server then applies the webhook's
   failurePolicy, as for a server that is down: ``Fail`` refuses the write with
   "failed calling webhook ...: failed to call webhook: <that message>" (from a body
   that is not a Status it would show "unknown"), ``Ignore`` lets it through; the client
   does not see a 403 denial that reads like RBAC.
4. *The answer*: the review with the request's uid echoed. A mutating handler returns the
   object changed; the RFC 6902 JSON patch from the object received to the object
   returned is computed here (`json_patch`) and sent base64-encoded; an unchanged
   object sends no patch. A conversion handler gets each object and the desired
   apiVersion; apiVersion is set for it on every result, and one failed object fails the
   whole review (the API server never sees a partial list).

Bad requests are logged at WARNING once per client address, path and status per minute;
the line says how many like it were left out since the last one (`LogThrottle`).

Every request is counted in ``operator_kit_webhook_requests_total{path,outcome}`` and
timed in ``operator_kit_webhook_duration_seconds{path}``, and under controller-runtime's
names: ``controller_runtime_webhook_requests_total{webhook,code}`` (the HTTP status),
``..._latency_seconds{webhook}`` and ``..._requests_in_flight{webhook}``.

The wire format lives beside it: `operator_kit.webhooks.admission` (the request, the
answer, bad input), `operator_kit.webhooks.conversion`, `operator_kit.webhooks.jsonpatch`;
`operator_kit.webhooks.loader` is the gunicorn entry point (``gunicorn
operator_kit.webhooks:app``; see `operator_kit.gunicorn_conf` for the server settings).
"""

from __future__ import annotations

import base64
import builtins
import json
import logging
import reprlib
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

import flask
from kubernetes.client import ApiClient
from werkzeug.exceptions import (
    ClientDisconnected,
    HTTPException,
    MethodNotAllowed,
    RequestEntityTooLarge,
)

from operator_kit import metrics
from operator_kit.api.kinds import Kind, KindSpec
from operator_kit.api.resources import CustomResource
from operator_kit.metrics import WEBHOOK_DURATION, WEBHOOK_REQUESTS
from operator_kit.runtime.objects import decode, encode
from operator_kit.webhooks.admission import (
    ADMISSION_API_VERSION,
    AdmissionRequest,
    BadInput,
    Denied,
    InvalidObject,
    admission_answer,
    admission_request,
    denial_response,
    handler_name,
    internal_error,
    json_type,
    wrap_review,
)
from operator_kit.webhooks.conversion import CONVERSION_API_VERSION, ConvertHandler, convert_all
from operator_kit.webhooks.jsonpatch import json_patch
from operator_kit.webhooks.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONVERSION_BODY_BYTES,
    BodyBudget,
    LogThrottle,
    budget_wait,
)

__all__ = ["AdmissionRequest", "Denied", "Registration", "Webhooks"]

logger = logging.getLogger("operator_kit.webhooks")

K = TypeVar("K")  # the registered kind's form: a CustomResource, a client model or a dict

BAD_REQUEST_LOG_INTERVAL = 60.0

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


@dataclass(frozen=True)
class Registration:
    """One registered webhook: what it does, where, and for which kind (the kind's root
    class for a conversion webhook; None for one registered without a kind).

    `Webhooks.registrations` lists them, so manifests (CRD conversion stanzas, webhook
    configurations) are written from the same registrations that serve requests.
    """

    type: Literal["validate", "mutate", "convert"]
    path: str
    kind: builtins.type[CustomResource] | None
    target: Kind | None = field(default=None, compare=False)
    """The kind of an admission webhook in any form (``kind`` is its CustomResource
    class, when it is one); None for a conversion webhook."""
    namespace_selector: Mapping[str, Any] | None = None
    object_selector: Mapping[str, Any] | None = None


ValidateHandler = Callable[[AdmissionRequest[K]], None]
MutateHandler = Callable[[K, AdmissionRequest[K]], K]

_Answer = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


class Webhooks(flask.Flask):
    """A Flask app serving admission and conversion webhooks; see the module docstring.

    `max_body_bytes` bounds the body of an admission review (default 7 MiB: an UPDATE
    holds the object twice), `max_conversion_body_bytes` that of a conversion review
    (default 8 MiB: it holds a whole list, or a page of it); 413 beyond them.
    `body_budget_bytes` bounds the bodies of 256 KiB or more answered at once (default,
    and never less than, the larger of the two). All three may be changed until the app
    serves (an Operator's: ``operator.webhooks.max_conversion_body_bytes = ...``); the
    generated Deployment's memory limit follows them (`memory_limit_mib`). Other routes
    (probes, metrics) may be added to the same app as to any Flask app.
    """

    def __init__(
        self,
        import_name: str = "operator_kit",
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_conversion_body_bytes: int = DEFAULT_MAX_CONVERSION_BODY_BYTES,
        body_budget_bytes: int | None = None,
    ) -> None:
        super().__init__(import_name)
        for name, value in (("max_body_bytes", max_body_bytes),
                            ("max_conversion_body_bytes", max_conversion_body_bytes),
                            ("body_budget_bytes", body_budget_bytes or 1)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.max_body_bytes = max_body_bytes
        self.max_conversion_body_bytes = max_conversion_body_bytes
        self.body_budget_bytes = body_budget_bytes
        self._budget = BodyBudget(self.budget_bytes())
        self._budget_wait = budget_wait()
        self._bad_requests = LogThrottle(BAD_REQUEST_LOG_INTERVAL)
        self._registrations: dict[str, Registration] = {}
        self.register_error_handler(HTTPException, self._http_error)

    # ------------------------------------------------------------------ registration

    def validate(
        self, kind: KindSpec, path: str, *, namespace_selector: Mapping[str, Any] | None = None,
        object_selector: Mapping[str, Any] | None = None,
    ) -> Callable[[ValidateHandler[K]], ValidateHandler[K]]:
        """Register a validating webhook for `kind` at `path`.

        `kind` is any form a kind is named in (`operator_kit.api.kinds`): the handler
        gets the objects in that form (a CustomResource, a client model, the API's
        dict). `namespace_selector` and `object_selector` (label selectors, as the
        webhook configuration's) narrow what the API server sends; for a kind the
        operator does not define, its own namespace is excluded as well, so a broken
        webhook on Pods cannot stop the operator's own Pods from starting. The handler
        gets the `AdmissionRequest`; returning allows, raising `Denied` denies.
        """
        target = Kind.of(kind)

        def register(handler: ValidateHandler[K]) -> ValidateHandler[K]:
            def answer(review: dict[str, Any]) -> tuple[dict[str, Any], str]:
                request = admission_request(target, review, _decode)
                try:
                    handler(request)
                except Denied as denial:
                    return admission_answer(request, denial_response(denial.message)), "denied"
                except Exception as err:  # a bug: logged with its traceback there
                    _log_handler_error(path, handler, request)
                    raise HandlerFailed(internal_error(path)) from err
                return admission_answer(request, {"allowed": True}), "allowed"

            self._add_webhook(Registration("validate", path, target.custom_resource, target,
                                           namespace_selector, object_selector), answer)
            return handler

        return register

    def mutate(
        self, kind: KindSpec, path: str, *, namespace_selector: Mapping[str, Any] | None = None,
        object_selector: Mapping[str, Any] | None = None,
    ) -> Callable[[MutateHandler[K]], MutateHandler[K]]:
        """Register a mutating webhook for `kind` at `path` (any form of kind, and the
        selectors, as for `validate`).

        On CREATE and UPDATE the handler gets the object and the request and returns the
        object as it should be, in the same form; other operations are allowed
        unchanged. `Denied` denies.
        """
        target = Kind.of(kind)
        form = _form(target)

        def register(handler: MutateHandler[K]) -> MutateHandler[K]:
            def answer(review: dict[str, Any]) -> tuple[dict[str, Any], str]:
                request = admission_request(target, review, _decode)
                if request.operation not in ("CREATE", "UPDATE"):
                    return admission_answer(request, {"allowed": True}), "allowed"
                if request.object is None:
                    raise BadInput(f"request.object is required for {request.operation}")
                try:
                    returned = handler(request.object, request)
                    if not isinstance(returned, form):
                        raise TypeError(
                            f"mutating webhook handler {handler_name(handler)} returned "
                            f"{type(returned).__name__}; it must return the {form.__name__}"
                        )
                    patch = json_patch(request.raw["object"], encode(returned, _CLIENT)[1])
                except Denied as denial:
                    return admission_answer(request, denial_response(denial.message)), "denied"
                except Exception as err:  # a bug: logged with its traceback there
                    _log_handler_error(path, handler, request)
                    raise HandlerFailed(internal_error(path)) from err
                if not patch:
                    return admission_answer(request, {"allowed": True}), "allowed"
                encoded = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
                response = {"allowed": True, "patchType": "JSONPatch", "patch": encoded}
                return admission_answer(request, response), "patched"

            self._add_webhook(Registration("mutate", path, target.custom_resource, target,
                                           namespace_selector, object_selector), answer)
            return handler

        return register

    def convert(
        self, path: str, kind: type[CustomResource] | None = None
    ) -> Callable[[ConvertHandler], ConvertHandler]:
        """Register a CRD conversion webhook at `path`, for `kind` (any of its version classes).

        The handler gets each object (a dict) and the desired apiVersion and returns the
        object in that version; apiVersion is set on the result for it. Objects already in
        the desired version are passed through without calling it.

        Before it runs, the review is checked and a malformed one fails with a message
        naming the object (`operator_kit.webhooks.conversion`). With `kind` the check is
        the full one: desiredAPIVersion must be one of the kind's versions, and each
        object of the kind, in one of its versions, decoding as that version class
        (`CustomResource.from_dict`), so the handler only ever sees well-formed objects.
        Without it only the form is checked: a ``group/version`` desiredAPIVersion, and
        objects with an apiVersion in the same group, a kind and metadata.
        """
        root = None if kind is None else _root_of(kind)

        def register(handler: ConvertHandler) -> ConvertHandler:
            def answer(review: dict[str, Any]) -> tuple[dict[str, Any], str]:
                return convert_all(path, handler, review["request"], root)

            self._add_webhook(Registration("convert", path, root), answer)
            return handler

        return register

    def budget_bytes(self) -> int:
        """The body budget in force: `body_budget_bytes`, never less than one body."""
        return max(self.body_budget_bytes or 0, self.max_body_bytes,
                   self.max_conversion_body_bytes)

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
        self.add_url_rule(
            path,
            endpoint=f"webhook:{path}",
            view_func=self._view(path, answer, registration.type == "convert"),
            methods=["POST"],
            provide_automatic_options=False,
        )

    # ------------------------------------------------------------------ serving

    def _view(self, path: str, answer: _Answer, conversion: bool) -> Callable[[], flask.Response]:
        in_flight = metrics.CR_WEBHOOK_IN_FLIGHT.labels(path)
        if conversion:
            api_version, review_kind = CONVERSION_API_VERSION, "ConversionReview"
        else:
            api_version, review_kind = ADMISSION_API_VERSION, "AdmissionReview"

        def view() -> flask.Response:
            started = time.perf_counter()
            outcome = "error"
            code = 500
            taken = 0  # bytes of the body budget held, given back once answered
            in_flight.inc()
            try:
                taken = self._take_budget(conversion)
                review = self._read_review(api_version, review_kind, conversion)
                try:
                    body, outcome = answer(review)
                except InvalidObject as invalid:
                    logger.info("webhook %s: denied: %s", path, invalid.message)
                    denied = denial_response(invalid.message, 422)
                    body = wrap_review(ADMISSION_API_VERSION, "AdmissionReview",
                                       {"uid": review["request"]["uid"], **denied})
                    outcome = "denied"
                code = 200
                response = _json(body, 200)
                if taken:  # the answer is in memory until written: held until then
                    response.call_on_close(partial(self._budget.give_back, taken))
                    taken = 0
                return response
            except HandlerFailed as failed:  # logged with its traceback already
                return _status(failed.message, 500)
            except BadInput as bad:
                outcome, code = "bad_request", bad.status
                self._log_bad_request(path, bad)
                response = _status(bad.message, bad.status)
                if bad.status == 503:
                    response.headers["Retry-After"] = "1"
                return response
            except Exception:  # a bug here, not in a handler: still no traceback out
                logger.exception("webhook %s: unexpected error answering a request", path)
                return _status(f"internal error in webhook {path}", 500)
            finally:
                if taken:
                    self._budget.give_back(taken)
                in_flight.dec()
                elapsed = time.perf_counter() - started
                WEBHOOK_REQUESTS.labels(path, outcome).inc()
                WEBHOOK_DURATION.labels(path).observe(elapsed)
                metrics.CR_WEBHOOK_REQUESTS.labels(path, str(code)).inc()
                metrics.CR_WEBHOOK_LATENCY.labels(path).observe(elapsed)

        return view

    def _limit(self, conversion: bool) -> tuple[int, str]:
        """The body limit of a conversion or admission review, and the setting naming it."""
        if conversion:
            return self.max_conversion_body_bytes, "max_conversion_body_bytes"
        return self.max_body_bytes, "max_body_bytes"

    def _too_large(self, conversion: bool, length: int | None) -> BadInput:
        limit, setting = self._limit(conversion)
        what = f"body of {length} bytes" if length is not None else "body"
        review = "a conversion review" if conversion else "an admission review"
        return BadInput(f"{what} over the {limit}-byte ({_size(limit)}) limit of {review}; "
                        f"Webhooks.{setting} sets it", 413)

    def _take_budget(self, conversion: bool) -> int:
        """Reserve the request's body in the body budget; the bytes taken (0 for a small
        body). A body too large is refused here, before any of it is read."""
        limit, _ = self._limit(conversion)
        length = flask.request.content_length
        if length is not None and length > limit:
            raise self._too_large(conversion, length)
        size = limit if length is None else length  # chunked: as large as it may be
        budget = self._budget
        budget.total = self.budget_bytes()  # the limits may have been changed since
        self.config["MAX_CONTENT_LENGTH"] = max(self.max_body_bytes,
                                                self.max_conversion_body_bytes) + 1
        if not budget.counts(size):
            return 0
        if not budget.take(size, self._budget_wait):
            raise BadInput(
                f"busy: {_size(budget.used)} of request bodies are being answered and "
                f"this one ({_size(size)}) does not fit in the {_size(budget.total)} body "
                "budget (Webhooks.body_budget_bytes); retry", 503)
        return size

    def _read_review(self, api_version: str, kind: str, conversion: bool) -> dict[str, Any]:
        request = flask.request
        if request.mimetype != "application/json":
            raise BadInput(
                f"Content-Type must be application/json, got {request.mimetype or 'none'}", 415
            )
        limit, _ = self._limit(conversion)
        length = request.content_length
        # Bounds what werkzeug reads of a body without Content-Length (chunked): it stops
        # quietly at the limit, so one byte more tells an over-long body from a full one.
        # Per request since Flask 3.1; before, the app's (the larger limit's) bounds it.
        with suppress(AttributeError):
            request.max_content_length = limit + 1
        try:
            data = request.get_data(cache=False)
        except RequestEntityTooLarge:
            raise self._too_large(conversion, length) from None
        except ClientDisconnected:  # werkzeug on Python 3.13: the body ended early
            raise BadInput(
                f"the body ended before the {length} bytes announced: the client closed "
                "the connection, or did not send the body in time") from None
        if len(data) > limit:
            raise self._too_large(conversion, length)
        if length is not None and len(data) < length:
            raise BadInput(
                f"the body ended after {len(data)} of the {length} bytes announced: the "
                "client closed the connection, or did not send the body in time"
            )
        try:
            review = json.loads(data, parse_constant=_reject_constant)
        except ValueError as err:
            raise BadInput(f"body is not JSON: {err}") from None
        except RecursionError:
            raise BadInput("body is not JSON: nested too deeply") from None
        del data
        if not isinstance(review, dict):
            raise BadInput(f"expected a JSON object (the {kind}), got {json_type(review)}")
        got = (review.get("apiVersion"), review.get("kind"))
        if got != (api_version, kind):
            raise BadInput(
                f"expected apiVersion {api_version} kind {kind}, got apiVersion "
                f"{_short.repr(got[0])} kind {_short.repr(got[1])}"
            )
        body = review.get("request")
        if not isinstance(body, dict):
            raise BadInput(f"the {kind} has no request")
        uid = body.get("uid")
        if not isinstance(uid, str) or not uid:
            raise BadInput("request.uid is missing")
        return review

    def _log_bad_request(self, path: str, bad: BadInput) -> None:
        """One WARNING per client address, path and status per interval (`LogThrottle`)."""
        source = flask.request.remote_addr or "an unknown client"
        left_out = self._bad_requests.admit((source, path, bad.status))
        if left_out is None:
            return
        more = (f" ({left_out} more like it from {source} since the last such line, "
                "not logged)" if left_out else "")
        logger.warning("webhook %s: bad request from %s (HTTP %d): %s%s",
                       path, source, bad.status, bad.message, more)

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
        response = _status(message, err.code or 500)
        if isinstance(err, MethodNotAllowed) and err.valid_methods:
            response.headers["Allow"] = ", ".join(err.valid_methods)
        return response


# Decodes admission objects into client models (kubernetes < 37 needs an ApiClient for
# that; it makes no connection).
_CLIENT = ApiClient()


def _decode(kind: Kind, raw: dict[str, Any]) -> Any:
    return decode(kind, raw, _CLIENT)


def _form(kind: Kind) -> builtins.type:
    """The class a mutating handler returns: the kind's class, or dict."""
    return kind.resource if kind.resource is not None else dict


def _root_of(kind: Any) -> type[CustomResource]:
    if not (isinstance(kind, type) and issubclass(kind, CustomResource)):
        raise TypeError(f"kind must be a CustomResource class, got {_short.repr(kind)}")
    return kind.versions()[0]


def _log_handler_error(
    path: str, handler: Callable[..., Any], request: AdmissionRequest[Any]
) -> None:
    where = f"{request.namespace}/{request.name}" if request.namespace else request.name
    logger.exception(
        "webhook %s: handler %s raised on %s of %s %s (uid %s)",
        path,
        handler_name(handler),
        request.operation,
        request.kind.get("kind", "object"),
        where or "<unnamed>",
        request.uid,
    )


class HandlerFailed(Exception):
    """A handler raised something other than `Denied` (a bug, logged with its traceback):
    answered with HTTP 500 and `message`, which names the webhook and nothing else."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _size(n: int) -> str:
    """A byte count as people read it: 8 MiB, 64 KiB, 1.5 MiB, 1000 bytes."""
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if n >= unit:
            return f"{n // unit} {name}" if n % unit == 0 else f"{n / unit:.1f} {name}"
    return f"{n} bytes"


_REASONS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed",
            413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 500: "InternalError",
            503: "ServiceUnavailable"}


def _status(message: str, code: int) -> flask.Response:
    """An error answer as a metav1 Status: the API server's client reads the message from
    it and shows it to the user (from another body it shows "unknown")."""
    return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": _REASONS.get(code, "Unknown"), "code": code},
                 code)


def _json(body: Any, status: int) -> flask.Response:
    return flask.Response(json.dumps(body), status=status, mimetype="application/json")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
