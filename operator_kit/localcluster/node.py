"""A node for the local plane (``up --node``): containerd, a bridge network and a kubelet.

The node keeps its files under the plane's folder::

    node/containerd/     containerd's config, root and state (network namespaces included);
                         ``restrict_oom_score_adj``: root here may not lower it
    node/cni/            the bridge network's config and its address allocations
    node/kubelet/        the kubelet's config, kubeconfig and certificates
    node/pod-logs/       the pods' logs

What cannot live there is named after the folder (`Node.ident`, 8 hex digits) so that
`Node.teardown` finds it again: ``/run/operator-kit-<ident>/`` (containerd's sockets and
the kubelet's root dir: a unix socket's path is at most 104 bytes), the bridge
``okb<ident>``, the pods' cgroups under ``/operator-kit-<ident>`` in every cgroup
hierarchy, the CNI network ``operator-kit-<ident>`` (its cache files in /var/lib/cni),
the NAT chain ``OKIT-<ident>``. The kubelet's own iptables chains (``KUBE-FIREWALL``,
``KUBE-KUBELET-CANARY``, ``KUBE-IPTABLES-HINT``, IPv4 and IPv6) and the kernel settings
it changes (`KERNEL_SETTINGS`, restored as found) are global: one node per machine.

Pods get the generated manifests' ordinary networking: an address on the bridge, and the
API server through the ``kubernetes`` Service's ClusterIP (what in-cluster clients use),
which the NAT chain forwards to the API server on loopback (``route_localnet`` on the
bridge alone). The API server reaches webhook Services at their pods' addresses
(``--enable-aggregator-routing``): no kube-proxy and no cluster DNS.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from operator_kit import _pki

# The Debian packages a node needs (``localcluster packages`` prints the command).
PACKAGES = ("containerd", "runc", "busybox-static", "iptables", "conntrack",
            "containernetworking-plugins")
INSTALL_COMMAND = f"apt-get update && apt-get install -y {' '.join(PACKAGES)}"
# The programs (and CNI plugins) each package brings, checked before a node starts.
_PROGRAMS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc",
             "iptables": "iptables", "ip6tables": "iptables", "conntrack": "conntrack",
             "ip": "iproute2"}
CNI_BIN_DIR = Path("/usr/lib/cni")
_CNI_PLUGINS = ("bridge", "host-local", "loopback")

NODE_NAME = "operator-kit-node"
COMPONENTS = ("kube-scheduler", "containerd", "kubelet")
# The controllers a node needs beyond the plane's own: Deployments become ReplicaSets and
# Pods, Services get endpoints, the registration taint goes once the node is Ready, and
# every namespace gets kube-root-ca.crt (the ServiceAccount volume mounts it).
CONTROLLERS = ("deployment-controller", "replicaset-controller", "endpointslice-controller",
               "endpoints-controller", "pod-garbage-collector-controller",
               "node-lifecycle-controller", "root-ca-certificate-publisher-controller",
               "disruption-controller")
SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service (the plane's --service-cluster-ip-range)
PAUSE_IMAGE = "operator-kit.local/pause:1"
# What the kubelet sets at start (protectKernelDefaults is off: it would refuse to start);
# recorded before and written back on teardown.
KERNEL_SETTINGS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys",
                   "kernel/keys/root_maxbytes")
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_MNT_DETACH = 2


class NodeError(RuntimeError):
    """This machine cannot run a node, or the node failed; the message says where to look."""


def apiserver_args(pki: Path) -> list[str]:
    """What kube-apiserver adds in node mode (besides the Node authorizer before RBAC):
    its client certificate towards kubelets (logs, exec), kubelets reached at their
    InternalIP (the bridge's address), and webhook Services called at their endpoints."""
    return [f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--enable-aggregator-routing=true"]


def check_machine() -> None:
    """`NodeError` with one line naming the first thing missing for a node: root, overlayfs,
    cgroups with a memory controller, a program (and its Debian package)."""
    if os.geteuid() != 0:
        raise NodeError("a node needs root (containerd, mounts, network namespaces): run as "
                        "root, or use the plane without --node")
    if "overlay" not in _read(Path("/proc/filesystems")).split():
        raise NodeError("a node needs the overlay filesystem (containerd's snapshotter): "
                        "`modprobe overlay`, or use the plane without --node")
    if not (_CGROUP_ROOT / "memory").is_dir() and "memory" not in _read(
            _CGROUP_ROOT / "cgroup.controllers").split():
        raise NodeError(f"a node needs cgroups with a memory controller under {_CGROUP_ROOT}; "
                        "none found: use the plane without --node")
    for program, package in _PROGRAMS.items():
        if shutil.which(program) is None:
            raise NodeError(f"a node needs {program} (Debian package {package}), not found: "
                            f"{INSTALL_COMMAND}")
    for plugin in _CNI_PLUGINS:
        if not (CNI_BIN_DIR / plugin).exists():
            raise NodeError(f"a node needs the CNI plugin {CNI_BIN_DIR / plugin} (Debian "
                            f"package containernetworking-plugins): {INSTALL_COMMAND}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class Node:
    """The node of the plane in `plane_dir`, its files and its commands."""

    def __init__(self, plane_dir: Path, *, apiserver_port: int, ports: dict[str, int],
                 binaries: dict[str, str]) -> None:
        self.plane_dir = plane_dir
        self.dir = plane_dir / "node"
        self.apiserver_port = apiserver_port
        self.ports = ports  # kubelet, kubelet-healthz, kube-scheduler
        self.binaries = binaries  # kubelet, kube-scheduler, pause
        self.ident = hashlib.sha256(str(plane_dir).encode()).hexdigest()[:8]
        self.bridge = f"okb{self.ident}"
        self.network = f"operator-kit-{self.ident}"
        self.chain = f"OKIT-{self.ident.upper()}"
        self.cgroup = f"operator-kit-{self.ident}"
        self.subnet = f"10.244.{int(self.ident, 16) % 250 + 1}.0/24"
        # The bridge's own address: the node's InternalIP, where the kubelet serves (a
        # kubelet refuses a loopback node IP).
        self.node_ip = self.subnet.rsplit(".", 1)[0] + ".1"

    # -- paths -------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        """containerd's sockets and the kubelet's root (its sockets too): a short path, as
        a unix socket's is at most 104 bytes."""
        return Path(f"/run/operator-kit-{self.ident}")

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.dir / "kubelet"

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """``ctr`` against this node's containerd, namespace k8s.io (the CRI's)."""
        return subprocess.run(["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, check=False, timeout=timeout)

    # -- preparing ---------------------------------------------------------------------

    def prepare(self, pki: Path) -> None:
        """Write the configs and certificates; make the bridge, the NAT chain and the
        pods' cgroup root; record the kernel settings the kubelet will change."""
        for folder in (self.run_dir, *(self.dir / sub for sub in (
                "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"))):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        settings = {k: _read(Path("/proc/sys") / k).strip() for k in KERNEL_SETTINGS}
        (self.dir / "kernel-settings.json").write_text(json.dumps(settings))
        self._write_containerd_config()
        self._write_cni_config()
        self._write_kubelet_files(pki)
        self._make_cgroup_root()
        self._make_bridge()

    def _write_containerd_config(self) -> None:
        base = self.dir / "containerd"
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        text = f"""version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{self.dir / 'cni' / 'net.d'}"
  max_conf_num = 1

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  Root = "{base / 'runc'}"
"""
        (base / "config.toml").write_text(text)

    def _write_cni_config(self) -> None:
        config = {
            "cniVersion": "1.0.0",
            "name": self.network,
            "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": True,
                "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]],
                         "routes": [{"dst": "0.0.0.0/0"}],
                         "dataDir": str(self.dir / "cni" / "ipam")},
            }],
        }
        (self.dir / "cni" / "net.d" / "10-operator-kit.conflist").write_text(
            json.dumps(config, indent=2))

    def _write_kubelet_files(self, pki: Path) -> None:
        ca = _pki.Issued(_pki.load_cert((pki / "ca.crt").read_bytes()),
                         _pki.load_key((pki / "ca.key").read_bytes()))
        client = _pki.issue(ca, f"system:node:{NODE_NAME}", organizations=("system:nodes",),
                            server=False, client=True)
        serving = _pki.issue(ca, NODE_NAME, dns_names=(NODE_NAME, "localhost"),
                             ip_addresses=(self.node_ip, "127.0.0.1"))
        files = {"client.crt": client.cert_pem, "client.key": client.key_pem,
                 "serving.crt": serving.cert_pem, "serving.key": serving.key_pem}
        for name, data in files.items():
            fd = os.open(self.kubelet_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": f"https://127.0.0.1:{self.apiserver_port}",
                "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "kubelet", "user": {
                "client-certificate": str(self.kubelet_dir / "client.crt"),
                "client-key": str(self.kubelet_dir / "client.key")}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kubelet"}}],
            "current-context": "local",
        }
        (self.kubelet_dir / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["kubelet-healthz"],
            "tlsCertFile": str(self.kubelet_dir / "serving.crt"),
            "tlsPrivateKeyFile": str(self.kubelet_dir / "serving.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "failCgroupV1": False,
            "failSwapOn": False,
            "podLogsDir": str(self.dir / "pod-logs"),
            "registerNode": True,
            "clusterDomain": "cluster.local",
            # A shared development machine: no evictions for its disk or memory, no
            # image garbage collection (the images here cannot be pulled again).
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 30,
        }
        (self.kubelet_dir / "config.yaml").write_text(yaml.safe_dump(config))

    def _hierarchies(self) -> list[Path]:
        """Every mounted cgroup hierarchy (v1 controllers, named ones, the unified one)."""
        seen: dict[str, Path] = {}
        if (_CGROUP_ROOT / "cgroup.controllers").exists():  # cgroup v2 alone
            return [_CGROUP_ROOT]
        for entry in sorted(_CGROUP_ROOT.iterdir()):
            if entry.is_dir():
                seen.setdefault(os.path.realpath(entry), entry)
        return list(seen.values())

    def _make_cgroup_root(self) -> None:
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup
            root.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset starts empty
                if (root / name).exists() and not _read(root / name).strip():
                    (root / name).write_text(_read(hierarchy / name))

    def _make_bridge(self) -> None:
        """The bridge before the first pod (the CNI plugin reuses it) and the NAT rule that
        sends the `kubernetes` Service's address to the API server on loopback."""
        gateway = f"{self.node_ip}/24"
        if not Path(f"/sys/class/net/{self.bridge}").exists():
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", gateway, "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        Path(f"/proc/sys/net/ipv4/conf/{self.bridge}/route_localnet").write_text("1")
        _run(["iptables", "-w", "-t", "nat", "-N", self.chain], check=False)
        _run(["iptables", "-w", "-t", "nat", "-F", self.chain])
        _run(["iptables", "-w", "-t", "nat", "-A", self.chain, "-d", f"{SERVICE_IP}/32",
              "-p", "tcp", "--dport", "443", "-j", "DNAT",
              "--to-destination", f"127.0.0.1:{self.apiserver_port}"])
        jump = ["PREROUTING", "-i", self.bridge, "-j", self.chain]
        if _run(["iptables", "-w", "-t", "nat", "-C", *jump], check=False).returncode != 0:
            _run(["iptables", "-w", "-t", "nat", "-A", *jump])

    # -- commands and health -----------------------------------------------------------

    def command(self, component: str, kubeconfig: Path, pki: Path) -> list[str]:
        if component == "containerd":
            return ["containerd", "--config", str(self.dir / "containerd" / "config.toml"),
                    "--log-level", "warn"]
        if component == "kubelet":
            return [self.binaries["kubelet"],
                    f"--config={self.kubelet_dir / 'config.yaml'}",
                    f"--kubeconfig={self.kubelet_dir / 'kubeconfig'}",
                    f"--root-dir={self.run_dir / 'kubelet'}",
                    f"--cert-dir={self.kubelet_dir / 'pki'}",
                    f"--hostname-override={NODE_NAME}",
                    f"--node-ip={self.node_ip}",
                    "--v=1"]
        if component == "kube-scheduler":
            return [self.binaries["kube-scheduler"],
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.ports['kube-scheduler']}",
                    f"--cert-dir={pki / 'kube-scheduler'}",
                    "--profiling=false",
                    "--v=1"]
        raise ValueError(f"unknown node component {component!r}; expected one of {COMPONENTS}")

    def healthy(self, component: str) -> bool:
        if component == "containerd":
            return self.socket.exists() and self.ctr("version", timeout=10).returncode == 0
        if component == "kubelet":
            url = f"http://127.0.0.1:{self.ports['kubelet-healthz']}/healthz"
            try:
                with urllib.request.urlopen(url, timeout=2.0) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.URLError):
                return False
        return True

    def import_image(self, tar: Path) -> None:
        """Load a docker-save-style tar into the node's containerd (the CRI's namespace)."""
        result = self.ctr("images", "import", "--no-unpack", str(tar), timeout=600)
        if result.returncode != 0:
            raise NodeError(f"importing {tar} into the node's containerd failed: "
                            f"{(result.stderr or result.stdout).strip()} (log: "
                            f"{self.plane_dir / 'logs' / 'containerd.log'})")

    # -- teardown ----------------------------------------------------------------------

    def stop_containers(self) -> None:
        """Kill and delete every task of this node's containerd (its shims then exit),
        then any process left in the pods' cgroups."""
        if self.socket.exists():
            # Every container and sandbox id, for the CNI cache files named after them.
            ids = self.ctr("containers", "ls", "-q", timeout=30).stdout.split()
            with open(self.dir / "container-ids", "a") as handle:
                handle.writelines(f"{i}\n" for i in ids)
            listed = self.ctr("tasks", "ls", "-q", timeout=30)
            for task in listed.stdout.split():
                self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", task, timeout=30)
            for task in listed.stdout.split():
                self.ctr("tasks", "delete", "-f", task, timeout=30)
        for _ in range(50):
            pids = self._cgroup_pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for hierarchy in self._hierarchies():
            for procs in (hierarchy / self.cgroup).rglob("cgroup.procs"):
                pids.update(int(p) for p in _read(procs).split())
        return pids

    def kill_shims(self) -> None:
        """Shims of this node's containerd that outlived it (found by its socket)."""
        marker = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and marker in cmdline:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def teardown(self) -> list[str]:
        """Remove what the node made outside its processes: mounts, the bridge (its veths
        went with the pods' network namespaces), iptables chains, cgroups, CNI cache files,
        log links; restore the kernel settings. Returns what could not be removed."""
        left: list[str] = []
        self.kill_shims()
        left += _unmount_under(self.plane_dir) + _unmount_under(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if Path(f"/sys/class/net/{self.bridge}").exists():
            if _run(["ip", "link", "del", self.bridge], check=False).returncode != 0:
                left.append(f"bridge {self.bridge}")
        jump = ["PREROUTING", "-i", self.bridge, "-j", self.chain]
        while _run(["iptables", "-w", "-t", "nat", "-D", *jump], check=False).returncode == 0:
            pass
        _run(["iptables", "-w", "-t", "nat", "-F", self.chain], check=False)
        _run(["iptables", "-w", "-t", "nat", "-X", self.chain], check=False)
        for tool in ("iptables", "ip6tables"):
            remove_chains(tool, KUBELET_CHAINS)
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup
            if root.exists():
                for folder in sorted((p for p in root.rglob("*") if p.is_dir()),
                                     key=lambda p: len(p.parts), reverse=True):
                    _rmdir(folder)
                if not _rmdir(root):
                    left.append(f"cgroup {root}")
        ids = set(_read(self.dir / "container-ids").split())
        results = Path("/var/lib/cni/results")  # <network>-<sandbox id>-<interface>
        for cache in sorted(results.glob("*")) if results.is_dir() else []:
            if cache.name.startswith(f"{self.network}-") or any(
                    f"-{i}-" in cache.name for i in ids):
                cache.unlink(missing_ok=True)
        logs = str(self.dir / "pod-logs")
        for link in Path("/var/log/containers").glob("*.log"):
            if link.is_symlink() and os.readlink(link).startswith(logs):
                link.unlink(missing_ok=True)
        # The kubelet's device-plugin socket ignores --root-dir; the shims' socket folder.
        Path("/var/lib/kubelet/device-plugins/kubelet.sock").unlink(missing_ok=True)
        for folder in (results, results.parent, Path("/var/log/containers"),
                       Path("/var/lib/kubelet/device-plugins"), Path("/var/lib/kubelet"),
                       Path("/run/containerd/s"), Path("/run/containerd")):
            _rmdir(folder)  # made by the CNI plugins, the kubelet, containerd: if empty
        self._restore_kernel_settings()
        return left

    def _restore_kernel_settings(self) -> None:
        try:
            settings = json.loads((self.dir / "kernel-settings.json").read_text())
        except (OSError, ValueError):
            return
        for key, value in settings.items():
            if value and key in KERNEL_SETTINGS:
                try:
                    (Path("/proc/sys") / key).write_text(value)
                except OSError:
                    pass


def remove_chains(tool: str, chains: tuple[str, ...]) -> None:
    """Delete `chains` from every table of `tool` (iptables or ip6tables), the rules that
    jump to them first."""
    for table in ("filter", "nat", "mangle"):
        listed = _run([tool, "-w", "-t", table, "-S"], check=False).stdout.splitlines()
        for rule in listed:
            words = shlex.split(rule)
            if words[:1] == ["-A"] and "-j" in words \
                    and words[words.index("-j") + 1] in chains:
                _run([tool, "-w", "-t", table, "-D", *words[1:]], check=False)
        for chain in chains:
            if f"-N {chain}" in listed:
                _run([tool, "-w", "-t", table, "-F", chain], check=False)
                _run([tool, "-w", "-t", table, "-X", chain], check=False)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _unmount_under(folder: Path) -> list[str]:
    """Lazily unmount every mount point under `folder`, deepest first."""
    prefix = str(folder).rstrip("/") + "/"
    libc = ctypes.CDLL(None, use_errno=True)
    left = []
    for _ in range(5):
        points = sorted({p for p in _mount_points() if p.startswith(prefix)},
                        key=len, reverse=True)
        if not points:
            return []
        for point in points:
            libc.umount2(point.encode(), _MNT_DETACH)
        left = points
    return [f"mount {p}" for p in left]


def _mount_points() -> list[str]:
    points = []
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(fields[4].encode().decode("unicode_escape"))
    return points


def _run(cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(cmd)} failed: {(result.stderr or result.stdout).strip()}")
    return result
