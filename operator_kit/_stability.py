"""Stability markers (docs/stability.md): the warning an experimental API gives on its first
use, and the `DeprecationWarning` a deprecated one gives on each.

*Experimental* names (fleets, sharding, tracing) work and are tested like the rest, but may
change in a minor release while their design settles: the first use in a process warns once
with `ExperimentalWarning`, a `FutureWarning` (shown by default, unlike
`DeprecationWarning`), so that a team learns it before it depends on one. Silence it with
``warnings.filterwarnings("ignore", category=operator_kit.ExperimentalWarning)``.

A *deprecated* name keeps working for at least one deprecation cycle -- until the next
minor release while 0.x, the next major from 1.0 on -- warning on each use with the release
that will remove it and what to use instead; CHANGELOG.md lists it under *Deprecated*, then
*Removed*.

A leaf: it imports nothing of operator_kit, so any layer may mark its names.
"""

from __future__ import annotations

import threading
import warnings

__all__ = ["ExperimentalWarning", "deprecated", "experimental"]


class ExperimentalWarning(FutureWarning):
    """An experimental operator_kit API was used: it may change in a minor release
    (docs/stability.md). Given once per API and process."""


_warned: set[str] = set()
_lock = threading.Lock()


def experimental(api: str, *, stacklevel: int = 2) -> None:
    """Warn, once per process, that `api` (its public name, e.g. ``"operator_kit.Sharding"``)
    is experimental. `stacklevel` as in `warnings.warn`, counted from the caller."""
    if api in _warned:  # the common case, without the lock
        return
    with _lock:
        if api in _warned:
            return
        _warned.add(api)
    warnings.warn(
        f"{api} is experimental: it may change in a minor release of operator_kit "
        "(see docs/stability.md); silence this with warnings.filterwarnings('ignore', "
        "category=operator_kit.ExperimentalWarning)",
        ExperimentalWarning, stacklevel=stacklevel + 1)


def deprecated(api: str, *, since: str, removed_in: str, instead: str,
               stacklevel: int = 2) -> None:
    """Warn that `api` is deprecated since release `since` and goes in `removed_in`, which
    the policy bounds: at least one minor release later while 0.x (one deprecation cycle),
    a major release from 1.0 on. `instead` says what to use. A `removed_in` sooner than
    that is a ValueError on the first use, so the deprecated name's own test catches it."""
    earliest = _earliest_removal(since)
    if _minor(removed_in) < _minor(earliest):
        raise ValueError(f"{api}: deprecated in {since}, it may be removed in {earliest} "
                         f"at the earliest, not {removed_in} (docs/stability.md)")
    warnings.warn(
        f"{api} is deprecated since operator_kit {since} and will be removed in "
        f"{removed_in}: use {instead}", DeprecationWarning, stacklevel=stacklevel + 1)


def _minor(version: str) -> tuple[int, int]:
    """(major, minor) of a ``MAJOR.MINOR[.PATCH]`` release; ValueError naming the version
    otherwise."""
    parts = version.split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise ValueError(f"{version!r} is not a release version (MAJOR.MINOR.PATCH)")
    return int(parts[0]), int(parts[1])


def _earliest_removal(since: str) -> str:
    """The first release that may remove what `since` deprecated: the next minor in 0.x,
    the next major from 1.0 on."""
    major, minor = _minor(since)
    return f"0.{minor + 1}.0" if major == 0 else f"{major + 1}.0.0"
