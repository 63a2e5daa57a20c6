"""Where operator_kit comes from (`operator_kit_source`), for ``make wheels`` of a project,
and which of its releases a project depends on (`compatible_requirement`)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["compatible_requirement", "operator_kit_source", "source_of"]


def compatible_requirement(version: str | None = None) -> str:
    """The requirement of a generated project on operator_kit: from `version` (default:
    this operator_kit's, ``operator_kit._version``) up to the next release SemVer lets
    break it: ``>=0.2.1,<0.3`` before 1.0 (a minor release may), ``>=1.4.0,<2`` after."""
    if version is None:
        from operator_kit._version import __version__

        version = __version__
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"operator_kit version {version!r} is not MAJOR.MINOR[.PATCH]")
    major, minor = int(found.group(1)), int(found.group(2))
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"operator_kit>={version},<{upper}"


def operator_kit_source() -> str:
    """What ``pip wheel`` should build operator_kit's wheel from: where the installed one came
    from (PEP 610's ``direct_url.json``), else the checkout this module is imported from,
    else the package name (a package index)."""
    for distribution in importlib.metadata.distributions(name="operator_kit"):
        text = distribution.read_text("direct_url.json")  # absent from an in-tree egg-info
        if text:
            return source_of(json.loads(text))
    checkout = Path(__file__).resolve().parents[2]  # CHECKOUT/operator_kit/new/source.py
    if (checkout / "setup.cfg").exists() or (checkout / "pyproject.toml").exists():
        return str(checkout)
    return "operator_kit"


def source_of(direct_url: dict[str, Any]) -> str:
    """A pip requirement (or path) for operator_kit from a PEP 610 ``direct_url.json``: a
    checkout's or a wheel's path, ``operator_kit @ git+URL@REV``, ``operator_kit @ URL``."""
    url = str(direct_url.get("url", ""))
    vcs = direct_url.get("vcs_info")
    if vcs is not None:
        revision = vcs.get("requested_revision") or vcs.get("commit_id")
        return f"operator_kit @ {vcs['vcs']}+{url}" + (f"@{revision}" if revision else "")
    if url.startswith("file://"):
        return urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    if url:
        return f"operator_kit @ {url}"
    return "operator_kit"
