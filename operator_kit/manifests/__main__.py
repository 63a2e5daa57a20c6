"""``python -m operator_kit.manifests MODULE:ATTR``: print an operator's manifests.

The YAML stream holds everything the operator named by MODULE:ATTR needs, in apply
order — CRDs, RBAC, the webhook Service and the Deployment, webhook configurations —
ready for ``kubectl apply -f -``: the Namespace first (``--no-namespace`` leaves it
out). ``--kustomize DIR`` writes the same documents as a kustomize base instead (one
file per concern, a kustomization.yaml and a kustomizeconfig.yaml that keeps every
reference right under an overlay's namePrefix; see `operator_kit.manifests._kustomize`).

``--check`` first reads the cluster of the current kubeconfig (or ``--kubeconfig``) and
refuses — exit 1, one line per object on stderr, nothing on stdout — when the operator
is already installed in another namespace: one installation per cluster
(`operator_kit.installation`). ``--certificate-secret NAME`` mounts a certificate Secret
someone else keeps (cert-manager) instead (`operator_kit.certificates.ExternalCertificate`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from operator_kit.certificates import ExternalCertificate
from operator_kit.manifests._deploy import operator_manifests
from operator_kit.manifests._kustomize import write_kustomize_base
from operator_kit.manifests._yaml import to_yaml
from operator_kit.operator import Operator
from operator_kit.webhooks import import_target


def main(argv: list[str] | None = None, *, operator: Operator | None = None,
         app: str | None = None) -> int:
    """The CLI; an Operator's own ``--manifests`` passes itself as `operator`."""
    parser = argparse.ArgumentParser(
        prog="python -m operator_kit.manifests",
        description="Print the manifests an operator needs, for kubectl apply -f -.")
    if operator is None:
        parser.add_argument("app", metavar="MODULE:ATTR",
                            help="the Operator, e.g. backup_operator:operator")
    parser.add_argument("--namespace", help="where the operator runs (default: its name)")
    parser.add_argument("--image", help="the operator's container image "
                        "(default: <name>:latest)")
    parser.add_argument("--replicas", type=int,
                        help="default: 2, or 3 when the operator shards")
    parser.add_argument("--certificate-secret", metavar="NAME",
                        help="serve the kubernetes.io/tls Secret NAME (e.g. cert-manager's), "
                        "mounted; its CA is injected with cert-manager.io/inject-ca-from")
    parser.add_argument("--check", action="store_true",
                        help="first refuse if the operator is installed in another "
                        "namespace of the cluster (reads the current kubeconfig)")
    parser.add_argument("--kubeconfig", help="the cluster --check reads (default: "
                        "$KUBECONFIG, then ~/.kube/config, then in-cluster)")
    parser.add_argument("--no-namespace", dest="namespace_document", action="store_false",
                        help="leave the Namespace document out (it exists already)")
    parser.add_argument("--app-version", metavar="VERSION",
                        help="the app.kubernetes.io/version label (default: the image's tag)")
    parser.add_argument("--kustomize", metavar="DIR", help="write a kustomize base into DIR "
                        "instead of printing one stream")
    args = parser.parse_args(argv)
    if operator is None:
        app = args.app
        try:
            target = import_target(app, named_by="MODULE:ATTR")
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if not isinstance(target, Operator):
            print(f"error: {app} is a {type(target).__name__}, not an operator_kit.Operator",
                  file=sys.stderr)
            return 2
        operator = target
    assert app is not None
    namespace = args.namespace or operator.name
    certificate = (ExternalCertificate(args.certificate_secret)
                   if args.certificate_secret else None)
    try:
        docs = operator_manifests(operator, app=app, namespace=namespace,
                                  image=args.image or f"{operator.name}:latest",
                                  replicas=args.replicas, certificate=certificate,
                                  namespace_document=args.namespace_document,
                                  version=args.app_version)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        problems = _check(docs, namespace, operator.name, args.kubeconfig)
        if problems is None:
            return 2
        if problems:
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr)
            return 1
    if args.kustomize:
        for path in write_kustomize_base(args.kustomize, docs):
            print(f"wrote {path}", file=sys.stderr)
        return 0
    sys.stdout.write(to_yaml(docs))
    return 0


def _check(docs: list[dict[str, Any]], namespace: str, name: str,
           kubeconfig: str | None) -> list[str] | None:
    """The other installations' objects, one line each; None (said why) if unreadable."""
    from operator_kit.client import Api, api_client, error_message
    from operator_kit.installation import foreign_owners

    try:
        with api_client(kubeconfig) as client:
            return foreign_owners(Api(client), docs, namespace, name)
    except Exception as err:  # noqa: BLE001 - one line for any cause (no kubeconfig, down)
        print(f"error: --check cannot read the cluster: {error_message(err)}",
              file=sys.stderr)
        return None


if __name__ == "__main__":
    sys.exit(main())
