"""``python -m operator_kit.manifests MODULE:ATTR``: print an operator's manifests.

The YAML stream holds everything the operator named by MODULE:ATTR needs, in apply
order — CRDs, RBAC, the webhook Service and the Deployment, webhook configurations —
ready for ``kubectl apply -f -``: the Namespace first (``--no-namespace`` leaves it
out). ``--kustomize DIR`` writes the same documents as a kustomize base instead (one
file per concern, a kustomization.yaml and a kustomizeconfig.yaml that keeps every
reference right under an overlay's namePrefix; see `operator_kit.manifests._kustomize`).
"""

from __future__ import annotations

import argparse
import sys

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
    parser.add_argument("--replicas", type=int, default=2, help="default: %(default)s")
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
    try:
        docs = operator_manifests(operator, app=app, namespace=namespace,
                                  image=args.image or f"{operator.name}:latest",
                                  replicas=args.replicas,
                                  namespace_document=args.namespace_document,
                                  version=args.app_version)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.kustomize:
        for path in write_kustomize_base(args.kustomize, docs):
            print(f"wrote {path}", file=sys.stderr)
        return 0
    sys.stdout.write(to_yaml(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
