"""CertificateKeeper: every replica follows, heals and rotates the shared webhook certificate.

The certificate lives in one ``kubernetes.io/tls`` Secret (cert-manager's keys ``tls.crt``,
``tls.key``, ``ca.crt``, plus ``ca.key``: the key of the CA that issues the next serving
certificates). Every replica runs a keeper; each pass (`sync`, every
`Rotation.poll_interval` seconds, and once in the gunicorn master before it listens):

1. reads the caBundle of each webhook configuration and CRD conversion it serves, then
   the Secret;
2. decides what the Secret should hold (`plan`, a pure function):

   - absent (deleted) or unusable (garbage, a key that is not the certificate's): what
     this replica last saw is written back; a replica that saw nothing yet makes a new
     CA and certificate and keeps the CAs the caBundle trusts now, because other
     replicas may still be serving certificates they signed;
   - the issuing CA is missing or past `renew_fraction` (2/3) of its lifetime: a new CA
     is *added* to the bundle; the serving certificate is left as it is, so the new CA is
     trusted everywhere before anything it signed is served;
   - the serving certificate has expired, does not cover the Service's names, is past
     2/3 of its lifetime, or was signed by an older CA while the issuing CA has been in the
     bundle for `settle` seconds: a new one is issued by the issuing CA;
   - a CA that neither issues nor signed the serving certificate is dropped once the
     serving certificate has been in the Secret for `overlap` (every replica has picked
     it up by then: each looks every `poll_interval`), or once it expired.

   Writes carry the resourceVersion read, so of replicas deciding at once one wins and
   the others start over from what it wrote;
3. patches the Secret's ``ca.crt`` into every caBundle — a JSON patch that tests the
   resourceVersion read in step 1, so a replica with an older view never overwrites a
   newer bundle — and, when that added a CA, waits `settle` seconds for the API server to
   load it;
4. installs the certificate into the server's directory when it changed (the server's
   `operator_kit.tls.ServingContext` picks it up for new connections);
5. checks that every caBundle trusts the certificate this replica serves. If not, the
   replica is not ready (`ready`), and says why in an ERROR log line and a Warning Event
   ``WebhookCertificateUntrusted`` on the configuration or CRD that does not trust it
   (cluster-scoped: the Event is in ``default``); the Normal ``WebhookCertificateTrusted``
   follows when it is mended.

A webhook configuration or CRD whose Service is another namespace's belongs to another
installation (`operator_kit.installation`): its caBundle is neither patched nor carried
into the Secret, and the replica is not ready, with an ERROR line and a Warning Event
``ForeignInstallation`` on that object.

With ``manage=False`` (``OPERATOR_KIT_MANAGE_TLS=0``: the certificate is someone else's,
e.g. a cert-manager Secret mounted in the directory, its caBundle injected by
cert-manager's CA injector) the keeper writes nothing: it only does step 5 with the
certificate in the directory.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from kubernetes.client.exceptions import ApiException

from operator_kit import _pki
from operator_kit._pki import b64, spki
from operator_kit.client.events import EventRecorder
from operator_kit.client.installation import foreign_owner
from operator_kit.client.transport import Api, error_message
from operator_kit.webhooks.certificates import (
    WebhookCertificate,
    ca_bundle_paths,
    new_issuer,
    patch_bundle,
    service_dns_names,
    signer_of,
)

__all__ = ["CertificateKeeper", "Rotation", "plan"]

logger = logging.getLogger("operator_kit.certificates")

_ATTEMPTS = 10
TRUST_ACTION = "CheckWebhookCertificate"
"""The ``action`` of the Events saying whether a caBundle trusts the served certificate."""
_REGISTRATION = "/apis/admissionregistration.k8s.io/v1"


def parse_duration(raw: str, setting: str) -> datetime.timedelta:
    """``"90d"``, ``"12h"``, ``"30m"``, ``"6s"`` or plain seconds; a clear error otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", raw)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{setting} must be a positive duration such as 90d, 12h, 30m or "
                         f"6s, got {raw!r}")
    unit = {"": "seconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    return datetime.timedelta(**{unit[match.group(2)]: float(match.group(1))})


@dataclass(frozen=True)
class Rotation:
    """Lifetimes and timings of the shared certificate (see the module docstring).

    ``OPERATOR_KIT_CERT_LIFETIME`` (default 90d), ``OPERATOR_KIT_CA_LIFETIME`` (default
    1095d), ``OPERATOR_KIT_CERT_POLL_INTERVAL`` (default 5s) and
    ``OPERATOR_KIT_CERT_SETTLE`` (default 2s) set them (`from_env`).
    """

    cert_lifetime: datetime.timedelta = datetime.timedelta(days=90)
    ca_lifetime: datetime.timedelta = datetime.timedelta(days=3 * 365)
    renew_fraction: float = 2 / 3
    poll_interval: float = 5.0
    settle: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_fraction < 1:
            raise ValueError(f"renew_fraction must be between 0 and 1, got {self.renew_fraction}")
        if self.poll_interval <= 0 or self.settle < 0:
            raise ValueError("poll_interval must be positive and settle not negative")
        if self.ca_lifetime < 3 * self.cert_lifetime:
            raise ValueError(
                f"the CA lifetime ({self.ca_lifetime}) must be at least 3 times the serving "
                f"certificate's ({self.cert_lifetime}): a certificate the old CA signed just "
                "before it was rotated must stay valid until it is replaced")
        if self.overlap >= self.cert_lifetime * (1 - self.renew_fraction):
            raise ValueError(
                f"the serving certificate lifetime ({self.cert_lifetime}) is too short for a "
                f"poll interval of {self.poll_interval} s: replicas would not pick a renewed "
                "certificate up before the old one expires")

    @property
    def overlap(self) -> datetime.timedelta:
        """How long a CA stays trusted after the serving certificate stopped using it."""
        return datetime.timedelta(seconds=3 * self.poll_interval + self.settle)

    def renew_at(self, cert: x509.Certificate) -> datetime.datetime:
        start = _pki.issued_at(cert)
        return start + (cert.not_valid_after_utc - start) * self.renew_fraction

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Rotation:
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for setting, attr in (("OPERATOR_KIT_CERT_LIFETIME", "cert_lifetime"),
                              ("OPERATOR_KIT_CA_LIFETIME", "ca_lifetime")):
            if source.get(setting, "").strip():
                values[attr] = parse_duration(source[setting], setting)
        for setting, attr in (("OPERATOR_KIT_CERT_POLL_INTERVAL", "poll_interval"),
                              ("OPERATOR_KIT_CERT_SETTLE", "settle")):
            if source.get(setting, "").strip():
                values[attr] = parse_duration(source[setting], setting).total_seconds()
        return cls(**values)


# ---------------------------------------------------------------------- deciding


def leaf_problem(cert: WebhookCertificate, names: Iterable[str],
                 now: datetime.datetime) -> str | None:
    """Why `cert` must not be served (expired, not yet valid, wrong names), or None."""
    if now >= cert.not_after:
        return f"the serving certificate expired at {cert.not_after.isoformat()}"
    if now < cert._cert.not_valid_before_utc:
        return "the serving certificate is not valid yet"
    missing = sorted(set(names) - set(cert.dns_names))
    if missing:
        return (f"the serving certificate is for {', '.join(cert.dns_names) or 'no DNS name'}, "
                f"not {', '.join(missing)} (a certificate for another Service?)")
    return None


def plan(current: WebhookCertificate | None, *, service: str, namespace: str,
         rotation: Rotation, now: datetime.datetime,
         carry: Sequence[x509.Certificate] = ()) -> tuple[WebhookCertificate, str] | None:
    """What the Secret should hold instead of `current`, and why; None if it is right.

    `current` None means there is nothing usable to start from: a new CA and serving
    certificate, trusting also the unexpired CAs of `carry` (what the caBundle trusts now).
    """
    name, names = f"{service}.{namespace}.svc", service_dns_names(service, namespace)
    if current is None:
        fresh = WebhookCertificate.generate(service, namespace, lifetime=rotation.cert_lifetime,
                                            ca_lifetime=rotation.ca_lifetime)
        kept = [ca for ca in _unique(carry) if ca.not_valid_after_utc > now]
        return _with_cas(fresh, [*fresh.cas, *kept]), "made a new CA and serving certificate"
    broken = leaf_problem(current, names, now)
    issuer = current.issuer()
    if issuer is None or now >= rotation.renew_at(issuer.cert):
        why = ("no issuing CA key in the Secret" if issuer is None
               else f"the issuing CA is due for rotation (expires "
                    f"{issuer.cert.not_valid_after_utc.isoformat()})")
        ca = new_issuer(name, rotation.ca_lifetime)
        bundle = [ca.cert, *(c for c in current.cas if c.not_valid_after_utc > now)]
        rotated = WebhookCertificate(_pems(bundle), current.cert_pem, current.key_pem,
                                     ca.key_pem)
        if broken:  # nothing worth waiting for: issue from the new CA at once
            return rotated.reissued(name, names, lifetime=rotation.cert_lifetime), \
                f"{broken}; {why}: a new CA issued a new one"
        return rotated, f"{why}: added a new CA to the bundle"
    since = _pki.issued_at(issuer.cert)
    settled = now >= since + datetime.timedelta(seconds=rotation.settle)
    signer = current.signer()
    older = signer is None or spki(signer.public_key()) != spki(issuer.cert.public_key())
    due = broken or (
        f"the serving certificate is due for renewal (expires {current.not_after.isoformat()})"
        if now >= rotation.renew_at(current._cert) else
        "the serving certificate was signed by the previous CA" if older and settled else None)
    if due and (settled or broken):
        renewed = current.reissued(name, names, lifetime=rotation.cert_lifetime)
        return _pruned(renewed, rotation, now), f"{due}: issued a new one"
    pruned = _pruned(current, rotation, now)
    if pruned.ca_pem != current.ca_pem:
        return pruned, "dropped CAs the serving certificate no longer needs"
    return None


def _pruned(cert: WebhookCertificate, rotation: Rotation,
            now: datetime.datetime) -> WebhookCertificate:
    """`cert` without the CAs nothing needs: not the issuer, not the serving certificate's
    signer, and expired or older than `overlap` since that certificate was issued."""
    issuer, signer = cert.issuer(), cert.signer()
    needed = {spki(c.public_key()) for c in (issuer.cert if issuer else None, signer) if c}
    young = now < _pki.issued_at(cert._cert) + rotation.overlap
    kept = [ca for ca in _unique(cert.cas) if spki(ca.public_key()) in needed
            or (young and ca.not_valid_after_utc > now)]
    return _with_cas(cert, kept)


def _unique(cas: Iterable[x509.Certificate]) -> list[x509.Certificate]:
    seen: set[bytes] = set()
    out = []
    for ca in cas:
        key = _pki.cert_pem(ca)
        if key not in seen:
            seen.add(key)
            out.append(ca)
    return out


def _pems(cas: Iterable[x509.Certificate]) -> bytes:
    return b"".join(_pki.cert_pem(ca) for ca in _unique(cas))


def _with_cas(cert: WebhookCertificate, cas: Iterable[x509.Certificate]) -> WebhookCertificate:
    return WebhookCertificate(_pems(cas), cert.cert_pem, cert.key_pem, cert.ca_key_pem)


def trusted_by(cert: WebhookCertificate, bundle: str | None,
               now: datetime.datetime) -> bool:
    """Whether a caBundle (base64 PEM, as in a clientConfig) trusts `cert` now."""
    import base64

    if not bundle:
        return False
    try:
        cas = x509.load_pem_x509_certificates(base64.b64decode(bundle))
    except ValueError:
        return False
    ca = signer_of(cert._cert, cas)
    return ca is not None and ca.not_valid_before_utc <= now < ca.not_valid_after_utc


# ---------------------------------------------------------------------- keeping


@dataclass
class _Target:
    kind: str
    name: str
    path: str
    obj: dict[str, Any] | None = None

    def bundles(self) -> list[str | None]:
        return [b for _, b in ca_bundle_paths(self.obj)] if self.obj else []


@dataclass
class CertificateKeeper:
    """One replica's keeper of the shared certificate (module docstring)."""

    api: Api
    namespace: str
    secret: str
    service: str
    directory: Path
    validating: Sequence[str] = ()
    mutating: Sequence[str] = ()
    crds: Sequence[str] = ()
    rotation: Rotation = field(default_factory=Rotation)
    manage: bool = True
    recorder: EventRecorder | None = None
    last: WebhookCertificate | None = field(default=None, repr=False)
    installed: WebhookCertificate | None = field(default=None, repr=False)
    problem: str | None = "the webhook certificate was not checked yet"
    rotations: int = 0
    foreign: str | None = None  # why another installation owns a target (last pass)
    _secret_obj: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.secret}"

    def ready(self) -> bool:
        """Whether every caBundle trusts the certificate this replica serves."""
        return self.problem is None

    # -- one pass ------------------------------------------------------------------------

    def sync(self, *, wait: bool = True) -> None:
        """One pass (module docstring); `wait` False skips the settle pause (at start-up,
        before anything is served)."""
        for _ in range(_ATTEMPTS):
            targets = self._read_targets()
            foreign = self._foreign(targets)
            self.foreign = foreign[0] if foreign else None
            if not self.manage:
                self._check(targets, self._installed_from_files(), foreign)
                return
            # Another installation's caBundles are neither carried nor patched; the
            # Secret (in our namespace) is still kept, so the server can start and say why
            # it is not ready.
            desired = self._settle_secret([] if foreign else targets)
            if desired is None:
                continue  # the Secret changed meanwhile: start over
            try:
                added = False if foreign else self._patch_bundles(targets, desired)
            except ApiException as err:
                if err.status in (409, 422):
                    continue
                raise
            if desired != self.installed:
                if added and wait and self.installed is not None:
                    time.sleep(self.rotation.settle)  # let the API server load the new CA
                desired.install(self.directory, point_server=False)
                self.installed = desired
            self.last = desired
            self._check(targets, desired, foreign)
            return
        raise RuntimeError(f"{self.where} or the caBundles kept changing during "
                           f"{_ATTEMPTS} attempts to follow them; is another program "
                           "rewriting them?")

    def _read_targets(self) -> list[_Target]:
        targets = [
            *(_Target("ValidatingWebhookConfiguration", n,
                      f"{_REGISTRATION}/validatingwebhookconfigurations/{n}")
              for n in self.validating),
            *(_Target("MutatingWebhookConfiguration", n,
                      f"{_REGISTRATION}/mutatingwebhookconfigurations/{n}")
              for n in self.mutating),
            *(_Target("CustomResourceDefinition", n,
                      f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
              for n in self.crds),
        ]
        for target in targets:
            try:
                target.obj = self.api.get_or_none(target.path)
            except ApiException as err:
                if err.status != 403:
                    raise
                raise RuntimeError(
                    f"cannot read {target.kind} {target.name}: {error_message(err)}; if "
                    f"ClusterRoleBinding {self.service} binds another namespace's "
                    "ServiceAccount, this operator is installed there (one installation "
                    "per cluster, see operator_kit.installation)") from None
        return targets

    def _foreign(self, targets: Sequence[_Target]) -> tuple[str, dict[str, Any]] | None:
        """The first target that belongs to another installation: why, and the object."""
        for target in targets:
            if target.obj is not None:
                why = foreign_owner(target.obj, self.namespace, self.service)
                if why:
                    return why, target.obj
        return None

    def _settle_secret(self, targets: Sequence[_Target]) -> WebhookCertificate | None:
        """What the Secret holds once this pass wrote what it should; None on a conflict."""
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{self.secret}"
        secret = self.api.get_or_none(path)
        current: WebhookCertificate | None = None
        if secret is not None:
            if secret.get("type") not in (None, "kubernetes.io/tls"):
                raise RuntimeError(
                    f"{self.where} exists with type {secret.get('type')}, not "
                    "kubernetes.io/tls; delete it or name another Secret for the webhook "
                    "certificate")
            try:
                current = WebhookCertificate.from_secret(secret)
            except ValueError as err:
                logger.warning("%s holds no usable webhook certificate (%s); replacing it "
                               "with %s", self.where, err,
                               "the one this replica last saw" if self.last else "a new one")
        elif self.last is not None:
            logger.warning("%s is gone; writing back the certificate this replica serves",
                           self.where)
        base = current or self.last
        carry = [ca for t in targets for b in t.bundles() for ca in _cas_of(b)]
        decision = plan(base, service=self.service, namespace=self.namespace,
                        rotation=self.rotation, now=_now(), carry=carry)
        desired, why = decision if decision else (base, "")
        assert desired is not None
        if secret is not None and desired == current:
            self._secret_obj = secret
            return desired
        body = desired.to_secret(self.secret, self.namespace)
        try:
            if secret is None:
                written = self.api.request(
                    "POST", f"/api/v1/namespaces/{self.namespace}/secrets", body=body)
            else:
                old = secret.get("metadata") or {}
                for key in ("labels", "annotations", "ownerReferences"):
                    if old.get(key):
                        body["metadata"][key] = old[key]
                body["metadata"]["resourceVersion"] = old.get("resourceVersion")
                written = self.api.request("PUT", path, body=body)
        except ApiException as err:
            if err.status in (404, 409):
                return None
            raise
        self._secret_obj = written
        if decision:
            self.rotations += 1
            broken = base is not None and leaf_problem(
                base, service_dns_names(self.service, self.namespace), _now())
            (logger.warning if broken else logger.info)(
                "%s: %s (now %s)", self.where, why, desired)
        return desired

    def _patch_bundles(self, targets: Sequence[_Target], desired: WebhookCertificate) -> bool:
        """Write the Secret's bundle into every caBundle; whether one gained a CA."""
        bundle = b64(desired.ca_pem)
        added = False
        for target in targets:
            if target.obj is None:
                continue
            before = {_pki.cert_pem(c) for b in target.bundles() for c in _cas_of(b)}
            if patch_bundle(self.api, target.path, target.obj, bundle):
                added |= any(_pki.cert_pem(c) not in before for c in desired.cas)
                logger.info("patched the webhook CA bundle into %s %s", target.kind,
                            target.name)
                target.obj = self.api.get_or_none(target.path)
        return added

    def _installed_from_files(self) -> WebhookCertificate | None:
        try:
            cert = (self.directory / "tls.crt").read_bytes()
            ca_file = self.directory / "ca.crt"
            ca = ca_file.read_bytes() if ca_file.exists() else b""
        except OSError:
            return None
        return WebhookCertificate(ca, cert, b"")

    def _check(self, targets: Sequence[_Target], served: WebhookCertificate | None,
               foreign: tuple[str, dict[str, Any]] | None = None) -> None:
        now = _now()
        problem, about = None, self._secret_obj
        if foreign is not None:
            problem, about = foreign
            self._report(problem, about, reason="ForeignInstallation")
            return
        if served is None:
            problem = f"no certificate in {self.directory}"
        else:
            try:
                problem = leaf_problem(served, (), now)
            except ValueError as err:
                problem = f"the served certificate cannot be read: {err}"
        for target in targets:
            if problem:
                break
            if target.obj is None:
                problem = (f"{target.kind} {target.name} does not exist; apply the "
                           "operator's manifests")
            elif served is not None and not all(trusted_by(served, b, now)
                                                for b in target.bundles()):
                problem, about = (
                    f"the caBundle of {target.kind} {target.name} does not trust the "
                    f"certificate this replica serves ({served}); the API server would "
                    "refuse its calls", target.obj)
        self._report(problem, about or next((t.obj for t in targets if t.obj), None))

    def _report(self, problem: str | None, about: dict[str, Any] | None,
                reason: str = "WebhookCertificateUntrusted") -> None:
        """Log and post an Event (on the untrusting object, else the Secret) on a change."""
        if problem == self.problem:
            return
        previous, self.problem = self.problem, problem
        who = os.environ.get("POD_NAME", "a replica")
        if problem:
            logger.error("webhook certificate: %s; this replica reports not ready", problem)
            if self.recorder is not None and about is not None:
                self.recorder.event(about, warning=True, reason=reason, action=TRUST_ACTION,
                                    note=f"{who}: {problem}")
        elif previous and not previous.endswith("not checked yet"):
            logger.info("webhook certificate: trusted by every caBundle again; ready")
            if self.recorder is not None and about is not None:
                self.recorder.event(about, warning=False, action=TRUST_ACTION,
                                    reason="WebhookCertificateTrusted",
                                    note=f"{who}: the served certificate is trusted again")

    # -- the thread ----------------------------------------------------------------------

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(stop,), daemon=True,
                                  name="operator_kit-certificate-keeper")
        thread.start()
        return thread

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.rotation.poll_interval):
            try:
                self.sync()
            except Exception as err:  # noqa: BLE001 - keep following; logged, retried
                logger.error("webhook certificate: following %s failed: %s", self.where, err)


def _cas_of(bundle: str | None) -> list[x509.Certificate]:
    import base64

    if not bundle:
        return []
    try:
        return list(x509.load_pem_x509_certificates(base64.b64decode(bundle)))
    except ValueError:
        return []


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
