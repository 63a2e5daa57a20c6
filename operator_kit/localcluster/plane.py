"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

Everything lives in one folder (``--dir``)::

    state.json            ports and process ids: how a second ``up`` finds a running plane
    kubeconfig            admin access (client certificate in group system:masters)
    pki/                  CA, API server serving cert, admin cert, service-account key pair
    etcd/                 etcd's data
    logs/<component>.log  each process's output

Processes run in their own sessions so they outlive the ``up`` command; ``down`` (or
`LocalCluster.stop`) terminates each one it recorded and removes the folder. Each
component can be stopped and started again on the same ports, which lets fault tests
restart the API server or etcd under a running operator.

The controller manager runs only the controllers an operator's tests need and that
envtest lacks: garbage collection, namespace deletion, and ServiceAccounts with tokens.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from operator_kit import _pki
from operator_kit.localcluster import node as _node
from operator_kit.localcluster.binaries import (
    Binaries,
    find_or_build,
    find_or_build_node,
    resolve,
    user_folder,
)
from operator_kit.localcluster.images import pause_image

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)


class LocalClusterError(RuntimeError):
    """The local control plane could not be started or reached."""


def default_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "operator_kit" / "localcluster"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _State:
    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    controller_manager_port: int
    pids: dict[str, int] = field(default_factory=dict)
    binaries: dict[str, str | None] = field(default_factory=dict)
    apiserver_args: list[str] = field(default_factory=list)
    # The Kubernetes release the binaries were built for (None: a user's folder, or a
    # plane started before versions were recorded).
    kubernetes_version: str | None = None
    # With a node (``up --node``): the kubelet's and kube-scheduler's ports.
    node: bool = False
    node_ports: dict[str, int] = field(default_factory=dict)


class LocalCluster:
    """One local control plane rooted at a folder."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.dir = Path(directory) if directory else default_dir()
        self.dir = self.dir.resolve()
        self._state: _State | None = None

    # -- paths -------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def _state_file(self) -> Path:
        return self.dir / "state.json"

    def log_file(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"

    @property
    def state(self) -> _State:
        if self._state is None:
            if not self._state_file.exists():
                raise LocalClusterError(f"no local control plane in {self.dir}; run `up` first")
            self._state = _State(**json.loads(self._state_file.read_text()))
        return self._state

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.state.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.state.etcd_port}"

    def _save(self) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.state), indent=2))
        tmp.rename(self._state_file)

    # -- lifecycle ---------------------------------------------------------------------

    def running(self) -> bool:
        """True when this folder's plane is up and its API server answers."""
        if not self._state_file.exists():
            return False
        try:
            pids = self.state.pids
        except (ValueError, TypeError):
            return False
        alive = all(_alive(pids.get(c)) for c in ("etcd", "kube-apiserver"))
        return alive and self._healthy()

    @property
    def components(self) -> tuple[str, ...]:
        """The processes of this plane, in start order (a node's last)."""
        return COMPONENTS + (_node.COMPONENTS if self.state.node else ())

    @property
    def node(self) -> _node.Node:
        """This plane's node (`operator_kit.localcluster.node`); `up(node=True)` first."""
        s = self.state
        if not s.node:
            raise LocalClusterError(f"the plane in {self.dir} has no node: start it with "
                                    "`up --node`")
        return _node.Node(self.dir, apiserver_port=s.apiserver_port, ports=s.node_ports,
                          binaries={k: str(v) for k, v in s.binaries.items() if v})

    def up(self, *, timeout: float = 120.0, apiserver_args: list[str] | None = None,
           node: bool = False) -> Path:
        """Start the plane (or reuse the one running here); return the kubeconfig path.

        With `node`, a node too (`operator_kit.localcluster.node`): kube-scheduler, the
        controllers a node needs, containerd and a kubelet; `LocalClusterError` with one
        line when this machine cannot run one (nothing is started then)."""
        if node:
            try:
                _node.check_machine()
            except _node.NodeError as err:
                raise LocalClusterError(str(err)) from None
        if self.running():
            self._check_version()
            if node and not self.state.node:
                raise LocalClusterError(
                    f"the plane in {self.dir} runs without a node: stop it first "
                    f"(down --dir {self.dir}), or pick another --dir")
            self._wait_default_service_account(timeout)
            return self.kubeconfig
        if self._state_file.exists():  # a dead or half-dead plane: start clean
            self.down()
        binaries = find_or_build()
        node_binaries = find_or_build_node() if node else None
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        (self.dir / "logs").mkdir(exist_ok=True)
        self._state = _State(
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            apiserver_port=free_port(),
            controller_manager_port=free_port(),
            binaries={
                "etcd": str(binaries.etcd),
                "kube-apiserver": str(binaries.kube_apiserver),
                "kube-controller-manager": _str_or_none(binaries.kube_controller_manager),
                "kubectl": _str_or_none(binaries.kubectl),
            },
            apiserver_args=list(apiserver_args or []),
            kubernetes_version=binaries.kubernetes_version,
        )
        if node_binaries is not None:
            self.state.node = True
            self.state.node_ports = {"kubelet": free_port(), "kubelet-healthz": free_port(),
                                     "kube-scheduler": free_port()}
            self.state.binaries.update({"kubelet": str(node_binaries.kubelet),
                                        "kube-scheduler": str(node_binaries.kube_scheduler),
                                        "pause": str(node_binaries.pause)})
            self.state.apiserver_args[:0] = _node.apiserver_args(self.dir / "pki")
        self._write_pki()
        self._write_kubeconfig()
        self._save()
        try:
            if node_binaries is not None:
                self.node.prepare(self.dir / "pki")
            for component in self.components:
                if component == "kubelet":  # its sandboxes need the pause image
                    pause = Path(str(self.state.binaries["pause"]))
                    self.node.import_image(pause_image(pause, self.dir / "node"))
                self.start(component, timeout=timeout)
            self._wait_default_service_account(timeout)
            if node_binaries is not None:
                self._wait_node_ready(timeout)
        except BaseException:
            self.down()
            raise
        if binaries.kube_controller_manager is None:
            print(_NO_CONTROLLER_MANAGER, file=sys.stderr)
        return self.kubeconfig

    def _check_version(self) -> None:
        """A running plane is reused only for the Kubernetes version asked for."""
        running = self.state.kubernetes_version
        if running is None or user_folder() is not None:
            return
        wanted = resolve(None).kubernetes
        if wanted != running:
            raise LocalClusterError(
                f"the plane in {self.dir} runs Kubernetes {running}, not the {wanted} asked "
                f"for: stop it first (down --dir {self.dir}), or pick another --dir"
            )

    def down(self) -> None:
        """Stop every process this plane started and remove its folder."""
        left: list[str] = []
        readable = False
        if self._state_file.exists():
            try:
                readable = bool(self.state)
            except (ValueError, TypeError):  # a state file cut short: nothing to stop by it
                pass
        if readable:
            # Past reading the state, a failure is raised, not passed over: a node left
            # half torn down (its bridge, chains, kernel settings) must not go unnoticed.
            node = self.state.node
            for component in reversed(self.components):
                if component == "containerd":
                    self.node.stop_containers()
                self.stop(component)
            if node:
                left = self.node.teardown()
        if left:
            raise LocalClusterError(f"stopped the plane in {self.dir}, but could not remove: "
                                    f"{', '.join(left)}")
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        self._state = None

    def binaries(self) -> Binaries:
        b = self.state.binaries
        kcm, kubectl = b.get("kube-controller-manager"), b.get("kubectl")
        return Binaries(
            etcd=Path(str(b["etcd"])),
            kube_apiserver=Path(str(b["kube-apiserver"])),
            kube_controller_manager=Path(kcm) if kcm else None,
            kubectl=Path(kubectl) if kubectl else None,
        )

    def start(self, component: str, *, timeout: float = 120.0) -> None:
        """Start one component on its recorded ports and wait until it serves."""
        args = self._command(component)
        if args is None:
            return
        log = open(self.log_file(component), "ab")
        try:
            proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.dir,
            )
        finally:
            log.close()
        self.state.pids[component] = proc.pid
        self._save()
        ready: Callable[[], bool] = {
            "etcd": self._etcd_healthy,
            "kube-apiserver": self._healthy,
        }.get(component, lambda: True)
        if component in _node.COMPONENTS:
            node = self.node
            ready = lambda: node.healthy(component)  # noqa: E731
        deadline = time.monotonic() + timeout
        while True:
            code = proc.poll()
            if code is not None:
                raise LocalClusterError(
                    f"{component} exited with code {code} on start. "
                    f"Last lines of {self.log_file(component)}:\n{self.log_tail(component)}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"{component} did not become ready within {timeout:.0f}s. "
                    f"Last lines of {self.log_file(component)}:\n{self.log_tail(component)}"
                )
            time.sleep(0.2)

    def stop(self, component: str, *, grace: float = 10.0) -> None:
        """Stop one component (SIGTERM, then SIGKILL after `grace` seconds)."""
        pid = self.state.pids.pop(component, None)
        self._save()
        if pid is None or not _alive(pid):
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while _alive(pid):
                time.sleep(0.05)

    def restart(self, component: str, *, timeout: float = 120.0) -> None:
        self.stop(component)
        self.start(component, timeout=timeout)

    def log_tail(self, component: str, lines: int = 25) -> str:
        try:
            text = self.log_file(component).read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- commands ----------------------------------------------------------------------

    def _command(self, component: str) -> list[str] | None:
        s, pki = self.state, self.dir / "pki"
        if component in _node.COMPONENTS and s.node:
            return self.node.command(component, self.kubeconfig, pki)
        binary = s.binaries.get(component)
        if binary is None:
            return None
        if component == "etcd":
            peer = f"http://127.0.0.1:{s.etcd_peer_port}"
            return [
                binary,
                "--name=local",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--listen-metrics-urls=",
            ]
        if component == "kube-apiserver":
            return [
                binary,
                f"--etcd-servers={self.etcd_url}",
                f"--secure-port={s.apiserver_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The default (lease) reconciler of the `kubernetes` Service's endpoints
                # refuses a loopback address from 1.37 on; nothing here routes to it.
                "--endpoint-reconciler-type=none",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                # A node's kubelet is authorized as such (`node.apiserver_args`).
                f"--authorization-mode={'Node,RBAC' if s.node else 'RBAC'}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *s.apiserver_args,
            ]
        if component == "kube-controller-manager":
            return [
                binary,
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(CONTROLLERS + (_node.CONTROLLERS if s.node else ()))}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={s.controller_manager_port}",
                f"--cert-dir={pki / 'controller-manager'}",
                "--profiling=false",
                "--v=1",
            ]
        raise ValueError(f"unknown component {component!r}; expected one of {COMPONENTS}")

    # -- files -------------------------------------------------------------------------

    def _write_pki(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(mode=0o700, exist_ok=True)
        ca = _pki.new_ca("operator-kit-local-ca")
        server = _pki.issue(
            ca,
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=("127.0.0.1", "10.0.0.1"),
        )
        admin = _pki.issue(
            ca, "operator-kit-admin", organizations=("system:masters",), server=False, client=True
        )
        sa = _pki.new_key()
        files = {
            "ca.crt": ca.cert_pem,
            "ca.key": ca.key_pem,
            "apiserver.crt": server.cert_pem,
            "apiserver.key": server.key_pem,
            "admin.crt": admin.cert_pem,
            "admin.key": admin.key_pem,
            "sa.key": _pki.key_pem(sa),
            "sa.pub": _pki.public_key_pem(sa),
        }
        for name, data in files.items():
            path = pki / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)

    def _write_kubeconfig(self) -> None:
        pki = self.dir / "pki"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(pki / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(pki / "admin.crt"),
                        "client-key": str(pki / "admin.key"),
                    },
                }
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(config, handle, sort_keys=False)

    # -- health ------------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        pki = self.dir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET a path on the API server as admin; (status, body)."""
        request = urllib.request.Request(self.server + path)
        try:
            with urllib.request.urlopen(request, context=self._ssl(), timeout=timeout) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as err:
            return int(err.code), bytes(err.read())

    def _healthy(self) -> bool:
        try:
            status, _ = self.get("/readyz", timeout=2.0)
        except (OSError, ssl.SSLError):
            return False
        return status == 200

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2.0) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _wait_default_service_account(self, timeout: float) -> None:
        if self.state.binaries.get("kube-controller-manager") is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                status, _ = self.get("/api/v1/namespaces/default/serviceaccounts/default")
            except OSError:
                status = 0
            if status == 200:
                return
            time.sleep(0.3)
        raise LocalClusterError(
            "the default ServiceAccount did not appear within "
            f"{timeout:.0f}s: is kube-controller-manager running? Last lines of its log:\n"
            + self.log_tail("kube-controller-manager")
        )


    def _wait_node_ready(self, timeout: float) -> None:
        """Until the node reports Ready and carries no taint (the not-ready taint goes
        when node-lifecycle-controller sees it Ready)."""
        deadline = time.monotonic() + timeout
        path = f"/api/v1/nodes/{_node.NODE_NAME}"
        while time.monotonic() < deadline:
            try:
                status, body = self.get(path)
            except OSError:
                status, body = 0, b""
            if status == 200:
                found = json.loads(body)
                ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in found.get("status", {}).get("conditions", []))
                if ready and not found.get("spec", {}).get("taints"):
                    return
            if not _alive(self.state.pids.get("kubelet")):
                break
            time.sleep(0.5)
        raise LocalClusterError(
            f"node {_node.NODE_NAME} did not become Ready within {timeout:.0f}s: see "
            f"{self.log_file('kubelet')} and {self.log_file('containerd')}. Last lines of "
            f"the kubelet's log:\n{self.log_tail('kubelet')}")


_NO_CONTROLLER_MANAGER = (
    "warning: no kube-controller-manager among the binaries: running without it. Owned "
    "objects are not garbage collected, namespaces never finish deleting and no "
    "ServiceAccount (nor its token) is created. Add kube-controller-manager to "
    "OPERATOR_KIT_BINARIES for a complete plane."
)


def _str_or_none(path: Path | None) -> str | None:
    return str(path) if path else None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own exited children
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (FileNotFoundError, IndexError):
        return False
