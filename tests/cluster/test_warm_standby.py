"""Warm standby with real operator processes: a follower lists before it leads, not after.

Replicas (tests/cluster/replica.py) run with ``--log-lists``, so each informer's list —
streamed or paged — is a line of their output; the line ``acquired lease`` marks the
moment a replica takes the Lease. A warm follower's lists come before that line and none
after it; a cold one (``--cold``, ``LeaderElection(warm_standby=False)``) lists only after.
"""

from __future__ import annotations

import signal

import pytest

from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import create_widget
from .test_leader_election import LEASE, RETRY, Replica, by, holder, replicas, start

__all__ = ["replicas"]  # the fixture, shared with test_leader_election

pytestmark = pytest.mark.usefixtures("widget_kind")


def lists(lines: list[str]) -> list[str]:
    """The informer list lines (operator_kit.watching at DEBUG) among `lines`."""
    return [line for line in lines if " operator_kit.watching " in line
            and (" streamed " in line or " listed " in line)]


def split_at_acquiring(replica: Replica) -> tuple[list[str], list[str]]:
    """The replica's output before its ``acquired lease`` line, and from it on."""
    lines = list(replica.lines)
    at = next((i for i, line in enumerate(lines) if "acquired lease" in line), len(lines))
    return lines[:at], lines[at:]


def kill_leader_and_create(ns: Namespace, first: Replica) -> None:
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    create_widget(ns, "after", size=7)


def test_follower_syncs_its_caches_before_it_leads_and_never_relists_after(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    for i in range(3):
        create_widget(namespace, f"w{i}", size=i)
    first = start(replicas, namespace, cluster.kubeconfig, "first", "--log-lists")
    eventually(30, lambda: holder(namespace) == "first")
    for i in range(3):
        eventually(30, lambda i=i: by(namespace, f"w{i}", i) == "first")
    second = start(replicas, namespace, cluster.kubeconfig, "second", "--log-lists")
    # Following, it lists the Widgets and their ConfigMaps — and reconciles nothing.
    eventually(30, lambda: any("widgets" in line for line in lists(second.lines)),
               message="the follower listed the Widgets while following")
    eventually(30, lambda: any("configmaps" in line for line in lists(second.lines)))
    assert "warm standby" in second.output()
    assert second.reconciled() == 0, second.output()
    assert "acquired lease" not in second.output()

    kill_leader_and_create(namespace, first)
    eventually(LEASE + RETRY * 2.2 + 10, lambda: by(namespace, "after", 7) == "second",
               message="the new leader reconciled the Widget created after the kill")
    before, after = split_at_acquiring(second)
    assert lists(before), second.output()
    assert lists(after) == [], "the new leader listed again after acquiring:\n" + "".join(
        lists(after))
    assert "with warm caches" in "".join(after)
    for i in range(3):  # the cached objects were queued too (at low priority)
        eventually(30, lambda i=i: by(namespace, f"w{i}", i) in ("first", "second"))


def test_cold_follower_lists_only_after_it_acquires_the_lease(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "first", "--log-lists", "--cold")
    eventually(30, lambda: holder(namespace) == "first")
    second = start(replicas, namespace, cluster.kubeconfig, "second", "--log-lists", "--cold")
    eventually(10, lambda: "waiting to lead" in second.output())
    create_widget(namespace, "w", size=1)
    eventually(30, lambda: by(namespace, "w", 1) == "first")
    assert lists(second.lines) == [], second.output()

    kill_leader_and_create(namespace, first)
    eventually(LEASE + RETRY * 2.2 + 10, lambda: by(namespace, "after", 7) == "second")
    before, after = split_at_acquiring(second)
    assert lists(before) == []
    assert any("widgets" in line for line in lists(after)), second.output()
