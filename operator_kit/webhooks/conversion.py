"""The conversion review: every object of a ConversionReview converted, or the whole review failed.

`convert_all` answers one ``apiextensions.k8s.io/v1`` ConversionReview request with a
user handler (``handler(obj, desired_api_version) -> dict``): objects already at the
desired version pass through, apiVersion is set on every result, and one failed object
fails the whole review — the API server never sees a partial list.

Before any handler runs, the review is checked, and what fails is answered
with ``result.status: Failure`` and a message naming the object, never "internal error":

- desiredAPIVersion must be ``group/version`` of a custom resource; with the kind known
  (``Webhooks.convert(path, kind=Backup)``) it must be one of the kind's versions;
- each object must be a JSON object with an apiVersion, a kind and a metadata object,
  in the desired group (a conversion never changes the group); with the kind known, in
  one of its versions, of that kind, and decoding as that version (`from_dict`), so a
  malformed object is reported with the decoder's message.

Then a handler's `Denied` fails the review with its message; any other exception on a
well-formed object is a bug in the handler: logged with its traceback, answered with a
generic "internal error".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from operator_kit.api.names import DNS_LABEL, GROUP
from operator_kit.api.resources import CustomResource, InvalidResource
from operator_kit.webhooks.admission import (
    BadInput,
    Denied,
    handler_name,
    internal_error,
    json_type,
    wrap_review,
)

__all__ = ["CONVERSION_API_VERSION", "ConvertHandler", "convert_all"]

logger = logging.getLogger("operator_kit.webhooks")

CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"

ConvertHandler = Callable[[dict[str, Any], str], dict[str, Any]]


class _Malformed(Exception):
    """The review cannot be converted as sent: a Failure with `message`, no handler called."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _check_desired(kind: type[CustomResource] | None, desired: str) -> None:
    """Raise `_Malformed` unless the objects may be converted to `desired`."""
    if kind is None:
        if _group_version(desired) is None:
            raise _Malformed(
                f"desiredAPIVersion {desired!r} is not the group/version of a custom "
                "resource (a group with a dot, a version: example.com/v1)")
        return
    if _version_class(kind, desired) is None:
        raise _Malformed(
            f"desiredAPIVersion {desired} is not a version of {kind.kind}: "
            f"it serves {_versions(kind)}")


def _check_object(kind: type[CustomResource] | None, i: int, obj: Any, desired: str) -> None:
    """Raise `_Malformed` unless request.objects[`i`] can be converted to `desired`."""
    where = f"request.objects[{i}]"
    if not isinstance(obj, dict):
        raise _Malformed(f"{where} is not an object, got {json_type(obj)}")
    what = f"{where}, {_describe(obj)},"
    api_version, obj_kind, metadata = obj.get("apiVersion"), obj.get("kind"), obj.get("metadata")
    if not isinstance(api_version, str) or not api_version:
        raise _Malformed(f"{what} has no apiVersion{_got(api_version)}")
    if not isinstance(obj_kind, str) or not obj_kind:
        raise _Malformed(f"{what} has no kind{_got(obj_kind)}")
    if not isinstance(metadata, dict):
        raise _Malformed(f"{what} has no metadata object{_got(metadata)}")
    group_version = _group_version(api_version)
    if group_version is None:
        raise _Malformed(
            f"{what} has apiVersion {api_version!r}, not the group/version of a custom resource")
    desired_group = desired.partition("/")[0]
    if group_version[0] != desired_group:
        raise _Malformed(
            f"cannot convert {what} to {desired}: a conversion never changes the group "
            f"({group_version[0]} to {desired_group})")
    if kind is None:
        return
    if obj_kind != kind.kind:
        raise _Malformed(f"{what} is not a {kind.kind}")
    version = _version_class(kind, api_version)
    if version is None:
        raise _Malformed(f"{what} is not in a version of {kind.kind}: it serves {_versions(kind)}")
    try:
        version.from_dict(obj)
    except InvalidResource as err:
        raise _Malformed(f"{where} is not a valid {version.kind} {api_version}: {err}") from None


def _version_class(kind: type[CustomResource], api_version: str) -> type[CustomResource] | None:
    return next((v for v in kind.versions() if v.api_version() == api_version), None)


def _versions(kind: type[CustomResource]) -> str:
    # Every version the CRD lists is accepted: the API server may ask for any of them (a
    # storage version no longer served too), never for another.
    served = [v.api_version() for v in kind.versions() if v.served]
    others = [v.api_version() for v in kind.versions() if not v.served]
    also = f" (and has {', '.join(others)}, not served)" if others else ""
    return ", ".join(served) + also


def convert_all(
    path: str,
    handler: ConvertHandler,
    request: dict[str, Any],
    kind: type[CustomResource] | None = None,
) -> tuple[dict[str, Any], str]:
    """The ConversionReview answering `request`: every object converted, or a failure.

    `kind` (any version class of it) makes the checks the full ones: desiredAPIVersion
    and each object's apiVersion one of its versions, each object decoding as its own."""
    uid = request["uid"]
    desired = request.get("desiredAPIVersion")
    if not isinstance(desired, str) or not desired:
        raise BadInput("request.desiredAPIVersion is missing")
    objects = request.get("objects")
    if not isinstance(objects, list):
        raise BadInput("request.objects is missing or not a list")
    try:
        _check_desired(kind, desired)
        for i, obj in enumerate(objects):
            _check_object(kind, i, obj, desired)
    except _Malformed as malformed:
        logger.info("webhook %s: conversion failed: %s", path, malformed.message)
        return _conversion_failure(uid, malformed.message), "denied"
    converted: list[dict[str, Any]] = []
    for obj in objects:
        if obj["apiVersion"] == desired:
            converted.append(obj)
            continue
        what = f"{_describe(obj)} to {desired}"
        try:
            out = _converted(handler, obj, desired)
        except Denied as denial:
            return _conversion_failure(uid, f"cannot convert {what}: {denial.message}"), "denied"
        except Exception:
            logger.exception(
                "webhook %s: handler %s raised converting %s", path, handler_name(handler), what
            )
            message = f"converting {what} failed: {internal_error(path)}"
            return _conversion_failure(uid, message), "error"
        converted.append(out)
    response = {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}}
    return wrap_review(CONVERSION_API_VERSION, "ConversionReview", response), "converted"


def _converted(handler: ConvertHandler, obj: dict[str, Any], desired: str) -> dict[str, Any]:
    """The handler's result with apiVersion set; TypeError if it is no object of the kind."""
    out = handler(obj, desired)
    if not isinstance(out, dict):
        raise TypeError(
            f"conversion webhook handler {handler_name(handler)} returned "
            f"{type(out).__name__}; it must return a dict"
        )
    out = dict(out)
    out["apiVersion"] = desired
    out.setdefault("kind", obj["kind"])
    out.setdefault("metadata", obj["metadata"])
    if out["kind"] != obj["kind"] or not isinstance(out["metadata"], dict):
        raise TypeError(
            f"conversion webhook handler {handler_name(handler)} returned kind "
            f"{out['kind']!r} and metadata {json_type(out['metadata'])}; it must keep the "
            f"kind {obj['kind']!r} and return metadata as an object"
        )
    return out


def _group_version(api_version: str) -> tuple[str, str] | None:
    """(group, version) of a custom resource's apiVersion, or None if it is not one."""
    group, _, version = api_version.partition("/")
    if GROUP.fullmatch(group) and DNS_LABEL.fullmatch(version):
        return group, version
    return None


def _got(value: Any) -> str:
    return "" if value is None or value == "" else f" (got {json_type(value)})"


def _conversion_failure(uid: str, message: str) -> dict[str, Any]:
    response = {"uid": uid, "result": {"status": "Failure", "message": message}}
    return wrap_review(CONVERSION_API_VERSION, "ConversionReview", response)


def _describe(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name") or "<unnamed>"
    namespace = metadata.get("namespace")
    where = f"{namespace}/{name}" if namespace else str(name)
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    version = f" ({api_version})" if isinstance(api_version, str) and api_version else ""
    return f"{kind if isinstance(kind, str) and kind else 'object'} {where}{version}"
