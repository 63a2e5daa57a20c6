"""``python -m operator_kit.localcluster up|down|status|build|image|packages [--dir D]``.

``up --feature-gates Name=true,...`` switches kube-apiserver's feature gates on or off
(`operator_kit.localcluster.gates`; e.g. ``ShardedListAndWatch=true`` for server-side
sharding); ``up --node`` adds a node (`operator_kit.localcluster.node`); ``image PROJECT`` builds an
operator project's image and loads it into that node (`operator_kit.localcluster.images`);
``packages`` prints the command installing the Debian packages a node needs;
``node-check`` says whether ``up --node`` can start here now, without building anything
(ci/demo.sh asks it to choose between Pods on a node and processes on the host).

Bad input — an unknown flag, a ``--timeout`` that is not a positive number, a bad
``--kubernetes-version`` or ``OPERATOR_KIT_KUBERNETES_VERSION``, a bad
``--feature-gates``, ``OPERATOR_KIT_BUILD_JOBS`` or ``OPERATOR_KIT_BINARIES`` —
is one line on stderr naming it, and exit code 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from operator_kit.localcluster.binaries import (
    DEFAULT_KUBERNETES_VERSION,
    VERSION_ENV,
    BinariesError,
    build_jobs,
    find_or_build,
    find_or_build_node,
    node_missing,
    resolve,
    supported_versions,
    user_folder,
)
from operator_kit.localcluster.gates import GateError, apiserver_args, gates_of, parse
from operator_kit.localcluster.images import ImageError, build_operator_image, default_reference
from operator_kit.localcluster.node import INSTALL_COMMAND, NodeError, check_machine
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
        choices=["up", "down", "status", "build", "image", "packages", "node-check"],
        help="up: start or reuse, print the kubeconfig path last; "
        "down: stop and remove; status: say whether it runs; "
        "build: only find or build the binaries; image: build PROJECT's image, load it "
        "into the node, print its reference; packages: print the command installing "
        "the Debian packages a node needs; node-check: exit 0 if up --node can start here "
        "now (root, the packages, the node's binaries built, no plane without a node in "
        "--dir), else 1 and the reason",
    )
    parser.add_argument("project", nargs="?", default=None,
                        help="image: the operator project's folder (its pyproject.toml)")
    parser.add_argument("--node", action="store_true",
                        help="up, build: a node too (kube-scheduler, containerd, kubelet): "
                        "the operator runs as real Pods; needs root and the packages")
    parser.add_argument("--tag", default=None,
                        help="image: its reference (default: operator-kit.local/NAME:VERSION "
                        "from the project's pyproject.toml)")
    parser.add_argument("--out", default=None,
                        help="image: where to write the image's tar (default: in the "
                        "plane's folder, images/)")
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
    parser.add_argument(
        "--feature-gates",
        default=None,
        help="up: kube-apiserver's feature gates, Name=true[,Name=false...], e.g. "
        "ShardedListAndWatch=true (default: none; a running plane is reused only with "
        "the same gates)",
    )
    args = parser.parse_args(argv)
    gates: dict[str, bool] = {}
    if args.feature_gates is not None:
        if args.command != "up":
            raise UsageError(f"--feature-gates is for up only, not {args.command}")
        try:
            gates = parse(args.feature_gates)
        except GateError as err:
            raise UsageError(str(err)) from None
    if args.command == "packages":
        print(INSTALL_COMMAND)
        return 0
    if args.command == "node-check":
        return _node_check(LocalCluster(args.dir))
    if args.command == "image":
        return _image(args.project, args.tag, args.out, LocalCluster(args.dir))
    if args.project is not None:
        raise UsageError(f"{args.command} takes no PROJECT ({args.project!r}); only image does")
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
            if args.node:
                node = find_or_build_node()
                for name in ("kubelet", "kube_scheduler", "pause"):
                    print(f"{name.replace('_', '-')}: {getattr(node, name)}")
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
        if reused and gates_of(cluster.state.apiserver_args) != gates:
            running = ",".join(f"{k}={str(v).lower()}" for k, v in
                               sorted(gates_of(cluster.state.apiserver_args).items()))
            print(f"error: the plane in {cluster.dir} runs with feature gates "
                  f"{running or '(none)'}, not the ones asked for: stop it first (down "
                  f"--dir {cluster.dir}), or pick another --dir", file=sys.stderr)
            return 1
        kubeconfig = cluster.up(timeout=timeout, node=args.node,
                                apiserver_args=apiserver_args(gates))
        state = "reusing" if reused else "started"
        version = cluster.state.kubernetes_version
        print(
            f"{state} local control plane{f' (Kubernetes {version})' if version else ''}"
            f"{' with a node' if cluster.state.node else ''}"
            f"{' with feature gates ' + args.feature_gates if gates else ''} at "
            f"{cluster.server}; logs in {cluster.dir}/logs",
            file=sys.stderr,
        )
        print(kubeconfig)
        return 0
    except (BinariesError, LocalClusterError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _node_check(cluster: LocalCluster) -> int:
    """0 when `up --node` on `cluster` would start without building anything; else 1,
    the reason on stderr. Cheap: it looks, it neither starts nor builds."""
    try:
        check_machine()
        reason = node_missing()
    except (NodeError, BinariesError) as err:
        reason = str(err)
    if reason is None and cluster.running() and not cluster.state.node:
        reason = (f"the plane in {cluster.dir} runs without a node (down --dir "
                  f"{cluster.dir} stops it)")
    if reason is not None:
        print(f"no node: {reason}", file=sys.stderr)
        return 1
    print("a node can run here", file=sys.stderr)
    return 0


def _image(project: str | None, tag: str | None, out: str | None,
           cluster: LocalCluster) -> int:
    """Build `project`'s image, load it into the plane's node, print its reference."""
    if project is None:
        raise UsageError("image needs the operator project's folder: image PROJECT")
    if tag is not None:
        name, _, version = tag.rpartition("/")[2].partition(":")
        if not name or version in ("", "latest"):
            raise UsageError(
                f"--tag {tag}: give a version other than latest, e.g. {tag.split(':')[0]}"
                ":0.1.0 (with latest, or none, the Deployment pulls the image again, "
                "imagePullPolicy Always, and an image loaded into the node cannot be pulled)")
    if not cluster.running() or not cluster.state.node:
        print(f"error: no plane with a node in {cluster.dir}: start one with `up --node "
              f"--dir {cluster.dir}` first", file=sys.stderr)
        return 1
    try:
        reference = tag or default_reference(Path(project))
        tar = Path(out) if out else cluster.dir / "images" / (
            reference.rsplit("/", 1)[-1].replace(":", "-") + ".tar")
        tar.parent.mkdir(parents=True, exist_ok=True)
        image_id = build_operator_image(Path(project).resolve(), reference, tar)
        cluster.node.import_image(tar)
    except (ImageError, NodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"built {image_id} ({tar}) and loaded it into the node", file=sys.stderr)
    print(reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
