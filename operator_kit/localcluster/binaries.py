"""Finding or building the control plane's binaries, for a chosen Kubernetes version.

Order of preference:
1. ``OPERATOR_KIT_BINARIES`` (or envtest's ``KUBEBUILDER_ASSETS``): a folder holding
   ``etcd`` and ``kube-apiserver``, and optionally ``kube-controller-manager`` and
   ``kubectl``. Nothing is built (and no version is chosen: the folder's binaries run).
2. The cache, ``$XDG_CACHE_HOME/operator_kit/bin/<component>-<version>/`` (default
   ``~/.cache``): built once per version, reused in seconds.
3. A build with the installed Go. The ``k8s.io/kubernetes`` module cannot be
   ``go install``-ed (its go.mod replaces its staging modules with local paths), so a
   wrapper module is generated for the chosen version from that version's own go.mod:
   the same ``go`` and ``godebug`` lines, and every staging module it replaces pinned to
   its published ``v0.Y.Z``. The commands are ``tool`` dependencies, so one ``go build``
   compiles the three Kubernetes binaries and shares their packages. etcd is built the
   same way from ``go.etcd.io/etcd/server/v3``. Builds run niced, with Go's parallelism
   capped at the machine's cores; Go's module and build caches stay in their usual places.

The version is ``--kubernetes-version`` on the command line, else
``OPERATOR_KIT_KUBERNETES_VERSION``, else `DEFAULT_KUBERNETES_VERSION`. ``1.37``,
``1.37.x`` and ``v1.37.2`` are all accepted; a minor alone means the patch release
pinned in `SUPPORTED`.
"""

from __future__ import annotations

import fcntl
import json
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

from operator_kit.settings import UsageError, env_int

VERSION_ENV = "OPERATOR_KIT_KUBERNETES_VERSION"
JOBS_ENV = "OPERATOR_KIT_BUILD_JOBS"


@dataclass(frozen=True)
class Release:
    """A Kubernetes release and the etcd it runs with."""

    kubernetes: str  # "v1.37.2"
    etcd: str  # "v3.7.3"

    @property
    def minor(self) -> str:
        """``"1.37"``."""
        return ".".join(self.kubernetes.lstrip("v").split(".")[:2])


# Each supported minor: the patch release that "1.Y" and "1.Y.x" build, and the etcd to run
# with it (the newest patch of the etcd minor that minor's kubeadm names as its default:
# 3.6 for 1.35 and 1.36, 3.7 for 1.37).
SUPPORTED: dict[str, Release] = {
    "1.35": Release("v1.35.4", "v3.6.16"),
    "1.36": Release("v1.36.3", "v3.6.16"),
    "1.37": Release("v1.37.2", "v3.7.3"),
}
DEFAULT_KUBERNETES_VERSION = SUPPORTED["1.37"].kubernetes
# The default release's versions, under the names earlier releases exported.
KUBERNETES_VERSION = DEFAULT_KUBERNETES_VERSION
ETCD_VERSION = SUPPORTED["1.37"].etcd

_KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kubectl")
# A node's binaries (``up --node``): built from the same wrapper module, into a folder of
# their own so that adding them never invalidates a cached plane.
_NODE_COMMANDS = ("kubelet", "kube-scheduler")
# The pause image's program: a sandbox's first process, which only waits to be stopped
# and reaps orphans.
PAUSE_SOURCE = """package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tsignal.Ignore(syscall.SIGCHLD)
\tstop := make(chan os.Signal, 1)
\tsignal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
\t<-stop
}
"""
_VERSION = re.compile(r"^v?1\.(\d+)(?:\.(\d+|x))?$")


class BinariesError(RuntimeError):
    """The control plane's binaries could not be found or built."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path | None
    kubectl: Path | None
    # The release they were built for; None for a folder the user named (unknown).
    kubernetes_version: str | None = None

    def missing(self) -> list[str]:
        """Optional binaries that are absent, by name."""
        absent = []
        if self.kube_controller_manager is None:
            absent.append("kube-controller-manager")
        if self.kubectl is None:
            absent.append("kubectl")
        return absent


def supported_versions() -> str:
    return ", ".join(f"{minor}.x ({r.kubernetes})" for minor, r in SUPPORTED.items())


def resolve(version: str | None = None) -> Release:
    """The release to build for a version as a user writes it (None: env var, then default).

    ``1.35``, ``1.35.x``, ``v1.35.4`` and ``1.35.4`` are accepted for each supported minor;
    any patch release of a supported minor may be named exactly.
    """
    source = "--kubernetes-version"
    if version is None:
        version = os.environ.get(VERSION_ENV) or None
        source = VERSION_ENV
    if version is None:
        return SUPPORTED[".".join(DEFAULT_KUBERNETES_VERSION.lstrip("v").split(".")[:2])]
    found = _VERSION.match(version.strip())
    if found is None:
        raise BinariesError(
            f"{source}={version!r} is not a Kubernetes version: write it like 1.37, 1.37.x "
            f"or v1.37.2 (supported: {supported_versions()})"
        )
    minor = f"1.{found[1]}"
    pinned = SUPPORTED.get(minor)
    if pinned is None:
        raise BinariesError(
            f"{source}={version!r}: Kubernetes {minor} is not supported; "
            f"pick one of {supported_versions()}"
        )
    if found[2] is None or found[2] == "x":
        return pinned
    return Release(f"v{minor}.{found[2]}", pinned.etcd)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "operator_kit" / "bin"


def cache_folders(release: Release) -> tuple[Path, Path]:
    """Where `release`'s binaries are cached: ``kubernetes-v1.Y.Z/`` (kube-apiserver,
    kube-controller-manager, kubectl) and ``etcd-v3.Y.Z/`` (etcd), each complete once it
    holds a ``.complete`` marker. Releases sharing an etcd share its folder."""
    return cache_dir() / f"kubernetes-{release.kubernetes}", cache_dir() / f"etcd-{release.etcd}"


def node_cache_folder(release: Release) -> Path:
    """Where `release`'s node binaries are cached: ``kubernetes-node-v1.Y.Z/`` (kubelet,
    kube-scheduler and the pause program), complete once it holds ``.complete``."""
    return cache_dir() / f"kubernetes-node-{release.kubernetes}"


def is_cached(release: Release) -> bool:
    """True when `release` runs without building anything."""
    return all((folder / ".complete").exists() for folder in cache_folders(release))


def node_missing(version: str | None = None) -> str | None:
    """Why a node cannot start without building first (None: its binaries are in
    ``OPERATOR_KIT_BINARIES``, or built and cached). Builds nothing."""
    folder = user_folder()
    names = ("kubelet", "kube-scheduler", "pause")
    if folder is not None:
        absent = [n for n in names if _executable(folder, n) is None]
        return f"{folder} (OPERATOR_KIT_BINARIES) has no {', '.join(absent)}" if absent else None
    cached = node_cache_folder(resolve(version))
    if not (cached / ".complete").exists():
        return (f"the node's binaries are not built ({cached}): `python -m "
                "operator_kit.localcluster build --node` builds them once (minutes)")
    return None


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


def user_folder() -> Path | None:
    """The folder ``OPERATOR_KIT_BINARIES`` (or ``KUBEBUILDER_ASSETS``) names, if any;
    `BinariesError` naming the variable when it is not a folder."""
    for var in ("OPERATOR_KIT_BINARIES", "KUBEBUILDER_ASSETS"):
        folder = os.environ.get(var)
        if folder:
            if not os.path.isdir(folder):
                what = "not a folder" if os.path.exists(folder) else "no such folder"
                raise BinariesError(
                    f"{var}={folder!r}: {what}; give the folder holding etcd and "
                    "kube-apiserver, or unset it to build them with Go")
            return Path(folder)
    return None


def find_or_build(version: str | None = None, *, log: bool = True) -> Binaries:
    """The binaries to run for `version` (see `resolve`), building them on first use."""
    folder = user_folder()
    if folder is not None:
        return from_folder(folder)
    release = resolve(version)
    k8s_folder, etcd_folder = cache_folders(release)
    k8s = _cached_build(
        k8s_folder.name,
        "k8s.io/kubernetes",
        release.kubernetes,
        [f"k8s.io/kubernetes/cmd/{c}" for c in _KUBERNETES_COMMANDS],
        _kubernetes_ldflags(release.kubernetes),
        log=log,
    )
    etcd = _cached_build(
        etcd_folder.name,
        "go.etcd.io/etcd/server/v3",
        release.etcd,
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
        kubernetes_version=release.kubernetes,
    )


@dataclass(frozen=True)
class NodeBinaries:
    """What a node runs beside the plane: kubelet and kube-scheduler of the plane's
    release, and the pause program the sandbox image holds."""

    kubelet: Path
    kube_scheduler: Path
    pause: Path


def find_or_build_node(version: str | None = None, *, log: bool = True) -> NodeBinaries:
    """The node's binaries for `version` (see `resolve`), built on first use.

    ``OPERATOR_KIT_BINARIES`` may hold ``kubelet``, ``kube-scheduler`` and ``pause``;
    otherwise they are built (once per release) from the wrapper module the plane's
    binaries come from, with the pause program as a package of that module."""
    folder = user_folder()
    if folder is not None:
        found = {n: _executable(folder, n) for n in ("kubelet", "kube-scheduler", "pause")}
        absent = [n for n, p in found.items() if p is None]
        if absent:
            raise BinariesError(
                f"{folder} (OPERATOR_KIT_BINARIES) has no executable {', '.join(absent)}: "
                "a node needs them; add them there, or unset the variable to build them")
        return NodeBinaries(*(p for p in found.values() if p is not None))
    release = resolve(version)
    target = _cached_build(
        node_cache_folder(release).name,
        "k8s.io/kubernetes",
        release.kubernetes,
        [f"k8s.io/kubernetes/cmd/{c}" for c in _NODE_COMMANDS],
        _kubernetes_ldflags(release.kubernetes),
        log=log,
        sources={"pause/main.go": PAUSE_SOURCE},
    )
    return NodeBinaries(kubelet=target / "kubelet", kube_scheduler=target / "kube-scheduler",
                        pause=target / "pause")


def _kubernetes_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = {
        "k8s.io/component-base/version.gitVersion": version,
        "k8s.io/component-base/version.gitMajor": major,
        "k8s.io/component-base/version.gitMinor": minor,
        "k8s.io/component-base/version.gitTreeState": "clean",
        "k8s.io/client-go/pkg/version.gitVersion": version,
        "k8s.io/client-go/pkg/version.gitMajor": major,
        "k8s.io/client-go/pkg/version.gitMinor": minor,
    }
    return "-s -w " + " ".join(f"-X {k}={v}" for k, v in flags.items())


# -- the wrapper module ----------------------------------------------------------------

_LOCAL_REPLACE = re.compile(r"^\s*(?:replace\s+)?(\S+)(?:\s+v\S+)?\s+=>\s+(\.{1,2}/\S*)\s*$")


def wrapper_gomod(upstream: str, module: str, version: str, packages: list[str]) -> str:
    """A go.mod that builds `packages` of `module`@`version` from published modules only.

    `upstream` is that version's own go.mod. Its ``go`` and ``godebug`` lines are kept
    (they set the language version and runtime defaults the release was tested with), and
    each module it replaces with a local path (``k8s.io/api => ./staging/src/k8s.io/api``,
    ``go.etcd.io/etcd/api/v3 => ../api``) is pinned to its release for `version`: the same
    version for etcd's siblings, ``v0.Y.Z`` for Kubernetes' staging modules.
    """
    go_line = next((ln.strip() for ln in upstream.splitlines() if ln.startswith("go ")), None)
    if go_line is None:
        raise BinariesError(f"{module}@{version}'s go.mod has no go directive")
    godebug = [ln.strip() for ln in upstream.splitlines() if ln.startswith("godebug ")]
    # etcd 3.6 guards modules it must never depend on with a replace to a folder that does
    # not exist (``go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY``): not a sibling to pin.
    local = sorted(
        {m[1] for ln in upstream.splitlines()
         if (m := _LOCAL_REPLACE.match(ln)) and m[1] != module
         and "FORBIDDEN_DEPENDENCY" not in m[2]}
    )
    if module == "k8s.io/kubernetes":
        if not local:
            raise BinariesError(f"{module}@{version}'s go.mod replaces no staging modules")
        pin = "v0." + version.lstrip("v").split(".", 1)[1]
    else:
        pin = version
    lines = [
        "// Generated by operator_kit.localcluster: builds released binaries of",
        f"// {module} {version} from published modules only.",
        "module operatorkit.local/wrapper",
        "",
        go_line,
        *godebug,
        "",
        f"require {module} {version}",
        "",
        "tool (",
        *(f"\t{p}" for p in packages),
        ")",
    ]
    if local:
        lines += ["", "replace (", *(f"\t{m} => {m} {pin}" for m in local), ")"]
    return "\n".join(lines) + "\n"


def _upstream_gomod(go: str, module: str, version: str, env: dict[str, str]) -> str:
    """`module`@`version`'s go.mod, through the Go module proxy (or Go's module cache)."""
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=cache_dir(),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        info = json.loads(result.stdout)
    except ValueError:
        info = {}
    path = info.get("GoMod")
    if result.returncode != 0 or not path:
        reason = info.get("Error") or result.stderr.strip() or "no go.mod found"
        raise BinariesError(
            f"cannot fetch {module}@{version} from the Go module proxy: {reason}. Check "
            "GOPROXY and the network, or set OPERATOR_KIT_BINARIES to prebuilt binaries."
        )
    return Path(path).read_text()


# -- building --------------------------------------------------------------------------


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock, so two processes never build the same thing at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_jobs() -> int:
    """Go's build parallelism: OPERATOR_KIT_BUILD_JOBS, else the cores this process may use."""
    try:
        jobs = env_int(JOBS_ENV, 0, minimum=1, what="the number of packages Go builds at once")
    except UsageError as err:
        raise BinariesError(str(err)) from None
    if jobs:
        return jobs
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def build_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for ``go``: static binaries, module mode, bounded parallelism.

    ``-p`` caps the packages compiled at once and ``GOMAXPROCS`` each compiler's own
    threads, both at `build_jobs`, so a build never runs more threads than cores; the
    user's own GOFLAGS come first, ours after them.
    """
    env = dict(os.environ if base is None else base)
    jobs = build_jobs()
    ours = f"-mod=mod -buildvcs=false -p={jobs}"
    env["GOFLAGS"] = f"{env['GOFLAGS']} {ours}" if env.get("GOFLAGS") else ours
    env["GOMAXPROCS"] = str(jobs)
    env["CGO_ENABLED"] = "0"
    return env


def _niced(cmd: list[str]) -> list[str]:
    """`cmd` at a lower priority (nice 10), so a build leaves room for interactive work."""
    nice = shutil.which("nice")
    return [nice, "-n", "10", *cmd] if nice else cmd


def _cached_build(
    name: str,
    module: str,
    version: str,
    packages: list[str],
    ldflags: str,
    *,
    log: bool,
    rename: dict[str, str] | None = None,
    sources: dict[str, str] | None = None,
) -> Path:
    target = cache_dir() / name
    done = target / ".complete"
    if done.exists():
        return target
    with file_lock(cache_dir() / f".{name}.lock"):
        if done.exists():  # another process built it while we waited
            return target
        go = _go()
        env = build_env()
        if log:
            print(
                f"building {name} with {go}, -p={build_jobs()} at nice 10 "
                f"(first use only, several minutes; cached in {target})",
                file=sys.stderr,
                flush=True,
            )
        gomod = wrapper_gomod(_upstream_gomod(go, module, version, env), module, version, packages)
        _check_go_version(go, gomod, module, version)
        with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=cache_dir()) as tmp:
            work = Path(tmp) / "src"
            work.mkdir()
            (work / "go.mod").write_text(gomod)
            local = []  # main packages of the wrapper module itself (./pause)
            for relative, text in (sources or {}).items():
                (work / relative).parent.mkdir(parents=True, exist_ok=True)
                (work / relative).write_text(text)
                local.append("./" + str(Path(relative).parent))
            out = Path(tmp) / "out"
            out.mkdir()
            build = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/",
                     *packages, *sorted(set(local))]
            for cmd in ([go, "mod", "tidy"], build):
                result = subprocess.run(
                    _niced(cmd),
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
            shutil.copy(work / "go.mod", out / "go.mod")
            (out / ".complete").write_text(f"{module} {version}\n")
            if target.exists():
                shutil.rmtree(target)
            out.rename(target)
    return target


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BinariesError(
            "The local control plane needs etcd, kube-apiserver and kube-controller-manager, "
            "and no Go toolchain was found to build them. Install Go "
            "(https://go.dev/doc/install), or set OPERATOR_KIT_BINARIES to a folder holding "
            "the binaries (envtest's assets work)."
        )
    return go


def _go_version(text: str) -> tuple[int, int] | None:
    found = re.search(r"go\s*(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def _check_go_version(go: str, gomod: str, module: str, version: str) -> None:
    """A clear error when the installed Go is older than the release's go directive and
    may not fetch a newer toolchain itself (GOTOOLCHAIN=local)."""
    wanted = _go_version(next(ln for ln in gomod.splitlines() if ln.startswith("go ")))
    out = subprocess.run(
        [go, "env", "GOVERSION", "GOTOOLCHAIN"], capture_output=True, text=True, check=False
    ).stdout.split()
    have = _go_version(out[0]) if out else None
    if wanted and have and have < wanted and out[1:2] == ["local"]:
        raise BinariesError(
            f"{module} {version} needs Go {wanted[0]}.{wanted[1]}+, found {out[0]} "
            "(and GOTOOLCHAIN=local). Upgrade Go, pick an older --kubernetes-version, or "
            "set OPERATOR_KIT_BINARIES to a folder holding the binaries."
        )
