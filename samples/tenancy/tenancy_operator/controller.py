"""The controller: its primary kind is the built-in ``v1/Namespace`` (cluster-scoped).

It owns each tenant Namespace's NetworkPolicy and ResourceQuota (server-side applied
with the Namespace as their controller owner, so they are restored when changed by hand
and go with the Namespace), watches the TenancyPolicy (a change re-applies every
tenant), and holds a finalizer so a tenant's release is recorded on the policy before
the Namespace goes.
"""

from __future__ import annotations

from typing import Any

from operator_kit.filters import spec_changed

from operator_kit import Context, Controller, Rule, Watch
from tenancy_operator.resources import TenancyPolicy, TenancyPolicySpec

TENANT_LABEL = "tenancy.example.com/tenant"
POLICY = "default"


def tenant_namespaces(_policy: Any, objects: Any) -> list[str]:
    """Every tenant Namespace: the policy changed, so each gets it again."""
    return [ns["metadata"]["name"] for ns in objects.list("v1/Namespace", labels=TENANT_LABEL)]


class TenantNamespaces(Controller[dict[str, Any]]):
    resource = "v1/Namespace"
    label_selector = TENANT_LABEL  # only Namespaces that carry the tenant label
    owns = ("networking.k8s.io/v1/NetworkPolicy", "v1/ResourceQuota")
    # A change of the policy's spec re-applies every tenant (its status, written here,
    # does not).
    watches = (Watch(TenancyPolicy, tenant_namespaces, filters=[spec_changed]),)
    finalizer = "tenancy.example.com/release"
    # It writes the policy's status too (the list of tenants): a kind it watches, not
    # its primary, so the rule is declared (running as its ServiceAccount proves it).
    rules = (Rule(["tenancy.example.com"], ["tenancypolicies/status"], ["patch"]),)

    def reconcile(self, ns: dict[str, Any], ctx: Context) -> None:
        policy = ctx.get(TenancyPolicy, POLICY)
        spec = policy.spec if policy is not None else TenancyPolicySpec()
        sources: list[dict[str, Any]] = [] if spec.allow_from_other_namespaces else [
            {"podSelector": {}}]  # pods of this namespace only
        ctx.apply_owned(ns, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "tenant-isolation"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": sources}] if sources else [{}]}})
        ctx.apply_owned(ns, {
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "tenant-quota"},
            "spec": {"hard": {"pods": str(spec.max_pods)}}})
        if policy is not None:
            self._record_tenants(policy, ctx)
        ctx.event(ns, False, "TenantDefaults", f"quota {spec.max_pods} pods, isolation "
                  f"{'off' if spec.allow_from_other_namespaces else 'on'}")

    def cleanup(self, ns: dict[str, Any], ctx: Context) -> None:
        policy = ctx.get(TenancyPolicy, POLICY)
        if policy is not None:
            self._record_tenants(policy, ctx, leaving=ns["metadata"]["name"])
            ctx.event(policy, False, "TenantReleased",
                      f"namespace {ns['metadata']['name']} is being deleted")

    def _record_tenants(self, policy: TenancyPolicy, ctx: Context,
                        leaving: str | None = None) -> None:
        """The policy's status lists the tenant Namespaces as the cache has them now
        (level-based: each reconcile writes the whole list, so a write that raced
        another is corrected by the next)."""
        tenants = sorted(ns["metadata"]["name"] for ns in ctx.list(
            "v1/Namespace", labels=TENANT_LABEL)
            if not ns["metadata"].get("deletionTimestamp")
            and ns["metadata"]["name"] != leaving)
        ctx.patch_status(policy, {"tenants": tenants})
