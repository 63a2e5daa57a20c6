"""The names Kubernetes accepts in a kind's declaration, and how it orders version names.

A plural is a DNS label (RFC 1123), a group a DNS subdomain with at least one dot, a
kind an alphanumeric word starting with a letter. Versions sort as the API server sorts
them when it picks a preferred version: GA before beta before alpha, then the higher
major, then the higher minor (``v2`` > ``v1`` > ``v1beta2`` > ``v1beta1`` > ``v1alpha1``),
then names of no such form, alphabetically.
"""

from __future__ import annotations

import re

__all__ = ["DNS_LABEL", "GROUP", "KIND", "version_priority"]

DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
GROUP = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+")
KIND = re.compile(r"[A-Za-z][A-Za-z0-9]*")

_VERSION = re.compile(r"v(\d+)(?:(alpha|beta)(\d+))?")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key of Kubernetes' version priority: smaller sorts first (is preferred)."""
    match = _VERSION.fullmatch(version)
    if not match:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0), "")
