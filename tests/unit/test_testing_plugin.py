"""The pytest plugin names each test's namespace after the test, as a valid DNS label."""

from __future__ import annotations

import re

import pytest

from operator_kit.testing.plugin import namespace_prefix

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize(("test_name", "prefix"), [
    ("test_backup_is_reconciled", "backup-is-reconciled"),
    ("test_probe[5]", "probe-5"),
    ("test_versions[v1-Backup_A]", "versions-v1-backup-a"),
    ("test_" + "x" * 60, "x" * 40),
    ("test_[]", "test"),
])
def test_a_namespace_prefix_is_the_test_name_as_a_dns_label(test_name: str, prefix: str) -> None:
    assert namespace_prefix(test_name) == prefix
    # The fixture appends "-" and 6 hex digits: still a label of at most 63 characters.
    assert DNS_LABEL.fullmatch(prefix + "-a1b2c3")
    assert len(prefix) + 7 <= 63
