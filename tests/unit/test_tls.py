"""The webhook server's TLS: the suites it accepts, and a certificate replaced in place.

Real gunicorn processes with `operator_kit.gunicorn_conf`, probed with ``openssl s_client``
and Python's ssl module; no API server is needed (the app is a bare `Webhooks`).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from operator_kit.testing import stop_process
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.tls import ServingContext, apply_policy

OPENSSL = shutil.which("openssl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def certificate() -> WebhookCertificate:
    return WebhookCertificate.generate_for("localhost", ["localhost"], ip_addresses=["127.0.0.1"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path, subprocess.Popen[bytes]]]:
    (tmp_path / "tls_test_app.py").write_text(
        "from operator_kit.webhooks import Webhooks\napp = Webhooks('tls-test')\n")
    certificate().install(tmp_path / "tls")
    port = free_port()
    env = {**os.environ, "OPERATOR_KIT_APP": "tls_test_app:app",
           "OPERATOR_KIT_TLS_DIR": str(tmp_path / "tls"),
           "OPERATOR_KIT_BIND": f"127.0.0.1:{port}",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    for name in ("OPERATOR_KIT_TLS_CERT", "OPERATOR_KIT_TLS_KEY"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            served_certificate(port)
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                stop_process(process)
                raise AssertionError(process.communicate()[0].decode()) from None
            time.sleep(0.1)
    try:
        yield port, tmp_path / "tls", process
    finally:
        stop_process(process)


def served_certificate(port: int) -> bytes:
    """The DER certificate a new TLS connection to `port` is served."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def s_client(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    assert OPENSSL is not None, "these tests need the openssl command"
    return subprocess.run([OPENSSL, "s_client", "-connect", f"127.0.0.1:{port}", *args],
                          input="", capture_output=True, text=True, timeout=20)


def test_tls_1_2_accepts_only_aead_suites_and_tls_1_3_is_served(
        server: tuple[int, Path, subprocess.Popen[bytes]]) -> None:
    port = server[0]
    cbc = s_client(port, "-tls1_2", "-cipher",
                   "ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA256:AES128-SHA256:"
                   "ECDHE-ECDSA-AES128-SHA")
    assert cbc.returncode != 0, cbc.stdout
    assert "handshake failure" in cbc.stderr or "no ciphers" in cbc.stderr, cbc.stderr
    aead = s_client(port, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert aead.returncode == 0, aead.stderr
    assert "ECDHE-ECDSA-AES128-GCM-SHA256" in aead.stdout
    chacha = s_client(port, "-tls1_2", "-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305")
    assert chacha.returncode == 0, chacha.stderr
    tls13 = s_client(port, "-tls1_3")
    assert tls13.returncode == 0, tls13.stderr
    assert "TLSv1.3" in tls13.stdout
    for old in ("-tls1", "-tls1_1"):
        assert s_client(port, old, "-cipher", "DEFAULT@SECLEVEL=0").returncode != 0


def test_a_replaced_certificate_is_served_to_new_connections_without_a_restart(
        server: tuple[int, Path, subprocess.Popen[bytes]]) -> None:
    port, directory, process = server
    before = served_certificate(port)
    # A connection made before the change keeps working after it.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    kept = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5))
    fresh = certificate()
    fresh.install(directory)
    expected = ssl.PEM_cert_to_DER_cert(fresh.cert_pem.decode())
    deadline = time.monotonic() + 5
    while served_certificate(port) != expected:
        assert time.monotonic() < deadline, "the new certificate was not served within 5 s"
        time.sleep(0.1)
    assert before != expected
    kept.sendall(b"GET /nothing HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert kept.recv(64).startswith(b"HTTP/1.1 404")
    kept.close()
    assert process.poll() is None  # the same process: no restart


def test_garbage_in_place_of_the_certificate_keeps_the_last_good_one_served(
        server: tuple[int, Path, subprocess.Popen[bytes]]) -> None:
    port, directory, _ = server
    before = served_certificate(port)
    (directory / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n")
    time.sleep(1.5)
    for _ in range(5):
        assert served_certificate(port) == before


def test_serving_context_reloads_only_when_the_files_change(tmp_path: Path) -> None:
    files = certificate().install(tmp_path)
    now = [0.0]
    serving = ServingContext(str(files.cert), str(files.key), check_interval=1.0,
                             clock=lambda: now[0])
    built: list[ssl.SSLContext] = []

    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(files.cert), str(files.key))
        built.append(context)
        return context

    first = serving.context(factory)
    now[0] = 5.0
    assert serving.context(factory) is first and len(built) == 1  # unchanged files
    certificate().install(tmp_path)
    assert serving.context(factory) is first  # looked at less than a second ago
    now[0] = 6.5
    second = serving.context(factory)
    assert second is not first and serving.reloads == 1
    assert second.minimum_version == ssl.TLSVersion.TLSv1_2


def test_policy_lists_only_aead_suites_for_tls_1_2() -> None:
    context = apply_policy(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    suites = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert suites and all(c["aead"] for c in suites), [c["name"] for c in suites]
