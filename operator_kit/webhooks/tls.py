"""The webhook server's TLS: one policy, and a serving certificate that follows its files.

Policy (`apply_policy`): TLS 1.2 with AEAD suites only — Mozilla's "intermediate"
profile: ECDHE with AES-GCM or ChaCha20-Poly1305 — and TLS 1.3 (whose suites are all
AEAD). CBC-mode suites, RSA key exchange, TLS 1.0 and 1.1 are refused.

Loading (`pair_problem`), as Go's ``tls.LoadX509KeyPair`` refuses a pair and a little
more: both files readable, the certificate file PEM (its first certificate is the one
served), the key file an unencrypted PEM private key, the key the certificate's (their
public keys equal), and the certificate valid now. A pair that fails is refused with
one ERROR line naming both files, what is wrong, and what to check, such as
``webhook certificate /tls/tls.crt and key /tls/tls.key do not match: the key's public
key is not the certificate's; check the Secret backup-operator-tls; this replica is not
ready until they load``.

Reloading (`ServingContext`), modelled on controller-runtime's ``certwatcher``: the
server asks for the context to use on every new connection; the certificate and key files
are looked at (one ``stat`` each) at most every `check_interval` seconds, and when they
changed — a file replaced by `WebhookCertificate.install`, or the kubelet swapping a
mounted Secret's ``..data`` link — a new context is built from them and handed out from
then on. Connections already open keep the certificate they were made with; nothing
restarts. When the files do not load:

- **before any pair loaded** (the process starts with a broken pair: `ServingContext.check`
  refuses it at start, in gunicorn's master): the ERROR line at once, and not ready —
  `serving_problem`, which `Operator.ready` consults, says why. The probes are on the
  TLS port and the kubelet does not verify their certificate, so a throwaway self-signed
  certificate (`placeholder_context`) answers them meanwhile: ``/livez`` 200 and
  ``/readyz`` 503, so the pod is reported not ready instead of being restarted over and
  over. A client that verifies (the API server) refuses it, and a pod that is not ready
  gets no webhook calls through its Service. The files are tried again every
  `check_interval`; the first pair that loads is served at once, one INFO line says so,
  and readiness returns. Nothing restarts.
- **after a good pair** (a bad renewal): the last good pair stays in use — never none —
  and the replica stays ready while it is valid; an ERROR line once the failure lasted
  `check_interval` times five (a key replaced a moment before its certificate mismatches
  briefly, and is retried quietly). A served pair that expires makes the replica not
  ready, with an ERROR line.

Each ERROR line is logged once per problem; the INFO line that ends it, once.
`operator_kit.gunicorn_conf` installs a `ServingContext` as gunicorn's ``ssl_context`` hook
and makes it the process's (`set_current`).
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from operator_kit import _pki
from operator_kit._pki import spki

logger = logging.getLogger("operator_kit.tls")

# Mozilla's intermediate configuration (v5.7) for TLS 1.2; TLS 1.3 suites are not set here.
INTERMEDIATE_CIPHERS = ":".join((
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "DHE-RSA-AES128-GCM-SHA256",
    "DHE-RSA-AES256-GCM-SHA384",
    "DHE-RSA-CHACHA20-POLY1305",
))


def apply_policy(context: ssl.SSLContext) -> ssl.SSLContext:
    """Restrict `context` to TLS 1.2 (AEAD suites) and TLS 1.3."""
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(INTERMEDIATE_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    return context


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _inspect(cert: str, key: str, now: datetime.datetime
             ) -> tuple[str | None, datetime.datetime | None]:
    """`pair_problem`, and the certificate's end of validity when it has none."""
    pems: dict[str, bytes] = {}
    for path in dict.fromkeys((cert, key)):
        try:
            with open(path, "rb") as f:
                pems[path] = f.read()
        except OSError as err:
            return f"cannot be read: {path}: {err.strerror or err}", None
    try:
        leaf = x509.load_pem_x509_certificates(pems[cert])[0]
        served = spki(leaf.public_key())
    except (ValueError, UnsupportedAlgorithm):
        return f"cannot be parsed: {cert} holds no PEM certificate", None
    try:
        private = serialization.load_pem_private_key(pems[key], password=None)
    except TypeError:
        return (f"cannot be parsed: {key} is an encrypted key, and the server has no "
                "password"), None
    except (ValueError, UnsupportedAlgorithm):
        return f"cannot be parsed: {key} holds no PEM private key", None
    if spki(private.public_key()) != served:
        return "do not match: the key's public key is not the certificate's", None
    until = leaf.not_valid_after_utc
    if now >= until:
        return f"have expired: the certificate was valid until {until.isoformat()}", None
    if now < leaf.not_valid_before_utc:
        return ("are not valid yet: the certificate is valid from "
                f"{leaf.not_valid_before_utc.isoformat()}"), None
    return None, until


def pair_problem(cert: str, key: str, *, now: datetime.datetime | None = None) -> str | None:
    """Why the certificate file `cert` and the key file `key` cannot be served, or None.

    The phrase follows "webhook certificate <cert> and key <key>": ``do not match: the
    key's public key is not the certificate's``, ``cannot be read: <path>: <reason>``,
    ``cannot be parsed: ...``, ``have expired: ...``, ``are not valid yet: ...``. `now`
    (default: the current time) is when the certificate must be valid."""
    return _inspect(cert, key, now or _utcnow())[0]


def placeholder_context() -> ssl.SSLContext:
    """A server context with a throwaway self-signed certificate, under the policy.

    What the server answers with while no pair of its own loads: the kubelet's HTTPS
    probes (which do not verify) get ``/livez`` and ``/readyz``; a client that verifies
    refuses it. The key exists only in this process (its PEM file, in a private temporary
    directory, is removed once loaded)."""
    ca = _pki.new_ca("operator_kit placeholder CA", days=365)
    leaf = _pki.issue(ca, "operator_kit placeholder (webhook certificate refused)",
                      dns_names=("localhost",), days=365)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="operator_kit-placeholder-") as directory:
        cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
        for path, data in ((key, leaf.key_pem), (cert, leaf.cert_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context.load_cert_chain(cert, key)
    return apply_policy(context)


Fingerprint = tuple[tuple[int, int, int, int], ...]


def _fingerprint(paths: tuple[str, ...]) -> Fingerprint:
    out = []
    for path in paths:
        try:
            st = os.stat(path)  # follows links: a kubelet-mounted Secret swaps ..data
        except OSError:
            out.append((0, 0, 0, 0))
            continue
        out.append((st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _scratch_factory(cert: str, key: str) -> Callable[[], ssl.SSLContext]:
    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        return context
    return factory


class ServingContext:
    """The SSLContext for new connections, rebuilt when the certificate files change.

    `factory` builds a context from the files (gunicorn's default factory reads its
    ``certfile``/``keyfile`` settings, which name the same files); `apply_policy` is
    applied to each. Thread-safe: many connections ask at once. `hint` says what to check
    when the files do not load (``check the Secret NAME``), asked only then; `clock`
    (monotonic) paces the checks, `wall` (UTC) is when a certificate must be valid.
    `what` names the certificate in the log lines, `unserved` what follows while none of
    its own is served (the secure metrics server's differ from the webhooks').
    What happens when the files do not load: the module docstring.
    """

    def __init__(self, cert: str, key: str, *, check_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = _utcnow,
                 hint: Callable[[], str] | None = None,
                 what: str = "webhook certificate",
                 unserved: str = "this replica is not ready until they load") -> None:
        self.paths = (cert, key)
        self.what, self.unserved = what, unserved
        self.check_interval = check_interval
        self.hint = hint
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None  # the last pair that loaded
        self._not_after: datetime.datetime | None = None  # ... valid until then
        self._placeholder: ssl.SSLContext | None = None
        self._loaded: Fingerprint | None = None
        self._checked = float("-inf")
        self._failing_since: float | None = None
        self._refused: str | None = None  # why the files did not load, the last time
        self._reported: str | None = None  # the problem of the last ERROR line
        self.reloads = 0

    @property
    def problem(self) -> str | None:
        """Why no valid certificate of its own is served now (so: not ready), or None.

        None too while a bad renewal leaves the previous, still valid, pair served."""
        if self._context is None:
            return self._refused
        if self._not_after is not None and self._wall() >= self._not_after:
            return ("have expired while served: the certificate was valid until "
                    f"{self._not_after.isoformat()}, and no newer pair loads")
        return None

    @property
    def serving_placeholder(self) -> bool:
        """Whether new connections get the placeholder (no pair of its own loaded yet)."""
        return self._context is None and self._placeholder is not None

    def check(self) -> str | None:
        """Look at the files now, as at start (gunicorn_conf calls it in the master): a
        pair that cannot be served is refused with the ERROR line; its problem is
        returned (None: the pair loads). Nothing is kept for serving."""
        with self._lock:
            problem, _ = self._load(_scratch_factory(*self.paths))
            self._refused = problem
            if problem is not None and self._context is None:
                self._report(problem)
            return problem

    def context(self, factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """The context to wrap the next connection with (reloaded first when due)."""
        now = self._clock()
        current = self._context or self._placeholder
        if current is not None and now - self._checked < self.check_interval:
            return current
        with self._lock:
            current = self._context or self._placeholder
            if current is not None and now - self._checked < self.check_interval:
                return current
            self._checked = now
            seen = _fingerprint(self.paths)
            if self._context is not None and seen == self._loaded:
                expired = self.problem
                if expired is not None:
                    self._report(expired)
                return self._context
            problem, fresh = self._load(factory)
            if fresh is None:
                assert problem is not None
                return self._note_failure(now, problem)
            self._serve(fresh, seen)
            return fresh[0]

    def _load(self, factory: Callable[[], ssl.SSLContext]
              ) -> tuple[str | None, tuple[ssl.SSLContext, datetime.datetime] | None]:
        problem, until = _inspect(*self.paths, self._wall())
        if problem is not None:
            return problem, None
        assert until is not None
        try:
            return None, (apply_policy(factory()), until)
        except (OSError, ssl.SSLError, ValueError) as err:
            return f"cannot be loaded: {err}", None

    def _serve(self, fresh: tuple[ssl.SSLContext, datetime.datetime],
               seen: Fingerprint) -> None:
        cert, key = self.paths
        if self._reported is not None:
            logger.info("%s %s and key %s now load: serving them (the problem logged "
                        "before is over)", self.what, cert, key)
        elif self._context is not None:
            logger.info("serving the new certificate from %s", cert)
        if self._context is not None:
            self.reloads += 1
        self._context, self._not_after = fresh
        self._loaded, self._placeholder = seen, None
        self._failing_since = self._refused = self._reported = None

    def _note_failure(self, now: float, problem: str) -> ssl.SSLContext:
        self._refused = problem
        if self._context is None:  # nothing of its own to serve: say so at once
            self._report(problem)
            if self._placeholder is None:
                self._placeholder = placeholder_context()
            return self._placeholder
        expired = self.problem
        if expired is not None:  # the previous pair expired meanwhile: not ready now
            self._report(expired)
        # A key replaced a moment before its certificate mismatches briefly: retry quietly.
        elif self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= 5 * self.check_interval:
            self._report(problem)
        return self._context

    def _report(self, problem: str) -> None:
        """The ERROR line, once per problem."""
        if problem == self._reported:
            return
        self._reported = problem
        cert, key = self.paths
        hint = self.hint() if self.hint is not None else "replace them"
        if self.problem is None:  # a bad renewal: the previous pair is still served
            assert self._not_after is not None
            logger.error("%s %s and key %s %s; %s; still serving the previous pair (valid "
                         "until %s)", self.what, cert, key, problem, hint,
                         self._not_after.isoformat())
        else:
            logger.error("%s %s and key %s %s; %s; %s", self.what, cert, key, problem, hint,
                         self.unserved)


_current: ServingContext | None = None


def set_current(serving: ServingContext | None) -> None:
    """Make `serving` the context this process serves its webhooks with (gunicorn_conf
    does, in the master; the worker inherits it), which `serving_problem` follows."""
    global _current
    _current = serving


def serving_problem() -> str | None:
    """Why this process's webhook server has no valid certificate of its own to serve, or
    None (also when no `ServingContext` was made current: plain HTTP, or a server that
    loads its certificate itself). `Operator.ready` is False while it is not None."""
    serving = _current
    return serving.problem if serving is not None else None
