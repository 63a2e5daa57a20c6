"""operator_kit's sample over built-in kinds: tenant Namespaces get their defaults.

Every ``v1/Namespace`` labelled ``tenancy.example.com/tenant`` gets a NetworkPolicy that
admits traffic from its own namespace only and a ResourceQuota, both from the
cluster-scoped `TenancyPolicy` named ``default`` (changing the policy updates every
tenant namespace). A finalizer holds each tenant Namespace until its release is recorded
on the policy's status. ``tenancy_operator:operator`` is the `Operator`::

    python -m tenancy_operator --manifests | kubectl apply -f -
"""

from operator_kit import LeaderElection, Operator
from tenancy_operator.controller import TENANT_LABEL, TenantNamespaces
from tenancy_operator.resources import TenancyPolicy, TenancyPolicySpec, TenancyPolicyStatus

operator = Operator("tenancy-operator", [TenantNamespaces()],
                    leader_election=LeaderElection(lease_name="tenancy-operator"))

__all__ = ["TENANT_LABEL", "TenancyPolicy", "TenancyPolicySpec", "TenancyPolicyStatus",
           "TenantNamespaces", "operator"]
