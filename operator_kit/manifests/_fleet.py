"""Fleets in the manifests: the hub's access to its provider, and ``--fleet-member``.

An operator whose controllers declare ``fleet = True`` (`operator_kit.fleet`) runs them
on every member cluster, with the credentials its provider gives; the other controllers
run on the hub. So its RBAC is split:

- the hub's (`operator_manifests`): `Operator.rules()`, which leaves the fleet
  controllers out, plus `hub_access_documents` — what the fleet's provider reads in the
  hub (`HubAccess`: `KubeconfigSecrets` lists and watches Secrets), as a Role and
  RoleBinding ``<operator>-fleet`` in each namespace the provider names, or a
  ClusterRole and ClusterRoleBinding of that name only when it was asked to read every
  namespace (``KubeconfigSecrets(all_namespaces=True)``). `Fleet.of(operator,
  provider)` tells the operator its fleet; an operator without one gets nothing here.
- each member's (`fleet_member_manifests`, ``python -m operator_kit.manifests APP
  --fleet-member``): the Namespace, the CRDs of the kinds the fleet controllers
  reconcile, own or watch there (and a `FanOut`'s child kinds), a ServiceAccount with a
  ClusterRole derived from the fleet controllers only (`Controller.required_rules`, as
  the hub's is from its own; a `FanOut`'s `member_rules`), and
  a ``kubernetes.io/service-account-token`` Secret ``<operator>-fleet-token`` whose token
  and ``ca.crt`` go into the kubeconfig the hub is given for that member. No Deployment,
  Service, webhooks or Lease: the operator runs in the hub.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from operator_kit.api.kinds import Kind
from operator_kit.api.rbac import merge_rules
from operator_kit.api.resources import CustomResource
from operator_kit.fleet.fanout import FanOut
from operator_kit.fleet.providers import HubAccess
from operator_kit.manifests._crd import crd
from operator_kit.manifests._labels import RecommendedLabels, labelled
from operator_kit.manifests._rbac import Rbac

if TYPE_CHECKING:
    from operator_kit.operator import Operator

RBAC_API = "rbac.authorization.k8s.io/v1"


def hub_access_documents(operator: Operator, namespace: str) -> list[dict[str, Any]]:
    """The Role and RoleBinding ``<operator>-fleet`` in each namespace the fleet's
    provider reads in the hub (or one ClusterRole and ClusterRoleBinding of that name,
    when it reads every namespace) that let the operator's ServiceAccount (in
    `namespace`) read what it reads there; nothing without a fleet, or when the provider
    reads nothing there."""
    if operator.fleet is None:
        return []
    access = getattr(operator.fleet.provider, "hub_access", None)
    granted: HubAccess | None = access() if access is not None else None
    if granted is None or not granted.rules:
        return []
    name = f"{operator.name}-fleet"
    rules = [rule.to_dict() for rule in merge_rules(granted.rules)]
    subjects = [{"kind": "ServiceAccount", "name": operator.name, "namespace": namespace}]
    places: list[str | None] = ([None] if granted.namespaces is None
                                else list(dict.fromkeys(granted.namespaces)))
    docs: list[dict[str, Any]] = []
    for place in places:  # None: every namespace, a ClusterRole
        role = "ClusterRole" if place is None else "Role"
        where = {} if place is None else {"namespace": place}
        docs += [
            {"apiVersion": RBAC_API, "kind": role, "metadata": {"name": name, **where},
             "rules": rules},
            {"apiVersion": RBAC_API, "kind": f"{role}Binding",
             "metadata": {"name": name, **where},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role,
                         "name": name},
             "subjects": subjects},
        ]
    return docs


def fleet_member_manifests(operator: Operator, *, namespace: str,
                           namespace_document: bool = True,
                           version: str | None = None) -> list[dict[str, Any]]:
    """The documents to apply on each member cluster of `operator`'s fleet, labelled like
    the operator's own; a `ValueError` when it has no fleet controller."""
    fleet = [c for c in operator.controllers if c.fleet]
    fan_outs = [c for c in operator.controllers if isinstance(c, FanOut)]
    if not fleet and not fan_outs:
        raise ValueError(f"operator {operator.name} has no fleet controller (a Controller "
                         "with fleet = True, or a FanOut), so nothing of it runs on member "
                         "clusters; leave out --fleet-member")
    candidates: list[type[CustomResource] | None] = []
    for controller in fleet:
        candidates += [controller.primary_kind().defined_resource, *(k.defined_resource for k in (
            *controller.owned_kinds(), *controller.watched_kinds()))]
    for fan_out in fan_outs:  # its children's kinds; its own kind stays on the hub
        candidates += [Kind.of(k).defined_resource for k in fan_out.child_kinds]
    kinds: dict[str, type[CustomResource]] = {}
    for candidate in candidates:
        if candidate is not None:
            storage = candidate.storage_version()
            kinds.setdefault(f"{storage.plural}.{storage.group}", storage)
    docs: list[dict[str, Any]] = []
    if namespace_document:
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    docs += [crd(kinds[name]) for name in sorted(kinds)]
    docs += Rbac(operator.name, namespace).rules(
        *(rule for c in fleet for rule in c.required_rules()),
        *(rule for f in fan_outs for rule in f.member_rules())).documents()
    docs.append({"apiVersion": "v1", "kind": "Secret",
                 "type": "kubernetes.io/service-account-token",
                 "metadata": {"name": f"{operator.name}-fleet-token", "namespace": namespace,
                              "annotations": {
                                  "kubernetes.io/service-account.name": operator.name}}})
    labels = RecommendedLabels(operator.name, operator.name, version)
    return [labelled(doc, labels) for doc in docs]
