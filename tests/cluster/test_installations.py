"""One installation per cluster, and a certificate brought along (cert-manager's Secret).

The Backup sample runs as `LocalDeployment` runs it: its generated manifests, replicas as
local gunicorn processes acting as the operator's ServiceAccount.
"""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backup_operator import operator
from kubernetes.client.exceptions import ApiException

from operator_kit import _pki
from operator_kit.localcluster import find_or_build
from operator_kit.manifests._deploy import GUNICORN_ARGS
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment, Replica
from operator_kit.webhooks.certificates import ExternalCertificate, service_dns_names
from tests.cluster.test_certificate_keeping import (
    SAMPLE_DIR,
    TARGETS,
    Writers,
    ca_bundles,
    sample_served,
)

APP = "backup_operator:operator"


def readyz(port: int) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context,
                                    timeout=3) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def can_i(cluster: TestCluster, namespace: str, *args: str) -> bool:
    """``kubectl auth can-i ARGS --as`` the operator's ServiceAccount in `namespace`."""
    kubectl = find_or_build(log=False).kubectl  # the plane's own, whatever its version
    assert kubectl is not None, "operator_kit.localcluster builds kubectl with the plane"
    result = subprocess.run(
        [str(kubectl), "--kubeconfig", cluster.kubeconfig, "auth", "can-i", *args,
         f"--as=system:serviceaccount:{namespace}:backup-operator"],
        capture_output=True, text=True, timeout=30, check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stdout + result.stderr
    return result.stdout.strip() == "yes"


def write_through_webhooks(cluster: TestCluster, namespace: str) -> None:
    """A dry-run create of each version: mutated, validated (and converted) by the webhooks."""
    for version, spec in (("v1", {"database": "db"}), ("v2", {"source": {"database": "db"}})):
        answer = cluster.api.request(
            "POST", f"/apis/example.com/{version}/namespaces/{namespace}/backups",
            body={"apiVersion": f"example.com/{version}", "kind": "Backup",
                  "metadata": {"name": f"probe-{version}"},
                  "spec": {**spec, "schedule": "0 3 * * *"}},
            query={"dryRun": "All"}, timeout=30)
        assert answer["metadata"]["labels"]["example.com/managed"] == "true"


def manifests_check(cluster: TestCluster, namespace: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests", APP, "--namespace", namespace,
         "--check", "--kubeconfig", cluster.kubeconfig],
        capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def first(cluster: TestCluster, namespace: Namespace) -> Iterator[LocalDeployment]:
    deployed = LocalDeployment(cluster, operator, app=APP, namespace=namespace.name,
                               replicas=1, pythonpath=[SAMPLE_DIR])
    deployed.apply()
    try:
        with deployed:
            yield deployed
    finally:
        deployed.delete()


def test_a_second_installation_is_refused_clearly_and_the_first_keeps_working(
        cluster: TestCluster, namespace: Namespace, first: LocalDeployment,
        tmp_path: Path) -> None:
    team_a = namespace.name
    team_b = cluster.namespace("team-b")
    try:
        first.start()
        first.wait_serving()
        eventually(60, lambda: readyz(first.port) == 200, message="team-a ready")
        write_through_webhooks(cluster, team_a)
        bundles, versions = ca_bundles(cluster), [
            cluster.api.get(p)["metadata"]["resourceVersion"] for p in TARGETS]

        # 1. The manifests CLI refuses team-b: one line per object, nothing to apply.
        started = time.monotonic()
        refused = manifests_check(cluster, team_b.name)
        took = time.monotonic() - started
        assert refused.returncode == 1 and refused.stdout == "", refused.stderr
        lines = refused.stderr.strip().splitlines()
        named = {line.split(" belongs ")[0] for line in lines}
        assert named == {"error: ValidatingWebhookConfiguration backup-operator",
                         "error: MutatingWebhookConfiguration backup-operator",
                         "error: CustomResourceDefinition backups.example.com",
                         "error: ClusterRoleBinding backup-operator"}, lines
        for line in lines:
            assert f"belongs to the installation in namespace {team_a}" in line
            assert f"--namespace {team_a} --uninstall" in line
        assert manifests_check(cluster, team_a).returncode == 0  # re-applying team-a is fine

        # 2. team-b's whole stream applied anyway (no --check): team-a's installation
        #    policy refuses every cluster-scoped document that would move, one by one.
        second = LocalDeployment(cluster, operator, app=APP, namespace=team_b.name,
                                 replicas=1, pythonpath=[SAMPLE_DIR], work_dir=tmp_path)
        refusals = {}
        for doc in second.documents:
            try:
                cluster.api.apply(doc, field_manager="test")
            except ApiException as err:
                assert err.status == 403, err
                refusals[f"{doc['kind']} {doc['metadata']['name']}"] = str(err)
        assert set(refusals) == {
            "CustomResourceDefinition backups.example.com", "ClusterRole backup-operator",
            "ClusterRoleBinding backup-operator",
            "ValidatingWebhookConfiguration backup-operator",
            "MutatingWebhookConfiguration backup-operator"}, refusals
        for what, refusal in refusals.items():
            assert (f"{what} belongs to the installation of backup-operator in namespace "
                    f"{team_a}") in refusal
            assert f"--namespace {team_b.name} --check" in refusal
        assert ca_bundles(cluster) == bundles
        assert [cluster.api.get(p)["metadata"]["resourceVersion"] for p in TARGETS] == versions

        #    A team-b replica started anyway, with a credential that could patch
        #    everything: not ready, an Event, no controller, and no caBundle touched.
        env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, POD_NAME="backup-operator-b0",
                   POD_NAMESPACE=team_b.name, OPERATOR_KIT_APP=APP,
                   OPERATOR_KIT_BIND=f"127.0.0.1:{second.port}",
                   OPERATOR_KIT_TLS_DIR=str(tmp_path / "tls-b"), PYTHONPATH=SAMPLE_DIR,
                   OPERATOR_KIT_CERT_POLL_INTERVAL="1")
        env.pop("OPERATOR_KIT_TLS_CERT", None)
        env.pop("OPERATOR_KIT_TLS_KEY", None)
        intruder = Replica("team-b", [sys.executable, "-m", "gunicorn", *GUNICORN_ARGS],
                           env, cwd=None)
        try:
            eventually(60, lambda: readyz(second.port) == 503,
                       message="team-b serving, not ready")
            events = eventually(20, lambda: [
                e for e in cluster.api.get("/api/v1/namespaces/default/events")["items"]
                if e["reason"] == "ForeignInstallation" and team_b.name in e["message"]])
            time.sleep(3)  # three keeper passes: still nothing patched, still not ready
            assert readyz(second.port) == 503
            assert "not starting the controllers" in intruder.output()
            assert f"belongs to the installation in namespace {team_a}" in intruder.output()
        finally:
            intruder.stop()
        assert events[0]["type"] == "Warning"
        assert ca_bundles(cluster) == bundles
        assert [cluster.api.get(p)["metadata"]["resourceVersion"] for p in TARGETS] == versions

        # 3. team-a keeps working, and only team-a's ServiceAccount holds the permissions.
        assert readyz(first.port) == 200
        write_through_webhooks(cluster, team_a)
        write_through_webhooks(cluster, team_b.name)  # team-b's objects: team-a's webhooks
        for ns, expected in ((team_a, True), (team_b.name, False)):
            assert can_i(cluster, ns, "list", "backups.example.com", "-A") is expected
            assert can_i(cluster, ns, "patch", "validatingwebhookconfigurations/"
                         "backup-operator") is expected
        print(f"\nsecond installation: --check refused in {took:.1f} s with {len(lines)} "
              f"lines; the replica not ready, Event {events[0]['reason']}, 0 caBundles "
              "changed; team-a still admits writes")
    finally:
        team_b.delete()
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
            for item in cluster.api.get(path)["items"]:  # team-b's own guard, admitted
                if item["metadata"]["name"].endswith(f"-{team_b.name}"):
                    cluster.api.request("DELETE", f"{path}/{item['metadata']['name']}")


# ---------------------------------------------------------------------- bring your own


def project(data: dict[str, str], directory: Path) -> None:
    """Write a Secret's keys as the kubelet does: a new timestamped directory, then
    ``..data`` swapped to it by one rename; the key files are links through ``..data``."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / f"..{time.time_ns()}"
    stamp.mkdir()
    for key, value in data.items():
        (stamp / key).write_bytes(base64.b64decode(value))
    os.symlink(stamp.name, directory / "..data_tmp")
    os.replace(directory / "..data_tmp", directory / "..data")
    for key in data:
        if not (directory / key).is_symlink():
            os.symlink(f"..data/{key}", directory / key)


def tls_secret(ca: _pki.Issued, namespace: str) -> tuple[dict[str, str], bytes]:
    """cert-manager's shape for a leaf `ca` issues for the webhook Service; its DER."""
    leaf = _pki.issue(ca, "backup-operator webhook",
                      dns_names=service_dns_names("backup-operator", namespace))
    data = {"tls.crt": base64.b64encode(leaf.cert_pem).decode(),
            "tls.key": base64.b64encode(leaf.key_pem).decode(),
            "ca.crt": base64.b64encode(ca.cert_pem).decode()}
    return data, ssl.PEM_cert_to_DER_cert(leaf.cert_pem.decode())


def inject(cluster: TestCluster, ca_pem: bytes) -> None:
    """What cert-manager's CA injector does: the CA into every caBundle."""
    bundle = base64.b64encode(ca_pem).decode()
    for path in TARGETS:
        obj: Any = cluster.api.get(path)
        configs = ([w["clientConfig"] for w in obj["webhooks"]] if "webhooks" in obj
                   else [obj["spec"]["conversion"]["webhook"]["clientConfig"]])
        for config in configs:
            config["caBundle"] = bundle
        cluster.api.request("PUT", path, body=obj)


def test_a_cert_manager_secret_mounted_is_served_reloaded_and_the_ca_bundle_left_alone(
        cluster: TestCluster, namespace: Namespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operator, "webhook_certificate",
                        ExternalCertificate("backup-operator-tls"))
    deployed = LocalDeployment(cluster, operator, app=APP, namespace=namespace.name,
                               replicas=2, pythonpath=[SAMPLE_DIR])
    assert all(d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
               == f"{namespace.name}/backup-operator-tls" for d in deployed.documents
               if d["kind"] in ("ValidatingWebhookConfiguration",
                                "MutatingWebhookConfiguration", "CustomResourceDefinition"))
    ca = _pki.new_ca("cert-manager test CA")
    data, first_der = tls_secret(ca, namespace.name)
    secret = cluster.api.request("POST", f"/api/v1/namespaces/{namespace.name}/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "backup-operator-tls"}, "data": data})
    deployed.apply()
    try:
        inject(cluster, ca.cert_pem)
        for index in range(2):  # the kubelet mounts the Secret into each pod
            project(data, deployed.dir / f"tls-{index}")
        with deployed:
            # The Deployment's env; the replicas act as the get-only ServiceAccount.
            deployed.start(OPERATOR_KIT_MANAGE_TLS="0", OPERATOR_KIT_CERT_POLL_INTERVAL="1")
            deployed.wait_serving()
            eventually(60, lambda: readyz(deployed.port) == 200, message="ready")
            assert sample_served(deployed.port, 6) == {first_der}
            bundles, versions = ca_bundles(cluster), [
                cluster.api.get(p)["metadata"]["resourceVersion"] for p in TARGETS]
            with Writers(cluster, namespace.name) as writers:
                eventually(30, lambda: writers.done > 50, message="writes flowing")
                # cert-manager renews: a new leaf from the same CA, the mount follows.
                renewed, second_der = tls_secret(ca, namespace.name)
                secret["data"] = renewed
                secret = cluster.api.request(
                    "PUT", f"/api/v1/namespaces/{namespace.name}/secrets/backup-operator-tls",
                    body=secret)
                changed = time.monotonic()
                for index in range(2):
                    project(renewed, deployed.dir / f"tls-{index}")
                eventually(10, lambda: sample_served(deployed.port, 6) == {second_der},
                           message="every fresh connection gets the renewed certificate")
                followed = time.monotonic() - changed
                time.sleep(3)  # keep writing a while after the swap
            assert not writers.refused, "\n".join(writers.refused[:10]) + deployed.logs()
            assert readyz(deployed.port) == 200
            logs = deployed.logs()
        assert ca_bundles(cluster) == bundles
        assert [cluster.api.get(p)["metadata"]["resourceVersion"] for p in TARGETS] == versions
        live = cluster.api.get(
            f"/api/v1/namespaces/{namespace.name}/secrets/backup-operator-tls")
        assert live["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]
        assert not namespace.get("v1", "Secret", "backup-operator-webhook-tls")
        assert logs.count("serving the new certificate") >= 1, logs[-4000:]
        assert "Traceback" not in logs, logs[-4000:]
        print(f"\ncert-manager Secret renewed: fresh connections got it {followed:.1f} s after "
              f"the mount changed; {writers.done} writes, {len(writers.refused)} refused; "
              "caBundles and Secret untouched")
    finally:
        deployed.delete()


def test_a_running_replica_whose_configuration_another_installation_took_over_steps_back(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path) -> None:
    """team-b's manifests applied without --check: team-a's keeper never patches back."""
    from operator_kit.client.events import EventRecorder
    from operator_kit.webhooks.certkeeper import CertificateKeeper, Rotation

    deployed = LocalDeployment(cluster, operator, app=APP, namespace=namespace.name,
                               replicas=1, pythonpath=[SAMPLE_DIR])
    deployed.apply()
    try:
        keeper = CertificateKeeper(
            cluster.api, namespace.name, "backup-operator-webhook-tls", "backup-operator",
            tmp_path / "tls", validating=["backup-operator"], mutating=["backup-operator"],
            crds=["backups.example.com"], rotation=Rotation(poll_interval=2, settle=0),
            recorder=EventRecorder(cluster.api, "backup-operator"))
        keeper.sync()
        assert keeper.ready() and keeper.foreign is None
        # A cluster without the installation's guard (an administrator deleted it, or the
        # manifests predate it): the keeper is the second line.
        deployed.unguard()
        path = TARGETS[0]
        taken = cluster.api.get(path)
        for hook in taken["webhooks"]:
            hook["clientConfig"]["service"]["namespace"] = "team-b"
            hook["clientConfig"]["caBundle"] = base64.b64encode(b"team-b's CA").decode()
        version = cluster.api.request("PUT", path, body=taken)["metadata"]["resourceVersion"]
        keeper.sync()
        assert not keeper.ready()
        assert keeper.foreign is not None and keeper.foreign.startswith(
            "ValidatingWebhookConfiguration backup-operator belongs to the installation in "
            "namespace team-b")
        assert cluster.api.get(path)["metadata"]["resourceVersion"] == version
        eventually(10, lambda: [
            e for e in cluster.api.get("/api/v1/namespaces/default/events")["items"]
            if e["reason"] == "ForeignInstallation" and namespace.name in e["message"]])
    finally:
        deployed.delete()
