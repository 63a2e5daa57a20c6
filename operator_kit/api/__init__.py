"""The API types: what a custom resource is, before any I/O.

Declaring a kind (`resources`: `CustomResource` and its versions; `columns`: its printer
columns; `names`: the names Kubernetes accepts and how versions sort), the OpenAPI schema
and JSON codec of its dataclasses (`schema` reads type hints into the `shapes` tree, with
the markers of `validation`), naming any kind by class, model or ``"group/version/Kind"`` (`kinds`),
status conditions (`conditions`) and RBAC rules (`rbac`).

Layer: above the leaves (`operator_kit.metrics`, `logs`, `settings`, `_pki`); below
everything else. Nothing here talks to a cluster.
"""
