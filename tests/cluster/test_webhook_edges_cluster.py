"""The webhook server's edges as the real API server meets them (issue 38 R2; issue 40).

gunicorn serves this module's `webhooks` over TLS on 127.0.0.1, called by the API server
through an ExternalName Service (as in test_webhooks_cluster.py, whose helpers this
reuses), for a kind of this module only, in this module's namespace:

- 8 clients that ask for the largest answer and never read it, holding their sockets,
  leave admission working: 16 of 16 dry-run creates through the validating webhook pass;
- a handler that raises answers HTTP 500 with a message, and the API server applies the
  webhook's failurePolicy: ``Fail`` refuses the create as an internal error naming the
  webhook (not a 403 that reads like RBAC), ``Ignore`` lets it through;
- an object whose AdmissionReview is over the admission body limit (16 KiB here) is
  refused with the 413's message, which names the limit and the setting.

(A LIST in another version did not make a large ConversionReview: 80 objects of ~1.2 KiB
listed in v2 with a 64 KiB conversion limit succeeded, the API server converting as it
decodes; the conversion limit is tested through gunicorn in test_webhook_edges.py.)
"""

from __future__ import annotations

import json
import socket
import ssl
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit.api.resources import CustomResource
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.server import AdmissionRequest, Denied, Webhooks

from .test_webhooks_cluster import (
    REGISTRATION,
    SCENARIO,
    Gunicorn,
    configuration,
    configuration_path,
    delete_quietly,
    external_name_service,
    run_all,
    webhook,
)

GROUP = "edges.operator-kit.test"
SERVICE = "okedges"
WRITE_TIMEOUT = 2.0
SECRET = "hunter2-database-password"
BLOAT = 66_000  # bytes added to each converted object: 100 objects, an answer over 6 MiB


@dataclass
class ThingSpec:
    size: int
    note: str = ""


class Thing(CustomResource):
    group = GROUP
    version = "v1"
    kind = "Thing"
    spec: ThingSpec


# The body budget is set high: here only the write deadline frees the threads. The
# admission limit is set low, so that an object with a 20 KiB note is over it.
ADMISSION_LIMIT = 16 * 1024
webhooks = Webhooks(body_budget_bytes=256 * 1024 * 1024, max_body_bytes=ADMISSION_LIMIT)


@webhooks.validate(Thing, "/validate")
def validate(request: AdmissionRequest[Thing]) -> None:
    if request.object is not None and request.object.spec.size > 10:
        raise Denied("spec.size above 10")


@webhooks.validate(Thing, "/explode")
def explode(request: AdmissionRequest[Thing]) -> None:
    raise RuntimeError(f"could not reach the database with password {SECRET}")


@webhooks.convert("/convert")
def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
    return {**obj, "data": "x" * BLOAT}


@dataclass
class Edges:
    ns: Namespace
    server: Gunicorn


@pytest.fixture(scope="module")
def edges(cluster: TestCluster) -> Iterator[Edges]:
    ns = cluster.namespace("edges")
    name = f"{ns.name}-edges"
    tmp = tempfile.TemporaryDirectory(prefix="okedges-")
    cleanups: list[Any] = [ns.delete, tmp.cleanup]  # run last to first
    try:
        cert = WebhookCertificate.generate(SERVICE, ns.name)
        server = Gunicorn(cert, Path(tmp.name), app=f"{__name__}:webhooks",
                          env={"OPERATOR_KIT_WRITE_TIMEOUT": str(WRITE_TIMEOUT)})
        cleanups.append(server.stop)
        cluster.install_crd(Thing)
        cleanups.append(lambda: delete_quietly(
            cluster.api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                         f"{Thing.plural}.{GROUP}"))
        client.CoreV1Api(cluster.client).create_namespaced_service(
            ns.name, external_name_service(SERVICE, ns.name, server.port))
        hook: dict[str, Any] = {"namespace": ns.name, "service": SERVICE, "port": server.port,
                                "ca_bundle": cert.ca_pem, "resource": (GROUP, Thing.plural),
                                "timeout_seconds": 10}
        cluster.api.request(
            "POST", f"{REGISTRATION}/validatingwebhookconfigurations",
            body=configuration("ValidatingWebhookConfiguration", name, [
                webhook(f"validate.{GROUP}", path="/validate", scenario="admission", **hook),
                webhook(f"closed.{GROUP}", path="/explode", scenario="explode-closed", **hook),
                webhook(f"open.{GROUP}", path="/explode", scenario="explode-open",
                        fail_closed=False, **hook),
            ]))
        cleanups.append(lambda: delete_quietly(
            cluster.api, configuration_path("ValidatingWebhookConfiguration", name)))
        eventually(30, lambda: "spec.size above 10" in refusal(ns, "probe", "admission", 20),
                   message="the validating webhook in force")
        yield Edges(ns, server)
    finally:
        run_all(reversed(cleanups))


def create(ns: Namespace, name: str, scenario: str, size: int = 1,
           dry_run: bool = False) -> Any:
    body = Thing(name, ThingSpec(size=size), labels={SCENARIO: scenario}).to_dict()
    return ns.api.request("POST", f"/apis/{GROUP}/v1/namespaces/{ns.name}/{Thing.plural}",
                          body=body, query={"dryRun": "All"} if dry_run else None)


def refusal(ns: Namespace, name: str, scenario: str, size: int = 1) -> str:
    """The API server's message refusing a dry-run create ('' if it was allowed)."""
    try:
        create(ns, name, scenario, size, dry_run=True)
    except ApiException as err:
        return str(json.loads(err.body)["message"])
    return ""


def non_reader(server: Gunicorn) -> ssl.SSLSocket:
    """A client that asks for a conversion answer of over 6 MiB and never reads it."""
    objects = [{"apiVersion": f"{GROUP}/v1", "kind": "Thing",
                "metadata": {"name": f"t{i}", "namespace": "x"}, "spec": {"size": i}}
               for i in range(100)]
    body = json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                       "request": {"uid": "c-1", "desiredAPIVersion": f"{GROUP}/v2",
                                   "objects": objects}}).encode()
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(30)
    raw.connect(("127.0.0.1", server.port))
    sock = server.tls_context().wrap_socket(raw)
    sock.sendall(b"POST /convert HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def test_eight_clients_that_never_read_a_large_answer_leave_admission_working(
    edges: Edges,
) -> None:
    held = [non_reader(edges.server) for _ in range(8)]  # one per thread of the worker
    try:
        time.sleep(0.5)  # every thread now blocked sending an answer nobody reads
        started = time.monotonic()
        results = []
        for n in range(16):
            try:
                create(edges.ns, f"beside-{n}", "admission", dry_run=True)
                results.append("created")
            except ApiException as err:
                results.append(f"{err.status}: {json.loads(err.body)['message']}")
        seconds = time.monotonic() - started
        print(f"\n16 dry-run creates beside 8 non-readers: {results.count('created')}/16 "
              f"in {seconds:.1f} s")
        assert results == ["created"] * 16
        assert edges.ns.get(Thing.api_version(), "Thing", "beside-0") is None  # dry run
    finally:
        for sock in held:
            sock.close()
    log = edges.server.output()
    assert "its answer was not taken within 2.0 s" in log
    assert "Traceback" not in log


def test_a_handler_that_raises_is_an_internal_error_and_the_failure_policy_applies(
    edges: Edges,
) -> None:
    with pytest.raises(ApiException) as failure:
        create(edges.ns, "closed", "explode-closed")
    status = json.loads(failure.value.body)
    print(f"\nfailurePolicy Fail, handler raised: HTTP {failure.value.status} "
          f"{status.get('reason')}: {status['message']}")
    assert failure.value.status == 500 and status["reason"] == "InternalError"
    assert f'failed calling webhook "closed.{GROUP}"' in status["message"]
    # read from the Status answered (from another body the API server shows "unknown")
    assert status["message"].endswith(
        "failed to call webhook: internal error in webhook /explode; see the operator's log")
    assert SECRET not in failure.value.body
    assert edges.ns.get(Thing.api_version(), "Thing", "closed") is None

    created = create(edges.ns, "open", "explode-open")  # failurePolicy Ignore
    assert created["metadata"]["name"] == "open"

    log = edges.server.output()
    assert "handler explode raised on CREATE of Thing" in log
    assert "Traceback" in log and "RuntimeError" in log  # the traceback is in the log


def test_an_object_over_the_admission_body_limit_is_refused_naming_the_limit_and_the_setting(
    edges: Edges,
) -> None:
    body = Thing("large", ThingSpec(size=1, note="n" * 20 * 1024),
                 labels={SCENARIO: "admission"}).to_dict()
    with pytest.raises(ApiException) as failure:
        edges.ns.api.request(
            "POST", f"/apis/{GROUP}/v1/namespaces/{edges.ns.name}/{Thing.plural}", body=body)
    message = json.loads(failure.value.body)["message"]
    print(f"\nan object of 20 KiB: HTTP {failure.value.status}: {message}")
    assert f'failed calling webhook "validate.{GROUP}"' in message
    assert message.endswith(
        f"over the {ADMISSION_LIMIT}-byte (16 KiB) limit of an admission review; "
        "Webhooks.max_body_bytes sets it")
