"""The webhook server's TLS: the suites it accepts, a certificate replaced in place, and
a pair that cannot be served (a key that is not the certificate's) refused.

Real gunicorn processes with `operator_kit.gunicorn_conf`, probed with ``openssl s_client``
and Python's ssl module; no API server is needed (the app is a bare `Webhooks`, with the
probe views where readiness is looked at).
"""

from __future__ import annotations

import datetime
import logging
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

from operator_kit import _pki
from operator_kit.operator import Operator
from operator_kit.testing import stop_process
from operator_kit.webhooks.certificates import TlsFiles, WebhookCertificate
from operator_kit.webhooks.tls import (
    ServingContext,
    apply_policy,
    pair_problem,
    serving_problem,
    set_current,
)

OPENSSL = shutil.which("openssl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def certificate() -> WebhookCertificate:
    return WebhookCertificate.generate_for("localhost", ["localhost"], ip_addresses=["127.0.0.1"])


def start_gunicorn(tmp_path: Path, *, app: str = "tls_test_app:app",
                   env: dict[str, str] | None = None) -> tuple[int, subprocess.Popen[bytes]]:
    """gunicorn with operator_kit.gunicorn_conf on a free port, serving `tmp_path`/tls,
    once a TLS handshake (unverified) completes."""
    (tmp_path / "tls_test_app.py").write_text(
        "from operator_kit.webhooks import Webhooks\napp = Webhooks('tls-test')\n")
    port = free_port()
    environment = {**os.environ, "OPERATOR_KIT_APP": app,
                   "OPERATOR_KIT_TLS_DIR": str(tmp_path / "tls"),
                   "OPERATOR_KIT_BIND": f"127.0.0.1:{port}",
                   "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), **(env or {})}
    for name in ("OPERATOR_KIT_TLS_CERT", "OPERATOR_KIT_TLS_KEY"):
        environment.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf"],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            served_certificate(port)
            return port, process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                stop_process(process)
                raise AssertionError(process.communicate()[0].decode()) from None
            time.sleep(0.1)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path, subprocess.Popen[bytes]]]:
    certificate().install(tmp_path / "tls", point_server=False)
    port, process = start_gunicorn(tmp_path)
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


# -- a pair that cannot be served -------------------------------------------------------

MISMATCH = "do not match: the key's public key is not the certificate's"


def mismatched(directory: Path) -> TlsFiles:
    """A certificate with a key that is not its own: two keys, one certificate (every
    moment of the writing is mismatched: the foreign key goes in first)."""
    cert = certificate()
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
    files.key.write_bytes(_pki.key_pem(_pki.new_key()))
    files.cert.write_bytes(cert.cert_pem)
    files.ca.write_bytes(cert.ca_pem)
    return files


def factory_for(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(files.cert), str(files.key))
    return context


def tls_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "operator_kit.tls" and r.levelno >= logging.ERROR]


def test_pair_problem_names_each_way_a_pair_cannot_be_served(tmp_path: Path) -> None:
    good = certificate().install(tmp_path / "good", point_server=False)
    cert, key = str(good.cert), str(good.key)
    assert pair_problem(cert, key) is None
    bad = mismatched(tmp_path / "bad")
    assert pair_problem(str(bad.cert), str(bad.key)) == MISMATCH
    missing = str(tmp_path / "nowhere.key")
    assert pair_problem(cert, missing) == (
        f"cannot be read: {missing}: No such file or directory")
    (tmp_path / "garbage").write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n")
    assert pair_problem(str(tmp_path / "garbage"), key) == (
        f"cannot be parsed: {tmp_path / 'garbage'} holds no PEM certificate")
    assert pair_problem(cert, cert) == f"cannot be parsed: {cert} holds no PEM private key"
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=400)
    expired = pair_problem(cert, key, now=later)
    assert expired is not None and expired.startswith(
        "have expired: the certificate was valid until "), expired
    earlier = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    early = pair_problem(cert, key, now=earlier)
    assert early is not None and early.startswith("are not valid yet"), early


def test_a_mismatched_pair_is_refused_at_load_with_one_error_line_then_recovers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "operator_kit.tls")
    files = mismatched(tmp_path)
    now = [0.0]
    serving = ServingContext(str(files.cert), str(files.key), clock=lambda: now[0],
                             hint=lambda: "check the Secret backup-operator-tls")
    assert serving.check() == MISMATCH
    assert tls_errors(caplog) == [
        f"webhook certificate {files.cert} and key {files.key} {MISMATCH}; check the Secret "
        "backup-operator-tls; this replica is not ready until they load"]
    assert caplog.records[-1].levelname == "ERROR"
    assert serving.problem == MISMATCH
    placeholder = serving.context(lambda: factory_for(files))
    assert serving.serving_placeholder and serving.problem == MISMATCH
    for t in (0.5, 1.5, 2.6):  # looked at again, still broken: no second line
        now[0] = t
        assert serving.context(lambda: factory_for(files)) is placeholder
    assert len(tls_errors(caplog)) == 1
    fixed = certificate().install(tmp_path, point_server=False)
    now[0] = 4.0
    served = serving.context(lambda: factory_for(fixed))
    assert served is not placeholder and not serving.serving_placeholder
    assert serving.problem is None
    assert caplog.records[-1].levelname == "INFO"
    assert caplog.records[-1].getMessage() == (
        f"webhook certificate {fixed.cert} and key {fixed.key} now load: serving them "
        "(the problem logged before is over)")
    assert len(tls_errors(caplog)) == 1


def test_a_bad_renewal_keeps_the_last_good_pair_served_and_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "operator_kit.tls")
    files = certificate().install(tmp_path, point_server=False)
    now = [0.0]
    serving = ServingContext(str(files.cert), str(files.key), clock=lambda: now[0],
                             hint=lambda: "check the Secret backup-operator-tls")
    assert serving.check() is None and not tls_errors(caplog)
    good = serving.context(lambda: factory_for(files))
    mismatched(tmp_path)
    for t in (1.5, 3.0, 6.0):  # quiet for five checks: a key ahead of its certificate
        now[0] = t
        assert serving.context(lambda: factory_for(files)) is good
    assert not tls_errors(caplog)
    for t in (7.0, 8.5, 30.0):
        now[0] = t
        assert serving.context(lambda: factory_for(files)) is good
    [line] = tls_errors(caplog)
    assert line.startswith(f"webhook certificate {files.cert} and key {files.key} "
                           f"{MISMATCH}; check the Secret backup-operator-tls; still "
                           "serving the previous pair (valid until "), line
    assert serving.problem is None  # a valid pair is served: still ready
    renewed = certificate().install(tmp_path, point_server=False)
    now[0] = 31.5
    assert serving.context(lambda: factory_for(renewed)) is not good
    assert serving.reloads == 1 and serving.problem is None
    assert "now load: serving them" in caplog.records[-1].getMessage()


def test_a_served_pair_that_expires_is_not_ready(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = certificate().install(tmp_path, point_server=False)
    now, wall = [0.0], [datetime.datetime.now(datetime.timezone.utc)]
    serving = ServingContext(str(files.cert), str(files.key), clock=lambda: now[0],
                             wall=lambda: wall[0])
    good = serving.context(lambda: factory_for(files))
    wall[0] += datetime.timedelta(days=400)
    now[0] = 2.0
    assert serving.context(lambda: factory_for(files)) is good  # never none
    assert serving.problem is not None and "have expired while served" in serving.problem
    [line] = tls_errors(caplog)
    assert line.endswith("; replace them; this replica is not ready until they load"), line


def test_the_operator_is_not_ready_while_the_served_pair_is_broken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    operator = Operator("op")
    monkeypatch.setattr(operator, "_started", True)  # its (no) controllers run
    assert operator.ready()
    files = mismatched(tmp_path)
    now = [0.0]
    serving = ServingContext(str(files.cert), str(files.key), clock=lambda: now[0])
    serving.check()
    set_current(serving)
    try:
        assert serving_problem() == MISMATCH
        assert not operator.ready()
        fixed = certificate().install(tmp_path, point_server=False)
        now[0] = 2.0
        serving.context(lambda: factory_for(fixed))
        assert serving_problem() is None
        assert operator.ready()
    finally:
        set_current(None)


PROBE_APP = """
from operator_kit.probes import add_probe_views
from operator_kit.webhooks import Webhooks
from operator_kit.webhooks.certificates import ExternalCertificate
from operator_kit.webhooks.tls import serving_problem


class Served:  # as an Operator with an ExternalCertificate looks to gunicorn_conf
    webhook_certificate = ExternalCertificate(secret="tls-test-secret")
    app = Webhooks("tls-test")


served = Served()
add_probe_views(served.app, live=lambda: True, ready=lambda: serving_problem() is None)
"""


def get(port: int, path: str) -> int:
    """The status of GET `path` over TLS, the certificate not verified (as the kubelet)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                    .encode())
        return int(tls.recv(64).split()[1])


def verified_certificate(port: int, ca: Path) -> bytes:
    """The certificate of a TLS handshake that verifies it, as the API server does."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_gunicorn_refuses_a_mismatched_pair_is_not_ready_and_recovers_without_a_restart(
        tmp_path: Path) -> None:
    (tmp_path / "tls_probe_app.py").write_text(PROBE_APP)
    broken = mismatched(tmp_path / "tls")
    port, process = start_gunicorn(tmp_path, app="tls_probe_app:served",
                                   env={"OPERATOR_KIT_MANAGE_TLS": "0"})
    try:
        with pytest.raises(ssl.SSLCertVerificationError):  # the placeholder: trusted by none
            verified_certificate(port, broken.ca)
        assert get(port, "/livez") == 200  # answered: the kubelet does not restart it
        assert get(port, "/readyz") == 503  # ... and reports it not ready
        fresh = certificate()
        fixed = fresh.install(tmp_path / "tls", point_server=False)
        replaced = time.monotonic()
        expected = ssl.PEM_cert_to_DER_cert(fresh.cert_pem.decode())
        while True:
            try:
                if verified_certificate(port, fixed.ca) == expected:
                    break
            except ssl.SSLError:
                pass
            assert time.monotonic() - replaced < 10, "the fixed pair was not served in 10 s"
            time.sleep(0.1)
        print(f"fixed pair served {time.monotonic() - replaced:.1f} s after the files")
        assert get(port, "/readyz") == 200
        assert process.poll() is None  # the same process: no restart
    finally:
        stop_process(process)
    output = process.communicate()[0].decode()
    directory = tmp_path / "tls"
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and errors[0].endswith(
        f" ERROR operator_kit.tls: webhook certificate {directory}/tls.crt and key "
        f"{directory}/tls.key {MISMATCH}; check the Secret tls-test-secret; this replica "
        "is not ready until they load"), output
    assert (f"INFO operator_kit.tls: webhook certificate {directory}/tls.crt and key "
            f"{directory}/tls.key now load: serving them") in output, output


def test_gunicorn_keeps_serving_the_old_pair_through_a_mismatched_renewal(
        server: tuple[int, Path, subprocess.Popen[bytes]]) -> None:
    port, directory, process = server
    before = served_certificate(port)
    mismatched(directory)
    deadline = time.monotonic() + 7.5  # five checks of quiet, then the ERROR line
    while time.monotonic() < deadline:
        assert served_certificate(port) == before
        time.sleep(0.5)
    stop_process(process)
    output = process.communicate()[0].decode()
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert len(errors) == 1, output
    assert (f"ERROR operator_kit.tls: webhook certificate {directory}/tls.crt and key "
            f"{directory}/tls.key {MISMATCH}; replace them; still serving the previous "
            "pair (valid until ") in errors[0], output
