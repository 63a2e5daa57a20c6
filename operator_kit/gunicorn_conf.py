"""gunicorn settings for serving an operator: ``gunicorn -c python:operator_kit.gunicorn_conf``.

Serves ``operator_kit.webhooks:app`` (the Operator or Webhooks app named by
``OPERATOR_KIT_APP=MODULE:ATTR``) unless another app is given on the command line.
Every setting can still be overridden on the command line or with ``GUNICORN_CMD_ARGS``.

Why these values:

- ``workers = 1``, a gthread worker (`operator_kit.webhooks.gunicorn_worker.ThreadWorker`), 8
  threads: an operator's controllers run inside the worker that loads the app
  (`operator_kit.webhooks.load_app` starts them), so a second worker would run every
  controller twice. Threads give the concurrency a webhook needs; handlers are short and
  mostly wait on the GIL-free parts (TLS, I/O). Scale with replicas (and leader
  election), not workers.
- Each request must be received in full within ``OPERATOR_KIT_READ_TIMEOUT`` seconds
  (default 5) of a thread taking it up, else its connection is closed: without that, as
  many stalled or trickling clients as threads would stop every webhook being answered
  (see `operator_kit.webhooks.gunicorn_worker`).
- ``reuse_port``: two replicas (or an old and a new process during a rollout) may listen
  on one port, as pods behind a Service do.
- TLS is required: the API server only calls webhooks over HTTPS. The files come from
  ``OPERATOR_KIT_TLS_CERT`` / ``OPERATOR_KIT_TLS_KEY`` (what
  `WebhookCertificate.install` sets), else ``OPERATOR_KIT_TLS_DIR``/tls.crt and tls.key
  (a mounted ``kubernetes.io/tls`` Secret). They must exist when gunicorn starts: gunicorn
  checks them before it listens. The ``ssl_context`` hook hands every new connection the
  context of `operator_kit.webhooks.tls.ServingContext`, which reloads the files when they change
  (looked at once a second), so a renewed certificate is served without a restart, and
  restricts TLS to 1.2 with AEAD suites and 1.3 (`operator_kit.webhooks.tls.apply_policy`).
  ``OPERATOR_KIT_INSECURE_HTTP=1`` serves plain HTTP, for local debugging only.
- With an Operator that serves webhooks, ``post_worker_init`` starts its certificate
  keeper in the worker (`Operator.keep_webhook_tls`): it follows the shared Secret,
  renews and rotates, keeps the caBundle, and writes new files into the directory.
- bind ``OPERATOR_KIT_BIND``; by default ``0.0.0.0:8443`` inside a pod (where the Service
  must reach the pod's IP) and ``127.0.0.1:8443`` elsewhere, so a developer's machine does
  not expose a debugging server.
- No control socket (gunicorn 24+ makes one at a fixed path by default, which two servers
  on one machine would fight over; an operator is managed by Kubernetes, not gunicornc).
- ``keepalive = 120``: longer than the API server's idle-connection timeout (90 s), so the
  server never closes a connection the API server is about to reuse (a POST is not
  retried; the request would fail).
- ``timeout = 30``: the API server gives up on a webhook after at most 30 s.
  ``graceful_timeout = 20``: in-flight requests finish before a pod's default 30 s
  termination grace period ends.
- ``post_worker_init`` freezes the start-up heap (``gc.freeze``): full collections of it
  stalled every request for tens of milliseconds, the largest part of the tail latency.
- Access log off (``OPERATOR_KIT_ACCESS_LOG=1`` turns it on): the API server calls
  webhooks on every write; metrics count them.
- Logs: ``OPERATOR_KIT_LOG_LEVEL`` (default info) and ``OPERATOR_KIT_LOG_FORMAT`` (text or
  json), in the master and the worker, gunicorn's own lines included
  (`operator_kit.logs`): the same format as ``python -m my_operator --log-format``.
"""

from __future__ import annotations

import gc
import os
import ssl
from collections.abc import Callable
from typing import Any

from gunicorn.glogging import Logger

from operator_kit import logs
from operator_kit.webhooks.certificates import TLS_CERT_ENV, TLS_KEY_ENV
from operator_kit.webhooks.gunicorn_worker import read_timeout_from_env
from operator_kit.webhooks.loader import APP_ENV
from operator_kit.webhooks.tls import ServingContext

_TRUE = ("1", "true", "yes", "on")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _tls_files() -> tuple[str | None, str | None]:
    cert = os.environ.get(TLS_CERT_ENV)
    key = os.environ.get(TLS_KEY_ENV)
    directory = os.environ.get("OPERATOR_KIT_TLS_DIR")
    if not (cert and key) and directory:
        cert = cert or os.path.join(directory, "tls.crt")
        key = key or os.path.join(directory, "tls.key")
    missing = [p for p in (cert, key) if p and not os.path.isfile(p)]
    if cert and key and not missing:
        return cert, key
    if _flag("OPERATOR_KIT_INSECURE_HTTP"):
        return None, None
    found = (
        f"missing: {', '.join(missing)}"
        if missing
        else "none of OPERATOR_KIT_TLS_CERT/OPERATOR_KIT_TLS_KEY or OPERATOR_KIT_TLS_DIR is set"
    )
    raise RuntimeError(
        f"operator_kit.gunicorn_conf: webhooks need TLS, and no certificate was found ({found}). "
        "Set OPERATOR_KIT_TLS_DIR to a directory holding tls.crt and tls.key (a mounted "
        "kubernetes.io/tls Secret, or one written by WebhookCertificate.install), or "
        "OPERATOR_KIT_TLS_CERT and OPERATOR_KIT_TLS_KEY to the files. For local debugging "
        "only, OPERATOR_KIT_INSECURE_HTTP=1 serves plain HTTP."
    )


def _managed() -> bool:
    return os.environ.get("OPERATOR_KIT_MANAGE_TLS", "1").strip().lower() not in (
        "0", "false", "no", "off")


def _prepare_tls() -> None:
    """Let an Operator with webhooks provide its own certificate before gunicorn listens.

    With ``OPERATOR_KIT_TLS_DIR`` set and ``OPERATOR_KIT_APP`` naming an Operator that
    registered webhooks, `Operator.prepare_webhook_tls` runs here, in the master: the
    shared certificate (a Secret every replica reads; renewed when near expiry) is written
    to that directory and the CA bundles are patched. ``OPERATOR_KIT_MANAGE_TLS=0`` turns
    this off when the files come from elsewhere (a cert-manager Secret mounted there).
    """
    directory = os.environ.get("OPERATOR_KIT_TLS_DIR")
    spec = os.environ.get(APP_ENV)
    if not (directory and spec and _managed()):
        return
    from operator_kit.webhooks.loader import import_target

    prepare = getattr(import_target(spec), "prepare_webhook_tls", None)
    if callable(prepare):  # an Operator: does nothing when it has no webhooks
        prepare(directory)


def _log_settings() -> tuple[str, str]:
    level = os.environ.get("OPERATOR_KIT_LOG_LEVEL", "info").strip().lower() or "info"
    fmt = os.environ.get("OPERATOR_KIT_LOG_FORMAT", "text").strip().lower() or "text"
    if level not in logs.LEVELS:
        raise RuntimeError(f"operator_kit.gunicorn_conf: OPERATOR_KIT_LOG_LEVEL={level!r} is "
                           f"not a log level; use one of {', '.join(logs.LEVELS)}")
    if fmt not in logs.FORMATS:
        raise RuntimeError(f"operator_kit.gunicorn_conf: OPERATOR_KIT_LOG_FORMAT={fmt!r} is "
                           "not a log format; use text or json")
    return level, fmt


class OperatorLogger(Logger):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn's logger, writing in the operator's format (text or json)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(logs.formatter(_log_format))


_in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
_log_level, _log_format = _log_settings()
logs.configure(_log_level, _log_format)  # the master's own lines (TLS preparation)
_prepare_tls()

wsgi_app = "operator_kit.webhooks:app"
bind = [os.environ.get("OPERATOR_KIT_BIND") or ("0.0.0.0:8443" if _in_pod else "127.0.0.1:8443")]
worker_class = "operator_kit.webhooks.gunicorn_worker.ThreadWorker"
read_timeout_from_env()  # a malformed OPERATOR_KIT_READ_TIMEOUT stops the start here
workers = 1
threads = int(os.environ.get("OPERATOR_KIT_THREADS", "8"))
reuse_port = True
control_socket_disable = True  # gunicorn >= 24: no shared ~/.gunicorn/gunicorn.ctl
keepalive = 120
timeout = 30
graceful_timeout = 20
certfile, keyfile = _tls_files()
_serving = ServingContext(certfile, keyfile) if certfile and keyfile else None


def ssl_context(conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]
                ) -> ssl.SSLContext:
    """Every new connection's context: the current certificate, under the TLS policy."""
    if _serving is None:  # certificate files given on the command line instead
        from operator_kit.webhooks.tls import apply_policy

        return apply_policy(default_ssl_context_factory())
    return _serving.context(default_ssl_context_factory)
accesslog = "-" if _flag("OPERATOR_KIT_ACCESS_LOG") else None
errorlog = "-"
loglevel = _log_level
logger_class = OperatorLogger


def post_worker_init(worker: Any) -> None:
    """In the worker, once the app (and the Operator) is loaded: freeze what exists.

    A full garbage collection walks every object in the process — with Flask, the
    kubernetes client and their modules loaded, tens of thousands, taking 40-90 ms on a
    small machine, during which no webhook is answered. ``gc.freeze()`` moves what was
    loaded at start-up (and lives for the whole process) out of the collector's reach, so
    collections only walk what came after.
    """
    _keep_tls()
    gc.collect()
    gc.freeze()


def _keep_tls() -> None:
    """Start the Operator's certificate keeper in this worker (see `_prepare_tls`)."""
    directory = os.environ.get("OPERATOR_KIT_TLS_DIR")
    if not directory:
        return
    from operator_kit.webhooks.loader import loaded_target

    keep = getattr(loaded_target(), "keep_webhook_tls", None)
    if callable(keep):
        keep(directory, manage=_managed())


def post_fork(server: Any, worker: Any) -> None:
    """In the worker: send the operator's own log records (operator_kit.*, the user's) to
    stderr next to gunicorn's, at gunicorn's level, in the same format."""
    logs.configure(_log_level, _log_format)


def worker_exit(server: Any, worker: Any) -> None:
    """In the worker, as it exits: stop the Operator it loaded (controllers, the Lease)."""
    from operator_kit.webhooks.loader import loaded_target

    stop = getattr(loaded_target(), "stop", None)
    if callable(stop):
        stop()
