"""The probes and the metrics: ``/livez``, ``/readyz`` and ``/metrics``, and their servers.

`add_probe_views` puts the three views on a Flask app (the operator's `Webhooks` app, so
gunicorn serves them on the webhook port); `HttpServer` serves some of them on a port of
their own in a thread, as controller-runtime's managers do (``--health-probe-bind-address``,
``--metrics-bind-address``; `operator_kit.cli`).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import flask
from prometheus_client import CONTENT_TYPE_LATEST

from operator_kit import metrics
from operator_kit.settings import Address, UsageError

__all__ = ["HttpServer", "add_probe_views"]

log = logging.getLogger("operator_kit.cli")


def add_probe_views(app: flask.Flask, *, live: Callable[[], bool],
                    ready: Callable[[], bool]) -> None:
    """``/livez`` (200 while `live`), ``/readyz`` (200 while `ready`), ``/metrics``."""

    def livez() -> flask.Response:
        ok = live()
        return flask.Response("ok\n" if ok else "stopping\n", 200 if ok else 503,
                              mimetype="text/plain")

    def readyz() -> flask.Response:
        ok = ready()
        return flask.Response("ok\n" if ok else "not ready\n", 200 if ok else 503,
                              mimetype="text/plain")

    def metrics_view() -> flask.Response:
        return flask.Response(metrics.exposition(), mimetype=CONTENT_TYPE_LATEST)

    app.add_url_rule("/livez", "livez", livez)
    app.add_url_rule("/readyz", "readyz", readyz)
    app.add_url_rule("/metrics", "metrics", metrics_view)


class _QuietHandler(WSGIRequestHandler):
    """No line per request: the kubelet probes every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class HttpServer:
    """A small threaded HTTP server for the given paths of a Flask app, in its own thread."""

    def __init__(self, what: str, address: Address, flag: str, app: Any) -> None:
        self.what = what
        server_class: type[_Server] = _Server
        if ":" in address.host:
            server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        try:
            self._server = server_class((address.host, address.port), _QuietHandler)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise UsageError(f"{flag} {address}: the address is already in use; stop what "
                                 "listens there, choose another port, or give 0 to turn the "
                                 f"{what} server off") from None
            raise UsageError(f"{flag} {address}: cannot listen there ({err.strerror}); choose "
                             f"another address, or give 0 to turn the {what} server off"
                             ) from None
        self._server.set_app(app)
        host, port = self._server.server_address[:2]
        self.address = Address(str(host), int(port))
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"{what}-server", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("serving %s on http://%s", self.what, self.address)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
