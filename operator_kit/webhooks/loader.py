"""The gunicorn entry point: which app a worker process serves.

``gunicorn operator_kit.webhooks:app`` serves the object named by ``OPERATOR_KIT_APP``
(``MODULE:ATTR``): the package attribute ``app`` is resolved lazily (`load_app`), so
importing `operator_kit.webhooks` never imports the user's code. An Operator's
``serve_in_background()`` is called once, so its controllers start in the process that
serves its webhooks.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from typing import Any

import flask

__all__ = ["APP_ENV", "AppNotFound", "import_target", "load_app", "loaded_target"]

APP_ENV = "OPERATOR_KIT_APP"


class AppNotFound(RuntimeError):
    """``OPERATOR_KIT_APP`` (or the name given) does not name an importable app."""


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
        raise AppNotFound(
            f"{APP_ENV} is not set: set it to MODULE:ATTR naming the Operator (or Webhooks "
            f"app) to serve, for example {example}"
        )
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppNotFound(f"{named_by}={spec!r} must be MODULE:ATTR, for example {example}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise AppNotFound(
            f"{named_by}={spec}: cannot import {module_name} ({err}); install it or put its "
            "directory on PYTHONPATH (gunicorn --pythonpath DIR)"
        ) from err
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AppNotFound(
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
    raise AppNotFound(
        f"{APP_ENV}={spec} names a {type(target).__name__}, which is neither an Operator "
        "nor a Webhooks app; point it at one of those"
    )
