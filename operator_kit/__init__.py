"""operator_kit: Kubernetes operators in Python.

Declare a custom resource as dataclasses, write one ``reconcile`` method, and the
framework does the rest: watches that never stall, a per-key work queue with backoff,
finalizers, status, owned children, events, leader election, webhooks with their TLS
certificate, manifests generated from the code, metrics and probes.

Only the public names are here; everything else is internal to its module.
"""

from operator_kit import filters
from operator_kit.context import Context
from operator_kit.controller import Action, Controller, Index, Owns, Watch
from operator_kit.kinds import Kind
from operator_kit.leader import LeaderElection
from operator_kit.operator import Operator
from operator_kit.rbac import Rule
from operator_kit.resources import CustomResource, InvalidResource, PrinterColumn

__version__ = "0.1.0"

__all__ = [
    "Action",
    "Context",
    "Controller",
    "CustomResource",
    "Index",
    "InvalidResource",
    "Kind",
    "LeaderElection",
    "Operator",
    "Owns",
    "PrinterColumn",
    "Rule",
    "Watch",
    "filters",
]
