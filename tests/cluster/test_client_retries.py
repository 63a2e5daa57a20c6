"""The client against a real API server: APF's 429s retried, and a KUBECONFIG list merged.

**Retries.** API Priority and Fairness refuses a request with ``429 Too Many Requests``
and ``Retry-After`` when its priority level has no seat free and rejects instead of
queuing. The test makes one such level for itself: a PriorityLevelConfiguration with one
nominal share (a few seats of the server's 600), none lendable, no borrowing,
``limitResponse: Reject``, and a FlowSchema that sends only one ServiceAccount of the
test's namespace to it (both named after the namespace, deleted at the end: nobody else's
requests can land there). Acting as that ServiceAccount, the test fills every seat with
"holders" — LISTs of about 11 MB of ConfigMaps whose bodies it does not read, so the API
server's handlers block writing them and keep their seats — until a holder is itself
refused. Then a few small GETs start: each is refused and sent again after its
Retry-After by `Api.request`; once each has been refused a couple of times, the holders
are closed, and every GET must succeed on a later attempt. Their 429s show in
``rest_client_requests_total{code="429"}`` and ``rest_client_request_retries_total``, and
the API server's own count of rejections for the level agrees.

**KUBECONFIG lists.** The test cluster's kubeconfig is cut into pieces as kubectl users
keep them — a first file that does not exist, a second with the context and the cluster
(its CA beside it, named by a relative path), a third with the user (its certificate and
key beside that one) — and `api_client` must connect through the list, as that user.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit.client.kubeconfig import load
from operator_kit.client.transport import MAX_RETRIES, Api, api_client, current_namespace
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
SERVICE_ACCOUNT = "throttled-client"
BIG_MAPS, BIG_MAP_BYTES = 12, 900_000  # a LIST of them is ~11 MB: more than TCP buffers
REQUESTERS = 4
MAX_HOLDERS = 12


@dataclass
class Throttled:
    """A ServiceAccount whose requests go to a priority level of a few seats that
    rejects when they are taken."""

    api: Api
    namespace: str
    flow_schema_uid: str
    priority_level: str
    host: str


def _delete(api: Api, path: str) -> None:
    try:
        api.request("DELETE", path)
    except ApiException as err:
        if err.status != 404:
            raise


@pytest.fixture
def throttled(cluster: TestCluster, namespace: Namespace, tmp_path: Path) -> Iterator[Throttled]:
    ns, admin = namespace.name, cluster.api
    admin.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                  body={"metadata": {"name": SERVICE_ACCOUNT}})
    admin.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", body={
        "metadata": {"name": "read-configmaps"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
    admin.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                  body={"metadata": {"name": "read-configmaps"},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                    "name": "read-configmaps"},
                        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                                      "namespace": ns}]})
    name = f"operator-kit-{ns}"  # the namespace's name is unique: so is this one
    try:
        admin.request("POST", f"{FLOWCONTROL}/prioritylevelconfigurations", body={
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 1, "lendablePercent": 0,
                "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}})
        schema = admin.request("POST", f"{FLOWCONTROL}/flowschemas", body={
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 1000,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{
                         "subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                             "name": SERVICE_ACCOUNT, "namespace": ns}}],
                         "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                            "resources": ["*"], "namespaces": ["*"],
                                            "clusterScope": True}],
                         "nonResourceRules": [{"verbs": ["*"],
                                               "nonResourceURLs": ["*"]}]}]}})
        kubeconfig = service_account_kubeconfig(cluster, ns, SERVICE_ACCOUNT,
                                                tmp_path / "throttled.kubeconfig")
        client_ = api_client(kubeconfig)
        yield Throttled(Api(client_), ns, schema["metadata"]["uid"], name,
                        urlsplit(client_.configuration.host).netloc)
        client_.close()
    finally:
        _delete(admin, f"{FLOWCONTROL}/flowschemas/{name}")
        _delete(admin, f"{FLOWCONTROL}/prioritylevelconfigurations/{name}")


def requests_total(host: str, code: str) -> float:
    return REGISTRY.get_sample_value(
        "rest_client_requests_total", {"code": code, "method": "GET", "host": host}) or 0.0


def retries_total(host: str, code: str) -> float:
    return REGISTRY.get_sample_value(
        "rest_client_request_retries_total", {"code": code, "verb": "GET", "host": host}) or 0.0


def rejected_by_the_server(cluster: TestCluster, priority_level: str) -> float:
    """``apiserver_flowcontrol_rejected_requests_total`` for the level (any reason)."""
    response = cluster.api.request("GET", "/metrics", stream=True, accept="text/plain")
    try:
        text = response.data.decode()
    finally:
        response.release_conn()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("apiserver_flowcontrol_rejected_requests_total{")
               and f'priority_level="{priority_level}"' in line)


def test_apf_429s_are_retried_after_retry_after_until_the_request_succeeds(
        cluster: TestCluster, throttled: Throttled) -> None:
    ns, api, host = throttled.namespace, throttled.api, throttled.host
    maps = f"/api/v1/namespaces/{ns}/configmaps"
    cluster.api.request("POST", maps, body={"metadata": {"name": "small"}, "data": {"k": "v"}})
    for i in range(BIG_MAPS):
        cluster.api.request("POST", maps, body={"metadata": {"name": f"big-{i:02d}"},
                                                "data": {"blob": "x" * BIG_MAP_BYTES}},
                            decode=False)

    def matched() -> bool:  # the FlowSchema is in force for the ServiceAccount
        response = api.request("GET", f"{maps}/small", stream=True)
        try:
            response.data  # noqa: B018 - read it before the connection goes back
        finally:
            response.release_conn()
        return response.headers.get("X-Kubernetes-PF-FlowSchema-UID") == \
            throttled.flow_schema_uid

    eventually(30, matched, message="the ServiceAccount's requests match the FlowSchema")

    holders: list[Any] = []
    refusal: ApiException | None = None
    try:
        # Take every seat: stream LISTs (never retried by the transport) until one is refused.
        while refusal is None and len(holders) < MAX_HOLDERS:
            try:
                holders.append(api.request("GET", maps, stream=True, timeout=(10.0, 120.0)))
            except ApiException as err:
                if err.status != 429:
                    raise
                refusal = err
        held = len(holders)
        assert refusal is not None, (
            f"{len(holders)} unread LISTs did not fill the priority level: no 429")
        assert refusal.headers.get("X-Kubernetes-PF-FlowSchema-UID") == \
            throttled.flow_schema_uid, "refused by APF, through our FlowSchema"
        retry_after = refusal.headers.get("Retry-After")
        assert retry_after is not None, "APF's 429 says when to come back"

        refused_before = requests_total(host, "429")
        retried_before = retries_total(host, "429") + retries_total(host, "200")
        ok_before = requests_total(host, "200")
        started = time.monotonic()
        finished: list[float] = []
        lock = threading.Lock()

        def small_get() -> Any:
            answer = api.get(f"{maps}/small")
            with lock:
                finished.append(time.monotonic() - started)
            return answer

        with ThreadPoolExecutor(max_workers=REQUESTERS) as pool:
            futures = [pool.submit(small_get) for _ in range(REQUESTERS)]
            # each refused at least twice, and still waiting to be sent again
            eventually(MAX_RETRIES * float(retry_after) / 2,
                       lambda: requests_total(host, "429") - refused_before >= 2 * REQUESTERS,
                       interval=0.05, message="the small GETs were refused")
            assert not any(f.done() for f in futures), "nothing got through while held"
            released_at = time.monotonic() - started
            for holder in holders:
                holder.close()  # the server's write fails, its handler returns: seats free
                holder.release_conn()
            holders = []
            answers = [f.result(timeout=60) for f in futures]
    finally:
        for holder in holders:
            holder.close()
            holder.release_conn()

    assert all(a["metadata"]["name"] == "small" for a in answers)
    refused = requests_total(host, "429") - refused_before
    retried = retries_total(host, "429") + retries_total(host, "200") - retried_before
    assert requests_total(host, "200") - ok_before == REQUESTERS, "each succeeded once"
    assert retried == refused, "each 429 was followed by one more attempt"
    assert refused <= REQUESTERS * MAX_RETRIES
    assert min(finished) >= released_at, "none succeeded before the seats were free"
    server = rejected_by_the_server(cluster, throttled.priority_level)
    assert server >= refused + 1, "the API server counted its rejections (the holder's too)"
    print(f"\nAPF: every seat held by {held} unread LISTs; "
          f"Retry-After {retry_after}s; {REQUESTERS} GETs refused {refused:.0f} times "
          f"(API server's rejections for the level: {server:.0f}), retried {retried:.0f} "
          f"times; released at {released_at:.2f}s, done at {max(finished):.2f}s "
          f"(first {min(finished):.2f}s)")


# -- KUBECONFIG lists --------------------------------------------------------------------

def _copy_files(body: dict[str, Any], fields: tuple[str, ...], into: Path, under: str) -> None:
    """Copy the files `body` names into `into/under` and name them relatively."""
    for key in fields:
        if body.get(key):
            (into / under).mkdir(parents=True, exist_ok=True)
            shutil.copy(body[key], into / under / Path(body[key]).name)
            body[key] = f"{under}/{Path(body[key]).name}"


def test_a_kubeconfig_list_in_pieces_connects_as_its_user(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    whole = load(cluster.kubeconfig)  # absolute paths, whatever the test cluster's file had
    context_name = whole.config["current-context"]
    context = dict(whole.current_context or {})
    cluster_entry = next(c for c in whole.config["clusters"] if c["name"] == context["cluster"])
    user_entry = next(u for u in whole.config["users"] if u["name"] == context["user"])
    context["namespace"] = namespace.name

    contexts, users = tmp_path / "contexts", tmp_path / "users"
    _copy_files(cluster_entry["cluster"], ("certificate-authority",), contexts, "pki")
    _copy_files(user_entry["user"], ("client-certificate", "client-key", "tokenFile"),
                users, "credentials")
    contexts.mkdir(exist_ok=True)
    users.mkdir(exist_ok=True)
    (contexts / "config").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context_name,
        "clusters": [cluster_entry],
        "contexts": [{"name": context_name, "context": context}]}))
    (users / "config").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "users": [user_entry],
        "current-context": "a-later-file-does-not-choose"}))
    listed = os.pathsep.join([str(tmp_path / "missing"), str(contexts / "config"),
                              str(users / "config")])
    if "certificate-authority" in cluster_entry["cluster"]:
        assert not os.path.isabs(cluster_entry["cluster"]["certificate-authority"])

    with api_client(listed) as made:
        api = Api(made)
        assert api.get(f"/api/v1/namespaces/{namespace.name}")["metadata"]["name"] == \
            namespace.name
        review = api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             body={"apiVersion": "authentication.k8s.io/v1",
                                   "kind": "SelfSubjectReview"})
    expected = cluster.api.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == \
        expected["status"]["userInfo"]["username"], "the third file's user"

    monkeypatch.setenv("KUBECONFIG", listed)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with api_client() as made:
        assert Api(made).get("/version")["gitVersion"]
    if not Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").exists():
        assert current_namespace() == namespace.name, "the second file's context"
