"""The shared webhook certificate followed, healed and rotated by real gunicorn replicas.

The Backup sample runs as `LocalDeployment` runs it (its generated manifests, replicas as
the operator's ServiceAccount on one TLS port); 16 threads keep writing Backups (dry-run
creates, so every one is admitted through the mutating and validating webhooks, and every
other one is sent as v2, so the conversion webhook is called too) while the certificate
Secret is deleted, or rotated every few seconds. Not one write may be refused.
"""

from __future__ import annotations

import base64
import datetime
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backup_operator import operator
from cryptography import x509
from kubernetes.client.exceptions import ApiException

from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api, api_client
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.certkeeper import CertificateKeeper, Rotation, trusted_by

SAMPLE_DIR = str(Path(__file__).resolve().parents[2] / "samples" / "backup")
REG = "/apis/admissionregistration.k8s.io/v1"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/backups.example.com"
TARGETS = (f"{REG}/validatingwebhookconfigurations/backup-operator",
           f"{REG}/mutatingwebhookconfigurations/backup-operator", CRD)
WRITERS = 16


class Writers:
    """16 threads writing Backups through the webhooks until stopped; every refusal kept."""

    def __init__(self, cluster: TestCluster, namespace: str) -> None:
        self.api = Api(api_client(cluster.kubeconfig, pool_size=WRITERS + 4))
        self.namespace = namespace
        self.stop = threading.Event()
        self.done = 0
        self.refused: list[str] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._write, args=(i,), daemon=True,
                                         name=f"writer-{i}") for i in range(WRITERS)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _write(self, index: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            version = "v2" if n % 2 else "v1"
            spec: dict[str, Any] = ({"source": {"database": "db"}} if version == "v2"
                                    else {"database": "db"})
            body = {"apiVersion": f"example.com/{version}", "kind": "Backup",
                    "metadata": {"name": f"w{index}-{n}"},
                    "spec": {**spec, "schedule": "0 3 * * *"}}
            sent = time.strftime("%H:%M:%S")
            try:
                answer = self.api.request(
                    "POST", f"/apis/example.com/{version}/namespaces/{self.namespace}/backups",
                    body=body, query={"dryRun": "All"}, timeout=30)
                assert answer["metadata"]["labels"]["example.com/managed"] == "true"
            except (ApiException, AssertionError, OSError) as err:
                with self._lock:
                    detail = getattr(err, "body", None) or str(err)
                    self.refused.append(
                        f"sent {sent}, refused {time.strftime('%H:%M:%S')}: {version} "
                        f"{type(err).__name__}: {str(detail)[:400]}")
            with self._lock:
                self.done += 1
            time.sleep(0.05)


def ca_bundles(cluster: TestCluster) -> list[str | None]:
    out: list[str | None] = []
    for path in TARGETS:
        obj = cluster.api.get(path)
        if "webhooks" in obj:
            out += [w["clientConfig"].get("caBundle") for w in obj["webhooks"]]
        else:
            out.append(obj["spec"]["conversion"]["webhook"]["clientConfig"].get("caBundle"))
    return out


def served_files_trusted(cluster: TestCluster, deployment: LocalDeployment) -> bool:
    """Whether every replica's served certificate is trusted by every caBundle now."""
    now = datetime.datetime.now(datetime.timezone.utc)
    bundles = ca_bundles(cluster)
    for index in range(len(deployment.replicas)):
        pem = (deployment.dir / f"tls-{index}" / "tls.crt").read_bytes()
        served = WebhookCertificate(b"", pem, b"")
        if not all(trusted_by(served, b, now) for b in bundles):
            return False
    return True


def sample_served(port: int, count: int = 20) -> set[bytes]:
    """The certificates `count` fresh TLS connections are served."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    seen = set()
    import socket

    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            seen.add(der)
    return seen


@pytest.fixture
def deployment(cluster: TestCluster, namespace: Namespace) -> Iterator[LocalDeployment]:
    deployed = LocalDeployment(cluster, operator, app="backup_operator:operator",
                               namespace=namespace.name, replicas=2, pythonpath=[SAMPLE_DIR])
    deployed.apply()
    try:
        with deployed:
            yield deployed
    finally:
        deployed.delete()


def secret_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets/backup-operator-webhook-tls"


def test_secret_deleted_while_two_replicas_serve_then_a_third_starts_refuses_no_write(
        cluster: TestCluster, namespace: Namespace, deployment: LocalDeployment) -> None:
    env = {"OPERATOR_KIT_CERT_POLL_INTERVAL": "1", "OPERATOR_KIT_CERT_SETTLE": "0.5"}
    deployment.start(2, **env)
    deployment.wait_serving()
    eventually(60, lambda: served_files_trusted(cluster, deployment))
    with Writers(cluster, namespace.name) as writers:
        eventually(30, lambda: writers.done > 50, message="writes flowing")
        cluster.api.request("DELETE", secret_path(namespace.name))
        deleted = time.monotonic()
        deployment.start(1, **env)
        deployment.wait_serving()
        eventually(30, lambda: namespace.get("v1", "Secret", "backup-operator-webhook-tls"))
        # Bound: every replica serves a certificate the caBundles trust within 10 s.
        eventually(10, lambda: served_files_trusted(cluster, deployment),
                   message="every replica trusted")
        healed = time.monotonic() - deleted
        secret = WebhookCertificate.from_secret(
            cluster.api.get(secret_path(namespace.name)))
        eventually(10, lambda: sample_served(deployment.port) == {
            ssl.PEM_cert_to_DER_cert(secret.cert_pem.decode())},
            message="every fresh connection gets the Secret's certificate")
        time.sleep(3)  # keep writing a while after the heal
    logs = deployment.logs()
    path = ("written back" if "is gone; writing back" in logs else
            "a new CA" if "made a new CA" in logs else "?")
    print(f"\nSecret deleted: healed by {path} in {healed:.1f} s; "
          f"{writers.done} writes, {len(writers.refused)} refused")
    assert not writers.refused, "\n".join(writers.refused[:10]) + logs[-6000:]
    assert writers.done > 200


def test_rotation_every_few_seconds_under_load_refuses_no_write(
        cluster: TestCluster, namespace: Namespace, deployment: LocalDeployment) -> None:
    # Renewed every 8 s; the CA at 24 s. Settle 3 s: on this 2-core machine under load, the
    # API server took 1-2 s to use a patched caBundle (0.5 s refused 18 of 1,390 writes).
    env = {"OPERATOR_KIT_CERT_LIFETIME": "12s", "OPERATOR_KIT_CA_LIFETIME": "36s",
           "OPERATOR_KIT_CERT_POLL_INTERVAL": "0.25", "OPERATOR_KIT_CERT_SETTLE": "3"}
    deployment.start(2, **env)
    deployment.wait_serving()
    leaves: set[bytes] = set()
    issuers: set[bytes] = set()
    served: set[bytes] = set()
    with Writers(cluster, namespace.name) as writers:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (len(leaves) < 5 or len(issuers) < 2):
            cert = WebhookCertificate.from_secret(cluster.api.get(secret_path(namespace.name)))
            leaves.add(cert.cert_pem)
            signer = cert.signer()
            if signer is not None:
                issuers.add(signer.fingerprint(signer.signature_hash_algorithm))  # type: ignore[arg-type]
            served |= sample_served(deployment.port, 3)
            time.sleep(0.2)
        eventually(5, lambda: served_files_trusted(cluster, deployment))
    logs = deployment.logs()
    print(f"\nrotation: {len(leaves) - 1} serving rotations, {len(issuers) - 1} CA rotations "
          f"(CAs that signed a served certificate), {len(served)} certificates served; "
          f"{writers.done} writes, {len(writers.refused)} refused")
    assert len(leaves) >= 4 and len(issuers) >= 2, logs[-6000:]
    assert len(served) >= 3
    assert not writers.refused, "\n".join(writers.refused[:10]) + logs[-6000:]
    assert "Traceback" not in logs, logs[-6000:]


# ---------------------------------------------------------------------- one keeper, in process


@pytest.fixture
def keeper_for(cluster: TestCluster, namespace: Namespace, tmp_path: Path,
               deployment: LocalDeployment) -> Any:
    def make(**kwargs: Any) -> CertificateKeeper:
        return CertificateKeeper(
            cluster.api, namespace.name, "backup-operator-webhook-tls", "backup-operator",
            tmp_path / f"tls-{time.monotonic_ns()}", validating=["backup-operator"],
            mutating=["backup-operator"], crds=["backups.example.com"],
            rotation=Rotation(poll_interval=2, settle=0), **kwargs)
    return make


def put_secret(cluster: TestCluster, namespace: str, data: dict[str, str]) -> None:
    path = secret_path(namespace)
    current = cluster.api.get(path)
    current["data"] = data
    cluster.api.request("PUT", path, body=current)


def cas(bundle: bytes) -> list[x509.Certificate]:
    return list(x509.load_pem_x509_certificates(bundle))


def test_a_replica_that_saw_nothing_makes_a_new_ca_but_keeps_trusting_the_served_one(
        cluster: TestCluster, namespace: Namespace, keeper_for: Any) -> None:
    first = keeper_for()
    first.sync()
    old_ca = first.installed.cas[0]
    cluster.api.request("DELETE", secret_path(namespace.name))
    second = keeper_for()  # a new replica: no memory of the deleted Secret
    second.sync()
    assert second.installed.cert_pem != first.installed.cert_pem
    assert old_ca in second.installed.cas and len(second.installed.cas) == 2
    now = datetime.datetime.now(datetime.timezone.utc)
    assert all(trusted_by(first.installed, b, now) and trusted_by(second.installed, b, now)
               for b in ca_bundles(cluster))
    first.sync()  # the old replica follows the new Secret
    assert first.installed == second.installed and first.ready()


def test_garbage_an_expired_certificate_and_another_services_are_each_replaced(
        cluster: TestCluster, namespace: Namespace, keeper_for: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "operator_kit")
    keeper = keeper_for()
    keeper.sync()
    good = keeper.installed
    # Garbage: what this replica last saw is written back.
    put_secret(cluster, namespace.name, {"tls.crt": base64.b64encode(b"junk").decode(),
                                         "tls.key": "eA==", "ca.crt": "eA=="})
    keeper.sync()
    assert "holds no usable webhook certificate" in caplog.text
    assert WebhookCertificate.from_secret(cluster.api.get(secret_path(namespace.name))) == good
    # Expired: renewed by the same CA, so nothing new needs trusting.
    expired = good.reissued("backup-operator.x.svc", ["backup-operator"],
                            lifetime=datetime.timedelta(seconds=1))
    put_secret(cluster, namespace.name, expired.to_secret("s", namespace.name)["data"])
    time.sleep(1.2)
    keeper.sync()
    assert "the serving certificate expired at" in caplog.text
    assert keeper.installed.cert_pem != expired.cert_pem
    assert keeper.installed.signer() == good.signer()
    # Another Service's certificate: never installed; replaced by one for ours.
    other = WebhookCertificate.generate("payments", namespace.name)
    put_secret(cluster, namespace.name, other.to_secret("s", namespace.name)["data"])
    keeper.sync()
    assert "a certificate for another Service?" in caplog.text
    assert keeper.installed.covers([f"backup-operator.{namespace.name}.svc"])
    assert keeper.ready()


def test_a_replica_whose_certificate_the_ca_bundle_does_not_trust_is_not_ready_and_says_why(
        cluster: TestCluster, namespace: Namespace, keeper_for: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    managed = keeper_for()
    managed.sync()
    foreign = WebhookCertificate.generate("x", "y")
    for path in TARGETS:  # someone else writes their CA into our caBundles
        obj = cluster.api.get(path)
        if "webhooks" in obj:
            for hook in obj["webhooks"]:
                hook["clientConfig"]["caBundle"] = base64.b64encode(foreign.ca_pem).decode()
        else:
            obj["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = \
                base64.b64encode(foreign.ca_pem).decode()
        cluster.api.request("PUT", path, body=obj)
    # A certificate that is not ours to manage (cert-manager's): only checked.
    observer = keeper_for(manage=False, recorder=EventRecorder(cluster.api, "backup-operator"))
    managed.installed.install(observer.directory, point_server=False)
    observer.sync()
    assert not observer.ready()
    assert "does not trust the certificate this replica serves" in (observer.problem or "")
    assert "reports not ready" in caplog.text
    events = eventually(10, lambda: [
        e for e in cluster.api.get("/api/v1/namespaces/default/events")["items"]
        if e["reason"] == "WebhookCertificateUntrusted" and namespace.name in e["message"]])
    assert events[0]["involvedObject"]["kind"] == "ValidatingWebhookConfiguration"
    assert "does not trust the certificate" in events[0]["message"]
    # The managed keeper writes its bundle back; both are ready again.
    managed.sync()
    observer.sync()
    assert managed.ready() and observer.ready()
