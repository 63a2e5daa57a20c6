"""Manifests written from the code, so they never drift from it.

`crd(Kind)` writes a CustomResourceDefinition from a `CustomResource` type (every version
it has, the status subresource, printer columns); `with_conversion_webhook` points a CRD's
conversion at the operator's webhook server.
"""

from operator_kit.manifests._crd import crd, with_conversion_webhook

__all__ = ["crd", "with_conversion_webhook"]
