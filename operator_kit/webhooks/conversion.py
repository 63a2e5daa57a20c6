"""The conversion review: every object of a ConversionReview converted, or the whole review failed.

`convert_all` answers one ``apiextensions.k8s.io/v1`` ConversionReview request with a
user handler (``handler(obj, desired_api_version) -> dict``): objects already at the
desired version pass through, apiVersion is set on every result, and one failed object
(`Denied`, or a bug in the handler, logged with its traceback) fails the whole review —
the API server never sees a partial list.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from operator_kit.webhooks.admission import (
    BadInput,
    Denied,
    handler_name,
    internal_error,
    wrap_review,
)

__all__ = ["CONVERSION_API_VERSION", "ConvertHandler", "convert_all"]

logger = logging.getLogger("operator_kit.webhooks")

CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"

ConvertHandler = Callable[[dict[str, Any], str], dict[str, Any]]


def convert_all(
    path: str, handler: ConvertHandler, request: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The ConversionReview answering `request`: every object converted, or a failure."""
    uid = request["uid"]
    desired = request.get("desiredAPIVersion")
    if not isinstance(desired, str) or not desired:
        raise BadInput("request.desiredAPIVersion is missing")
    objects = request.get("objects")
    if not isinstance(objects, list):
        raise BadInput("request.objects is missing or not a list")
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise BadInput(f"request.objects[{i}] is not an object")
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
                    f"conversion webhook handler {handler_name(handler)} returned "
                    f"{type(out).__name__}; it must return a dict"
                )
        except Denied as denial:
            return _conversion_failure(uid, f"cannot convert {what}: {denial.message}"), "denied"
        except Exception:
            logger.exception(
                "webhook %s: handler %s raised converting %s", path, handler_name(handler), what
            )
            message = f"converting {what} failed: {internal_error(path)}"
            return _conversion_failure(uid, message), "error"
        out = dict(out)
        out["apiVersion"] = desired
        out.setdefault("kind", obj.get("kind"))
        out.setdefault("metadata", obj.get("metadata"))
        converted.append(out)
    response = {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}}
    return wrap_review(CONVERSION_API_VERSION, "ConversionReview", response), "converted"


def _conversion_failure(uid: str, message: str) -> dict[str, Any]:
    response = {"uid": uid, "result": {"status": "Failure", "message": message}}
    return wrap_review(CONVERSION_API_VERSION, "ConversionReview", response)


def _describe(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name") or "<unnamed>"
    namespace = metadata.get("namespace")
    where = f"{namespace}/{name}" if namespace else str(name)
    return f"{obj.get('kind', 'object')} {where} ({obj.get('apiVersion')})"
