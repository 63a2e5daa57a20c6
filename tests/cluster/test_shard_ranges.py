"""Server-side shard ranges against a real kube-apiserver with ``ShardedListAndWatch`` on.

A differential test: for N members, the API server's answer to each member's selector
(operator_kit.election.shard_ranges) must hold exactly the objects our own FNV-1a of
their uid puts in that member's slots — every object seen once over all members. Also:
a watch filters the same way, the probe (operator_kit.election.shard_probe) tells a gated
server from the ungated test cluster, and a selector the server cannot parse is refused.

The gated plane is a fixture of its own (`sharded_cluster`, conftest.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Resource
from operator_kit.election.shard_probe import PROBE_SELECTOR, Support, probe
from operator_kit.election.shard_ranges import assign, owner, ranges_of, selector, uid_hash
from operator_kit.runtime.watching import Informers
from operator_kit.testing import Namespace, TestCluster


@pytest.fixture
def sharded_ns(sharded_cluster: TestCluster) -> Iterator[Namespace]:
    ns = sharded_cluster.namespace("shard-ranges")
    yield ns
    ns.delete()


def make_config_maps(ns: Namespace, count: int, prefix: str = "cm") -> dict[str, str]:
    """`count` ConfigMaps ``<prefix>-NNN``; their names by uid."""
    made: dict[str, str] = {}
    for i in range(count):
        obj = ns.api.request("POST", f"/api/v1/namespaces/{ns.name}/configmaps",
                             body={"metadata": {"name": f"{prefix}-{i:03d}"}})
        made[obj["metadata"]["uid"]] = obj["metadata"]["name"]
    return made


def listed(ns: Namespace, shard_selector: str) -> tuple[list[dict[str, Any]], Any]:
    answer = ns.api.get(f"/api/v1/namespaces/{ns.name}/configmaps",
                        shardSelector=shard_selector)
    return answer["items"], answer["metadata"].get("shardInfo")


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_the_ranges_of_n_members_cover_every_object_exactly_once(
        sharded_ns: Namespace, count: int) -> None:
    objects = make_config_maps(sharded_ns, 60)
    members = [f"member-{i}" for i in range(count)]
    split = assign(members)
    seen: dict[str, list[str]] = {}
    for member, slots in split.items():
        items, info = listed(sharded_ns, selector(ranges_of(slots)))
        assert info == {"selector": selector(ranges_of(slots))}  # the server filtered
        for item in items:
            seen.setdefault(item["metadata"]["uid"], []).append(member)
    assert set(seen) == set(objects)
    twice = {objects[u]: m for u, m in seen.items() if len(m) != 1}
    assert not twice, f"objects seen by more than one member: {twice}"
    wrong = {objects[u]: (m[0], owner(split, uid_hash(u))) for u, m in seen.items()
             if m[0] != owner(split, uid_hash(u))}
    assert not wrong, f"the server's member differs from our hash's: {wrong}"
    if count > 1:  # 60 random uids over N members: no member is given nothing
        assert all(any(m == [member] for m in seen.values()) for member in members)


def test_a_watch_with_a_members_selector_sees_only_its_objects(sharded_ns: Namespace) -> None:
    split = assign(["a", "b"])
    mine = selector(ranges_of(split["a"]))
    rv = sharded_ns.api.get(f"/api/v1/namespaces/{sharded_ns.name}/configmaps",
                            )["metadata"]["resourceVersion"]
    response = sharded_ns.api.request(
        "GET", f"/api/v1/namespaces/{sharded_ns.name}/configmaps", stream=True,
        query={"watch": "true", "resourceVersion": rv, "shardSelector": mine,
               "timeoutSeconds": 8}, timeout=(10.0, 15.0))
    objects = make_config_maps(sharded_ns, 30)
    expected = {u for u in objects if owner(split, uid_hash(u)) == "a"}
    got: set[str] = set()
    deadline = time.monotonic() + 15
    buffer = b""
    for chunk in response.stream(4096):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            event = json.loads(line)
            assert event["type"] == "ADDED", event
            got.add(event["object"]["metadata"]["uid"])
        if got >= expected or time.monotonic() > deadline:
            break
    response.release_conn()
    assert got == expected, {objects[u] for u in got ^ expected}
    assert 0 < len(expected) < len(objects)


def test_the_probe_tells_a_filtering_server_from_one_that_ignores_the_selector(
        sharded_ns: Namespace, namespace: Namespace, widget_kind: type) -> None:
    assert probe(sharded_ns.api, f"/api/v1/namespaces/{sharded_ns.name}/configmaps") \
        is Support.SERVER
    # A custom resource's list filters but echoes no shardInfo (1.37.2): the probe's
    # second question (is an unparsable selector refused?) tells.
    widgets = f"/apis/ctl.operator-kit.test/v1/namespaces/{sharded_ns.name}/widgets"
    assert "shardInfo" not in sharded_ns.api.get(widgets, shardSelector=PROBE_SELECTOR)[
        "metadata"]
    assert probe(sharded_ns.api, widgets) is Support.SERVER
    assert probe(namespace.api, widgets.replace(sharded_ns.name, namespace.name)) \
        is Support.IGNORED
    # The session's plane runs without the gate: it returns everything, echoes nothing.
    make_config_maps(namespace, 4)
    items, info = listed(namespace, selector(ranges_of(assign(["a", "b"])["a"])))
    assert info is None and len(items) >= 4
    assert probe(namespace.api, f"/api/v1/namespaces/{namespace.name}/configmaps") \
        is Support.IGNORED


def test_a_selector_the_server_cannot_parse_is_refused_and_the_probe_says_refused(
        sharded_ns: Namespace) -> None:
    with pytest.raises(ApiException) as refused:
        listed(sharded_ns, "shardRange(object.metadata.name, '0x0', '0x1')")
    assert "invalid shard selector" in str(refused.value)
    # A server that refuses every selector (here: a collection path that cannot serve a
    # list at all stands in for it) is not trusted with sharding.
    assert probe(sharded_ns.api, f"/api/v1/namespaces/{sharded_ns.name}/nothings") \
        is Support.REFUSED


CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming-list", "paged-list"])
def test_each_members_informer_caches_only_its_share_and_follows_changes(
        sharded_ns: Namespace, streaming: bool) -> None:
    objects = make_config_maps(sharded_ns, 45)
    split = assign(["a", "b", "c"])
    stop = threading.Event()
    informers = Informers(sharded_ns.api, stop, streaming=streaming)
    caches = {m: informers.informer(CONFIG_MAPS, namespace=sharded_ns.name,
                                    shard_selector=selector(ranges_of(slots)))
              for m, slots in split.items()}
    informers.start()
    try:
        for informer in caches.values():
            assert informer.synced.wait(30)
            assert not informer.covers(sharded_ns.name)  # never serves a full read
            assert informer.initial_list == ("streaming" if streaming else "list")
        later = make_config_maps(sharded_ns, 15, prefix="late")
        objects.update(later)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(len(i) for i in caches.values()) < 60:
            time.sleep(0.1)
        held = {m: {o["metadata"]["uid"] for o in i.objects()} for m, i in caches.items()}
        assert sorted(u for uids in held.values() for u in uids) == sorted(objects)
        for member, uids in held.items():
            assert {owner(split, uid_hash(u)) for u in uids} == {member}
        shares = [len(uids) / len(objects) for uids in held.values()]
        assert all(0.1 < share < 0.6 for share in shares), shares  # about a third each
    finally:
        stop.set()
        informers.interrupt()

