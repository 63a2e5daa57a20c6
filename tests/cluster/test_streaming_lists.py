"""Streaming initial lists against a real API server: the informer's cache comes from a
watch with ``sendInitialEvents=true`` (no LIST), again after a 410 Gone; a server with
the WatchList feature gate off refuses it, and the informer lists instead.

The fallback runs on a plane of its own (kube-apiserver ``--feature-gates=WatchList=false``),
started once for this module's tests that need it (about 15 s)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operator_kit.client.transport import Api, Resource, api_client
from operator_kit.localcluster import LocalCluster
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.watching import Informer, Informers
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.faults import TcpProxy, proxied_client

from .test_controller_faults import etcd_compact

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)


class Requests:
    """Every request an Api sends, with its query: (method, path, query)."""

    def __init__(self, api: Api) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []
        send = api.request
        lock = threading.Lock()

        def spy(method: str, path: str, **options: Any) -> Any:
            with lock:
                self.sent.append((method, path, dict(options.get("query") or {})))
            return send(method, path, **options)

        api.request = spy  # type: ignore[method-assign]

    def to(self, path: str) -> list[tuple[str, dict[str, Any]]]:
        """(``LIST`` or ``WATCH``, query) of each request to `path`, in order."""
        return [("WATCH" if query.get("watch") else method, query)
                for method, sent, query in list(self.sent) if sent == path]


def streamed(query: dict[str, Any]) -> bool:
    return bool(query.get("sendInitialEvents"))


def watch_list_requests(api: Api, resource: str) -> float:
    """The API server's count of watch-list (streaming list) requests that completed
    their initial events for `resource` (``apiserver_watch_list_duration_seconds``)."""
    response = api.request("GET", "/metrics", stream=True, accept="text/plain")
    try:
        text = response.data.decode()
    finally:
        response.release_conn()
    total = 0.0
    for line in text.splitlines():
        if (line.startswith("apiserver_watch_list_duration_seconds_count{")
                and f'resource="{resource}"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def make_config_maps(api: Api, namespace: str, count: int, prefix: str = "cm") -> None:
    for i in range(count):
        api.request("POST", CONFIG_MAPS.path(namespace),
                    body={"metadata": {"name": f"{prefix}-{i}"}, "data": {"i": str(i)}})


class Events:
    def __init__(self, informer: Informer) -> None:
        self.seen: list[tuple[str, str]] = []
        informer.add_handler(self)

    def __call__(self, event: WatchEvent) -> None:
        self.seen.append((event.type, event.object["metadata"]["name"]))


def started(api: Api, namespace: str, stop: threading.Event, **options: Any
            ) -> tuple[Informer, Events]:
    informer = Informers(api, stop, **options).informer(CONFIG_MAPS, namespace=namespace)
    events = Events(informer)
    informer.start()
    assert informer.synced.wait(30), "the informer synced"
    return informer, events


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_an_informer_fills_its_cache_from_a_streaming_watch_and_never_lists(
        cluster: TestCluster, namespace: Namespace, stop: threading.Event) -> None:
    make_config_maps(cluster.api, namespace.name, 25)
    api = Api(api_client(cluster.kubeconfig))
    requests = Requests(api)
    completed_before = watch_list_requests(cluster.api, "configmaps")

    informer, events = started(api, namespace.name, stop)
    assert informer.initial_list == "streaming"
    names = {f"cm-{i}" for i in range(25)}
    assert {o["metadata"]["name"] for o in informer.objects()} >= names
    assert {name for kind, name in events.seen if kind == "ADDED"} >= names
    path = CONFIG_MAPS.path(namespace.name)
    [(verb, query)] = requests.to(path)
    assert verb == "WATCH" and query["sendInitialEvents"] is True
    assert query["resourceVersionMatch"] == "NotOlderThan" and query["allowWatchBookmarks"]
    assert query.get("resourceVersion") is None, "a consistent read: the newest state"
    assert watch_list_requests(cluster.api, "configmaps") > completed_before, \
        "the API server served a watch-list request"

    # The same stream goes on as the watch.
    made = cluster.api.request("POST", path, body={"metadata": {"name": "late"}})
    cluster.api.request("DELETE", CONFIG_MAPS.path(namespace.name, "cm-0"))
    eventually(10, lambda: informer.get((namespace.name, "late")) is not None
               and informer.get((namespace.name, "cm-0")) is None)
    assert informer.has_seen(made["metadata"]["resourceVersion"])
    assert ("DELETED", "cm-0") in events.seen
    assert len(requests.to(path)) == 1, "no second request: the watch is the same stream"


def test_turned_off_an_informer_lists_then_watches(
        cluster: TestCluster, namespace: Namespace, stop: threading.Event) -> None:
    make_config_maps(cluster.api, namespace.name, 3)
    api = Api(api_client(cluster.kubeconfig))
    requests = Requests(api)
    informer, _ = started(api, namespace.name, stop, streaming=False)
    assert informer.initial_list == "list" and len(informer) >= 3
    eventually(10, lambda: len(requests.to(CONFIG_MAPS.path(namespace.name))) == 2)
    (first, _), (second, query) = requests.to(CONFIG_MAPS.path(namespace.name))
    assert (first, second) == ("GET", "WATCH") and not streamed(query)


def expired() -> float:
    return REGISTRY.get_sample_value("operator_kit_watch_restarts_total",
                                     {"resource": "configmaps", "cluster": "",
                                      "reason": "expired"}) or 0.0


def test_after_410_gone_the_informer_streams_its_list_again(
        cluster: TestCluster, namespace: Namespace, local_plane: LocalCluster,
        stop: threading.Event) -> None:
    make_config_maps(cluster.api, namespace.name, 3)
    with TcpProxy("127.0.0.1", local_plane.state.apiserver_port) as proxy:
        api = Api(proxied_client(cluster.client, proxy))
        requests = Requests(api)
        informer, events = started(api, namespace.name, stop)
        expired_before = expired()
        proxy.pause()  # the informer sees nothing from here on
        cluster.api.request("DELETE", CONFIG_MAPS.path(namespace.name, "cm-0"))
        make_config_maps(cluster.api, namespace.name, 1, prefix="new")
        etcd_compact(local_plane)
        # A fresh API server's watch cache starts after the compaction: resuming from the
        # informer's resourceVersion is 410 Gone.
        local_plane.restart("kube-apiserver")
        proxy.cut()
        proxy.resume()
        eventually(60, lambda: informer.get((namespace.name, "new-0")) is not None
                   and informer.get((namespace.name, "cm-0")) is None)
        assert ("DELETED", "cm-0") in events.seen, "the difference from the old cache"
        assert expired() > expired_before, "it was a 410"
        sent = requests.to(CONFIG_MAPS.path(namespace.name))
        assert [verb for verb, _ in sent] == ["WATCH"] * len(sent), "no LIST at all"
        assert sum(streamed(query) for _, query in sent) >= 2, "streamed again after the 410"
        assert informer.initial_list == "streaming"


# -- a server with the WatchList feature gate off ------------------------------------------

@pytest.fixture(scope="module")
def watch_list_off(binaries: None, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[LocalCluster]:
    plane = LocalCluster(tmp_path_factory.mktemp("watchlist-off") / "plane")
    try:
        plane.up(apiserver_args=["--feature-gates=WatchList=false"], timeout=120)
        yield plane
    finally:
        plane.down()


def test_on_a_server_that_refuses_streaming_the_informer_lists_and_remembers(
        watch_list_off: LocalCluster, stop: threading.Event,
        caplog: pytest.LogCaptureFixture) -> None:
    admin = Api(api_client(str(watch_list_off.kubeconfig)))
    admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "fallback"}})
    make_config_maps(admin, "fallback", 5)
    api = Api(api_client(str(watch_list_off.kubeconfig)))
    requests = Requests(api)
    informers = Informers(api, stop)
    config_maps = informers.informer(CONFIG_MAPS, namespace="fallback")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.watching"):
        config_maps.start()
        assert config_maps.synced.wait(30), "synced by listing"
        assert config_maps.initial_list == "list"
        assert {o["metadata"]["name"] for o in config_maps.objects()} == {
            f"cm-{i}" for i in range(5)}
        # Another informer of the same group version lists at once.
        secrets = informers.informer(Resource("", "v1", "secrets", "Secret", True),
                                     namespace="fallback")
        secrets.start()
        assert secrets.synced.wait(30) and secrets.initial_list == "list"
        eventually(10, lambda: len(requests.to("/api/v1/namespaces/fallback/secrets")) == 2)
    refused = [r for r in caplog.records if "does not stream lists" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.INFO], "said once, at INFO"
    assert "WatchList feature gate" in refused[0].getMessage()
    assert set(informers.streaming.refused()) == {"v1"}

    sent = requests.to(CONFIG_MAPS.path("fallback"))
    assert [verb for verb, _ in sent[:3]] == ["WATCH", "GET", "WATCH"]
    assert streamed(sent[0][1]) and not streamed(sent[2][1]), "asked once, then watched"
    assert not any(streamed(q) for _, q in requests.to("/api/v1/namespaces/fallback/secrets"))

    # It watches from the list on.
    admin.request("POST", CONFIG_MAPS.path("fallback"), body={"metadata": {"name": "late"}})
    eventually(10, lambda: config_maps.get(("fallback", "late")) is not None)
    time.sleep(0.2)
    assert not any(streamed(q) for _, q in requests.to(CONFIG_MAPS.path("fallback"))[1:])

