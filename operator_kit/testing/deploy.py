"""Deploy an operator "for real" without a kubelet: its manifests, its replicas as processes.

`LocalDeployment` applies everything ``python -m operator_kit.manifests`` writes for an
operator except its Deployment, and runs the replicas that Deployment would have run as
local processes instead, with the Deployment's command — each as the operator's own
ServiceAccount (a token from the TokenRequest API), so the generated RBAC is exactly what
they may do.

An operator with webhooks runs under gunicorn. The webhook Service becomes an
ExternalName pointing at ``localhost``, so the API server calls the generated,
service-based webhook configurations on the replicas' one TLS port (gunicorn's
``reuse_port`` lets them share it, as pods share a Service). The replicas share one
certificate through `WebhookCertificate.shared`, exactly as in a cluster.

An operator without webhooks runs its own command line (``python -m operator_kit``,
`Operator.main`); each replica serves its probes and metrics over HTTP on ports of its
own on 127.0.0.1 (`Replica.probe_port`, `Replica.metrics_port`), where a pod has 8081 and
8080.

Used by README's main command, the end-to-end run and the RBAC tests; a generated
project's own end-to-end test can use it the same way.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit.localcluster.plane import free_port
from operator_kit.manifests._deploy import GUNICORN_ARGS, OPERATOR_COMMAND, operator_manifests
from operator_kit.operator import Operator
from operator_kit.settings import ENV
from operator_kit.testing.cluster import Namespace, TestCluster, eventually

FIELD_MANAGER = "operator-kit-local-deploy"


def service_account_kubeconfig(cluster: TestCluster, namespace: str, name: str, path: Path,
                               *, expiration: int = 3600) -> Path:
    """Write a kubeconfig that acts as ServiceAccount `namespace/name` (TokenRequest)."""
    core = client.CoreV1Api(cluster.client)
    token = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": expiration}}).status.token
    source = cluster.client.configuration
    ca = source.ssl_ca_cert
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {
            "server": source.host, **({"certificate-authority": ca} if ca else {})}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {
            "cluster": "cluster", "user": name, "namespace": namespace}}],
        "current-context": name,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(config, handle)
    return path


class Replica:
    """One process serving the operator (a gunicorn master, or the operator's own command
    line); its output is kept for post-mortems. `probe_port` and `metrics_port` are where
    the operator's own command line serves ``/livez``, ``/readyz`` and ``/metrics`` over
    HTTP (None under gunicorn, which serves them on the deployment's TLS port)."""

    def __init__(self, name: str, command: Sequence[str], env: dict[str, str],
                 cwd: Path | None, *, probe_port: int | None = None,
                 metrics_port: int | None = None) -> None:
        self.name = name
        self.probe_port = probe_port
        self.metrics_port = metrics_port
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            list(command), env=env, cwd=cwd, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                        name=f"replica-{name}-log", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    @property
    def pid(self) -> int:
        """The process id of the replica (its gunicorn master, under gunicorn)."""
        return self.process.pid

    def output(self) -> str:
        """Everything the replica wrote to stdout and stderr so far."""
        return "".join(self.lines)

    def alive(self) -> bool:
        """True while the replica's process runs."""
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        """Send `signum` to the replica's process group (nothing if it has ended)."""
        if self.alive():
            os.killpg(self.process.pid, signum)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the replica, SIGKILL it after `timeout` seconds; its exit code."""
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait(10)
        self._reader.join(5)
        return self.process.returncode


class LocalDeployment:
    """An operator's manifests applied to `cluster`, its replicas run as local processes."""

    def __init__(self, cluster: TestCluster, operator: Operator, *, app: str,
                 namespace: str, replicas: int | None = None, port: int | None = None,
                 pythonpath: Sequence[str] = (), work_dir: Path | None = None,
                 documents: Sequence[dict[str, Any]] | None = None) -> None:
        """`replicas` defaults to the Deployment's (as `operator_manifests` chooses: 2
        with leader election, 3 when sharding, else 1). `port` is the replicas' shared
        TLS port under gunicorn (default: a free one). `documents` replaces the generated
        manifests (e.g. ``kubectl kustomize`` of an overlay over a base generated with
        ``webhook_port=port``): the replicas then run as its Deployment's
        ServiceAccount, with its command and environment."""
        self.cluster = cluster
        self.operator = operator
        self.app = app
        self.namespace = namespace
        self.port = port or free_port()
        self.pythonpath = list(pythonpath)
        self.dir = work_dir or Path(tempfile.mkdtemp(prefix=f"{operator.name}-"))
        self.replicas: list[Replica] = []
        if documents is None:
            documents = operator_manifests(operator, app=app, namespace=namespace,
                                           image="local", replicas=replicas,
                                           webhook_port=self.port)
        spec: dict[str, Any] = next((d["spec"] for d in documents
                                     if d["kind"] == "Deployment"), {})
        pod: dict[str, Any] = spec.get("template", {}).get("spec", {})
        self.replica_count: int = (replicas if replicas is not None
                                   else spec.get("replicas", 1))
        self.service_account = pod.get("serviceAccountName", operator.name)
        container: dict[str, Any] = next(iter(pod.get("containers", ())), {})
        command = container.get("command") or (
            ["gunicorn", *GUNICORN_ARGS] if operator.webhook_registrations()
            else list(OPERATOR_COMMAND))
        # True: gunicorn serving webhooks, probes and metrics on one TLS port; False: the
        # operator's own command line, probes and metrics over HTTP on ports of their own.
        self.gunicorn = command[0] == "gunicorn"
        # The Deployment's command, run with this interpreter.
        self.command = [sys.executable, *(("-m", "gunicorn") if self.gunicorn else ()),
                        *command[1:]]
        # The Deployment's plain values (names it tells the operator); the local ones win.
        self.environment = {e["name"]: e["value"] for e in container.get("env", ())
                            if "value" in e}
        self.documents = [copy.deepcopy(doc) for doc in documents
                          if doc["kind"] != "Deployment"]
        for doc in self.documents:
            if doc["kind"] == "Service":  # the API server reaches local processes
                doc["spec"] = {"type": "ExternalName", "externalName": "localhost",
                               "ports": [{"name": "https", "port": self.port,
                                          "protocol": "TCP"}]}

    # -- manifests -------------------------------------------------------------------------

    def apply(self) -> None:
        """Create the namespace if needed and server-side apply every document."""
        self.cluster.ensure_namespace(self.namespace)
        for doc in self.documents:
            if doc["kind"] == "CustomResourceDefinition":
                self.cluster.install_crd(doc)  # applies it and waits until it is served
            else:
                self.cluster.api.apply(doc, field_manager=FIELD_MANAGER)

    def delete(self) -> None:
        """Remove the cluster-scoped documents (the namespace goes with its own deletion).

        Those include the CRDs: deleting one deletes every object of its kind, in every
        namespace of the cluster. The guard policies go first, and only once the API
        server's admission no longer enforces them (`_wait_unguarded`) does the rest
        follow: a deleted policy is forgotten a moment later, not at once, and an
        installation in another namespace right after would otherwise be refused."""
        self.unguard()
        self._delete([d for d in reversed(self.documents)
                      if not d["metadata"].get("namespace") and d["kind"] != "Namespace"])

    def delete_custom_resources(self, timeout: float = 60.0) -> None:
        """Delete every object of the deployment's kinds, in every namespace, wait until
        they are gone, then delete their CRDs (`operator_kit.client.uninstall`, as
        ``--uninstall`` does). Call it while the replicas still run: their cleanups remove
        the finalizers; deleted after them, an object with a finalizer stays, and so do its
        CRD and namespace. AssertionError naming each object left after `timeout`."""
        from operator_kit.client.uninstall import finalizer_patch_command, uninstall

        crds = [d for d in self.documents if d["kind"] == "CustomResourceDefinition"]
        outcome = uninstall(self.cluster.api, crds, timeout=timeout)
        if outcome.leftovers:
            running = "running" if any(r.alive() for r in self.replicas) else "not running"
            raise AssertionError(
                f"custom objects still there after {timeout:g}s, the replicas {running}: "
                + "; ".join(o.describe() for o in outcome.leftovers)
                + f". Fix the cleanup, or drop a finalizer by hand (its cleanup skipped): "
                f"{finalizer_patch_command(outcome.leftovers[0])}")

    def unguard(self) -> None:
        """Delete the installation's admission policies (as an administrator may) and
        wait until the API server no longer enforces them."""
        policies = [d for d in reversed(self.documents)
                    if d["kind"].startswith("ValidatingAdmissionPolicy")]
        self._delete(policies)
        if policies:
            self._wait_unguarded()

    def _delete(self, docs: Sequence[dict[str, Any]]) -> None:
        for doc in docs:
            resource = self.cluster.api.resource_for(doc["apiVersion"], doc["kind"])
            try:
                self.cluster.api.request("DELETE", resource.path(None, doc["metadata"]["name"]))
            except ApiException as err:
                if err.status != 404:
                    raise

    def _wait_unguarded(self, timeout: float = 30.0) -> None:
        """Until a dry-run that re-points the ClusterRoleBinding (the documents' one: an
        overlay may have renamed it) at another namespace is admitted: the installation
        policy (`operator_kit.manifests._guard`) is gone."""
        name = next((d["metadata"]["name"] for d in self.documents
                     if d["kind"] == "ClusterRoleBinding"), self.operator.name)
        path = f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}"

        def admitted() -> bool:
            try:
                binding = self.cluster.api.get(path)
            except ApiException as err:
                if err.status == 404:
                    return True
                raise
            for subject in binding.get("subjects") or []:
                subject["namespace"] = "operator-kit-unguarded-probe"
            try:
                self.cluster.api.request("PUT", path, body=binding, query={"dryRun": "All"})
            except ApiException as err:
                if err.status == 403:
                    return False
                raise
            return True

        eventually(timeout, admitted, message="the deleted guard policies forgotten")

    # -- replicas --------------------------------------------------------------------------

    def kubeconfig(self) -> Path:
        """The operator's ServiceAccount as a kubeconfig (minted once per deployment)."""
        path = self.dir / "operator.kubeconfig"
        if not path.exists():
            service_account_kubeconfig(self.cluster, self.namespace, self.service_account,
                                       path)
        return path

    def start(self, count: int | None = None, **extra_env: str) -> list[Replica]:
        """Start replicas (default: as many as the Deployment asks for)."""
        started = []
        for _ in range(count or self.replica_count):
            index = len(self.replicas)
            env = dict(os.environ)
            env.update(self.environment)
            env.update(
                KUBECONFIG=str(self.kubeconfig()),
                POD_NAME=f"{self.operator.name}-{index}",
                POD_NAMESPACE=self.namespace,
                OPERATOR_KIT_APP=self.app,
                PYTHONPATH=os.pathsep.join(
                    [*self.pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])]),
            )
            ports: dict[str, int] = {}
            if self.gunicorn:
                env.update(OPERATOR_KIT_BIND=f"127.0.0.1:{self.port}",
                           OPERATOR_KIT_TLS_DIR=str(self.dir / f"tls-{index}"))
            else:  # a port of its own for each, where every pod has :8081 and :8080
                ports = {"probe_port": free_port(), "metrics_port": free_port()}
                env[ENV["health_probe_bind_address"]] = f"127.0.0.1:{ports['probe_port']}"
                env[ENV["metrics_bind_address"]] = f"127.0.0.1:{ports['metrics_port']}"
            env.update(extra_env)
            env.pop("OPERATOR_KIT_TLS_CERT", None)
            env.pop("OPERATOR_KIT_TLS_KEY", None)
            replica = Replica(f"{self.operator.name}-{index}", self.command, env, cwd=None,
                              **ports)
            self.replicas.append(replica)
            started.append(replica)
        return started

    def leader(self) -> Replica | None:
        """The replica whose POD_NAME holds the Lease now."""
        lease = self.lease()
        holder = (lease or {}).get("spec", {}).get("holderIdentity")
        return next((r for r in self.replicas if r.name == holder and r.alive()), None)

    def lease(self) -> Any:
        """The operator's Lease (named and placed as `Operator.start` does), or None."""
        election = self.operator.leader_election
        name = (election.lease_name if election else "") or self.operator.name
        namespace = (election.namespace if election else None) or self.namespace
        return Namespace(namespace, self.cluster).get("coordination.k8s.io/v1", "Lease", name)

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Wait until the replicas answer /livez (over TLS on the shared port under
        gunicorn, else each on its probe port), or fail with their logs."""
        import ssl
        import urllib.request

        def answers(url: str) -> bool:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # reachability only; the API server checks TLS
            with urllib.request.urlopen(url, context=context, timeout=3) as response:
                return bool(response.status == 200)

        def serving() -> bool:
            for replica in self.replicas:
                if not replica.alive():
                    raise AssertionError(f"{replica.name} exited:\n{replica.output()[-3000:]}")
            if self.gunicorn:
                return answers(f"https://127.0.0.1:{self.port}/livez")
            return all(answers(f"http://127.0.0.1:{replica.probe_port}/livez")
                       for replica in self.replicas)

        where = (f"on port {self.port}" if self.gunicorn else "on their probe ports")
        try:
            eventually(timeout, serving, message=f"replicas serving {where}")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.logs()}") from None

    def logs(self) -> str:
        """Every replica's output under a header with its name and exit code (for a failing test's
        report)."""
        return "\n".join(f"===== {r.name} (exit {r.process.poll()}) =====\n{r.output()}"
                         for r in self.replicas)

    def stop(self) -> None:
        """Stop every replica (SIGTERM, then SIGKILL)."""
        for replica in self.replicas:
            replica.stop()

    def __enter__(self) -> LocalDeployment:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
