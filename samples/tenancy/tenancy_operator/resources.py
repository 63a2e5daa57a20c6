"""The sample's own kind: one cluster-scoped TenancyPolicy holds every tenant's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from operator_kit import CustomResource


@dataclass
class TenancyPolicySpec:
    """What each tenant Namespace gets: a pod quota, and whether other namespaces may
    reach its pods (default: only its own)."""

    max_pods: int = 20
    allow_from_other_namespaces: bool = False


@dataclass
class TenancyPolicyStatus:
    """The tenant namespaces the policy applies to now."""

    tenants: list[str] = field(default_factory=list)


class TenancyPolicy(CustomResource):
    group = "tenancy.example.com"
    version = "v1"
    kind = "TenancyPolicy"
    plural = "tenancypolicies"
    namespaced = False
    json_names = "camelCase"
    spec: TenancyPolicySpec
    status: TenancyPolicyStatus
