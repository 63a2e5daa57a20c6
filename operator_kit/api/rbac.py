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
    resource_names: tuple[str, ...] = ()

    def __init__(self, api_groups: Iterable[str], resources: Iterable[str],
                 verbs: Iterable[str], resource_names: Iterable[str] = ()) -> None:
        for name, values in (("api_groups", api_groups), ("resources", resources),
                             ("verbs", verbs), ("resource_names", resource_names)):
            if isinstance(values, str):
                raise TypeError(f"Rule {name} must be a list of strings, not the string "
                                f"{values!r}; write [{values!r}]")
        object.__setattr__(self, "api_groups", tuple(sorted(set(api_groups))))
        object.__setattr__(self, "resources", tuple(sorted(set(resources))))
        object.__setattr__(self, "verbs", tuple(sorted(set(verbs))))
        object.__setattr__(self, "resource_names", tuple(sorted(set(resource_names))))
        if not self.resources or not self.verbs:
            raise ValueError("a Rule needs at least one resource and one verb")

    def to_dict(self) -> dict[str, list[str]]:
        """The rule as a ClusterRole/Role ``rules`` entry (``apiGroups``, ``resources``, ``verbs``,
        ``resourceNames``)."""
        rule = {"apiGroups": list(self.api_groups), "resources": list(self.resources)}
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        rule["verbs"] = list(self.verbs)
        return rule


def merge_rules(rules: Iterable[Rule]) -> list[Rule]:
    """One rule per (group, resource, resource names) with the union of verbs, sorted.

    Verbs a rule grants on every object of a resource are not repeated in a rule that
    names some of its objects."""
    verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        for group in rule.api_groups:
            for resource in rule.resources:
                key = (group, resource, rule.resource_names)
                verbs.setdefault(key, set()).update(rule.verbs)
    merged = []
    for group, resource, names in sorted(verbs):
        granted = verbs[(group, resource, names)]
        if names:
            granted = granted - verbs.get((group, resource, ()), set())
        if granted:
            merged.append(Rule([group], [resource], granted, names))
    return merged


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
