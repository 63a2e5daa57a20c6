"""The CustomResourceDefinition of a kind, written from its CustomResource classes.

`crd(Backup)` reads everything from the code: names and scope from the root class, one
``versions`` entry per version class (its ``openapi_schema()``, a status subresource
when it has a status, its printer columns), and which version is stored.
`with_conversion_webhook` adds the conversion webhook stanza that a kind with several
versions needs when they differ in shape. Both return new plain dicts with a stable key
order, ready for `to_yaml` or the kubernetes client.
"""

from __future__ import annotations

import copy
from typing import Any

from operator_kit.api.resources import CustomResource, PrinterColumn
from operator_kit.manifests._webhooks import WebhookTarget

__all__ = ["crd", "with_conversion_webhook"]


def crd(kind: type[CustomResource]) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of `kind` and all its versions.

    Any version class of the kind may be given. Raises TypeError when the kind does not
    have exactly one storage version, or is another party's (``external = True``).
    """
    if kind.external:
        raise TypeError(f"{kind.__name__} is declared external = True: its CRD belongs to "
                        "whoever defines it (install theirs); this operator generates none")
    versions = kind.versions()
    root, storage = versions[0], kind.storage_version()
    kind.check_columns()
    kind.preferred_version()  # a version that states preferred = True must get it
    names: dict[str, Any] = {
        "kind": root.kind,
        "listKind": f"{root.kind}List",
        "plural": root.plural,
        "singular": root.kind.lower(),
    }
    if root.short_names:
        names["shortNames"] = list(root.short_names)
    if root.categories:
        names["categories"] = list(root.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{root.plural}.{root.group}"},
        "spec": {
            "group": root.group,
            "names": names,
            "scope": "Namespaced" if root.namespaced else "Cluster",
            "versions": [_version(v, storage=v is storage) for v in versions],
        },
    }


def with_conversion_webhook(crd: dict[str, Any], target: WebhookTarget,
                            path: str = "/convert") -> dict[str, Any]:
    """A copy of `crd` whose versions are converted by the webhook at `target` + `path`.

    Without `target.ca_bundle` the caBundle is left for
    `WebhookCertificate.patch_ca_bundle` to fill in at startup.
    """
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError("with_conversion_webhook needs a CustomResourceDefinition dict")
    if not path.startswith("/"):
        raise ValueError(f"conversion webhook path {path!r} must start with '/'")
    out = copy.deepcopy(crd)
    out["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"],
                    "clientConfig": target.client_config(path)},
    }
    return out


def _version(cls: type[CustomResource], *, storage: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": cls.version,
        "served": cls.served,
        "storage": storage,
        "schema": {"openAPIV3Schema": cls.openapi_schema()},
    }
    if cls.deprecated:
        entry["deprecated"] = True
        if isinstance(cls.deprecated, str):
            entry["deprecationWarning"] = cls.deprecated
    if cls.status_type() is not None:
        entry["subresources"] = {"status": {}}
    columns = cls.columns()
    if columns:
        entry["additionalPrinterColumns"] = [_column(c) for c in columns]
    return entry


def _column(column: PrinterColumn) -> dict[str, Any]:
    out: dict[str, Any] = {"name": column.name, "type": column.type, "jsonPath": column.json_path}
    if column.format is not None:
        out["format"] = column.format
    if column.description is not None:
        out["description"] = column.description
    if column.priority is not None:
        out["priority"] = column.priority
    return out
