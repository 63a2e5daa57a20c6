"""`plan`: what the shared certificate Secret should hold next (pure; no API server)."""

from __future__ import annotations

import datetime

import pytest

from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.certkeeper import Rotation, parse_duration, plan

S = datetime.timedelta(seconds=1)
ROTATION = Rotation(cert_lifetime=60 * S, ca_lifetime=300 * S, poll_interval=1, settle=2)
NOW = datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture(autouse=True)
def _now() -> None:
    """Each test's certificates are made now: NOW is the test's start, not the import's."""
    global NOW
    NOW = datetime.datetime.now(datetime.timezone.utc)


def fresh() -> WebhookCertificate:
    return WebhookCertificate.generate("op", "ops", lifetime=60 * S, ca_lifetime=300 * S)


def decide(cert: WebhookCertificate | None,
           at: datetime.datetime) -> tuple[WebhookCertificate, str] | None:
    return plan(cert, service="op", namespace="ops", rotation=ROTATION, now=at)


def test_a_young_certificate_is_left_alone() -> None:
    assert decide(fresh(), NOW + 5 * S) is None


def test_the_serving_certificate_is_renewed_at_two_thirds_by_the_same_ca() -> None:
    cert = fresh()
    assert decide(cert, NOW + 35 * S) is None
    renewed, why = decide(cert, NOW + 41 * S) or (None, "")
    assert renewed is not None and "due for renewal" in why
    assert renewed.cert_pem != cert.cert_pem and renewed.signer() == cert.signer()


def test_a_ca_rotation_adds_the_new_ca_first_and_signs_with_it_only_after_settle() -> None:
    # A CA that ends first (9 s; the certificate is capped to it): due at 6 s.
    cert = WebhookCertificate.generate("op", "ops", lifetime=60 * S, ca_lifetime=9 * S)
    rotated, why = decide(cert, NOW + 6.5 * S) or (None, "")
    assert rotated is not None and "added a new CA" in why
    assert rotated.cert_pem == cert.cert_pem and len(rotated.cas) == 2  # nothing new served
    new_ca = rotated.issuer()
    assert new_ca is not None
    assert decide(rotated, NOW + 1 * S) is None  # the new CA is not settled yet
    moved, why = decide(rotated, NOW + 3 * S) or (None, "")
    assert moved is not None and "signed by the previous CA" in why
    assert moved.signer() == new_ca.cert and len(moved.cas) == 2  # the old CA kept: overlap
    pruned, why = decide(moved, NOW + 10 * S) or (None, "")
    assert pruned is not None and pruned.cas == (new_ca.cert,) and "dropped" in why


def test_nothing_usable_gives_a_new_ca_that_still_trusts_the_served_ones() -> None:
    served = fresh()
    made, _ = plan(None, service="op", namespace="ops", rotation=ROTATION, now=NOW,
                     carry=served.cas) or (None, "")
    assert made is not None and served.cas[0] in made.cas and len(made.cas) == 2


def test_lifetimes_that_cannot_rotate_safely_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="at least 3 times"):
        Rotation(cert_lifetime=60 * S, ca_lifetime=100 * S)
    with pytest.raises(ValueError, match="too short for a poll interval"):
        Rotation(cert_lifetime=6 * S, ca_lifetime=18 * S, poll_interval=5)
    assert parse_duration("90d", "X") == datetime.timedelta(days=90)
    with pytest.raises(ValueError, match="X must be a positive duration"):
        parse_duration("soon", "X")
