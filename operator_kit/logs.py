"""Logging: one format for every way an operator runs, and the object on every line.

An operator logs through the standard `logging` module; `configure` installs one handler
on the root logger that writes one line per record to stderr, as ``text`` (for people)
or ``json`` (one object per line, for log collectors), the latter with the key names of
zap, the logger controller-runtime operators write with, so a pipeline that parses their
lines parses ours::

    2026-12-03T07:06:59.123Z ERROR operator_kit.controller: backup: reconcile of ns/a
      failed (attempt 1, retrying in 0.1s): 500 Internal Server Error [controller=backup
      controllerGroup=example.com controllerKind=Backup namespace=ns name=a reconcileID=4f1c...]
    {"ts": "2026-12-03T07:06:59.123Z", "level": "error", "logger": "operator_kit.controller",
     "caller": "runtime/runner.py:456", "msg": "backup: reconcile of ns/a failed (attempt 1,
     retrying in 0.1s)", "controller": "backup", "controllerGroup": "example.com",
     "controllerKind": "Backup", "namespace": "ns", "name": "a", "reconcileID": "4f1c...",
     "error": "500 Internal Server Error", "errorType":
     "kubernetes.client.exceptions.ApiException", "stacktrace": "Traceback ..."}

(each one line). The JSON keys:

- ``ts``: RFC 3339 in UTC with milliseconds, as controller-runtime's zap default
  (``RFC3339TimeEncoder``; zap's own production default, epoch seconds, is not what
  controller-runtime operators write);
- ``level``: zap's lowercase names: ``debug``, ``info``, ``warn``, ``error``, and
  ``fatal`` for CRITICAL; ``logger``, ``caller`` (``<folder>/<file>:<line>``), ``msg``;
- during a reconcile: ``controller``, ``controllerGroup``, ``controllerKind`` (the kind),
  ``namespace``, ``name``, ``reconcileID``, as controller-runtime's reconcile logger;
- a failure: ``error`` (one line saying what went wrong, never inside ``msg``),
  ``errorType`` (the exception's class, ``module.Name``) and ``stacktrace`` (the Python
  traceback, where zap puts its stack). `failure` builds the first two for
  ``extra=``; a record logged with an exception (``log.exception``) gets all three;
- ``extra={...}`` fields of a record, as they are.

`python -m my_operator` (`Operator.main`) and gunicorn (`operator_kit.gunicorn_conf`)
both call `configure`, so both modes log alike; ``--log-level`` / ``--log-format`` or
``OPERATOR_KIT_LOG_LEVEL`` / ``OPERATOR_KIT_LOG_FORMAT`` choose.

*Libraries stay quiet.* The HTTP and Kubernetes client libraries (`LIBRARIES`: urllib3
logs every connection, the kubernetes client every response body) log at DEBUG only
when asked (``configure(libraries=True)``, ``OPERATOR_KIT_LOG_LIBRARIES=1``); otherwise
``--log-level debug`` shows the operator's debug lines and the libraries' INFO and above.

*The object on every line.* A worker runs each reconcile inside `reconciling`, which
sets a context variable (thread-local, so concurrent workers never mix) with the
controller, its kind, the object's namespace and name, and a fresh reconcile id.
`ObjectFilter`, on the handler, copies them onto every record logged in that thread
meanwhile — the framework's, ``ctx.log``'s, a library's — so lines of one reconcile can
be found together. Outside a reconcile the fields are absent (JSON) or the bracket is
left out (text).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["FORMATS", "LEVELS", "LIBRARIES", "JsonFormatter", "ObjectFilter", "TextFormatter",
           "configure", "current", "failure", "parse_level", "reconciling"]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
# The keys of the reconcile's fields, as controller-runtime's reconcile logger names them.
OBJECT_FIELDS = ("controller", "controllerGroup", "controllerKind", "namespace", "name",
                 "reconcileID")
# The loggers of the libraries under an operator, quiet at DEBUG unless asked (`configure`).
LIBRARIES = ("urllib3", "kubernetes", "werkzeug", "charset_normalizer", "websocket",
             "asyncio")
# zap's level names (its production encoder writes them in lowercase).
_ZAP_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn",
               logging.ERROR: "error", logging.CRITICAL: "fatal"}


@dataclass(frozen=True)
class Reconcile:
    """The reconcile a thread is running: what every line it logs is about."""

    controller: str
    namespace: str
    name: str
    reconcile_id: str
    kind: str = ""
    group: str = ""

    def fields(self) -> dict[str, str]:
        """The `OBJECT_FIELDS` with their values; the kind and group only when known."""
        values = (self.controller, self.group, self.kind, self.namespace, self.name,
                  self.reconcile_id)
        return {key: value for key, value in zip(OBJECT_FIELDS, values, strict=True)
                if value or key not in ("controllerGroup", "controllerKind")}


_current: contextvars.ContextVar[Reconcile | None] = contextvars.ContextVar(
    "operator_kit_reconcile", default=None)


def current() -> Reconcile | None:
    """The reconcile this thread is running, or None."""
    return _current.get()


@contextmanager
def reconciling(controller: str, namespace: str, name: str, *, kind: str = "",
                group: str = "") -> Iterator[Reconcile]:
    """Mark what this thread logs until the block ends as about this object (of `kind`
    in API group `group`, the controller's)."""
    reconcile = Reconcile(controller, namespace, name, uuid.uuid4().hex, kind, group)
    token = _current.set(reconcile)
    try:
        yield reconcile
    finally:
        _current.reset(token)


def failure(err: BaseException, text: str | None = None) -> dict[str, str]:
    """The ``extra=`` of a line about a failure: ``error`` (`text`, by default the
    exception's first line) and ``errorType`` (its class as ``module.Name``)::

        log.error("reconcile of %s failed", key, extra=logs.failure(err))
    """
    if text is None:
        lines = str(err).strip().splitlines()
        text = lines[0] if lines else type(err).__name__
    kind = type(err)
    module = "" if kind.__module__ == "builtins" else kind.__module__ + "."
    return {"error": text, "errorType": module + kind.__qualname__}


class ObjectFilter(logging.Filter):
    """Puts the thread's `Reconcile` on each record as ``record.reconcile`` (never drops
    one). One attribute, not four: a record's ``name`` is already its logger's."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "reconcile", None) is None:
            record.reconcile = _current.get()
        return True


def _object_fields(record: logging.LogRecord) -> dict[str, str]:
    reconcile = getattr(record, "reconcile", None)
    if not isinstance(reconcile, Reconcile):
        return {}
    return reconcile.fields()


def _timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 in UTC with milliseconds, as log collectors parse it."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def _caller(record: logging.LogRecord) -> str:
    """``<folder>/<file>:<line>``, as zap's short caller encoder."""
    folder = os.path.basename(os.path.dirname(record.pathname))
    return f"{folder}/{os.path.basename(record.pathname)}:{record.lineno}"


def _error_fields(record: logging.LogRecord) -> dict[str, str]:
    """``error`` and ``errorType`` of the record's exception, when ``extra=`` gave none."""
    if getattr(record, "error", None) is not None or not record.exc_info:
        return {}
    err = record.exc_info[1]
    return failure(err) if err is not None else {}


# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line with zap's keys: ts, level, logger, caller, msg, the
    reconcile's object, extras, and for a failure error, errorType and stacktrace."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": _ZAP_LEVELS.get(record.levelno, record.levelname.lower()),
            "logger": record.name,
            "caller": _caller(record),
            "msg": record.getMessage(),
        }
        entry.update(_object_fields(record))
        for key, value in vars(record).items():
            if key not in _STANDARD and key != "reconcile" and not key.startswith("_"):
                entry[key] = value
        entry.update(_error_fields(record))
        if record.exc_info:
            entry["stacktrace"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["stacktrace"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message>[: <error>]``, then during a reconcile
    ``[controller=.. controllerGroup=.. controllerKind=.. namespace=.. name=..
    reconcileID=..]``; an exception's traceback on the lines below."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        error = getattr(record, "error", None)
        if error is not None:
            line += f": {error}"
        fields = [f"{key}={value}" for key, value in _object_fields(record).items()]
        if fields:
            line += f" [{' '.join(fields)}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def parse_level(value: str) -> int:
    """A level name (any case) as a `logging` level; ValueError naming the choices."""
    name = value.strip().lower()
    if name not in LEVELS:
        raise ValueError(f"unknown log level {value!r}; choose one of {', '.join(LEVELS)}")
    return int(getattr(logging, name.upper()))


def formatter(fmt: str) -> logging.Formatter:
    """The formatter for a format name (``text`` or ``json``); ValueError otherwise."""
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {fmt!r}; choose one of {', '.join(FORMATS)}")


def handler(fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """A stderr handler in format `fmt` that carries the reconcile's object."""
    result = logging.StreamHandler(stream if stream is not None else sys.stderr)
    result.setFormatter(formatter(fmt))
    result.addFilter(ObjectFilter())
    return result


_MARK = "_operator_kit_handler"


def configure(level: str | int = "info", fmt: str = "text", stream: TextIO | None = None,
              *, libraries: bool = False) -> logging.Handler:
    """Log to stderr (or `stream`) at `level` in format `fmt`, replacing an earlier call's
    handler; other handlers on the root logger are left alone. The `LIBRARIES` log at
    INFO and above unless `libraries` (then at `level` too). Returns the handler."""
    numeric = parse_level(level) if isinstance(level, str) else level
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if libraries else
                                         max(numeric, logging.INFO))
    new = handler(fmt, stream)
    setattr(new, _MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
    root.addHandler(new)
    root.setLevel(numeric)
    return new
