"""How an informer's failed list or watch is logged: a 404 or 429 while a just-created
CRD becomes established (before the first sync, in the informer's first 30 s) at INFO; anything
else, or the same for longer, as the ERROR or WARNING that says changes are missed.
(Against the real API server: tests/cluster/test_quiet_start.py.)"""

from __future__ import annotations

import logging

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Resource
from operator_kit.runtime.watch_failures import (
    ESTABLISHING_GRACE,
    log_api_error,
    quiet,
    retry_after,
)

WIDGETS = Resource("example.com", "v1", "widgets", "Widget", namespaced=True)


@pytest.mark.parametrize("status", [404, 429])
def test_a_404_or_429_before_the_first_sync_is_quiet_for_the_grace(status: int) -> None:
    assert quiet(status, synced=False, running_for=0.0)
    assert quiet(status, synced=False, running_for=ESTABLISHING_GRACE - 0.1)


@pytest.mark.parametrize("status", [404, 429])
def test_it_is_loud_once_the_grace_is_over(status: int) -> None:
    assert not quiet(status, synced=False, running_for=ESTABLISHING_GRACE)


@pytest.mark.parametrize("status", [404, 429])
def test_after_the_first_sync_it_is_loud_at_once(status: int) -> None:
    assert not quiet(status, synced=True, running_for=0.0)


@pytest.mark.parametrize("status", [403, 500, 503, None])
def test_other_failures_are_never_quiet(status: int | None) -> None:
    assert not quiet(status, synced=False, running_for=0.0)


def test_the_quiet_line_is_info_and_says_when_it_would_warn(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="operator_kit.watching")
    log_api_error(ApiException(status=429, reason="Too Many Requests"), resource=WIDGETS,
                  namespace=None, delay=1.0, missed="changes are missed", quiet_for=29.0)
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        f"list/watch {WIDGETS} in all namespaces: 429 Too Many Requests while its CRD "
        "becomes established; retrying in 1.0s (a warning if it still fails in 29s)")


@pytest.mark.parametrize(("status", "level", "says"), [
    (404, logging.ERROR, "is its CustomResourceDefinition installed?"),
    (403, logging.ERROR, "Grant the operator's ServiceAccount the verbs list and watch"),
    (429, logging.WARNING, "failed: 429"),
])
def test_a_loud_line_says_what_to_do_and_that_changes_are_missed(
        caplog: pytest.LogCaptureFixture, status: int, level: int, says: str) -> None:
    caplog.set_level(logging.DEBUG, logger="operator_kit.watching")
    log_api_error(ApiException(status=status, reason="Reason"), resource=WIDGETS,
                  namespace="apps", delay=2.0, missed="changes to widgets are not seen")
    (record,) = caplog.records
    assert record.levelno == level
    assert says in record.getMessage()
    assert "changes to widgets are not seen" in record.getMessage()


def test_retry_after_is_a_429_s_header_in_seconds() -> None:
    err = ApiException(status=429)
    err.headers = {"Retry-After": "2"}
    assert retry_after(err) == 2.0
    err.headers = {"Retry-After": "soon"}
    assert retry_after(err) is None
    assert retry_after(ApiException(status=500)) is None
