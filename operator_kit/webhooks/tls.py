"""The webhook server's TLS: one policy, and a serving certificate that follows its files.

Policy (`apply_policy`): TLS 1.2 with AEAD suites only — Mozilla's "intermediate"
profile: ECDHE with AES-GCM or ChaCha20-Poly1305 — and TLS 1.3 (whose suites are all
AEAD). CBC-mode suites, RSA key exchange, TLS 1.0 and 1.1 are refused.

Reloading (`ServingContext`), modelled on controller-runtime's ``certwatcher``: the
server asks for the context to use on every new connection; the certificate and key files
are looked at (one ``stat`` each) at most every `check_interval` seconds, and when they
changed — a file replaced by `WebhookCertificate.install`, or the kubelet swapping a
mounted Secret's ``..data`` link — a new context is built from them and handed out from
then on. Connections already open keep the certificate they were made with; nothing
restarts. Files that do not load (a key that does not match its certificate yet, garbage)
leave the last good context in use; a failure that lasts longer than `check_interval`
times five is logged as an error.

`operator_kit.gunicorn_conf` installs it as gunicorn's ``ssl_context`` hook.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable

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


class ServingContext:
    """The SSLContext for new connections, rebuilt when the certificate files change.

    `factory` builds a context from the files (gunicorn's default factory reads its
    ``certfile``/``keyfile`` settings, which name the same files); `apply_policy` is
    applied to each. Thread-safe: many connections ask at once.
    """

    def __init__(self, cert: str, key: str, *, check_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.paths = (cert, key)
        self.check_interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._loaded: Fingerprint | None = None
        self._checked = float("-inf")
        self._failing_since: float | None = None
        self.reloads = 0

    def context(self, factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """The context to wrap the next connection with (reloaded first when due)."""
        now = self._clock()
        context = self._context
        if context is not None and now - self._checked < self.check_interval:
            return context
        with self._lock:
            if self._context is not None and now - self._checked < self.check_interval:
                return self._context
            self._checked = now
            seen = _fingerprint(self.paths)
            if self._context is not None and seen == self._loaded:
                return self._context
            try:
                fresh = apply_policy(factory())
            except (OSError, ssl.SSLError, ValueError) as err:
                if self._context is None:
                    raise
                self._note_failure(now, err)
                return self._context
            if self._context is not None:
                self.reloads += 1
                logger.info("serving the new certificate from %s", self.paths[0])
            self._context, self._loaded, self._failing_since = fresh, seen, None
            return fresh

    def _note_failure(self, now: float, err: Exception) -> None:
        # A key replaced a moment before its certificate mismatches briefly: retry quietly.
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= 5 * self.check_interval:
            logger.error("cannot load the new certificate %s with key %s (%s); still "
                         "serving the previous one", self.paths[0], self.paths[1], err)
            self._failing_since = now
