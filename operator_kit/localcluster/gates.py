"""Feature gates of the local plane: ``localcluster up --feature-gates Name=true,...``.

Kubernetes switches alpha features on with ``--feature-gates`` on kube-apiserver (and the
other components that know the gate). The local plane passes the gates given to ``up``
to kube-apiserver only, records them (its ``apiserver_args`` in ``state.json``), and a
second ``up`` reuses a running plane only when it was started with the same gates: a
plane without ``ShardedListAndWatch`` silently ignores a shard selector, so reusing it
for a test of sharded lists would test nothing.

From Python::

    LocalCluster(folder).up(apiserver_args=apiserver_args({"ShardedListAndWatch": True}))

Without gates the plane starts exactly as before (no ``--feature-gates`` flag at all).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["FLAG", "GateError", "apiserver_args", "gates_of", "parse"]

FLAG = "--feature-gates="
_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{0,99}$")
_MAX_GATES = 50


class GateError(ValueError):
    """A ``--feature-gates`` value that kube-apiserver would refuse, said in one line."""


def parse(text: str) -> dict[str, bool]:
    """``"A=true,B=false"`` as ``{"A": True, "B": False}``; `GateError` naming the bad part.

    Names are Kubernetes' gate names (an upper-case letter, then letters and digits);
    values ``true`` or ``false``. kube-apiserver refuses an unknown name at start, with
    its own message (the plane shows its log's last lines)."""
    gates: dict[str, bool] = {}
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise GateError(f"--feature-gates {text!r} has an empty entry: write "
                        "Name=true[,Name=false...], e.g. ShardedListAndWatch=true")
    if len(parts) > _MAX_GATES:
        raise GateError(f"--feature-gates names {len(parts)} gates, more than {_MAX_GATES}")
    for part in parts:
        name, eq, value = part.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not eq or not _NAME.match(name) or value not in ("true", "false"):
            raise GateError(f"--feature-gates entry {part[:120]!r} is not Name=true or "
                            "Name=false (a gate's name is letters and digits starting with "
                            "an upper-case letter, e.g. ShardedListAndWatch=true)")
        if name in gates:
            raise GateError(f"--feature-gates names {name} twice")
        gates[name] = value == "true"
    return gates


def apiserver_args(gates: Mapping[str, bool]) -> list[str]:
    """kube-apiserver's arguments for `gates` (none for no gates), names sorted."""
    if not gates:
        return []
    for name in gates:
        if not _NAME.match(name):
            raise GateError(f"feature gate name {name!r} is not letters and digits starting "
                            "with an upper-case letter")
    return [FLAG + ",".join(f"{n}={'true' if gates[n] else 'false'}" for n in sorted(gates))]


def gates_of(args: Iterable[str]) -> dict[str, bool]:
    """The gates in a recorded list of kube-apiserver arguments (a plane's state)."""
    found: dict[str, bool] = {}
    for arg in args:
        if arg.startswith(FLAG):
            found.update(parse(arg[len(FLAG):]))
    return found
