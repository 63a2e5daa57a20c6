"""gunicorn settings for serving an operator: ``gunicorn -c python:operator_kit.gunicorn_conf``.

Serves ``operator_kit.webhooks:app`` (the Operator or Webhooks app named by
``OPERATOR_KIT_APP=MODULE:ATTR``) unless another app is given on the command line.
Every setting can still be overridden on the command line or with ``GUNICORN_CMD_ARGS``.

Why these values:

- ``workers = 1``, a gthread worker (`operator_kit.webhooks.gunicorn_worker.ThreadWorker`), 8
  threads (``OPERATOR_KIT_THREADS``): an operator's controllers run inside the worker
  that loads the app (`operator_kit.webhooks.load_app` starts them), so a second worker
  would run every controller twice. Threads give the concurrency a webhook needs;
  handlers are short and mostly wait on the GIL-free parts (TLS, I/O). Scale with
  replicas (and leader election), not workers.
- Each request must be received in full within ``OPERATOR_KIT_READ_TIMEOUT`` seconds
  (default 5) of a thread taking it up, else its connection is closed: without that, as
  many stalled or trickling clients as threads would stop every webhook being answered
  (see `operator_kit.webhooks.gunicorn_worker`).
- Each answer must be sent in full within ``OPERATOR_KIT_WRITE_TIMEOUT`` seconds (default
  10) of the app returning it, else its connection is shut down: a client that never
  reads its answers would otherwise hold a thread each.
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
  A pair that cannot be served (a key that is not the certificate's, unreadable,
  unparsable, expired) is refused here, in the master, with one ERROR line naming the
  files, the problem and the Secret to check; the replica is then not ready (``/readyz``
  503; the probes get a placeholder certificate) until a pair that loads is mounted, which
  is served without a restart. A bad renewal keeps the last good pair served.
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
- At most two malloc arenas (`operator_kit.webhooks.limits.limit_malloc_arenas`, set here
  in the master, inherited by the worker): with one arena per thread, each thread kept the
  memory of the last large body it answered, and eight 8 MiB conversions in a row took
  the worker past the memory its Deployment's limit is derived from.
- ``post_worker_init`` freezes the start-up heap (``gc.freeze``): full collections of it
  stalled every request for tens of milliseconds, the largest part of the tail latency.
- ``OPERATOR_KIT_METRICS_SECURE=1``: ``/metrics`` answers only bearer tokens the API
  server allows to ``get /metrics`` (`operator_kit.probes`); never with
  ``OPERATOR_KIT_INSECURE_HTTP``.
- Access log off (``OPERATOR_KIT_ACCESS_LOG=1`` turns it on): the API server calls
  webhooks on every write; metrics count them.
- Logs: ``OPERATOR_KIT_LOG_LEVEL`` (default info), ``OPERATOR_KIT_LOG_FORMAT`` (text or
  json) and ``OPERATOR_KIT_LOG_LIBRARIES`` (the client libraries' DEBUG lines), in the
  master and the worker, gunicorn's own lines included (`operator_kit.logs`): the same
  format as ``python -m my_operator --log-format``.
- Every variable the master or the worker reads is checked here first
  (`operator_kit.settings`): a bad one ends the master with one line on stderr naming
  it, and exit code 2, before anything starts (gunicorn would print a traceback for
  any other error in this file). docs/reference/configuration.md lists them.
"""

from __future__ import annotations

import gc
import os
import ssl
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gunicorn.glogging import Logger

from operator_kit import logs
from operator_kit.client.kubeconfig_risks import ALLOW_ENV, check_categories
from operator_kit.settings import (
    LOG_LIBRARIES_ENV,
    UsageError,
    check_bind,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_names,
    env_text,
)
from operator_kit.webhooks.certificates import TLS_CERT_ENV, TLS_KEY_ENV
from operator_kit.webhooks.gunicorn_worker import DEFAULT_READ_TIMEOUT, DEFAULT_WRITE_TIMEOUT
from operator_kit.webhooks.limits import DEFAULT_THREADS, limit_malloc_arenas
from operator_kit.webhooks.loader import APP_ENV
from operator_kit.webhooks.tls import ServingContext, set_current


def _flag(name: str) -> bool:
    return env_bool(name, False)


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
    raise UsageError(
        f"webhooks need TLS, and no certificate was found ({found}). "
        "Set OPERATOR_KIT_TLS_DIR to a directory holding tls.crt and tls.key (a mounted "
        "kubernetes.io/tls Secret, or one written by WebhookCertificate.install), or "
        "OPERATOR_KIT_TLS_CERT and OPERATOR_KIT_TLS_KEY to the files. For local debugging "
        "only, OPERATOR_KIT_INSECURE_HTTP=1 serves plain HTTP."
    )


def _managed() -> bool:
    return env_bool("OPERATOR_KIT_MANAGE_TLS", True)


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
    from kubernetes.config.config_exception import ConfigException

    from operator_kit.client import ConfigurationError
    from operator_kit.webhooks.loader import AppNotFound, import_target

    try:
        prepare = getattr(import_target(spec), "prepare_webhook_tls", None)
        if callable(prepare):  # an Operator: does nothing when it has no webhooks
            prepare(directory)
    except (AppNotFound, ConfigurationError) as err:  # no app, or a kubeconfig refused
        _fail(UsageError(str(err)))
    except ConfigException as err:  # the official client's own refusals
        _fail(UsageError(f"kubeconfig: {err}"))


def _tls_hint() -> str:
    """What to check when the certificate files do not load: the Secret they come from.

    Asked only then. In the master, before the app is loaded, that means importing it
    (`_prepare_tls` does anyway when it manages the certificate), for the name of an
    `ExternalCertificate`'s Secret or of the Operator's own."""
    from operator_kit.webhooks.loader import import_target, loaded_target

    target, spec = loaded_target(), os.environ.get(APP_ENV)
    if target is None and spec:
        try:
            target = import_target(spec)
        except Exception:  # noqa: BLE001 - only for the message; the worker says why
            target = None
    secret = getattr(getattr(target, "webhook_certificate", None), "secret", None)
    if secret is None and _managed():
        secret = getattr(target, "webhook_secret", None)
    return f"check the Secret {secret}" if isinstance(secret, str) else "replace them"


def _log_settings() -> tuple[str, str, bool]:
    return (env_choice("OPERATOR_KIT_LOG_LEVEL", "info", logs.LEVELS, what="a log level"),
            env_choice("OPERATOR_KIT_LOG_FORMAT", "text", logs.FORMATS, what="a log format"),
            env_bool(LOG_LIBRARIES_ENV, False))


def _bind() -> str:
    default = "0.0.0.0:8443" if _in_pod else "127.0.0.1:8443"
    given = env_text("OPERATOR_KIT_BIND")
    return default if given is None else check_bind(given, "OPERATOR_KIT_BIND")


def _threads() -> int:
    return env_int("OPERATOR_KIT_THREADS", DEFAULT_THREADS, minimum=1,
                   what="the number of threads per worker")


_CERT_ENV = ("OPERATOR_KIT_CERT_LIFETIME", "OPERATOR_KIT_CA_LIFETIME",
             "OPERATOR_KIT_CERT_POLL_INTERVAL", "OPERATOR_KIT_CERT_SETTLE")


def _check_environment() -> None:
    """Check every variable the master and the worker read, before either starts: a bad
    one ends the master with one line on stderr and exit code 2 (`_fail`)."""
    try:
        _log_settings()
        _bind()
        _threads()
        # The worker reads it again (`ThreadWorker`), by the same rule.
        env_float("OPERATOR_KIT_READ_TIMEOUT", DEFAULT_READ_TIMEOUT, above=0,
                  what="the seconds a request may take to arrive in full")
        env_float("OPERATOR_KIT_WRITE_TIMEOUT", DEFAULT_WRITE_TIMEOUT, above=0,
                  what="the seconds an answer may take to be sent in full")
        # OPERATOR_KIT_LEADER_ELECT: the worker's Operator reads it (`apply_environment`)
        for name in ("OPERATOR_KIT_ACCESS_LOG", "OPERATOR_KIT_INSECURE_HTTP",
                     "OPERATOR_KIT_LEADER_ELECT", "OPERATOR_KIT_METRICS_SECURE"):
            _flag(name)
        if _flag("OPERATOR_KIT_METRICS_SECURE") and _flag("OPERATOR_KIT_INSECURE_HTTP"):
            raise UsageError("OPERATOR_KIT_METRICS_SECURE=1 with OPERATOR_KIT_INSECURE_HTTP=1 "
                             "would take bearer tokens over plain HTTP; unset one of them")
        _managed()
        spec = env_text(APP_ENV)
        module, sep, attr = (spec or "").partition(":")
        if spec is not None and not (module and sep and attr):  # as `import_target` reads it
            raise UsageError(f"{APP_ENV}={os.environ[APP_ENV]!r}: not MODULE:ATTR; name the "
                             "Operator (or Webhooks app) to serve, for example "
                             f"{APP_ENV}=backup_operator:operator")
        env_names()  # the namespaces and renamed objects the worker's Operator takes
        insecure = env_text(ALLOW_ENV)  # `apply_environment` gives it to the Operator
        if insecure is not None:
            try:
                check_categories(insecure.split(","), ALLOW_ENV)
            except ValueError as err:
                raise UsageError(str(err)) from None
        given = [name for name in _CERT_ENV if env_text(name)]
        if given:  # else the defaults, always valid (and certkeeper is not imported)
            from operator_kit.webhooks.certkeeper import Rotation

            try:
                Rotation.from_env()
            except ValueError as err:  # a bad duration, or lifetimes that do not fit
                named = str(err).startswith("OPERATOR_KIT_")
                raise UsageError(str(err) if named else f"{', '.join(given)}: {err}") from None
    except UsageError as err:
        _fail(err)


def _fail(err: UsageError) -> NoReturn:
    """One line on stderr and exit code 2. Any other exception in this file, gunicorn
    reports with a traceback (``-c FILE``) or after a blank line (``-c python:...``)."""
    print(f"operator_kit.gunicorn_conf: error: {' '.join(str(err).split())}",
          file=sys.stderr, flush=True)
    raise SystemExit(2)


class OperatorLogger(Logger):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn's logger, writing in the operator's format (text or json)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(logs.formatter(_log_format))


_in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
_check_environment()  # a bad variable ends the start here, in one line
_log_level, _log_format, _log_libraries = _log_settings()
# the master's own lines (TLS preparation)
logs.configure(_log_level, _log_format, libraries=_log_libraries)
_prepare_tls()
limit_malloc_arenas()  # before the worker is forked: it inherits the setting

wsgi_app = "operator_kit.webhooks:app"
bind = [_bind()]
worker_class = "operator_kit.webhooks.gunicorn_worker.ThreadWorker"
workers = 1
threads = _threads()
reuse_port = True
control_socket_disable = True  # gunicorn >= 24: no shared ~/.gunicorn/gunicorn.ctl
keepalive = 120
timeout = 30
graceful_timeout = 20
try:
    certfile, keyfile = _tls_files()
except UsageError as _missing:
    _fail(_missing)  # one line, exit 2: no traceback for a Deployment without its Secret
_serving = ServingContext(certfile, keyfile, hint=_tls_hint) if certfile and keyfile else None
if _serving is not None:
    _serving.check()  # a pair that cannot be served is refused here: one ERROR line
set_current(_serving)  # Operator.ready follows it (in the worker, which inherits it)


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
    logs.configure(_log_level, _log_format, libraries=_log_libraries)


def worker_exit(server: Any, worker: Any) -> None:
    """In the worker, as it exits: stop the Operator it loaded (controllers, the Lease)."""
    from operator_kit.webhooks.loader import loaded_target

    stop = getattr(loaded_target(), "stop", None)
    if callable(stop):
        stop()
