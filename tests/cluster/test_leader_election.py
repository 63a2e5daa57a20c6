"""Leader election with real operator processes: one reconciles, failover, fencing.

Replicas (tests/cluster/replica.py) stamp their identity into each Widget's ConfigMap, so
who reconciled is read from the objects, not from logs. Timings are shortened (lease
4 s, renew deadline 3 s, retry 0.5 s) to keep the suite quick; bench/failover_bench.py
measures client-go's defaults.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from operator_kit.localcluster import LocalCluster
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.faults import TcpProxy

from .conftest import create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

LEASE, DEADLINE, RETRY = 4.0, 3.0, 0.5
ROOT = Path(__file__).resolve().parents[2]


class Replica:
    """An operator process whose output is collected line by line."""

    def __init__(self, ns: Namespace, kubeconfig: str, identity: str, *args: str) -> None:
        self.identity = identity
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.replica", ns.name, kubeconfig, identity,
             "--lease-duration", str(LEASE), "--renew-deadline", str(DEADLINE),
             "--retry-period", str(RETRY), *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                        name=f"replica-{identity}", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def reconciled(self) -> int:
        return sum(1 for line in self.lines if line.startswith("reconciled "))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)


@pytest.fixture
def replicas(namespace: Namespace, cluster: TestCluster) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.stop()


def start(replicas: list[Replica], ns: Namespace, kubeconfig: str, identity: str,
          *args: str) -> Replica:
    replica = Replica(ns, kubeconfig, identity, *args)
    replicas.append(replica)
    return replica


def holder(ns: Namespace) -> str | None:
    lease = ns.get("coordination.k8s.io/v1", "Lease", "replica-test")
    return lease["spec"].get("holderIdentity") if lease else None


def stamp(ns: Namespace, name: str) -> dict[str, Any] | None:
    cm = ns.get("v1", "ConfigMap", name)
    return cm["data"] if cm else None


def set_size(ns: Namespace, name: str, size: int) -> None:
    ns.api.request("PATCH", widget_path(ns, name), body={"spec": {"size": size}},
                   content_type="application/merge-patch+json")


def by(ns: Namespace, name: str, size: int) -> str | None:
    data = stamp(ns, name)
    return data["reconciled_by"] if data and data["size"] == str(size) else None


def test_exactly_one_of_three_replicas_reconciles(namespace: Namespace, cluster: TestCluster,
                                                  replicas: list[Replica]) -> None:
    for i in range(3):
        start(replicas, namespace, cluster.kubeconfig, f"replica-{i}")
    leader = eventually(30, lambda: holder(namespace))
    for i in range(4):
        create_widget(namespace, f"w{i}", size=i)
    for i in range(4):
        assert eventually(30, lambda i=i: by(namespace, f"w{i}", i)) == leader
    time.sleep(1)
    counts = {r.identity: r.reconciled() for r in replicas}
    assert counts[leader] >= 4
    assert all(n == 0 for identity, n in counts.items() if identity != leader), counts


def test_sigterm_hands_over_to_a_follower_at_once(namespace: Namespace, cluster: TestCluster,
                                                  replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "first")
    eventually(30, lambda: holder(namespace) == "first")
    second = start(replicas, namespace, cluster.kubeconfig, "second")
    create_widget(namespace, "w", size=1)
    eventually(30, lambda: by(namespace, "w", 1) == "first")
    # a wait, not a promise: a process's start (imports) took over 10 s on a loaded machine
    eventually(30, lambda: "waiting to lead" in second.output())
    first.process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert first.process.wait(30) == 0, first.output()
    set_size(namespace, "w", 2)
    eventually(LEASE, lambda: by(namespace, "w", 2) == "second",
               message="the follower took over within the lease duration")
    handover = time.monotonic() - stopped
    print(f"\nSIGTERM handover: the follower reconciled {handover:.1f}s after the signal")
    assert handover < 2 * RETRY * 2.2 + 2, f"handover took {handover:.1f}s"


def test_sigkill_leader_is_replaced_within_lease_duration_plus_retry(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "first")
    eventually(30, lambda: holder(namespace) == "first")
    second = start(replicas, namespace, cluster.kubeconfig, "second")
    create_widget(namespace, "w", size=1)
    eventually(30, lambda: by(namespace, "w", 1) == "first")
    # the follower must be running before the leader dies, or its start is counted too
    eventually(30, lambda: "waiting to lead" in second.output())
    first.process.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    set_size(namespace, "w", 2)
    eventually(LEASE + RETRY * 2.2 + 5, lambda: by(namespace, "w", 2) == "second")
    took = time.monotonic() - killed
    print(f"\nSIGKILL takeover: {took:.1f}s (lease {LEASE:g}s, retry {RETRY:g}s)")
    assert took <= LEASE + RETRY * 2.2 + 3, f"takeover took {took:.1f}s"


def test_leader_that_cannot_renew_stops_and_exits_before_its_lease_expires(
        namespace: Namespace, cluster: TestCluster, local_plane: LocalCluster,
        replicas: list[Replica], tmp_path: Path) -> None:
    with TcpProxy("127.0.0.1", local_plane.state.apiserver_port) as proxy:
        config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{proxy.address}"
        proxied = tmp_path / "kubeconfig"
        proxied.write_text(yaml.safe_dump(config))
        first = start(replicas, namespace, str(proxied), "cut-off")
        eventually(30, lambda: holder(namespace) == "cut-off")
        create_widget(namespace, "w", size=1)
        eventually(30, lambda: by(namespace, "w", 1) == "cut-off")
        proxy.pause()  # renewals now hang: the leader must fence itself
        cut = time.monotonic()
        code = first.process.wait(DEADLINE + 5)
        exited = time.monotonic() - cut
        print(f"\ncut off from the API server: exited {exited:.1f}s after the cut "
              f"(renew deadline {DEADLINE:g}s, lease {LEASE:g}s)")
        assert code != 0, first.output()
        assert exited < LEASE, f"exited {exited:.1f}s after the cut, past the lease duration"
        assert "lost" in first.output()
        reconciles = first.reconciled()
        proxy.resume()
    assert first.reconciled() == reconciles


def test_replica_started_while_another_leads_never_reconciles_until_it_acquires(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "first")
    eventually(30, lambda: holder(namespace) == "first")
    late = start(replicas, namespace, cluster.kubeconfig, "late")
    eventually(30, lambda: "waiting to lead" in late.output())
    for i in range(3):
        create_widget(namespace, f"w{i}", size=i)
        set_size(namespace, f"w{i}", i + 10)
    for i in range(3):
        eventually(30, lambda i=i: by(namespace, f"w{i}", i + 10) == "first")
    time.sleep(LEASE)
    assert late.reconciled() == 0, late.output()
    assert holder(namespace) == "first"
    first.process.send_signal(signal.SIGTERM)
    first.process.wait(30)
    eventually(30, lambda: late.reconciled() > 0, message="reconciles once it leads")


def test_lease_rule_is_part_of_the_operator_rules() -> None:
    from operator_kit import LeaderElection, Operator, Rule

    from .conftest import WidgetController

    with_lease = Operator("x", [WidgetController("ns")], leader_election=LeaderElection())
    without = Operator("x", [WidgetController("ns")])
    create = Rule(["coordination.k8s.io"], ["leases"], ["create"])
    by_name = Rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["x"])
    assert create in with_lease.rules() and by_name in with_lease.rules(), \
        "create (a name cannot limit it), then get and update of its own Lease only"
    assert not any("leases" in r.resources for r in without.rules())


def test_leader_paused_past_its_lease_never_reconciles_again_after_resuming(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "paused")
    eventually(30, lambda: holder(namespace) == "paused")
    second = start(replicas, namespace, cluster.kubeconfig, "second")
    eventually(30, lambda: "waiting to lead" in second.output())  # running before the pause
    create_widget(namespace, "w", size=1)
    eventually(30, lambda: by(namespace, "w", 1) == "paused")
    first.process.send_signal(signal.SIGSTOP)  # a stop-the-world pause, a frozen VM
    eventually(LEASE + RETRY * 2.2 + 5, lambda: holder(namespace) == "second")
    set_size(namespace, "w", 2)
    eventually(10, lambda: by(namespace, "w", 2) == "second")
    first.process.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    set_size(namespace, "w", 3)  # a change the resumed replica sees in its queue
    code = first.process.wait(DEADLINE + 5)
    # Its line for size 1 may come after the pause: the stop can fall between the write
    # and the print. Any reconcile of the sizes set during or after the pause is a bug.
    late = [line for line in first.lines if line.startswith("reconcil")
            and not line.rstrip().endswith("size=1")]
    print(f"\npaused leader: exited {time.monotonic() - resumed:.1f}s after resuming, "
          f"{len(late)} reconciles after the pause")
    assert code != 0, "a leader that lost its lease while paused exits non-zero"
    assert not late, first.output()
    eventually(10, lambda: by(namespace, "w", 3) == "second")


def test_sigkill_in_the_middle_of_a_reconcile_leaves_work_the_next_leader_finishes(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "killed", "--slow", "3")
    eventually(30, lambda: holder(namespace) == "killed")
    second = start(replicas, namespace, cluster.kubeconfig, "second", "--slow", "0.1")
    eventually(30, lambda: "waiting to lead" in second.output())  # running before the kill
    create_widget(namespace, "w", size=5)
    eventually(30, lambda: "reconciling w size=5" in first.output())
    first.process.send_signal(signal.SIGKILL)  # status half-written, no ConfigMap yet
    killed = time.monotonic()

    def finished() -> bool:
        obj = namespace.api.get(widget_path(namespace, "w"))
        return by(namespace, "w", 5) == "second" and obj["status"].get("observed_size") == 5

    eventually(LEASE + RETRY * 2.2 + 10, finished, message="the next leader finished the work")
    print(f"\nSIGKILL mid-reconcile: the next leader finished it "
          f"{time.monotonic() - killed:.1f}s after the kill")


def test_sigterm_under_load_finishes_every_reconcile_it_started(
        namespace: Namespace, cluster: TestCluster, replicas: list[Replica]) -> None:
    first = start(replicas, namespace, cluster.kubeconfig, "busy", "--slow", "0.3")
    eventually(30, lambda: holder(namespace) == "busy")
    start(replicas, namespace, cluster.kubeconfig, "next", "--slow", "0.05")
    for i in range(20):
        create_widget(namespace, f"w{i}", size=i)
    eventually(30, lambda: first.output().count("reconciling ") >= 3)
    first.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert first.process.wait(30) == 0, first.output()
    drained = time.monotonic() - signalled
    started = {line.split()[1] for line in first.lines if line.startswith("reconciling ")}
    finished = {line.split()[1] for line in first.lines if line.startswith("reconciled ")}
    assert started and started == finished, "every reconcile it started, it finished"
    for i in range(20):
        eventually(60, lambda i=i: (namespace.api.get(widget_path(namespace, f"w{i}"))
                                    .get("status", {}).get("observed_size")) == i,
                   message=f"w{i} converged")
    print(f"\nSIGTERM under load: exited {drained:.1f}s after the signal with all "
          f"{len(started)} reconciles it started finished; all 20 converged "
          f"{time.monotonic() - signalled:.1f}s after the signal")
