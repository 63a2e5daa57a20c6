"""``python -m operator_kit.localcluster up|down|status|build [--dir D]``."""

from __future__ import annotations

import argparse
import os
import sys

from operator_kit.localcluster.binaries import (
    DEFAULT_KUBERNETES_VERSION,
    VERSION_ENV,
    BinariesError,
    find_or_build,
    resolve,
    supported_versions,
)
from operator_kit.localcluster.plane import LocalCluster, LocalClusterError, default_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
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
        type=float,
        default=180.0,
        help="seconds to wait for each component (default: %(default)s)",
    )
    parser.add_argument(
        "--kubernetes-version",
        default=None,
        help=f"Kubernetes to build or run: {supported_versions()}, or an exact v1.Y.Z "
        f"(default: ${VERSION_ENV}, else {DEFAULT_KUBERNETES_VERSION})",
    )
    args = parser.parse_args(argv)
    if args.command in ("up", "build"):
        try:
            resolve(args.kubernetes_version)  # a bad flag or env var: a usage error (exit 2)
        except BinariesError as err:
            parser.error(str(err))
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
        kubeconfig = cluster.up(timeout=args.timeout)
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
