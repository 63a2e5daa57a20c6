"""The manifests command: its flags, and what it prints or writes (`run`).

``python -m operator_kit.manifests`` (`operator_kit.manifests.__main__`, which loads the
Operator named by MODULE:ATTR) and an Operator's own ``--manifests`` flag
(`operator_kit.cli`) both run it.

A flag value the API server (or the kubelet) would refuse is refused first, as one line
on stderr naming the flag, with exit code 2 (`check_flags`): ``--namespace`` must be a
DNS-1123 label, ``--certificate-secret`` a Secret name (a DNS-1123 subdomain),
``--image`` an image reference, ``--app-version`` a label value, ``--replicas`` a whole
number of 0 or more, ``--kustomize`` and ``--helm`` a directory (or nothing yet), and only
one of them, ``--chart-version`` SemVer. So is an unknown or incomplete flag
(`operator_kit.settings.ArgumentParser`).

``--helm DIR`` writes a chart (`operator_kit.manifests._helm`) whose values default to the
other flags: ``--image``, ``--replicas``, ``--namespace`` (otherwise the release's),
``--certificate-secret`` (``certificate.mode: external``), ``--app-version`` (its
appVersion), ``--metrics-secure`` (``metrics.secure``).

``/metrics`` is secure by default, as in kubebuilder's scaffold: served over HTTPS only to
bearer tokens the API server allows to ``get /metrics`` (``OPERATOR_KIT_METRICS_SECURE=1``
in the Deployment, the operator's right to create TokenReviews and SubjectAccessReviews,
the ClusterRole ``<name>-metrics-reader`` to bind to Prometheus);
``--no-metrics-secure`` serves them over HTTP to anyone who reaches the port.

``--uninstall`` deletes instead of printing, in the order that cannot hang
(`operator_kit.client.uninstall`): the custom objects first, while the operator still
runs its cleanups, then the stream's documents.

``--fleet-member`` prints (or, with ``--kustomize``, writes) what each member cluster of
the operator's fleet needs instead (`operator_kit.manifests._fleet`); the flags about the
hub's installation (``--image``, ``--replicas``, ``--certificate-secret``, ``--check``,
``--helm``, ``--uninstall``, ``--service-monitor``, ``--metrics-secure``) are refused
with it.
"""


from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operator_kit.manifests._deploy import operator_manifests
from operator_kit.manifests._fleet import fleet_member_manifests
from operator_kit.manifests._helm import SEMVER, write_helm_chart
from operator_kit.manifests._kustomize import write_kustomize_base
from operator_kit.manifests._yaml import to_yaml
from operator_kit.settings import (
    LABEL_VALUE_RULE,
    ArgumentParser,
    UsageError,
    check_image,
    check_name,
    is_label_value,
    whole_number,
)
from operator_kit.webhooks.certificates import ExternalCertificate

if TYPE_CHECKING:
    from operator_kit.operator import Operator

PROG = "python -m operator_kit.manifests"


def check_flags(args: argparse.Namespace) -> None:
    """`UsageError` (one line naming the flag) for a flag value Kubernetes would refuse."""
    if args.namespace is not None:
        check_name(args.namespace, "--namespace", what="a namespace name")
    if args.certificate_secret is not None:
        check_name(args.certificate_secret, "--certificate-secret", what="a Secret name",
                   rule="subdomain")
    if args.image is not None:
        check_image(args.image, "--image")
    if args.app_version is not None and not is_label_value(args.app_version):
        raise UsageError(f"app.kubernetes.io/version {args.app_version!r} is not a valid "
                         f"label value: give --app-version {LABEL_VALUE_RULE}")
    if args.replicas is not None:
        whole_number(str(args.replicas), "--replicas", minimum=0,
                     what="the number of replicas")
    if args.timeout <= 0:
        raise UsageError(f"--timeout={args.timeout:g}: give the seconds --uninstall may "
                         "wait for the custom objects to go, more than 0")
    for flag, directory, what in (("--kustomize", args.kustomize, "the kustomize base"),
                                  ("--helm", args.helm, "the Helm chart")):
        if directory is not None and os.path.exists(directory) \
                and not os.path.isdir(directory):
            raise UsageError(f"{flag}={directory!r}: not a directory; give the directory to "
                             f"write {what} into")
    if args.kustomize is not None and args.helm is not None:
        raise UsageError("--kustomize and --helm: give one of them (each writes the same "
                         "documents in its own form)")
    if args.fleet_member:
        hub = [flag for flag, given in (
            ("--image", args.image), ("--replicas", args.replicas is not None),
            ("--certificate-secret", args.certificate_secret), ("--check", args.check),
            ("--helm", args.helm), ("--uninstall", args.uninstall),
            ("--service-monitor", args.service_monitor),
            ("--metrics-secure", args.metrics_secure is True)) if given]
        if hub:
            raise UsageError(f"--fleet-member with {', '.join(hub)}: those are about the "
                             "operator's installation in the hub; --fleet-member prints "
                             "what each member cluster needs (leave them out)")
    if args.chart_version is not None and not SEMVER.fullmatch(args.chart_version):
        raise UsageError(f"--chart-version={args.chart_version!r}: not a SemVer 2 version, "
                         "which Helm requires; give MAJOR.MINOR.PATCH, for example 0.1.0")


def run(argv: list[str] | None = None, *, operator: Operator | None = None,
        app: str | None = None, load: Callable[[str], Operator] | None = None,
        prog: str = PROG) -> int:
    """The command; an Operator's own ``--manifests`` passes itself as `operator` (and
    how it was run as `prog`), and ``python -m operator_kit.manifests`` passes `load`,
    which imports ``MODULE:ATTR``. A bad flag is one line on stderr and exit code 2."""
    try:
        return _run(argv, operator=operator, app=app, load=load, prog=prog)
    except UsageError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


def _run(argv: list[str] | None, *, operator: Operator | None, app: str | None,
         load: Callable[[str], Operator] | None, prog: str) -> int:
    parser = ArgumentParser(
        prog=prog,
        description="Print the manifests an operator needs, for kubectl apply -f -.")
    if operator is None:
        parser.add_argument("app", metavar="MODULE:ATTR",
                            help="the Operator, e.g. backup_operator:operator")
    parser.add_argument("--namespace", help="where the operator runs (default: its name)")
    parser.add_argument("--image", help="the operator's container image "
                        "(default: <name>:latest)")
    parser.add_argument("--replicas", type=int,
                        help="default: 2 with leader election, 3 when the operator "
                        "shards, else 1 (more than 1 needs leader election)")
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
    parser.add_argument("--helm", metavar="DIR", help="write a Helm chart into DIR instead "
                        "of printing one stream; the flags above are its values' defaults")
    parser.add_argument("--chart-version", metavar="VERSION", help="the Helm chart's version "
                        "(default: the app version if it is SemVer, else 0.1.0)")
    parser.add_argument("--uninstall", action="store_true",
                        help="delete the installation from the cluster instead of printing "
                        "it: every custom object first, while the operator still runs its "
                        "cleanups, then the manifests (reads the current kubeconfig)")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="how long --uninstall waits for the custom objects to go "
                        "(default 300)")
    parser.add_argument("--fleet-member", action="store_true",
                        help="print what each member cluster of the operator's fleet needs "
                        "instead: the fleet controllers' CRDs, a ServiceAccount with their "
                        "RBAC, and its token Secret")
    parser.add_argument("--service-monitor", action="store_true",
                        help="add a Prometheus Operator ServiceMonitor "
                        "(monitoring.coreos.com/v1) and the metrics Service it scrapes")
    parser.add_argument("--metrics-secure", action=argparse.BooleanOptionalAction,
                        help="serve /metrics only to bearer tokens the API server allows to "
                        "get /metrics: the operator may create TokenReviews and "
                        "SubjectAccessReviews, and the ClusterRole <name>-metrics-reader is "
                        "for you to bind to Prometheus (default: on, as kubebuilder's "
                        "scaffold; --no-metrics-secure serves them over HTTP to anyone who "
                        "reaches the port)")
    args = parser.parse_args(argv)
    check_flags(args)
    # On unless turned off (or --fleet-member, which installs no operator).
    metrics_secure = args.metrics_secure is not False and not args.fleet_member
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
        if args.fleet_member:
            docs = fleet_member_manifests(operator, namespace=namespace,
                                          namespace_document=args.namespace_document,
                                          version=args.app_version)
            if args.kustomize:
                for path in write_kustomize_base(args.kustomize, docs):
                    print(f"wrote {path}", file=sys.stderr)
            else:
                sys.stdout.write(to_yaml(docs))
            return 0
        docs = operator_manifests(operator, app=app, namespace=namespace,
                                  image=args.image or f"{operator.name}:latest",
                                  replicas=args.replicas, certificate=certificate,
                                  namespace_document=args.namespace_document,
                                  version=args.app_version,
                                  service_monitor=args.service_monitor,
                                  metrics_secure=metrics_secure)
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
    if args.uninstall:
        return _uninstall(docs, namespace, operator.name, args.kubeconfig, args.timeout)
    if args.helm:
        for path in write_helm_chart(args.helm, operator, app=app, image=args.image,
                                     namespace=args.namespace, replicas=args.replicas,
                                     certificate=certificate, app_version=args.app_version,
                                     chart_version=args.chart_version,
                                     metrics_secure=metrics_secure):
            print(f"wrote {path}", file=sys.stderr)
        return 0
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



def _uninstall(docs: list[dict[str, Any]], namespace: str, name: str,
               kubeconfig: str | None, timeout: float) -> int:
    """Run `operator_kit.client.uninstall` and say how it went: 0 when all is gone, 1
    (each object left named, with the way out) when custom objects stayed, 2 when the
    cluster cannot be read."""
    from operator_kit.client.transport import Api, api_client, error_message
    from operator_kit.client.uninstall import finalizer_patch_command, uninstall

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    try:
        with api_client(kubeconfig) as client:
            outcome = uninstall(Api(client), docs, timeout=timeout, say=say)
    except Exception as err:  # noqa: BLE001 - one line for any cause (no kubeconfig, 403)
        say(f"error: --uninstall: {error_message(err)}")
        return 2
    if outcome.leftovers:
        for obj in outcome.leftovers:
            say(f"error: {obj.describe()} after {timeout:g}s")
        say(f"nothing else was deleted: the operator removes these finalizers once each "
            f"cleanup has run, so it must be running (kubectl -n {namespace} get deployment "
            f"{name}); start it, or see why its cleanup fails in its log and Events, and run "
            f"this again. To give up a cleanup instead, drop the finalizer by hand:")
        for obj in outcome.leftovers:
            if obj.finalizers:
                say(f"  {finalizer_patch_command(obj)}")
        return 1
    say(f"uninstalled {name} from namespace {namespace}: {outcome.objects_deleted} custom "
        f"object(s) cleaned up, {len(outcome.documents_deleted)} document(s) deleted")
    return 0
