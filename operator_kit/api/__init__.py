"""The API types: what a custom resource is, before any I/O.

Declaring a kind (`resources`: `CustomResource`, its versions and printer columns), the
OpenAPI schema and JSON codec of its dataclasses (`schema`, with the markers of
`validation`), naming any kind by class, model or ``"group/version/Kind"`` (`kinds`),
status conditions (`conditions`) and RBAC rules (`rbac`).

Layer: above the leaves (`operator_kit.metrics`, `logs`, `settings`, `_pki`); below
everything else. Nothing here talks to a cluster.
"""
