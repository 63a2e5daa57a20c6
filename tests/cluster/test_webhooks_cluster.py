"""The real API server calls our webhooks over TLS, through gunicorn, as it would in a cluster.

The webhooks run under ``gunicorn -c python:operator_kit.gunicorn_conf
operator_kit.webhooks:app`` in a subprocess, with ``OPERATOR_KIT_APP`` naming the
`webhooks` app of this module and the certificate from `WebhookCertificate.install`. A
Service of type ExternalName (``externalName: localhost``) makes the API server dial
``https://localhost:<port>`` while checking the certificate for
``<service>.<namespace>.svc``, so the configurations are the ordinary, service-based
ones. They are scoped to this module's namespace (namespaceSelector) and to labelled
objects of a test kind, and are deleted afterwards, so other tests on the same cluster
never meet them.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import multiprocessing
import os
import socket
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit.api.resources import CustomResource
from operator_kit.client.transport import Api, api_client
from operator_kit.manifests import WebhookTarget, crd, with_conversion_webhook
from operator_kit.testing import Namespace, TestCluster, eventually, stop_process
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.server import AdmissionRequest, Denied, Webhooks

GROUP = "wh.operator-kit.test"
SCENARIO = f"{GROUP}/scenario"
MUTATED = f"{GROUP}/mutated"
SERVICE = "okwh"
REGISTRATION = "/apis/admissionregistration.k8s.io/v1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

# ---------------------------------------------------------------------- the kind, two versions


@dataclass
class GadgetSpec:
    size: int
    color: str = ""


class Gadget(CustomResource):
    group = GROUP
    version = "v1"
    kind = "Gadget"
    spec: GadgetSpec


@dataclass
class Dimensions:
    size: int


@dataclass
class GadgetSpecV2:
    dimensions: Dimensions
    colour: str = ""


class GadgetV2(CustomResource, version_of=Gadget):
    version = "v2"
    spec: GadgetSpecV2


CRD_NAME = f"{Gadget.plural}.{GROUP}"

# ---------------------------------------------------------------------- what gunicorn serves

webhooks = Webhooks(max_body_bytes=256 * 1024)


@webhooks.validate(Gadget, "/validate")
def validate(request: AdmissionRequest[Gadget]) -> None:
    gadget = request.object
    assert gadget is not None
    if gadget.spec.size > 100:
        request.warn("spec.size above 100 is unusually large")
    if gadget.spec.color == "probe":
        raise Denied("probe denied")
    if not gadget.spec.color:
        raise Denied("spec.color is required")


@webhooks.mutate(Gadget, "/mutate")
def mutate(gadget: Gadget, request: AdmissionRequest[Gadget]) -> Gadget:
    gadget.labels[MUTATED] = "true"
    return gadget


CAPTURE_ENV = "OKWH_CAPTURE_DIR"


@webhooks.validate(Gadget, "/capture")
def capture(request: AdmissionRequest[Gadget]) -> None:
    """Keep each review the API server sends, as sent, for the builder's test."""
    dry = "-dry" if request.dry_run else ""
    folder = Path(os.environ[CAPTURE_ENV])
    (folder / f"{request.operation}-{request.name}{dry}.json").write_text(
        json.dumps(request.raw))


@webhooks.convert("/convert", kind=Gadget)
def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
    spec = obj.get("spec", {})
    if desired_api_version == GadgetV2.api_version():
        obj["spec"] = {"dimensions": {"size": spec["size"]}, "colour": spec.get("color", "")}
    else:
        obj["spec"] = {"size": spec["dimensions"]["size"], "color": spec.get("colour", "")}
    return obj


# ---------------------------------------------------------------------- serving under gunicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gunicorn:
    """``gunicorn operator_kit.webhooks:app`` serving this module's `webhooks` over TLS
    (or the app `app` names, with `env` added to its environment)."""

    def __init__(self, cert: WebhookCertificate, directory: Path, *,
                 app: str = f"{__name__}:webhooks", env: dict[str, str] | None = None,
                 probe: str = "/validate") -> None:
        self.port = free_port()
        self.probe = probe  # a webhook path: a GET of it answers 405 once serving
        self.directory = directory
        self.captured = directory / "captured"
        self.captured.mkdir()
        # Not pointing this process's environment at the files: they go with the module's
        # temporary folder, and a later test's gunicorn would inherit the dead paths.
        self.files = cert.install(directory, point_server=False)
        env = {
            **os.environ,
            "OPERATOR_KIT_APP": app,
            "OPERATOR_KIT_TLS_DIR": str(directory),
            "OPERATOR_KIT_BIND": f"127.0.0.1:{self.port}",
            CAPTURE_ENV: str(self.captured),
            "PYTHONPATH": os.pathsep.join(sys.path),
            **(env or {}),
        }
        env.pop("OPERATOR_KIT_TLS_CERT", None)
        env.pop("OPERATOR_KIT_TLS_KEY", None)
        self.log = open(directory / "gunicorn.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        eventually(20, self._answers, message=f"gunicorn listening on {self.port}")

    def tls_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.files.ca))
        context.check_hostname = False  # the certificate names the Service, we dial 127.0.0.1
        return context

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.tls_context(), timeout=10
        )

    def _answers(self) -> bool:
        assert self.process.poll() is None, f"gunicorn exited: {self.output()}"
        connection = self.connect()
        try:
            connection.request("GET", self.probe)
            return connection.getresponse().status == 405
        finally:
            connection.close()

    def output(self) -> str:
        return (self.directory / "gunicorn.log").read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()


# ---------------------------------------------------------------------- cluster objects


def external_name_service(name: str, namespace: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    }


def webhook(
    name: str,
    namespace: str,
    *,
    service: str,
    port: int,
    path: str,
    scenario: str,
    fail_closed: bool = True,
    ca_bundle: bytes | None = None,
    operations: tuple[str, ...] = ("CREATE", "UPDATE"),
    resource: tuple[str, str] = (GROUP, Gadget.plural),
    timeout_seconds: int = 5,
) -> dict[str, Any]:
    client_config: dict[str, Any] = {
        "service": {"name": service, "namespace": namespace, "path": path, "port": port}
    }
    if ca_bundle is not None:
        client_config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [resource[0]],
                "apiVersions": ["v1"],
                "operations": list(operations),
                "resources": [resource[1]],
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "objectSelector": {"matchLabels": {SCENARIO: scenario}},
        "failurePolicy": "Fail" if fail_closed else "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
    }


def configuration(kind: str, name: str, hooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    }


def configuration_path(kind: str, name: str) -> str:
    return f"{REGISTRATION}/{kind.lower()}s/{name}"


def delete_quietly(api: Api, path: str) -> None:
    try:
        api.request("DELETE", path)
    except ApiException as err:
        if err.status != 404:
            raise


def gadgets(namespace: str, version: str = "v1") -> str:
    return f"/apis/{GROUP}/{version}/namespaces/{namespace}/{Gadget.plural}"


def create_gadget(
    ns: Namespace, name: str, *, scenario: str, color: str = "red", size: int = 1
) -> Any:
    body = Gadget(name, GadgetSpec(size=size, color=color), labels={SCENARIO: scenario})
    return ns.api.request("POST", gadgets(ns.name), body=body.to_dict())


def denial(ns: Namespace, name: str, **kwargs: Any) -> str:
    """The API server's error message for creating this gadget ('' if it was created)."""
    try:
        create_gadget(ns, name, **kwargs)
    except ApiException as err:
        return str(json.loads(err.body)["message"])
    ns.api.request("DELETE", f"{gadgets(ns.name)}/{name}")
    return ""


# ---------------------------------------------------------------------- the module's set-up


@dataclass
class Setup:
    ns: Namespace
    cert: WebhookCertificate
    server: Gunicorn
    validating: str
    mutating: str


@pytest.fixture(scope="module")
def setup(cluster: TestCluster) -> Iterator[Setup]:
    ns = cluster.namespace("webhooks")
    validating, mutating = f"{ns.name}-validate", f"{ns.name}-mutate"
    tmp = tempfile.TemporaryDirectory(prefix="okwh-")
    cleanups: list[Callable[[], Any]] = [ns.delete, tmp.cleanup]  # run last to first
    try:
        cert = WebhookCertificate.generate(SERVICE, ns.name)
        server = Gunicorn(cert, Path(tmp.name))
        cleanups += [server.stop, lambda: delete_crd(cluster)]
        cleanups += [
            functools.partial(delete_quietly, cluster.api, configuration_path(kind, name))
            for kind, name in (
                ("ValidatingWebhookConfiguration", validating),
                ("MutatingWebhookConfiguration", mutating),
            )
        ]
        client.CoreV1Api(cluster.client).create_namespaced_service(
            ns.name, external_name_service(SERVICE, ns.name, server.port)
        )
        hook: dict[str, Any] = {"namespace": ns.name, "service": SERVICE, "port": server.port}
        cluster.api.request(
            "POST",
            f"{REGISTRATION}/validatingwebhookconfigurations",
            body=configuration(
                "ValidatingWebhookConfiguration",
                validating,
                [
                    webhook(f"validate.{GROUP}", path="/validate", scenario="admission", **hook),
                    webhook(f"unused.{GROUP}", path="/validate", scenario="none", **hook),
                    webhook(f"capture.{GROUP}", path="/capture", scenario="capture",
                            operations=("CREATE", "UPDATE", "DELETE"), **hook),
                ],
            ),
        )
        cluster.api.request(
            "POST",
            f"{REGISTRATION}/mutatingwebhookconfigurations",
            body=configuration(
                "MutatingWebhookConfiguration",
                mutating,
                [webhook(f"mutate.{GROUP}", path="/mutate", scenario="admission", **hook)],
            ),
        )
        definition = with_conversion_webhook(
            crd(Gadget), WebhookTarget(SERVICE, ns.name, port=server.port))
        cluster.install_crd(definition)
        # No caBundle anywhere yet: patch_ca_bundle is what makes the API server trust us.
        cert.patch_ca_bundle(
            cluster.client, validating=[validating], mutating=[mutating], crds=[CRD_NAME]
        )
        eventually(
            30,
            lambda: "spec.color is required" in denial(ns, "probe", scenario="admission", color=""),
            message="the validating webhook in force",
        )
        yield Setup(ns, cert, server, validating, mutating)
    finally:
        run_all(reversed(cleanups))


def run_all(cleanups: Iterable[Callable[[], Any]]) -> None:
    """Run every clean-up even when one fails (cluster-wide objects must not be left)."""
    errors: list[BaseException] = []
    for cleanup in cleanups:
        try:
            cleanup()
        except Exception as err:  # noqa: BLE001 - collected, raised after the others ran
            errors.append(err)
    if errors:
        raise errors[0]


def delete_crd(cluster: TestCluster) -> None:
    delete_quietly(cluster.api, f"{CRDS}/{CRD_NAME}")
    eventually(60, lambda: not cluster.exists(f"{CRDS}/{CRD_NAME}"), message="CRD deleted")


# ---------------------------------------------------------------------- admission


def test_a_denied_create_fails_with_the_handlers_message(setup: Setup) -> None:
    with pytest.raises(ApiException) as failure:
        create_gadget(setup.ns, "colourless", scenario="admission", color="")
    assert failure.value.status == 403
    message = json.loads(failure.value.body)["message"]
    assert message == (
        f'admission webhook "validate.{GROUP}" denied the request: spec.color is required'
    )
    assert setup.ns.get(Gadget.api_version(), "Gadget", "colourless") is None


def test_a_mutated_create_comes_back_with_the_label(setup: Setup) -> None:
    created = create_gadget(setup.ns, "labelled", scenario="admission")
    assert created["metadata"]["labels"] == {SCENARIO: "admission", MUTATED: "true"}
    assert created["spec"] == {"size": 1, "color": "red"}
    stored = setup.ns.get(Gadget.api_version(), "Gadget", "labelled")
    assert stored is not None and stored["metadata"]["labels"][MUTATED] == "true"


def test_an_object_that_does_not_decode_is_refused_with_what_is_wrong_with_it(
        setup: Setup) -> None:
    # The API server calls mutating webhooks before it checks the schema, so the webhook
    # is the first to see a wrongly typed field: the client reads what is wrong, not
    # "failed calling webhook ... for an unknown reason".
    body = Gadget("mistyped", GadgetSpec(size=1), labels={SCENARIO: "admission"}).to_dict()
    body["spec"]["size"] = "big"
    with pytest.raises(ApiException) as failure:
        setup.ns.api.request("POST", gadgets(setup.ns.name), body=body)
    assert failure.value.status == 422
    message = json.loads(failure.value.body)["message"]
    assert message.startswith(f'admission webhook "mutate.{GROUP}" denied the request: '
                              "request.object is not a valid Gadget: "), message
    assert "spec.size: expected int" in message
    assert setup.ns.get(Gadget.api_version(), "Gadget", "mistyped") is None


def test_an_update_goes_through_the_webhooks_too(setup: Setup) -> None:
    created = create_gadget(setup.ns, "updated", scenario="admission")
    created["spec"]["color"] = ""
    with pytest.raises(ApiException) as failure:
        setup.ns.api.request("PUT", f"{gadgets(setup.ns.name)}/updated", body=created)
    assert "spec.color is required" in json.loads(failure.value.body)["message"]


def test_warnings_reach_the_client(setup: Setup) -> None:
    body = Gadget("big", GadgetSpec(size=500, color="red"), labels={SCENARIO: "admission"})
    response = setup.ns.api.request(
        "POST", gadgets(setup.ns.name), body=body.to_dict(), stream=True
    )
    response.read()
    assert "spec.size above 100 is unusually large" in response.headers.get("Warning", "")


# ---------------------------------------------------------------------- conversion


def test_the_crd_stores_v1_and_serves_v2_through_our_conversion(setup: Setup) -> None:
    api, ns = setup.ns.api, setup.ns.name
    meta = {"labels": {"team": "a"}, "annotations": {"note": "kept"}}
    v2 = {
        "apiVersion": GadgetV2.api_version(),
        "kind": "Gadget",
        "metadata": {"name": "from-v2", **meta},
        "spec": {"dimensions": {"size": 3}, "colour": "blue"},
    }
    created = api.request("POST", gadgets(ns, "v2"), body=v2)
    assert created["spec"] == v2["spec"]
    as_v1 = api.get(f"{gadgets(ns, 'v1')}/from-v2")
    assert as_v1["apiVersion"] == Gadget.api_version()
    assert as_v1["spec"] == {"size": 3, "color": "blue"}
    assert as_v1["metadata"]["annotations"] == {"note": "kept"}

    v1 = Gadget("from-v1", GadgetSpec(size=7, color="green"), labels={"team": "b"})
    api.request("POST", gadgets(ns, "v1"), body=v1.to_dict())
    as_v2 = GadgetV2.from_dict(api.get(f"{gadgets(ns, 'v2')}/from-v1"))
    assert as_v2.spec == GadgetSpecV2(Dimensions(7), "green")
    assert as_v2.labels == {"team": "b"}

    listed = api.get(gadgets(ns, "v2"), labelSelector="team")  # several objects, one review
    by_name = {item["metadata"]["name"]: item for item in listed["items"]}
    assert by_name["from-v2"]["spec"] == v2["spec"]
    assert by_name["from-v1"]["spec"] == {"dimensions": {"size": 7}, "colour": "green"}

    definition = api.get(f"{CRDS}/{CRD_NAME}")
    assert definition["status"]["storedVersions"] == ["v1"]


def test_a_conversion_the_api_server_would_not_ask_for_fails_saying_why(setup: Setup) -> None:
    # The API server asks only for the CRD's versions, with objects that fit its schema:
    # anything else reaches the webhook directly, over the same HTTPS, and is refused.
    stored = create_gadget(setup.ns, "reviewed", scenario="conversion")  # as the API has it
    cases = [
        (f"{GROUP}/v9", [stored],
         f"desiredAPIVersion {GROUP}/v9 is not a version of Gadget: it serves {GROUP}/v1, "
         f"{GROUP}/v2"),
        (GadgetV2.api_version(), [{**stored, "spec": 5}],
         f"request.objects[0] is not a valid Gadget {GROUP}/v1: Gadget {setup.ns.name}/reviewed: "
         "spec: expected object, got int 5"),
        (GadgetV2.api_version(), [{k: v for k, v in stored.items() if k != "metadata"}],
         f"request.objects[0], Gadget <unnamed> ({GROUP}/v1), has no metadata object"),
    ]
    connection = setup.server.connect()
    try:
        for desired, objects, message in cases:
            review = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                      "request": {"uid": "c1", "desiredAPIVersion": desired, "objects": objects}}
            connection.request("POST", "/convert", body=json.dumps(review),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200
            assert json.loads(response.read())["response"] == {
                "uid": "c1", "result": {"status": "Failure", "message": message}}
    finally:
        connection.close()
    assert "Traceback" not in setup.server.output()


# ---------------------------------------------------------------------- failure policy


def test_with_the_server_down_fail_closed_rejects_and_fail_open_allows(
    setup: Setup, cluster: TestCluster, tmp_path: Path
) -> None:
    ns, name = setup.ns, f"{setup.ns.name}-down"
    cert = WebhookCertificate.generate("okwh-down", ns.name)
    server = Gunicorn(cert, tmp_path)
    path = configuration_path("ValidatingWebhookConfiguration", name)
    try:
        core = client.CoreV1Api(cluster.client)
        core.create_namespaced_service(
            ns.name, external_name_service("okwh-down", ns.name, server.port)
        )
        hook: dict[str, Any] = {
            "namespace": ns.name,
            "service": "okwh-down",
            "port": server.port,
            "path": "/validate",
            "ca_bundle": cert.ca_pem,
        }
        cluster.api.request(
            "POST",
            f"{REGISTRATION}/validatingwebhookconfigurations",
            body=configuration(
                "ValidatingWebhookConfiguration",
                name,
                [
                    webhook(f"closed.{GROUP}", scenario="fail-closed", fail_closed=True, **hook),
                    webhook(f"open.{GROUP}", scenario="fail-open", fail_closed=False, **hook),
                ],
            ),
        )

        def probe_denied(scenario: str) -> bool:
            return "probe denied" in denial(ns, "probe", scenario=scenario, color="probe")

        for scenario in ("fail-closed", "fail-open"):  # both in force while the server is up
            eventually(
                30,
                functools.partial(probe_denied, scenario),
                message=f"{scenario} webhook in force",
            )
        server.stop()

        with pytest.raises(ApiException) as failure:
            create_gadget(ns, "closed", scenario="fail-closed")
        message = json.loads(failure.value.body)["message"]
        assert f'failed calling webhook "closed.{GROUP}"' in message
        created = create_gadget(ns, "open", scenario="fail-open")
        assert created["metadata"]["name"] == "open"
    finally:
        server.stop()
        delete_quietly(cluster.api, path)


# ---------------------------------------------------------------------- the CA bundle


def test_patch_ca_bundle_filled_every_configuration_and_the_crd(
    setup: Setup, cluster: TestCluster
) -> None:
    bundle = base64.b64encode(setup.cert.ca_pem).decode()
    for kind, name in (
        ("ValidatingWebhookConfiguration", setup.validating),
        ("MutatingWebhookConfiguration", setup.mutating),
    ):
        obj = cluster.api.get(configuration_path(kind, name))
        assert [w["clientConfig"]["caBundle"] for w in obj["webhooks"]] == [bundle] * len(
            obj["webhooks"]
        )
    definition = cluster.api.get(f"{CRDS}/{CRD_NAME}")
    assert definition["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == bundle


# ---------------------------------------------------------------------- shared()


def _shared_in_a_process(kubeconfig: str, namespace: str, barrier: Any, results: Any) -> None:
    try:
        api = api_client(kubeconfig)
        barrier.wait(timeout=60)
        cert = WebhookCertificate.shared(api, namespace, "webhook-tls", SERVICE)
        results.put((cert.ca_pem, cert.cert_pem, cert.key_pem, cert.ca_key_pem))
    except BaseException as err:
        results.put(repr(err))
        raise


def shared_by_processes(cluster: TestCluster, namespace: str, count: int = 4) -> list[Any]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(count)
    results = context.Queue()
    processes = [
        context.Process(
            target=_shared_in_a_process,
            args=(cluster.kubeconfig, namespace, barrier, results),
            name=f"shared-certificate-{i}",
        )
        for i in range(count)
    ]
    for process in processes:
        process.start()
    try:
        return [results.get(timeout=120) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)


def test_shared_by_several_processes_at_once_leaves_one_secret_and_one_certificate(
    cluster: TestCluster, namespace: Namespace
) -> None:
    results = shared_by_processes(cluster, namespace.name)
    assert all(isinstance(r, tuple) for r in results), results
    assert len(set(results)) == 1
    secrets = namespace.list("v1", "Secret", fieldSelector="type=kubernetes.io/tls")
    assert [s["metadata"]["name"] for s in secrets] == ["webhook-tls"]
    stored = WebhookCertificate.from_secret(secrets[0])
    assert (stored.ca_pem, stored.cert_pem, stored.key_pem, stored.ca_key_pem) == results[0]
    assert stored.covers([f"{SERVICE}.{namespace.name}.svc"])

    # A certificate near expiry is renewed once, however many replicas notice it.
    old = WebhookCertificate.generate(SERVICE, namespace.name, days=10)
    secret = old.to_secret("webhook-tls", namespace.name)
    secret["metadata"]["resourceVersion"] = secrets[0]["metadata"]["resourceVersion"]
    namespace.api.request(
        "PUT", f"/api/v1/namespaces/{namespace.name}/secrets/webhook-tls", body=secret
    )
    renewed = shared_by_processes(cluster, namespace.name)
    assert all(isinstance(r, tuple) for r in renewed), renewed
    assert len(set(renewed)) == 1
    cert = WebhookCertificate(*renewed[0])
    assert cert.cert_pem != old.cert_pem and not cert.needs_renewal()
    stored_secret = namespace.get("v1", "Secret", "webhook-tls")
    assert stored_secret is not None and WebhookCertificate.from_secret(stored_secret) == cert


# ---------------------------------------------------------------------- bad input over HTTP


def _review(obj: Any = None, **request: Any) -> dict[str, Any]:
    body = {"uid": "u1", "operation": "CREATE", "object": obj, **request}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


GOOD = Gadget("g", GadgetSpec(size=1, color="red")).to_dict()
BAD_INPUT = [
    ("not JSON", "POST", b"{oops", "application/json", 400),
    ("a JSON array", "POST", b"[]", "application/json", 400),
    (
        "the wrong kind of review",
        "POST",
        json.dumps({**_review(GOOD), "kind": "ConversionReview"}).encode(),
        "application/json",
        400,
    ),
    (
        "no request",
        "POST",
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
        "application/json",
        400,
    ),
    ("no uid", "POST", json.dumps(_review(GOOD, uid="")).encode(), "application/json", 400),
    # (An object that does not decode is not bad input to the call but a fault of the
    # object: a denial, test_an_object_that_does_not_decode_is_refused_with_what_is_wrong.)
    ("a body over the limit", "POST", b" " * (256 * 1024 + 1), "application/json", 413),
    ("the wrong content type", "POST", json.dumps(_review(GOOD)).encode(), "text/plain", 415),
    ("GET", "GET", b"", None, 405),
]


def test_bad_input_over_real_https_gets_its_4xx_and_the_server_keeps_serving(
    setup: Setup,
) -> None:
    connection = setup.server.connect()  # a keep-alive connection, as the API server's
    try:
        for what, method, body, content_type, status in BAD_INPUT:
            headers = {"Content-Type": content_type} if content_type else {}
            connection.request(method, "/validate", body=body or None, headers=headers)
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert response.status == status, (what, answer)
            assert answer["kind"] == "Status" and answer["message"], what
            assert "Traceback" not in answer["message"], what
            if status == 413:
                # gunicorn drains at most 64 KiB of an unread body, then closes the
                # connection; the API server never sends a body over the limit.
                connection.close()
                connection = setup.server.connect()
        connection.request(
            "POST",
            "/validate",
            body=json.dumps(_review(GOOD)),
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["response"] == {"uid": "u1", "allowed": True}
    finally:
        connection.close()
    assert setup.server.process.poll() is None
    assert "Traceback" not in setup.server.output()


# ---------------------------------------------------------------------- the review builder


def test_admission_review_builds_exactly_what_the_api_server_sends(setup: Setup) -> None:
    from operator_kit.testing.admission import admission_review

    ns, api = setup.ns, setup.ns.api
    created = create_gadget(ns, "captured", scenario="capture")
    created["spec"]["color"] = "blue"
    api.request("PUT", f"{gadgets(ns.name)}/captured", body=created)
    dry = Gadget("dry", GadgetSpec(size=2, color="red"), labels={SCENARIO: "capture"})
    api.request("POST", gadgets(ns.name), body=dry.to_dict(), query={"dryRun": "All"})
    api.request("DELETE", f"{gadgets(ns.name)}/captured")
    folder = setup.server.captured
    files = {"CREATE-captured.json", "UPDATE-captured.json", "CREATE-dry-dry.json",
             "DELETE-captured.json"}
    eventually(10, lambda: files <= {p.name for p in folder.iterdir()})
    for file in sorted(files):
        sent = json.loads((folder / file).read_text())
        built = admission_review(sent["operation"], sent["object"], sent["oldObject"],
                                 user_info=sent["userInfo"], dry_run=sent["dryRun"],
                                 uid=sent["uid"])["request"]
        assert built == sent, f"{file}: built {built}, the API server sent {sent}"
    # The defaults are the local plane's admin, as the API server names it.
    create = json.loads((folder / "CREATE-captured.json").read_text())
    if Path(ns.cluster.kubeconfig).parent.joinpath("state.json").exists():
        built = admission_review("CREATE", create["object"], uid=create["uid"])["request"]
        user = {key: create["userInfo"][key] for key in ("username", "groups")}
        assert built["userInfo"] == user  # (less the client certificate's id in `extra`)
