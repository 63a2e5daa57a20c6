"""How an informer tells that its list or watch failed (`operator_kit.runtime.watching`).

A 403 or 404 names the verb and resource (missing RBAC, a missing CRD), other API errors
their status; each line says how long the retry waits and that changes to the kind are
missed meanwhile.

Except at the start, while a CRD installed a moment ago becomes established: until an
informer has listed once, a 404 (the new resource not served yet) or a 429 (its storage
still initialising: ``Retry-After``) is what every ``make install && make run`` meets,
not an outage. Those are logged at INFO during the informer's first
`ESTABLISHING_GRACE` seconds; only if they go on longer do they become the ERROR or
WARNING lines above (`quiet`). The bound is from the informer's start, not from the
failure's: a watch accepted and then ended by a 429 cannot restart it.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Resource

log = logging.getLogger("operator_kit.watching")

__all__ = ["ESTABLISHING_GRACE", "QUIET_STATUSES", "log_api_error", "quiet", "retry_after"]

ESTABLISHING_GRACE = 30.0
"""Seconds from an informer's start during which, until it syncs, its 404s and 429s are
logged at INFO only."""

QUIET_STATUSES = (404, 429)
"""What a just-created CRD answers until it is established and its storage is ready."""


def quiet(status: int | None, *, synced: bool, running_for: float,
          grace: float = ESTABLISHING_GRACE) -> bool:
    """Whether a list/watch failure with `status` is part of a CRD becoming established:
    a 404 or 429 before the informer first synced, less than `grace` seconds after it
    started (`running_for`)."""
    return status in QUIET_STATUSES and not synced and running_for < grace


def log_api_error(err: ApiException, *, resource: Resource, namespace: str | None,
                  delay: float, missed: str, quiet_for: float | None = None) -> None:
    """One line for a failed list or watch of `resource`; at INFO, saying it is still
    becoming established, when `quiet_for` (what is left of the grace, in seconds) is
    given."""
    where = f"namespace {namespace}" if namespace else "all namespaces"
    if quiet_for is not None:
        log.info("list/watch %s in %s: %s %s while its CRD becomes established; retrying "
                 "in %.1fs (a warning if it still fails in %.0fs)", resource, where,
                 err.status, err.reason, delay, quiet_for)
    elif err.status == 403:
        log.error(
            "forbidden: cannot list/watch %s in %s (403). Grant the operator's "
            "ServiceAccount the verbs list and watch on %s (see Operator.rules()). "
            "Retrying in %.1fs; %s.", resource, where, resource, delay, missed)
    elif err.status == 404:
        log.error(
            "not found: the API server does not serve %s (404): is its "
            "CustomResourceDefinition installed? Retrying in %.1fs; %s.", resource,
            delay, missed)
    else:
        log.warning("list/watch %s in %s failed: %s %s; retrying in %.1fs; %s",
                    resource, where, err.status, err.reason, delay, missed)


def retry_after(err: ApiException) -> float | None:
    """A 429's ``Retry-After`` in seconds (at least 0.1), None without one."""
    if err.status != 429 or not err.headers:
        return None
    try:
        return max(0.1, float(err.headers.get("Retry-After", "")))
    except ValueError:
        return None
