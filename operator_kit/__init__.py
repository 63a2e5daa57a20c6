"""operator_kit: Kubernetes operators in Python.

Declare a custom resource as dataclasses, write one ``reconcile`` method, and the
framework does the rest: watches that never stall, a per-key work queue with backoff,
finalizers, status, owned children, events, leader election, webhooks with their TLS
certificate, manifests generated from the code, metrics and probes.
"""

__version__ = "0.1.0"
