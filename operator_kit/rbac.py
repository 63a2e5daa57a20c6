"""`Rule`: one RBAC PolicyRule, the unit in which operators declare what they need.

Controllers list extra rules their reconcile needs; `Operator.rules()` derives the rest
from the code (watched kinds, owned kinds, events, the Lease). `merge_rules` unions verbs
per API group and resource, so the generated ClusterRole has one rule per resource,
sorted, without duplicates — byte-identical output for the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """An RBAC PolicyRule: verbs on resources of API groups ("" is the core group)."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    def __init__(self, api_groups: Iterable[str], resources: Iterable[str],
                 verbs: Iterable[str]) -> None:
        for name, values in (("api_groups", api_groups), ("resources", resources),
                             ("verbs", verbs)):
            if isinstance(values, str):
                raise TypeError(f"Rule {name} must be a list of strings, not the string "
                                f"{values!r}; write [{values!r}]")
        object.__setattr__(self, "api_groups", tuple(sorted(set(api_groups))))
        object.__setattr__(self, "resources", tuple(sorted(set(resources))))
        object.__setattr__(self, "verbs", tuple(sorted(set(verbs))))
        if not self.resources or not self.verbs:
            raise ValueError("a Rule needs at least one resource and one verb")

    def to_dict(self) -> dict[str, list[str]]:
        return {"apiGroups": list(self.api_groups), "resources": list(self.resources),
                "verbs": list(self.verbs)}


def merge_rules(rules: Iterable[Rule]) -> list[Rule]:
    """One rule per (group, resource) with the union of verbs, in a stable order."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule.api_groups:
            for resource in rule.resources:
                verbs.setdefault((group, resource), set()).update(rule.verbs)
    return [Rule([group], [resource], verbs[(group, resource)])
            for group, resource in sorted(verbs)]


def guess_plural(kind: str) -> str:
    """The resource name Kubernetes would guess for a kind (as its RESTMapper does)."""
    lower = kind.lower()
    if lower in ("endpoints",):
        return lower
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in tuple("aeiou"):
        return lower[:-1] + "ies"
    return lower + "s"
