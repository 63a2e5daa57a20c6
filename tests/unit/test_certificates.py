"""operator_kit.certificates: making, storing, sharing and renewing the webhook certificate.

`shared` and `patch_ca_bundle` are checked here against an in-memory API with the API
server's optimistic concurrency (resourceVersion, 404, 409); the cluster tests run them
against a real one.
"""

from __future__ import annotations

import base64
import copy
import datetime
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes.client.exceptions import ApiException

import operator_kit.webhooks.certificates as certificates
from operator_kit.webhooks.certificates import WebhookCertificate

DAY = datetime.timedelta(days=1)
OTHER = WebhookCertificate.generate("other", "ns")  # a certificate unrelated to the others


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture(scope="module")
def cert() -> WebhookCertificate:
    return WebhookCertificate.generate("backup-webhook", "ops")


# ---------------------------------------------------------------------- generating


def test_generate_covers_the_service_names_the_api_server_may_use(
    cert: WebhookCertificate,
) -> None:
    assert cert.dns_names == (
        "backup-webhook",
        "backup-webhook.ops",
        "backup-webhook.ops.svc",
        "backup-webhook.ops.svc.cluster.local",
    )
    leaf = x509.load_pem_x509_certificate(cert.cert_pem)
    assert leaf.subject.rfc4514_string() == "CN=backup-webhook.ops.svc"


def test_the_certificate_is_a_server_certificate_signed_by_its_own_ca(
    cert: WebhookCertificate,
) -> None:
    leaf = x509.load_pem_x509_certificate(cert.cert_pem)
    ca = x509.load_pem_x509_certificate(cert.ca_pem)
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in list(usages)
    cert.check()


def test_the_certificate_is_valid_for_the_days_asked(cert: WebhookCertificate) -> None:
    assert abs(cert.not_after - (utcnow() + 365 * DAY)) < datetime.timedelta(minutes=1)
    short = WebhookCertificate.generate("s", "n", days=3)
    assert abs(short.not_after - (utcnow() + 3 * DAY)) < datetime.timedelta(minutes=1)


def test_long_service_and_namespace_names_fit_in_a_certificate() -> None:
    service, namespace = "s" * 63, "n" * 63
    cert = WebhookCertificate.generate(service, namespace)
    assert cert.covers([f"{service}.{namespace}.svc"])
    cert.check()


def test_generate_for_takes_any_dns_names_and_ip_addresses() -> None:
    cert = WebhookCertificate.generate_for(
        "local", ["localhost", "example.test"], ip_addresses=["127.0.0.1", "::1"]
    )
    assert cert.dns_names == ("localhost", "example.test")
    san = x509.load_pem_x509_certificate(cert.cert_pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert [str(ip) for ip in san.value.get_values_for_type(x509.IPAddress)] == [
        "127.0.0.1",
        "::1",
    ]


def test_a_certificate_needs_a_name_and_positive_validity() -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        WebhookCertificate.generate_for("x", [])
    with pytest.raises(ValueError, match="days must be positive"):
        WebhookCertificate.generate("s", "n", days=0)


def test_the_repr_never_shows_key_material(cert: WebhookCertificate) -> None:
    text = repr(cert) + str(cert)
    assert "PRIVATE KEY" not in text and "CERTIFICATE" not in text
    assert "backup-webhook.ops.svc" in text


# ---------------------------------------------------------------------- renewal decision


def test_a_certificate_needs_renewal_when_it_expires_within_the_margin() -> None:
    cert = WebhookCertificate.generate("s", "n", days=20)
    assert cert.needs_renewal()  # default margin: 30 days
    assert not cert.needs_renewal(within=10 * DAY)
    assert not WebhookCertificate.generate("s", "n", days=60).needs_renewal()


def test_covers_checks_every_name(cert: WebhookCertificate) -> None:
    assert cert.covers(["backup-webhook.ops.svc", "backup-webhook"])
    assert not cert.covers(["backup-webhook.other.svc"])


# ---------------------------------------------------------------------- files


def test_install_writes_the_files_with_safe_modes_and_points_the_server_at_them(
    cert: WebhookCertificate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPERATOR_KIT_TLS_CERT", raising=False)
    monkeypatch.delenv("OPERATOR_KIT_TLS_KEY", raising=False)
    old_umask = os.umask(0)  # the modes must not depend on the umask
    try:
        files = cert.install(tmp_path / "new" / "tls")
    finally:
        os.umask(old_umask)
    assert files.cert.read_bytes() == cert.cert_pem
    assert files.key.read_bytes() == cert.key_pem
    assert files.ca.read_bytes() == cert.ca_pem
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.cert.stat().st_mode) == 0o644
    assert stat.S_IMODE(files.ca.stat().st_mode) == 0o644
    assert stat.S_IMODE(files.cert.parent.stat().st_mode) == 0o700
    assert os.environ["OPERATOR_KIT_TLS_CERT"] == str(files.cert)
    assert os.environ["OPERATOR_KIT_TLS_KEY"] == str(files.key)
    assert sorted(p.name for p in files.cert.parent.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


def test_the_key_file_is_never_readable_by_others_even_while_written(
    cert: WebhookCertificate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: dict[str, int] = {}
    real_replace = os.replace

    def watching_replace(src: Any, dst: Any) -> None:
        modes[Path(dst).name] = stat.S_IMODE(os.stat(src).st_mode)
        assert Path(src).read_bytes()  # written fully before it takes the final name
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", watching_replace)
    old_umask = os.umask(0)
    try:
        cert.install(tmp_path)
    finally:
        os.umask(old_umask)
    assert modes == {"tls.key": 0o600, "tls.crt": 0o644, "ca.crt": 0o644}


def test_install_replaces_existing_files_and_keeps_an_existing_directory_mode(
    cert: WebhookCertificate, tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    other = WebhookCertificate.generate("other", "ns")
    other.install(tmp_path)
    files = cert.install(tmp_path)
    assert files.key.read_bytes() == cert.key_pem
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755


# ---------------------------------------------------------------------- Secrets


def test_to_secret_is_a_tls_secret_with_cert_managers_keys(cert: WebhookCertificate) -> None:
    secret = cert.to_secret("webhook-tls", "ops")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {"name": "webhook-tls", "namespace": "ops"}
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert base64.b64decode(secret["data"]["tls.key"]) == cert.key_pem
    assert WebhookCertificate.from_secret(secret) == cert


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("tls.key"), "Secret ops/webhook-tls has no tls.key"),
        (lambda d: d.update({"ca.crt": "%%%"}), "ca.crt is not base64"),
        (
            lambda d: d.update({"tls.key": OTHER.to_secret("x", "y")["data"]["tls.key"]}),
            "the private key does not belong to the certificate",
        ),
        (
            lambda d: d.update({"ca.crt": OTHER.to_secret("x", "y")["data"]["ca.crt"]}),
            "no CA in the bundle signed the certificate",
        ),
        (
            lambda d: d.update({"tls.crt": base64.b64encode(b"junk").decode()}),
            "not a usable certificate",
        ),
    ],
)
def test_from_secret_refuses_a_secret_that_does_not_hold_a_usable_certificate(
    cert: WebhookCertificate, change: Any, message: str
) -> None:
    secret = cert.to_secret("webhook-tls", "ops")
    change(secret["data"])
    with pytest.raises(ValueError, match=message):
        WebhookCertificate.from_secret(secret)


# ---------------------------------------------------------------------- shared


class FakeApi:
    """The few verbs `shared` and `patch_ca_bundle` use, with resourceVersion semantics."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.calls: list[tuple[str, str]] = []
        self.before_write: list[Any] = []  # callbacks run before the next write

    def get(self, path: str) -> Any:
        self.calls.append(("GET", path))
        if path not in self.objects:
            raise ApiException(status=404)
        return copy.deepcopy(self.objects[path])

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.calls.append((method, path))
        if self.before_write:
            self.before_write.pop(0)(self)
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                raise ApiException(status=409)
        elif method == "PUT":
            current = self.objects.get(path)
            if current is None:
                raise ApiException(status=404)
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiException(status=409)
        elif method == "PATCH":  # JSON patch: the "test" and "add" operations only
            patched = copy.deepcopy(self.objects[path])
            for op in body:
                *parents, last = op["path"].strip("/").split("/")
                node: Any = patched
                for part in parents:
                    node = node[int(part)] if isinstance(node, list) else node[part]
                if op["op"] == "test" and node[last] != op["value"]:
                    raise ApiException(status=422)
                if op["op"] == "add":
                    node[last] = op["value"]
            body = patched
        else:
            raise AssertionError(method)
        return self.store(path, body)

    def store(self, path: str, body: dict[str, Any]) -> Any:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[path] = stored
        return copy.deepcopy(stored)

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "GET"]


SECRET_PATH = "/api/v1/namespaces/ops/secrets/webhook-tls"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    fake = FakeApi()
    monkeypatch.setattr(certificates, "Api", lambda _client: fake)
    yield fake


def shared(**kwargs: Any) -> WebhookCertificate:
    return WebhookCertificate.shared(None, "ops", "webhook-tls", "backup-webhook", **kwargs)


def test_shared_creates_the_secret_when_it_is_absent(api: FakeApi) -> None:
    cert = shared()
    assert api.writes() == [("POST", "/api/v1/namespaces/ops/secrets")]
    assert WebhookCertificate.from_secret(api.objects[SECRET_PATH]) == cert
    assert cert.covers(["backup-webhook.ops.svc"])


def test_shared_returns_the_stored_certificate_when_it_is_good(
    api: FakeApi, cert: WebhookCertificate
) -> None:
    api.store(SECRET_PATH, cert.to_secret("webhook-tls", "ops"))
    assert shared() == cert
    assert api.writes() == []


def test_shared_reads_the_winners_certificate_after_losing_the_create_race(
    api: FakeApi, cert: WebhookCertificate
) -> None:
    # Another replica creates the Secret between our GET and our POST.
    api.before_write.append(lambda a: a.store(SECRET_PATH, cert.to_secret("webhook-tls", "ops")))
    assert shared() == cert


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(
            lambda: WebhookCertificate.generate("backup-webhook", "ops", days=10), id="near-expiry"
        ),
        pytest.param(lambda: WebhookCertificate.generate("other-service", "ops"), id="wrong-names"),
        pytest.param(lambda: None, id="unusable"),
    ],
)
def test_shared_replaces_a_certificate_that_is_near_expiry_wrong_or_unusable(
    api: FakeApi, stored: Any
) -> None:
    old = stored()
    secret = (old or OTHER).to_secret("webhook-tls", "ops")
    if old is None:
        secret["data"]["tls.key"] = base64.b64encode(b"garbage").decode()
    secret["metadata"]["labels"] = {"team": "ops"}
    api.store(SECRET_PATH, secret)
    cert = shared()
    assert cert != old
    assert not cert.needs_renewal() and cert.covers(["backup-webhook.ops.svc"])
    assert api.writes() == [("PUT", SECRET_PATH)]
    stored_secret = api.objects[SECRET_PATH]
    assert WebhookCertificate.from_secret(stored_secret) == cert
    assert stored_secret["metadata"]["labels"] == {"team": "ops"}


def test_a_renewed_bundle_still_trusts_the_previous_ca(api: FakeApi) -> None:
    old = WebhookCertificate.generate("backup-webhook", "ops", days=10)
    api.store(SECRET_PATH, old.to_secret("webhook-tls", "ops"))
    cert = shared()
    cas = x509.load_pem_x509_certificates(cert.ca_pem)
    assert len(cas) == 2
    assert x509.load_pem_x509_certificate(old.ca_pem) == cas[1]
    cert.check()


def test_shared_rereads_after_losing_the_renewal_race(api: FakeApi) -> None:
    old = WebhookCertificate.generate("backup-webhook", "ops", days=10)
    api.store(SECRET_PATH, old.to_secret("webhook-tls", "ops"))
    winner = WebhookCertificate.generate("backup-webhook", "ops")
    api.before_write.append(lambda a: a.store(SECRET_PATH, winner.to_secret("webhook-tls", "ops")))
    assert shared() == winner
    assert api.writes() == [("PUT", SECRET_PATH)]  # the conflicting update, then a read


def test_shared_refuses_to_overwrite_a_secret_of_another_type(api: FakeApi) -> None:
    api.store(SECRET_PATH, {"metadata": {"name": "webhook-tls"}, "type": "Opaque", "data": {}})
    with pytest.raises(RuntimeError, match=r"type Opaque, not kubernetes\.io/tls"):
        shared()
    assert api.writes() == []


def test_shared_refuses_a_renewal_margin_longer_than_the_validity(api: FakeApi) -> None:
    with pytest.raises(ValueError, match="renew_within"):
        shared(days=20)


# ---------------------------------------------------------------------- patch_ca_bundle

REG = "/apis/admissionregistration.k8s.io/v1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def webhook_configuration(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {"name": "a.example.com", "clientConfig": {"service": {"name": "s"}}},
            {"name": "b.example.com", "clientConfig": {"caBundle": "b2xk"}},
        ],
    }


def conversion_crd(name: str, conversion: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "example.com"}
    if conversion is not None:
        spec["conversion"] = conversion
    return {"kind": "CustomResourceDefinition", "metadata": {"name": name}, "spec": spec}


def test_patch_ca_bundle_fills_every_webhook_and_the_crd(
    api: FakeApi, cert: WebhookCertificate
) -> None:
    api.store(f"{REG}/validatingwebhookconfigurations/v", webhook_configuration("V", "v"))
    api.store(f"{REG}/mutatingwebhookconfigurations/m", webhook_configuration("M", "m"))
    webhook = {"clientConfig": {"service": {"name": "s"}}, "conversionReviewVersions": ["v1"]}
    api.store(
        f"{CRDS}/backups.example.com",
        conversion_crd("backups.example.com", {"strategy": "Webhook", "webhook": webhook}),
    )
    cert.patch_ca_bundle(None, validating=["v"], mutating=["m"], crds=["backups.example.com"])
    bundle = base64.b64encode(cert.ca_pem).decode()
    for kind in ("validating", "mutating"):
        obj = api.objects[f"{REG}/{kind}webhookconfigurations/{kind[0]}"]
        assert [w["clientConfig"]["caBundle"] for w in obj["webhooks"]] == [bundle, bundle]
    crd = api.objects[f"{CRDS}/backups.example.com"]
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == bundle
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {"name": "s"}
    writes = len(api.writes())
    cert.patch_ca_bundle(None, validating=["v"], mutating=["m"], crds=["backups.example.com"])
    assert len(api.writes()) == writes  # nothing to change, nothing written


def test_patch_ca_bundle_retries_on_a_conflict(api: FakeApi, cert: WebhookCertificate) -> None:
    path = f"{REG}/validatingwebhookconfigurations/v"
    api.store(path, webhook_configuration("V", "v"))
    api.before_write.append(lambda a: a.store(path, webhook_configuration("V", "v")))
    cert.patch_ca_bundle(None, validating=["v"])
    assert api.writes() == [("PATCH", path), ("PATCH", path)]
    assert api.objects[path]["webhooks"][0]["clientConfig"]["caBundle"]


def test_patch_ca_bundle_says_what_is_missing(api: FakeApi, cert: WebhookCertificate) -> None:
    with pytest.raises(LookupError, match="validatingwebhookconfigurations nope does not exist"):
        cert.patch_ca_bundle(None, validating=["nope"])
    api.store(f"{CRDS}/plain.example.com", conversion_crd("plain.example.com", None))
    with pytest.raises(ValueError, match=r"plain\.example\.com has no conversion webhook"):
        cert.patch_ca_bundle(None, crds=["plain.example.com"])
