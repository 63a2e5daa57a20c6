"""Does the API server filter by shard? One LIST tells (`probe`).

A server with the ``ShardedListAndWatch`` gate on answers a LIST carrying a
``shardSelector`` with ``metadata.shardInfo.selector`` echoing it (and only the objects
in its ranges). A server without it — the gate off, or Kubernetes before 1.36 — ignores
the parameter: every object, no ``shardInfo``. A server that has the field but cannot
parse the selector answers an error (1.37.2: HTTP 500 "invalid shard selector: ...").
So the probe sends the whole hash space (every object matches: nothing is lost whatever
the answer) with ``limit=1``, and the answer says which:

==========================================  ======================================
answer                                      `Support`
==========================================  ======================================
2xx with ``shardInfo.selector`` == sent     ``server``: lists and watches filter
2xx without ``shardInfo``                   ``ignored``: the label mode is needed
an error (refused selector, 4xx, 5xx)       ``refused``: the label mode is needed
==========================================  ======================================

Each outcome but ``server`` is logged with what happens next (label sharding). The
probe does not decide the mode itself; `Sharding`'s caller does (docs/how-to/sharding.md).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api, error_message
from operator_kit.election.shard_ranges import HASH_SPACE, ShardRange, selector

__all__ = ["PROBE_SELECTOR", "Support", "probe"]

log = logging.getLogger("operator_kit.sharding")

PROBE_SELECTOR = selector([ShardRange(0, HASH_SPACE)])
"""The whole hash space: every object matches, so the probe's answer is complete whether
the server filters or not."""


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
                    "advertises server-side sharding but cannot serve it; label sharding "
                    "runs instead", path, error_message(err))
        return Support.REFUSED
    echoed = _echo(answer)
    if echoed == PROBE_SELECTOR:
        return Support.SERVER
    if echoed is None:
        log.info("sharding: the API server ignores shard selectors on %s (the "
                 "ShardedListAndWatch gate is off, or Kubernetes is older than 1.36): label "
                 "sharding runs", path)
        return Support.IGNORED
    log.warning("sharding: the API server echoed another shard selector on %s (%r, sent "
                "%r): not trusted; label sharding runs instead", path, echoed[:200],
                PROBE_SELECTOR)
    return Support.REFUSED


def _echo(answer: Any) -> str | None:
    meta = answer.get("metadata") if isinstance(answer, Mapping) else None
    info = meta.get("shardInfo") if isinstance(meta, Mapping) else None
    value = info.get("selector") if isinstance(info, Mapping) else None
    return value if isinstance(value, str) else None
