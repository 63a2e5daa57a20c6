"""``python -m operator_kit.localcluster up|down|status|build [--dir D]``.

Bad input — an unknown flag, a ``--timeout`` that is not a positive number, a bad
``--kubernetes-version`` or ``OPERATOR_KIT_KUBERNETES_VERSION``, ``OPERATOR_KIT_BUILD_JOBS``
or ``OPERATOR_KIT_BINARIES`` — is one line on stderr naming it, and exit code 2.
"""

from __future__ import annotations

import os
import sys

from operator_kit.localcluster.binaries import (
    DEFAULT_KUBERNETES_VERSION,
    VERSION_ENV,
    BinariesError,
    build_jobs,
    find_or_build,
    resolve,
    supported_versions,
    user_folder,
)
from operator_kit.localcluster.plane import LocalCluster, LocalClusterError, default_dir
from operator_kit.settings import ArgumentParser, UsageError, number


def main(argv: list[str] | None = None) -> int:
    """The command; returns its exit code, or raises SystemExit(2), as argparse does, after
    printing the one line of a usage error."""
    try:
        return _main(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _main(argv: list[str] | None) -> int:
    parser = ArgumentParser(
        prog="python -m operator_kit.localcluster",
        description="A local Kubernetes control plane on loopback "
        "(etcd, kube-apiserver, kube-controller-manager).",
    )
    parser.add_argument(
        "command",
        choices=["up", "down", "status", "build"],
        help="up: start or reuse, print the kubeconfig path last; "
        "down: stop and remove; status: say whether it runs; "
        "build: only find or build the binaries",
    )
    parser.add_argument(
        "--dir",
        default=str(default_dir()),
        help="folder for the plane's state (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        default="180",
        help="seconds to wait for each component (default: %(default)s)",
    )
    parser.add_argument(
        "--kubernetes-version",
        default=None,
        help=f"Kubernetes to build or run: {supported_versions()}, or an exact v1.Y.Z "
        f"(default: ${VERSION_ENV}, else {DEFAULT_KUBERNETES_VERSION})",
    )
    args = parser.parse_args(argv)
    timeout = number(args.timeout, "--timeout", above=0,
                     what="the seconds to wait for each component")
    if args.command in ("up", "build"):
        try:  # a bad flag or variable: a usage error (exit 2), before anything starts
            resolve(args.kubernetes_version)
            user_folder()
            build_jobs()
        except BinariesError as err:
            raise UsageError(str(err)) from None
    if args.kubernetes_version:
        os.environ[VERSION_ENV] = args.kubernetes_version
    cluster = LocalCluster(args.dir)
    try:
        if args.command == "build":
            binaries = find_or_build()
            print(f"kubernetes: {binaries.kubernetes_version or 'as found in the folder'}")
            for name in ("etcd", "kube_apiserver", "kube_controller_manager", "kubectl"):
                print(f"{name.replace('_', '-')}: {getattr(binaries, name) or 'missing'}")
            return 0
        if args.command == "down":
            cluster.down()
            print(f"stopped; removed {cluster.dir}", file=sys.stderr)
            return 0
        if args.command == "status":
            if cluster.running():
                print(f"running at {cluster.server}", file=sys.stderr)
                print(cluster.kubeconfig)
                return 0
            print(f"not running ({cluster.dir})", file=sys.stderr)
            return 1
        reused = cluster.running()
        kubeconfig = cluster.up(timeout=timeout)
        state = "reusing" if reused else "started"
        version = cluster.state.kubernetes_version
        print(
            f"{state} local control plane{f' (Kubernetes {version})' if version else ''} at "
            f"{cluster.server}; logs in {cluster.dir}/logs",
            file=sys.stderr,
        )
        print(kubeconfig)
        return 0
    except (BinariesError, LocalClusterError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
