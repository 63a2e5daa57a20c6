"""Finding or building the control plane's binaries.

Order of preference:
1. ``OPERATOR_KIT_BINARIES`` (or envtest's ``KUBEBUILDER_ASSETS``): a folder holding
   ``etcd`` and ``kube-apiserver``, and optionally ``kube-controller-manager`` and
   ``kubectl``. Nothing is built.
2. The cache, ``$XDG_CACHE_HOME/operator_kit/bin/<component>-<version>/`` (default
   ``~/.cache``): built once, reused in seconds.
3. A build with the installed Go from the wrapper modules shipped in ``gomod/``. The
   ``k8s.io/kubernetes`` module cannot be ``go install``-ed (its go.mod replaces its
   staging modules with local paths); the wrapper pins each staging module to its
   published release instead and names the commands as ``tool`` dependencies, so one
   ``go build`` compiles the three Kubernetes binaries and shares their packages.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
# The Go release the pinned Kubernetes version needs (its go.mod's go directive).
GO_MINIMUM = (1, 26)

_GOMOD = Path(__file__).parent / "gomod"


class BinariesError(RuntimeError):
    """The control plane's binaries could not be found or built."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path | None
    kubectl: Path | None

    def missing(self) -> list[str]:
        """Optional binaries that are absent, by name."""
        absent = []
        if self.kube_controller_manager is None:
            absent.append("kube-controller-manager")
        if self.kubectl is None:
            absent.append("kubectl")
        return absent


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "operator_kit" / "bin"


def _executable(folder: Path, name: str) -> Path | None:
    path = folder / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def from_folder(folder: Path) -> Binaries:
    """Binaries from a folder a user named; etcd and kube-apiserver are required."""
    etcd = _executable(folder, "etcd")
    apiserver = _executable(folder, "kube-apiserver")
    absent = [n for n, p in (("etcd", etcd), ("kube-apiserver", apiserver)) if p is None]
    if etcd is None or apiserver is None:
        raise BinariesError(
            f"{folder} has no executable {' or '.join(absent)}. Put etcd and kube-apiserver "
            "(and ideally kube-controller-manager and kubectl) there, or unset "
            "OPERATOR_KIT_BINARIES to build them with Go."
        )
    return Binaries(
        etcd=etcd,
        kube_apiserver=apiserver,
        kube_controller_manager=_executable(folder, "kube-controller-manager"),
        kubectl=_executable(folder, "kubectl"),
    )


def find_or_build(*, log: bool = True) -> Binaries:
    """The binaries to run, building them into the cache on first use."""
    for var in ("OPERATOR_KIT_BINARIES", "KUBEBUILDER_ASSETS"):
        folder = os.environ.get(var)
        if folder:
            return from_folder(Path(folder))
    k8s = _cached_build(
        f"kubernetes-{KUBERNETES_VERSION}",
        "kubernetes",
        [
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kubectl",
        ],
        _kubernetes_ldflags(),
        log=log,
    )
    etcd = _cached_build(
        f"etcd-{ETCD_VERSION}",
        "etcd",
        ["go.etcd.io/etcd/server/v3"],
        "-s -w",
        log=log,
        rename={"server": "etcd"},
    )
    return Binaries(
        etcd=etcd / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kubectl=k8s / "kubectl",
    )


def _kubernetes_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = {
        "k8s.io/component-base/version.gitVersion": KUBERNETES_VERSION,
        "k8s.io/component-base/version.gitMajor": major,
        "k8s.io/component-base/version.gitMinor": minor,
        "k8s.io/component-base/version.gitTreeState": "clean",
        "k8s.io/client-go/pkg/version.gitVersion": KUBERNETES_VERSION,
        "k8s.io/client-go/pkg/version.gitMajor": major,
        "k8s.io/client-go/pkg/version.gitMinor": minor,
    }
    return "-s -w " + " ".join(f"-X {k}={v}" for k, v in flags.items())


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock, so two processes never build the same thing at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cached_build(
    name: str,
    module: str,
    packages: list[str],
    ldflags: str,
    *,
    log: bool,
    rename: dict[str, str] | None = None,
) -> Path:
    target = cache_dir() / name
    done = target / ".complete"
    if done.exists():
        return target
    with _locked(cache_dir() / f".{name}.lock"):
        if done.exists():  # another process built it while we waited
            return target
        go = _go()
        if log:
            print(
                f"building {name} with {go} (first use only; cached in {target})",
                file=sys.stderr,
                flush=True,
            )
        with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=cache_dir()) as tmp:
            work = Path(tmp) / "src"
            shutil.copytree(_GOMOD / module, work)
            out = Path(tmp) / "out"
            out.mkdir()
            env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
            cmd = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/", *packages]
            result = subprocess.run(
                cmd,
                cwd=work,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                tail = "\n".join(result.stdout.splitlines()[-30:])
                raise BinariesError(
                    f"building {name} failed ({' '.join(cmd)}):\n{tail}\n"
                    "Set OPERATOR_KIT_BINARIES to a folder with prebuilt binaries instead."
                )
            for old, new in (rename or {}).items():
                (out / old).rename(out / new)
            (out / ".complete").write_text(KUBERNETES_VERSION + " " + ETCD_VERSION + "\n")
            if target.exists():
                shutil.rmtree(target)
            out.rename(target)
    return target


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BinariesError(
            "The local control plane needs etcd, kube-apiserver and kube-controller-manager, "
            f"and no Go toolchain was found to build them. Install Go "
            f"{'.'.join(map(str, GO_MINIMUM))}+ (https://go.dev/doc/install), or set "
            "OPERATOR_KIT_BINARIES to a folder holding the binaries (envtest's assets work)."
        )
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"go(\d+)\.(\d+)", out)
    if found and (int(found[1]), int(found[2])) < GO_MINIMUM:
        raise BinariesError(
            f"Kubernetes {KUBERNETES_VERSION} needs Go {'.'.join(map(str, GO_MINIMUM))}+, "
            f"found {out.strip()}. Upgrade Go, or set OPERATOR_KIT_BINARIES to a folder "
            "holding etcd, kube-apiserver and kube-controller-manager."
        )
    return go
