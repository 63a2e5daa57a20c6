"""``python -m operator_kit.manifests MODULE:ATTR``: print an operator's manifests.

The YAML stream holds everything the operator named by MODULE:ATTR needs, in apply
order — CRDs, RBAC, the webhook Service and the Deployment, webhook configurations —
ready for ``kubectl apply -f -``: the Namespace first (``--no-namespace`` leaves it
out). ``--kustomize DIR`` writes the same documents as a kustomize base instead (one
file per concern, a kustomization.yaml and a kustomizeconfig.yaml that keeps every
reference right under an overlay's namePrefix; see `operator_kit.manifests._kustomize`);
``--helm DIR`` writes them as a Helm chart, the flags its values' defaults
(`operator_kit.manifests._helm`).

``--check`` first reads the cluster of the current kubeconfig (or ``--kubeconfig``) and
refuses — exit 1, one line per object on stderr, nothing on stdout — when the operator
is already installed in another namespace: one installation per cluster
(`operator_kit.client.installation`). ``--certificate-secret NAME`` mounts a certificate
Secret someone else keeps (cert-manager) instead
(`operator_kit.webhooks.certificates.ExternalCertificate`).
"""

from __future__ import annotations

import sys

from operator_kit.manifests._command import run
from operator_kit.operator import Operator
from operator_kit.webhooks.loader import import_target


def main(argv: list[str] | None = None, *, operator: Operator | None = None,
         app: str | None = None) -> int:
    """The CLI; an Operator's own ``--manifests`` passes itself as `operator`."""
    return run(argv, operator=operator, app=app, load=_load)


def _load(app: str) -> Operator:
    """The Operator that ``MODULE:ATTR`` names (RuntimeError saying why it is not one)."""
    target = import_target(app, named_by="MODULE:ATTR")
    if not isinstance(target, Operator):
        raise RuntimeError(f"{app} is a {type(target).__name__}, not an operator_kit.Operator")
    return target


if __name__ == "__main__":
    sys.exit(main())
