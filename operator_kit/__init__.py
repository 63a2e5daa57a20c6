"""operator_kit: Kubernetes operators in Python.

Declare a custom resource as dataclasses, write one ``reconcile`` method, and the
framework does the rest: watches that never stall, a per-key work queue with backoff,
finalizers, status, owned children, events, leader election, webhooks with their TLS
certificate, manifests generated from the code, metrics and probes.

Only the public names are here; everything else is internal to its module.
"""

import sys
from typing import TYPE_CHECKING

from operator_kit._lazy import lazy_names
from operator_kit._stability import ExperimentalWarning
from operator_kit._version import __version__ as __version__
from operator_kit.runtime import filters, transforms

if TYPE_CHECKING:
    from operator_kit.api.conditions import Condition, Conditions, find_condition, set_condition
    from operator_kit.api.kinds import Kind
    from operator_kit.api.rbac import Rule
    from operator_kit.api.resources import CustomResource, InvalidResource, PrinterColumn
    from operator_kit.api.validation import (
        CelRule,
        ExclusiveMaximum,
        ExclusiveMinimum,
        Format,
        ListType,
        MapType,
        Maximum,
        MaxItems,
        MaxLength,
        MaxProperties,
        Minimum,
        MinItems,
        MinLength,
        MinProperties,
        MultipleOf,
        Pattern,
        UniqueItems,
        cel_rules,
    )
    from operator_kit.client.fencing import Fenced
    from operator_kit.election.leader import LeaderElection
    from operator_kit.election.sharding import Sharding
    from operator_kit.operator import Operator
    from operator_kit.runtime.context import ALL_NAMESPACES, AlreadyOwned, Context
    from operator_kit.runtime.controller import Action, Controller, Index, Owns, Watch
    from operator_kit.runtime.fairness import Fairness
    from operator_kit.webhooks.certificates import WebhookCertificate
    from operator_kit.webhooks.server import Webhooks


# Each public name is imported from its module on first use (PEP 562), so that
# ``import operator_kit`` — which pytest's plugin entry point does in every test run of an
# environment that has it installed — costs nothing until a name is used, and an operator
# without webhooks never imports Flask (`Webhooks` and `WebhookCertificate` load it).
_HOMES = {name: module for module, names in {
    "operator_kit.api.conditions": ("Condition", "Conditions", "find_condition",
                                    "set_condition"),
    "operator_kit.api.kinds": ("Kind",),
    "operator_kit.api.rbac": ("Rule",),
    "operator_kit.api.resources": ("CustomResource", "InvalidResource", "PrinterColumn"),
    "operator_kit.api.validation": (
        "CelRule", "ExclusiveMaximum", "ExclusiveMinimum", "Format", "ListType", "MapType",
        "Maximum", "MaxItems", "MaxLength", "MaxProperties", "Minimum", "MinItems",
        "MinLength", "MinProperties", "MultipleOf", "Pattern", "UniqueItems", "cel_rules"),
    "operator_kit.client.fencing": ("Fenced",),
    "operator_kit.election.leader": ("LeaderElection",),
    "operator_kit.election.sharding": ("Sharding",),
    "operator_kit.operator": ("Operator",),
    "operator_kit.runtime.context": ("ALL_NAMESPACES", "AlreadyOwned", "Context"),
    "operator_kit.runtime.fairness": ("Fairness",),
    "operator_kit.runtime.controller": ("Action", "Controller", "Index", "Owns", "Watch"),
    "operator_kit.webhooks.certificates": ("WebhookCertificate",),
    "operator_kit.webhooks.server": ("Webhooks",),
}.items() for name in names}


__getattr__, __dir__ = lazy_names(globals(), _HOMES)


# ``import operator_kit.filters`` and ``from operator_kit.filters import spec_changed``: the
# path the docs have always given, for the module that now lives in the runtime layer.
sys.modules.setdefault(f"{__name__}.filters", filters)
# ``from operator_kit.transforms import drop_fields``: cache transforms, the same way.
sys.modules.setdefault(f"{__name__}.transforms", transforms)

__all__ = [
    "ALL_NAMESPACES",
    "Action",
    "AlreadyOwned",
    "CelRule",
    "Condition",
    "Conditions",
    "Context",
    "Controller",
    "CustomResource",
    "ExclusiveMaximum",
    "ExclusiveMinimum",
    "ExperimentalWarning",
    "Fairness",
    "Fenced",
    "Format",
    "Index",
    "InvalidResource",
    "Kind",
    "LeaderElection",
    "ListType",
    "MapType",
    "MaxItems",
    "MaxLength",
    "MaxProperties",
    "Maximum",
    "MinItems",
    "MinLength",
    "MinProperties",
    "Minimum",
    "MultipleOf",
    "Operator",
    "Owns",
    "Pattern",
    "PrinterColumn",
    "Rule",
    "Sharding",
    "UniqueItems",
    "Watch",
    "WebhookCertificate",
    "Webhooks",
    "cel_rules",
    "filters",
    "find_condition",
    "set_condition",
    "transforms",
]
