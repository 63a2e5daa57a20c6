"""WebhookCertificate: the TLS certificate the API server trusts when it calls our webhooks.

The API server calls a webhook at ``https://<service>.<namespace>.svc`` and checks the
serving certificate against the ``caBundle`` of the webhook configuration (or of a CRD's
conversion webhook). So an operator needs three things, which this module gives it
without cert-manager:

- a CA and a serving certificate for the Service's DNS names (`generate`,
  `generate_for`), made by `operator_kit._pki` like the local plane's certificates;
- the same certificate on every replica (`shared`): the first replica stores it in a
  ``kubernetes.io/tls`` Secret, the others read it. Creation races are settled by the
  API server — the losers of a create get 409 and read the winner's Secret; the losers
  of a replacement (optimistic concurrency on resourceVersion) do the same. The Secret
  uses cert-manager's keys (``tls.crt``, ``tls.key``, ``ca.crt``), so a cert-manager
  Secret can be used instead (`from_secret`);
- the files for the server (`install`) and the CA in the configurations
  (`patch_ca_bundle`).

Renewal: `shared` replaces a certificate that expires within ``renew_within`` (30 days by
default) or that does not cover the Service's names. The new ``ca.crt`` holds the new CA
followed by the previous one while that is still valid, so replicas still serving the
old certificate stay trusted once the new bundle is patched in.

Key material is never logged and never part of a repr.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit import _pki
from operator_kit._pki import b64, spki
from operator_kit.client.transport import Api

__all__ = ["ExternalCertificate", "TlsFiles", "WebhookCertificate"]

logger = logging.getLogger("operator_kit.certificates")

TLS_CERT_ENV = "OPERATOR_KIT_TLS_CERT"
TLS_KEY_ENV = "OPERATOR_KIT_TLS_KEY"
DEFAULT_RENEW_WITHIN = datetime.timedelta(days=30)
_ATTEMPTS = 10


@dataclass(frozen=True)
class ExternalCertificate:
    """Bring your own webhook certificate: a ``kubernetes.io/tls`` Secret someone else
    issues and renews (cert-manager: ``tls.crt``, ``tls.key``, ``ca.crt``).

    ``Operator(..., webhook_certificate=ExternalCertificate(secret="backup-operator-tls"))``
    (or ``python -m operator_kit.manifests APP --certificate-secret NAME``) makes the
    manifests mount that Secret at ``OPERATOR_KIT_TLS_DIR`` instead of an emptyDir, set
    ``OPERATOR_KIT_MANAGE_TLS=0``, annotate the webhook configurations and the converted
    CRDs with ``cert-manager.io/inject-ca-from: <namespace>/<certificate>`` (so
    cert-manager's CA injector owns their caBundle) and grant no write on the Secret
    or the caBundles. The server reloads the mounted files when the kubelet swaps them
    (`operator_kit.webhooks.tls.ServingContext`); the operator never writes the Secret or a
    caBundle, and is not ready while a caBundle does not trust what it serves.

    A pair that cannot be served — a key that is not the certificate's, a file that
    cannot be read or parsed, a certificate expired or not valid yet — is refused when
    the server starts, with one ERROR line naming both files, the problem and this
    Secret; the replica stays up and is not ready (``/readyz`` 503, ``/livez`` 200) until
    the Secret holds a pair that loads, which is then served without a restart. A
    renewal that does not load leaves the previous pair served, with an ERROR line.

    `certificate` is the cert-manager Certificate that writes the Secret (the
    annotation names it); by default it has the Secret's name.
    """

    secret: str
    certificate: str | None = None

    def inject_ca_from(self, namespace: str) -> str:
        """The ``cert-manager.io/inject-ca-from`` annotation's value."""
        return f"{namespace}/{self.certificate or self.secret}"


INJECT_CA_FROM = "cert-manager.io/inject-ca-from"


@dataclass(frozen=True)
class TlsFiles:
    """Where `WebhookCertificate.install` wrote the certificate, key and CA bundle."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, repr=False)
class WebhookCertificate:
    """A serving certificate, its private key and the CA bundle that trusts it (all PEM)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes | None = None
    """The key of the CA that issues the next serving certificates (``ca.key`` in the
    Secret; absent in a cert-manager Secret). Its certificate is one of `ca_pem`'s."""

    # ------------------------------------------------------------------ making one

    @classmethod
    def generate(cls, service: str, namespace: str, *, days: int = 365,
                 lifetime: datetime.timedelta | None = None,
                 ca_lifetime: datetime.timedelta | None = None) -> WebhookCertificate:
        """A new CA and a certificate for the Service ``<service>.<namespace>``.

        Valid for ``service``, ``service.namespace``, ``service.namespace.svc`` (the name
        the API server checks) and ``service.namespace.svc.cluster.local``; for
        `lifetime` (the CA for `ca_lifetime`), or else both for `days`.
        """
        return cls.generate_for(
            f"{service}.{namespace}.svc", service_dns_names(service, namespace), days=days,
            lifetime=lifetime, ca_lifetime=ca_lifetime,
        )

    @classmethod
    def generate_for(
        cls,
        name: str,
        dns_names: Iterable[str],
        *,
        ip_addresses: Iterable[str] = (),
        days: int = 365,
        lifetime: datetime.timedelta | None = None,
        ca_lifetime: datetime.timedelta | None = None,
    ) -> WebhookCertificate:
        """A new CA and a certificate named `name`, valid for `dns_names` and `ip_addresses`."""
        if days <= 0:
            raise ValueError(f"days must be positive, got {days}")
        dns, ips = tuple(dns_names), tuple(ip_addresses)
        if not dns and not ips:
            raise ValueError("a serving certificate needs at least one DNS name or IP address")
        ca = new_issuer(name, ca_lifetime or lifetime or datetime.timedelta(days=days))
        return cls(ca.cert_pem, b"", b"", ca.key_pem).reissued(
            name, dns, ip_addresses=ips, lifetime=lifetime or datetime.timedelta(days=days))

    def reissued(self, name: str, dns_names: Iterable[str], *,
                 ip_addresses: Iterable[str] = (),
                 lifetime: datetime.timedelta) -> WebhookCertificate:
        """A new serving certificate and key from this bundle's issuing CA (`issuer`)."""
        issuer = self.issuer()
        if issuer is None:
            raise ValueError("no issuing CA: ca.key is absent or matches no CA of the bundle")
        # A common name holds at most 64 characters; clients check the DNS names (SANs).
        leaf = _pki.issue(issuer, name[:64], dns_names=tuple(dns_names),
                          ip_addresses=tuple(ip_addresses), lifetime=lifetime)
        return WebhookCertificate(self.ca_pem, leaf.cert_pem, leaf.key_pem, self.ca_key_pem)

    # ------------------------------------------------------------------ reading it

    @functools.cached_property
    def _cert(self) -> x509.Certificate:
        return _pki.load_cert(self.cert_pem)

    @property
    def not_after(self) -> datetime.datetime:
        """When the serving certificate expires (UTC)."""
        return self._cert.not_valid_after_utc

    @property
    def cas(self) -> tuple[x509.Certificate, ...]:
        """The CA certificates of the bundle, in order (unparsable bundle: none)."""
        try:
            return tuple(x509.load_pem_x509_certificates(self.ca_pem))
        except ValueError:
            return ()

    def issuer(self) -> _pki.Issued | None:
        """The CA of the bundle whose key is `ca_key_pem`: it issues the next certificates."""
        if not self.ca_key_pem:
            return None
        try:
            key = _pki.load_key(self.ca_key_pem)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            return None
        mine = spki(key.public_key())
        for ca in self.cas:
            if spki(ca.public_key()) == mine:
                return _pki.Issued(ca, key)
        return None

    def signer(self) -> x509.Certificate | None:
        """The CA of the bundle that signed the serving certificate."""
        return signer_of(self._cert, self.cas)

    @property
    def dns_names(self) -> tuple[str, ...]:
        """The DNS names the serving certificate is valid for."""
        try:
            san = self._cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except x509.ExtensionNotFound:
            return ()
        return tuple(san.value.get_values_for_type(x509.DNSName))

    def covers(self, dns_names: Iterable[str]) -> bool:
        """Whether the certificate is valid for every one of `dns_names`."""
        return set(dns_names) <= set(self.dns_names)

    def needs_renewal(self, *, within: datetime.timedelta = DEFAULT_RENEW_WITHIN) -> bool:
        """Whether the certificate expires within `within` from now (or already has)."""
        return self.not_after - datetime.datetime.now(datetime.timezone.utc) < within

    def check(self) -> None:
        """Raise ValueError unless the key belongs to the certificate and a CA of the bundle
        signed it. `from_secret` calls it, so a corrupt Secret is noticed at once."""
        try:
            cert = self._cert
            key = serialization.load_pem_private_key(self.key_pem, password=None)
            cas = x509.load_pem_x509_certificates(self.ca_pem)
        except (ValueError, TypeError, UnsupportedAlgorithm) as err:
            raise ValueError(f"not a usable certificate, key and CA: {err}") from None
        if spki(cert.public_key()) != spki(key.public_key()):
            raise ValueError("the private key does not belong to the certificate")
        if signer_of(cert, cas) is None:
            raise ValueError("no CA in the bundle signed the certificate")

    def __repr__(self) -> str:
        try:
            detail = f"dns_names={self.dns_names!r}, not_after={self.not_after.isoformat()}"
        except ValueError:
            detail = "unparsable"
        return f"WebhookCertificate({detail})"

    # ------------------------------------------------------------------ files

    def install(self, directory: str | os.PathLike[str], *, point_server: bool = True
                ) -> TlsFiles:
        """Write ``tls.crt``, ``tls.key`` and ``ca.crt`` into `directory`; point the server at them.

        The key is created with mode 0600 (never readable by others, not even briefly);
        the certificates 0644; a directory created here gets 0700. Each file is replaced
        atomically, so a server reading them meanwhile sees the old or the new one.
        Sets ``OPERATOR_KIT_TLS_CERT`` and ``OPERATOR_KIT_TLS_KEY``, which
        `operator_kit.gunicorn_conf` reads, unless `point_server` is False: the
        `CertificateKeeper` installs into ``OPERATOR_KIT_TLS_DIR``, which the server reads
        anyway, and must not leave them set in a process that starts other servers (a test
        run: a later plain-HTTP gunicorn inherited them and served TLS instead).
        """
        path = Path(directory)
        if not path.exists():
            path.mkdir(mode=0o700, parents=True)
            os.chmod(path, 0o700)
        files = TlsFiles(path / "tls.crt", path / "tls.key", path / "ca.crt")
        # The key first: a server that notices the new tls.crt finds its key already there.
        _write_atomically(files.key, self.key_pem, 0o600)
        _write_atomically(files.cert, self.cert_pem, 0o644)
        _write_atomically(files.ca, self.ca_pem, 0o644)
        if point_server:
            os.environ[TLS_CERT_ENV] = str(files.cert)
            os.environ[TLS_KEY_ENV] = str(files.key)
        logger.info("installed webhook certificate %s in %s", self, path)
        return files

    # ------------------------------------------------------------------ Secrets

    def to_secret(self, name: str, namespace: str) -> dict[str, Any]:
        """A ``kubernetes.io/tls`` Secret with cert-manager's keys: tls.crt, tls.key, ca.crt
        (and ``ca.key``, the issuing CA's key, when there is one)."""
        data = {
            "tls.crt": b64(self.cert_pem),
            "tls.key": b64(self.key_pem),
            "ca.crt": b64(self.ca_pem),
        }
        if self.ca_key_pem:
            data["ca.key"] = b64(self.ca_key_pem)
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/tls",
            "data": data,
        }

    @classmethod
    def from_secret(cls, secret: Mapping[str, Any]) -> WebhookCertificate:
        """The certificate in a Secret dict (as the API returns it, data base64-encoded).

        Raises ValueError naming what is missing or wrong.
        """
        meta = secret.get("metadata") or {}
        name, namespace = meta.get("name") or "<unnamed>", meta.get("namespace")
        where = f"Secret {namespace}/{name}" if namespace else f"Secret {name}"
        data = secret.get("data") or {}
        pems: dict[str, bytes] = {}
        for key in ("ca.crt", "tls.crt", "tls.key"):
            value = data.get(key)
            if not value:
                raise ValueError(f"{where} has no {key}")
            try:
                pems[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise ValueError(f"{where}: {key} is not base64") from None
        ca_key: bytes | None = None
        if data.get("ca.key"):
            try:
                ca_key = base64.b64decode(data["ca.key"], validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise ValueError(f"{where}: ca.key is not base64") from None
        cert = cls(pems["ca.crt"], pems["tls.crt"], pems["tls.key"], ca_key)
        try:
            cert.check()
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        return cert

    @classmethod
    def shared(
        cls,
        api_client: client.ApiClient,
        namespace: str,
        secret: str,
        service: str,
        *,
        renew_within: datetime.timedelta = DEFAULT_RENEW_WITHIN,
        days: int = 365,
    ) -> WebhookCertificate:
        """The certificate for `service` that every replica shares, kept in Secret `secret`.

        Reads the Secret; when it is absent, generates a certificate and creates it (a
        409 means another replica won: its Secret is read instead). When the Secret's
        certificate expires within `renew_within`, does not cover the Service's names or
        is unusable, a new one replaces it — an update carrying the resourceVersion read,
        so of several replicas renewing at once one wins and the others read its
        certificate. Every caller returns the same certificate.
        """
        if renew_within >= datetime.timedelta(days=days):
            raise ValueError(
                f"renew_within ({renew_within}) must be shorter than the validity ({days} days), "
                "or every new certificate would need renewal at once"
            )
        api = Api(api_client)
        collection = f"/api/v1/namespaces/{namespace}/secrets"
        path = f"{collection}/{secret}"
        names = service_dns_names(service, namespace)
        where = f"Secret {namespace}/{secret}"
        for _ in range(_ATTEMPTS):
            current = api.get_or_none(path)
            if current is None:
                fresh = cls.generate(service, namespace, days=days)
                try:
                    api.request("POST", collection, body=fresh.to_secret(secret, namespace))
                except ApiException as err:
                    if err.status == 409:  # another replica created it first: read theirs
                        continue
                    raise
                logger.info("created webhook certificate %s in %s", fresh, where)
                return fresh
            existing: WebhookCertificate | None
            try:
                existing = cls.from_secret(current)
            except ValueError as err:
                logger.warning("replacing the unusable webhook certificate in %s: %s", where, err)
                existing = None
            if existing is not None:
                if not existing.needs_renewal(within=renew_within) and existing.covers(names):
                    return existing
                logger.info(
                    "renewing webhook certificate %s in %s (needed: valid for %s until "
                    "at least %s from now)",
                    existing,
                    where,
                    ", ".join(names),
                    renew_within,
                )
            if current.get("type") not in (None, "kubernetes.io/tls"):
                raise RuntimeError(
                    f"{where} exists with type {current.get('type')}, not kubernetes.io/tls; "
                    "delete it or name another Secret for the webhook certificate"
                )
            fresh = cls.generate(service, namespace, days=days)
            if existing is not None:
                fresh = fresh._trusting_also(existing)
            body = fresh.to_secret(secret, namespace)
            old_meta = current.get("metadata", {})
            for key in ("labels", "annotations", "ownerReferences"):
                if old_meta.get(key):
                    body["metadata"][key] = old_meta[key]
            body["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
            try:
                api.request("PUT", path, body=body)
            except ApiException as err:
                if err.status in (404, 409):  # changed or deleted meanwhile: look again
                    continue
                raise
            logger.info("replaced webhook certificate in %s with %s", where, fresh)
            return fresh
        raise RuntimeError(
            f"{where} kept changing while {_ATTEMPTS} attempts read and wrote it; is another "
            "program rewriting it?"
        )

    def _trusting_also(self, previous: WebhookCertificate) -> WebhookCertificate:
        """This certificate with a CA bundle that also holds `previous`'s still-valid CAs."""
        now = datetime.datetime.now(datetime.timezone.utc)
        try:
            old_cas = x509.load_pem_x509_certificates(previous.ca_pem)
        except ValueError:
            return self
        keep = [ca for ca in old_cas if ca.not_valid_after_utc > now][:1]
        bundle = self.ca_pem + b"".join(_pki.cert_pem(ca) for ca in keep)
        return WebhookCertificate(bundle, self.cert_pem, self.key_pem, self.ca_key_pem)

    # ------------------------------------------------------------------ caBundle

    def patch_ca_bundle(
        self,
        api_client: client.ApiClient,
        *,
        validating: Sequence[str] = (),
        mutating: Sequence[str] = (),
        crds: Sequence[str] = (),
    ) -> None:
        """Write this CA bundle into every webhook of the named configurations and into
        the named CRDs' conversion webhooks (``spec.conversion.webhook.clientConfig``).

        Each object is read and written back with its resourceVersion (re-read on a
        conflict); one that already holds the bundle is not written. A missing object, or
        a CRD without a conversion webhook, raises LookupError / ValueError.
        """
        api = Api(api_client)
        bundle = b64(self.ca_pem)
        registration = "/apis/admissionregistration.k8s.io/v1"
        targets = [
            *((f"{registration}/validatingwebhookconfigurations/{n}", n) for n in validating),
            *((f"{registration}/mutatingwebhookconfigurations/{n}", n) for n in mutating),
            *((f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}", n) for n in crds),
        ]
        for path, name in targets:
            _update(api, path, name, bundle)


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a Service answers to inside the cluster, shortest first."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def _update(api: Api, path: str, name: str, bundle: str) -> None:
    for _ in range(_ATTEMPTS):
        obj = api.get_or_none(path)
        if obj is None:
            raise LookupError(
                f"{path.rsplit('/', 2)[-2]} {name} does not exist; apply the operator's "
                "manifests before patching its caBundle"
            )
        try:
            if not patch_bundle(api, path, obj, bundle):
                return
        except ApiException as err:
            if err.status in (409, 422):  # changed since read (the test op failed)
                continue
            raise
        logger.info("patched the webhook CA bundle into %s %s", obj.get("kind"), name)
        return
    raise RuntimeError(f"{path} kept changing while patching its caBundle")


def ca_bundle_paths(obj: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """Each clientConfig of a webhook configuration or a CRD's conversion webhook: its JSON
    pointer and the caBundle it holds (base64, or None)."""
    name = (obj.get("metadata") or {}).get("name")
    if obj.get("kind") == "CustomResourceDefinition":
        conversion = (obj.get("spec") or {}).get("conversion") or {}
        webhook = conversion.get("webhook")
        if conversion.get("strategy") != "Webhook" or not webhook:
            raise ValueError(
                f"CustomResourceDefinition {name} has no conversion webhook; build it with "
                "operator_kit.manifests.with_conversion_webhook"
            )
        config = webhook.get("clientConfig") or {}
        return [("/spec/conversion/webhook/clientConfig", config.get("caBundle"))]
    return [(f"/webhooks/{i}/clientConfig", (w.get("clientConfig") or {}).get("caBundle"))
            for i, w in enumerate(obj.get("webhooks") or [])]


def patch_bundle(api: Api, path: str, obj: Mapping[str, Any], bundle: str) -> bool:
    """Set `bundle` into every clientConfig of `obj` (as read from `path`) with a JSON patch
    that first tests the resourceVersion read: a change made since fails it (422/409), so
    a stale bundle never overwrites a newer one. False when nothing needed changing."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                  "value": obj["metadata"]["resourceVersion"]}]
    for pointer, current in ca_bundle_paths(obj):
        if current != bundle:
            ops.append({"op": "add", "path": f"{pointer}/caBundle", "value": bundle})
    if len(ops) == 1:
        return False
    api.request("PATCH", path, body=ops, content_type="application/json-patch+json")
    return True


def signer_of(cert: x509.Certificate,
              cas: Iterable[x509.Certificate]) -> x509.Certificate | None:
    """The CA of `cas` that signed `cert`, or None."""
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None


def new_issuer(name: str, lifetime: datetime.timedelta) -> _pki.Issued:
    """A CA for serving certificates named `name`."""
    return _pki.new_ca(f"{name[:53]} webhook CA", lifetime=lifetime)


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write `data` to `path` by rename; the file is created with `mode` from the start."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
