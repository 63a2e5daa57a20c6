"""The probes and the metrics: ``/livez``, ``/readyz`` and ``/metrics``, and their servers.

`add_probe_views` puts the three views on a Flask app (the operator's `Webhooks` app, so
gunicorn serves them on the webhook port); `HttpServer` serves some of them (a
`ProbeApp`, plain WSGI: an operator without webhooks never imports Flask) on a port of
their own in a thread, as controller-runtime's managers do (``--health-probe-bind-address``,
``--metrics-bind-address``; `operator_kit.cli`).

``--metrics-secure`` (controller-runtime's ``SecureServing`` with
``filters.WithAuthenticationAndAuthorization``): the metrics view lets a request in only
when the API server says its bearer token may ``get /metrics``
(`operator_kit.client.delegated`): 401 without a valid token, 403 for a user without
the right, 503 when the API server cannot say. On the command line's own metrics server
that needs TLS (`metrics_tls`: the ``tls.crt`` and ``tls.key`` of ``--metrics-cert-dir``,
followed as the webhook server follows its files, so a renewed certificate is served
without a restart (`operator_kit.webhooks.tls.ServingContext`, controller-runtime's
``certwatcher``); else a self-signed pair made at start, as controller-runtime makes
one); under gunicorn the webhook port is TLS already.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Sequence
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CONTENT_TYPE_LATEST

from operator_kit import _pki, metrics
from operator_kit.settings import Address, UsageError

if TYPE_CHECKING:
    import flask

    from operator_kit.client.delegated import DelegatedAuth

__all__ = ["HttpServer", "ProbeApp", "add_probe_views", "metrics_tls"]

log = logging.getLogger("operator_kit.cli")

PATHS = ("livez", "readyz", "metrics")

Answer = tuple[int, str | bytes, str, dict[str, str]]
"""A view's answer: status, body, content type, extra headers."""


class _Views:
    """What ``/livez``, ``/readyz`` and ``/metrics`` answer, whatever serves them."""

    def __init__(self, live: Callable[[], bool], ready: Callable[[], bool],
                 metrics_auth: Callable[[], DelegatedAuth | None] | None,
                 detail: Callable[[], str] | None = None) -> None:
        self.live, self.ready, self.metrics_auth = live, ready, metrics_auth
        self.detail = detail

    def answer(self, view: str, authorization: str | None, path: str) -> Answer:
        if view == "livez":
            ok = self.live()
            return (200 if ok else 503, "ok\n" if ok else "stopping\n", "text/plain", {})
        if view == "readyz":
            ok = self.ready()
            more = self.detail() if self.detail is not None else ""
            return (200 if ok else 503, ("ok\n" if ok else "not ready\n") + more,
                    "text/plain", {})
        auth = self.metrics_auth() if self.metrics_auth is not None else None
        if auth is not None:
            decision = auth.check(authorization, path)
            if not decision.allowed:
                return _refusal(decision.status, decision.reason)
        return 200, metrics.exposition(), CONTENT_TYPE_LATEST, {}


def add_probe_views(app: flask.Flask, *, live: Callable[[], bool],
                    ready: Callable[[], bool],
                    metrics_auth: Callable[[], DelegatedAuth | None] | None = None,
                    detail: Callable[[], str] | None = None) -> None:
    """``/livez`` (200 while `live`), ``/readyz`` (200 while `ready`; `detail`'s lines
    follow its first), ``/metrics``: to whom the API server allows it when
    `metrics_auth` (asked at each request) gives a checker, else to anyone."""
    import flask

    views = _Views(live, ready, metrics_auth, detail)

    def view(name: str) -> Callable[[], flask.Response]:
        def answer() -> flask.Response:
            request = flask.request
            status, body, content_type, headers = views.answer(
                name, request.headers.get("Authorization"), request.path)
            response = flask.Response(body, status, content_type=_with_charset(content_type))
            response.headers.update(headers)
            return response
        return answer

    for name in PATHS:
        app.add_url_rule(f"/{name}", name, view(name))


class ProbeApp:
    """A WSGI app answering some of ``/livez``, ``/readyz`` and ``/metrics`` (404 for any
    other path, 405 for a method but GET or HEAD), without Flask: the command line's own
    probe and metrics servers of an operator that serves no webhooks."""

    def __init__(self, paths: Sequence[str], *, live: Callable[[], bool],
                 ready: Callable[[], bool],
                 metrics_auth: Callable[[], DelegatedAuth | None] | None = None,
                 detail: Callable[[], str] | None = None) -> None:
        unknown = sorted(set(paths) - set(PATHS))
        if unknown:
            raise ValueError(f"ProbeApp serves {', '.join(PATHS)}, not {', '.join(unknown)}")
        self.paths = tuple(paths)
        self._views = _Views(live, ready, metrics_auth, detail)

    def __call__(self, request: dict[str, Any],  # WSGI's environ: the request's
                 start_response: Callable[..., Any]) -> list[bytes]:
        path = request.get("PATH_INFO") or "/"
        name = path.removeprefix("/")
        headers: dict[str, str] = {}
        body: str | bytes
        if name not in self.paths:
            status, body, content_type = 404, b"Not Found\n", "text/plain"
        elif request.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            status, body, content_type = 405, b"Method Not Allowed\n", "text/plain"
            headers["Allow"] = "GET, HEAD"
        else:
            status, body, content_type, headers = self._views.answer(
                name, request.get("HTTP_AUTHORIZATION"), path)
        data = body if isinstance(body, bytes) else body.encode()
        start_response(f"{status} {HTTPStatus(status).phrase}",
                       [("Content-Type", _with_charset(content_type)),
                        ("Content-Length", str(len(data))), *headers.items()])
        return [] if request.get("REQUEST_METHOD") == "HEAD" else [data]


def _with_charset(content_type: str) -> str:
    return content_type if "charset" in content_type else f"{content_type}; charset=utf-8"


_REFUSED = {401: "Unauthorized", 403: "Forbidden", 503: "Service Unavailable"}


def _refusal(status: int, reason: str) -> Answer:
    """401 and 403 say why (the caller's own name at most; never a token); a 503 points at
    the operator's log, which says what failed."""
    if status == 503:
        reason = "the API server cannot check the token now; see the operator's log"
    else:
        log.debug("metrics: %s %s", status, reason)
    headers = {"WWW-Authenticate": 'Bearer realm="metrics"'} if status == 401 else {}
    return status, f"{_REFUSED.get(status, 'Refused')}: {reason}\n", "text/plain", headers


def metrics_tls(cert_dir: str | None, name: str) -> Callable[[], ssl.SSLContext]:
    """What gives each connection of the secure metrics server its TLS context: the
    ``tls.crt`` and ``tls.key`` of `cert_dir` (a mounted ``kubernetes.io/tls`` Secret),
    reloaded when they change; else a self-signed certificate for `name` made now, whose
    key exists on disk only while it is loaded (a private folder, mode 0600) and never in
    a log. `UsageError` for files that do not load at start."""
    from operator_kit.webhooks.tls import ServingContext, apply_policy

    if cert_dir is not None:
        cert, key = os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key")
        serving = ServingContext(
            cert, key, what="metrics certificate",
            hint=lambda: f"check what is mounted at {cert_dir}",
            unserved="scrapes are refused until they load")
        problem = serving.check()
        if problem is not None:
            raise UsageError(f"--metrics-cert-dir {cert_dir}: {cert} and {key} {problem}; "
                             "mount a kubernetes.io/tls Secret there, or leave it unset "
                             "for a self-signed certificate")

        def from_files() -> ssl.SSLContext:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            return context

        return lambda: serving.context(from_files)
    context = apply_policy(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    ca = _pki.new_ca(f"{name}-metrics-ca", days=365)
    leaf = _pki.issue(ca, name, dns_names=(name, "localhost", socket.gethostname()),
                      ip_addresses=("127.0.0.1",), days=365)
    folder = tempfile.mkdtemp(prefix="operator-kit-metrics-")  # mode 0700
    try:
        cert_file, key_file = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        with open(cert_file, "wb") as out:
            out.write(leaf.cert_pem + ca.cert_pem)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(leaf.key_pem)
        context.load_cert_chain(cert_file, key_file)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return lambda: context


class _QuietHandler(WSGIRequestHandler):
    """No line per request: the kubelet probes every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _TlsHandler(_QuietHandler):
    """Over TLS: the handshake happens in the request's thread (not the accepting one),
    and a connection that sends nothing for 10 s is closed."""

    timeout = 10


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: Callable[[], ssl.SSLContext] | None = None

    def get_request(self) -> tuple[Any, Any]:
        """Over TLS, each connection wrapped with the context `tls` gives now (a renewed
        certificate for new connections); the handshake is left to its thread."""
        sock, address = self.socket.accept()
        if self.tls is None:
            return sock, address
        try:
            return self.tls().wrap_socket(sock, server_side=True,
                                          do_handshake_on_connect=False), address
        except BaseException:
            sock.close()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed TLS handshake (plain HTTP to the secure metrics port) or a dropped
        connection: one debug line, not a traceback on stderr."""
        import sys

        log.debug("%s: connection closed: %s", client_address, sys.exc_info()[1])


class HttpServer:
    """A small threaded HTTP server for a WSGI app (a `ProbeApp`), in its own thread."""

    def __init__(self, what: str, address: Address, flag: str, app: Any,
                 tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        self.what = what
        self.scheme = "https" if tls is not None else "http"
        server_class: type[_Server] = _Server
        if ":" in address.host:
            server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        try:
            self._server = server_class((address.host, address.port),
                                        _TlsHandler if tls is not None else _QuietHandler)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise UsageError(f"{flag} {address}: the address is already in use; stop what "
                                 "listens there, choose another port, or give 0 to turn the "
                                 f"{what} server off") from None
            raise UsageError(f"{flag} {address}: cannot listen there ({err.strerror}); choose "
                             f"another address, or give 0 to turn the {what} server off"
                             ) from None
        self._server.tls = tls
        self._server.set_app(app)
        host, port = self._server.server_address[:2]
        self.address = Address(str(host), int(port))
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"{what}-server", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("serving %s on %s://%s", self.what, self.scheme, self.address)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
