"""The manifests command: its flags, and what it prints or writes (`run`).

``python -m operator_kit.manifests`` (`operator_kit.manifests.__main__`, which loads the
Operator named by MODULE:ATTR) and an Operator's own ``--manifests`` flag
(`operator_kit.cli`) both run it.
"""


from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operator_kit.manifests._deploy import operator_manifests
from operator_kit.manifests._kustomize import write_kustomize_base
from operator_kit.manifests._yaml import to_yaml
from operator_kit.webhooks.certificates import ExternalCertificate

if TYPE_CHECKING:
    from operator_kit.operator import Operator


def run(argv: list[str] | None = None, *, operator: Operator | None = None,
        app: str | None = None, load: Callable[[str], Operator] | None = None) -> int:
    """The command; an Operator's own ``--manifests`` passes itself as `operator`, and
    ``python -m operator_kit.manifests`` passes `load`, which imports ``MODULE:ATTR``."""
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
        assert load is not None, "run() needs an operator or a way to load one"
        try:
            operator = load(app)
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
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
    from operator_kit.client.installation import foreign_owners
    from operator_kit.client.transport import Api, api_client, error_message

    try:
        with api_client(kubeconfig) as client:
            return foreign_owners(Api(client), docs, namespace, name)
    except Exception as err:  # noqa: BLE001 - one line for any cause (no kubeconfig, down)
        print(f"error: --check cannot read the cluster: {error_message(err)}",
              file=sys.stderr)
        return None

