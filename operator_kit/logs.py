"""Logging: one format for every way an operator runs, and the object on every line.

An operator logs through the standard `logging` module; `configure` installs one handler
on the root logger that writes one line per record to stderr, as ``text`` (for people)
or ``json`` (one object per line, for log collectors)::

    2026-12-03T07:06:59.123Z INFO operator_kit.controller: backup: reconcile of ns/a failed
      [controller=backup namespace=ns name=a reconcile_id=4f1c...]
    {"time": "2026-12-03T07:06:59.123Z", "level": "ERROR", "logger": "operator_kit.controller",
     "message": "...", "controller": "backup", "namespace": "ns", "name": "a",
     "reconcile_id": "4f1c..."}

(each one line). `python -m my_operator` (`Operator.main`) and gunicorn
(`operator_kit.gunicorn_conf`) both call `configure`, so both modes log alike;
``--log-level`` / ``--log-format`` or ``OPERATOR_KIT_LOG_LEVEL`` /
``OPERATOR_KIT_LOG_FORMAT`` choose.

*The object on every line.* A worker runs each reconcile inside `reconciling`, which
sets a context variable (thread-local, so concurrent workers never mix) with the
controller, the object's namespace and name, and a fresh reconcile id. `ObjectFilter`,
on the handler, copies them onto every record logged in that thread meanwhile — the
framework's, ``ctx.log``'s, a library's — so lines of one reconcile can be found
together. Outside a reconcile the fields are absent (JSON) or the bracket is left out
(text). ``extra={...}`` fields of a record are kept in JSON.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "ObjectFilter", "TextFormatter", "configure",
           "current", "parse_level", "reconciling"]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
OBJECT_FIELDS = ("controller", "namespace", "name", "reconcile_id")


@dataclass(frozen=True)
class Reconcile:
    """The reconcile a thread is running: what every line it logs is about."""

    controller: str
    namespace: str
    name: str
    reconcile_id: str


_current: contextvars.ContextVar[Reconcile | None] = contextvars.ContextVar(
    "operator_kit_reconcile", default=None)


def current() -> Reconcile | None:
    """The reconcile this thread is running, or None."""
    return _current.get()


@contextmanager
def reconciling(controller: str, namespace: str, name: str) -> Iterator[Reconcile]:
    """Mark what this thread logs until the block ends as about this object."""
    reconcile = Reconcile(controller, namespace, name, uuid.uuid4().hex)
    token = _current.set(reconcile)
    try:
        yield reconcile
    finally:
        _current.reset(token)


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
    return {field: getattr(reconcile, field) for field in OBJECT_FIELDS}


def _timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 in UTC with milliseconds, as log collectors parse it."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the object, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_object_fields(record))
        for key, value in vars(record).items():
            if key not in _STANDARD and key != "reconcile" and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message>``, then during a reconcile
    ``[controller=.. namespace=.. name=.. reconcile_id=..]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
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


def configure(level: str | int = "info", fmt: str = "text",
              stream: TextIO | None = None) -> logging.Handler:
    """Log to stderr (or `stream`) at `level` in format `fmt`, replacing an earlier call's
    handler; other handlers on the root logger are left alone. Returns the handler."""
    numeric = parse_level(level) if isinstance(level, str) else level
    new = handler(fmt, stream)
    setattr(new, _MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
    root.addHandler(new)
    root.setLevel(numeric)
    return new
