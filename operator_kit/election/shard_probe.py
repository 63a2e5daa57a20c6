"""Does the API server filter by shard? Two LISTs tell (`probe`).

A server with the ``ShardedListAndWatch`` gate on returns, for a LIST carrying a
``shardSelector``, only the objects in its ranges; for built-in kinds it echoes the
selector in ``metadata.shardInfo.selector``, but for custom resources (1.37.2) it does not
(their lists are unstructured). A server without the gate — or Kubernetes before 1.36 —
ignores the parameter. So the probe sends, with ``limit=1``:

1. the whole hash space (`PROBE_SELECTOR`: every object matches, nothing is lost whatever
   the answer). An error: the server advertises the field but cannot serve it
   (``refused``). The selector echoed: ``server``.
2. otherwise a selector that cannot parse (`INVALID_SELECTOR`: its start is past its
   end). A server that filters refuses it, naming the shard selector (1.37.2: HTTP 500
   "invalid shard selector: ..."): ``server``. One that ignores shard selectors answers
   200: ``ignored``. Any other error: ``refused``.

Each outcome but ``server`` is logged. `pick_mode` turns the answers into
`Sharding.mode`'s choice (docs/how-to/sharding.md). tests/cluster/test_shard_ranges.py
checks the probe against a gated and an ungated server, on a built-in kind and a custom
resource.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.client.transport import Api, error_message
from operator_kit.election.shard_ranges import HASH_SPACE, ShardRange, selector

__all__ = ["INVALID_SELECTOR", "PROBE_SELECTOR", "SelectorRefused", "Support", "pick_mode",
           "probe", "refusal"]

log = logging.getLogger("operator_kit.sharding")

PROBE_SELECTOR = selector([ShardRange(0, HASH_SPACE)])
"""The whole hash space: every object matches, so the probe's answer is complete whether
the server filters or not."""


INVALID_SELECTOR = ("shardRange(object.metadata.uid, '0x8000000000000000', "
                    "'0x0000000000000000')")
"""A selector a filtering server refuses (start past end) and an ignoring one ignores."""


class Support(enum.Enum):
    """What the API server does with a ``shardSelector``."""

    SERVER = "server"
    IGNORED = "ignored"
    REFUSED = "refused"


def probe(api: Api, path: str, *, timeout: float = 10.0) -> Support:
    """LIST `path` (a collection, e.g. ``/api/v1/namespaces/x/configmaps``) once with
    `PROBE_SELECTOR` and ``limit=1``; what the answer says (module docstring)."""
    try:
        answer = api.request("GET", path, query={"shardSelector": PROBE_SELECTOR, "limit": 1},
                             timeout=timeout)
    except ApiException as err:
        log.warning("sharding: the API server refused a shard selector on %s (%s): it "
                    "advertises server-side sharding but cannot serve it: not used", path,
                    error_message(err))
        return Support.REFUSED
    echoed = _echo(answer)
    if echoed == PROBE_SELECTOR:
        return Support.SERVER
    if echoed is not None:
        log.warning("sharding: the API server echoed another shard selector on %s (%r, sent "
                    "%r): not trusted, server-side sharding is not used", path, echoed[:200],
                    PROBE_SELECTOR)
        return Support.REFUSED
    try:  # no echo (a custom resource's list has none): does it parse selectors at all?
        api.request("GET", path, query={"shardSelector": INVALID_SELECTOR, "limit": 1},
                    timeout=timeout)
    except ApiException as err:
        if "shard selector" in str(err.body or err.reason or ""):
            return Support.SERVER
        log.warning("sharding: the API server answered a shard selector on %s with an "
                    "unexpected error (%s): server-side sharding is not used", path,
                    error_message(err))
        return Support.REFUSED
    log.info("sharding: the API server ignores shard selectors on %s (the "
             "ShardedListAndWatch gate is off, or Kubernetes is older than 1.36): "
             "server-side sharding is not used", path)
    return Support.IGNORED


def _echo(answer: Any) -> str | None:
    meta = answer.get("metadata") if isinstance(answer, Mapping) else None
    info = meta.get("shardInfo") if isinstance(meta, Mapping) else None
    value = info.get("selector") if isinstance(info, Mapping) else None
    return value if isinstance(value, str) else None


def pick_mode(api: Api, mode: str, operator: str, paths: Mapping[str, str]) -> str:
    """The sharding mode to run: `mode` (`Sharding.mode`), ``"auto"`` decided by probing
    each sharded controller's collection in `paths` (controller name → path): server
    only when every one filters. Logged, and exposed as ``operator_kit_shard_mode``.
    `RuntimeError` for ``"server"`` where the server does not filter: every member would
    reconcile every object."""
    if mode != "labels":
        refused = [name for name, path in paths.items()
                   if probe(api, path) is not Support.SERVER]
        if refused and mode == "server":
            raise RuntimeError(
                f"operator {operator}: Sharding(mode='server'), but the API server does not "
                f"filter by shard for controller(s) {', '.join(refused)} (see the line "
                "above): every member would reconcile every object. Switch the "
                "ShardedListAndWatch feature gate on, or use mode='auto' or 'labels'")
        mode = "labels" if refused else "server"
    for each in ("labels", "server"):
        metrics.SHARD_MODE.labels(operator, each).set(1 if each == mode else 0)
    log.info("operator %s: sharding mode %s (%s)", operator, mode,
             "the API server filters each member's hash ranges; no label is written"
             if mode == "server" else "the leader's sharder labels every object")
    return mode


class SelectorRefused(Exception):
    """The API server refused the shard selector of a member's slots (`refusal`)."""


def refusal(api: Api, path: str, shard_selector: str, *, timeout: float = 10.0) -> str | None:
    """Why the API server refuses a LIST of `path` (``limit=1``) with `shard_selector`,
    or None when it serves it. A refusal is a 400 or 422, or an error naming the
    selector (1.37.2 answers a selector it cannot use with a 500 "invalid shard
    selector"); any other failure (a timeout, a 503, missing RBAC) is raised: it says
    nothing of the selector, and the caller tries again."""
    try:
        api.request("GET", path, query={"shardSelector": shard_selector, "limit": 1},
                    timeout=timeout)
    except ApiException as err:
        if err.status in (400, 422) or "selector" in str(err.body or err.reason or ""):
            return f"{err.status}: {error_message(err)}"
        raise
    return None
