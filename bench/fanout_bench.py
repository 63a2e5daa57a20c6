"""How fast a FanOut keeps a hub object's children in step on its member clusters.

    python bench/fanout_bench.py --hub H --members M1:M2 [--teams 20]

H and M1, M2 are kubeconfigs of clusters you can throw away (e.g. local planes:
``python -m operator_kit.localcluster up --dir D``); they default to
OPERATOR_KIT_TEST_KUBECONFIG and OPERATOR_KIT_TEST_FLEET_KUBECONFIGS. The sample's
`TeamSync` (samples/fleet) runs in this process as a hub operator with its fleet.

Two phases in the same run, the first the baseline: the fleet with **one** member, then
with **all** members. In each, `--teams` Teams are created at once on the hub, and for
each the time from its create to the hub object's ``status.clusters`` saying Ready for
every member (each member's children applied by its own workers, each entry written by
server-side apply) is taken; then, on the first member, a child ConfigMap is deleted by
hand five times (time until it is back), and five Teams are deleted (time until the hub
object is gone: the finalizer deleted the children on every member). It prints each
phase's medians and p90, then the last line::

    fanout: members=<n> teams=<n> ready_p50_s=<s> ratio_vs_one=<x.xx> restore_p50_s=<s>
            delete_p50_s=<s>     (one line)

(ratio_vs_one: ready_p50 with every member / ready_p50 with one member.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples" / "fleet"))

from team_operator import Team, TeamSpec, TeamSync

from operator_kit import Operator
from operator_kit.fleet import Fleet, KubeconfigDirectory
from operator_kit.testing import TestCluster, eventually

TEAMS = "/apis/example.com/v1/teams"


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def all_ready(obj: dict[str, Any], names: list[str]) -> bool:
    found = {e["name"]: e["conditions"][0]["status"]
             for e in (obj.get("status") or {}).get("clusters") or ()}
    return all(found.get(n) == "True" for n in names)


def phase(hub: TestCluster, members: dict[str, TestCluster], teams: int,
          tag: str) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="fanout-bench-"))
    for name, member in members.items():
        shutil.copy(member.kubeconfig, folder / f"{name}.yaml")
    controller = TeamSync()
    controller.status_interval = 5.0
    operator = Operator("team-operator", [controller])
    operator.use(hub.client)
    fleet = Fleet.of(operator, KubeconfigDirectory(folder), poll_interval=0.2)
    operator.start()
    fleet.start()
    names = sorted(members)
    try:
        eventually(60, lambda: len(fleet.members()) == len(names) and all(
            m.synced() for m in fleet.members().values()), message="members synced")
        created: dict[str, float] = {}
        for i in range(teams):
            name = f"bench-{tag}-{i}"
            hub.api.request("POST", TEAMS, body=Team(name, TeamSpec(
                members=["a", "b"], config={"i": str(i)})).to_dict())
            created[name] = time.monotonic()
        ready: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while len(ready) < teams and time.monotonic() < deadline:
            now = time.monotonic()
            for obj in hub.api.get(TEAMS)["items"]:
                name = obj["metadata"]["name"]
                if name in created and name not in ready and all_ready(obj, names):
                    ready[name] = now - created[name]
            time.sleep(0.02)
        if len(ready) < teams:
            raise SystemExit(f"only {len(ready)} of {teams} Teams were Ready within 120 s")
        first = members[names[0]]
        restores = []
        for i in range(5):
            path = f"/api/v1/namespaces/team-bench-{tag}-{i}/configmaps/team-config"
            uid = first.api.get(path)["metadata"]["uid"]
            first.api.request("DELETE", path)
            began = time.monotonic()
            eventually(30, lambda p=path, u=uid: (first.api.get_or_none(p) or {}).get(
                "metadata", {}).get("uid") not in (None, u), interval=0.02)
            restores.append(time.monotonic() - began)
        deletes = []
        for i in range(5):
            name = f"bench-{tag}-{i}"
            began = time.monotonic()
            hub.api.request("DELETE", f"{TEAMS}/{name}")
            eventually(60, lambda n=name: hub.api.get_or_none(f"{TEAMS}/{n}") is None,
                       interval=0.02)
            deletes.append(time.monotonic() - began)
        for name in created:
            _delete(hub, name)
        eventually(120, lambda: not [t for t in hub.api.get(TEAMS)["items"]
                                     if t["metadata"]["name"].startswith(f"bench-{tag}-")],
                   message="the phase's Teams finalized")
    finally:
        operator.stop()
        fleet.stop()
        shutil.rmtree(folder, ignore_errors=True)
    values = list(ready.values())
    return {"ready_p50": statistics.median(values), "ready_p90": p90(values),
            "restore_p50": statistics.median(restores),
            "delete_p50": statistics.median(deletes)}


def _delete(hub: TestCluster, name: str) -> None:
    if hub.api.get_or_none(f"{TEAMS}/{name}") is not None:
        try:
            hub.api.request("DELETE", f"{TEAMS}/{name}")
        except Exception as err:
            if getattr(err, "status", None) != 404:
                raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hub", default=os.environ.get("OPERATOR_KIT_TEST_KUBECONFIG"))
    parser.add_argument("--members",
                        default=os.environ.get("OPERATOR_KIT_TEST_FLEET_KUBECONFIGS"))
    parser.add_argument("--teams", type=int, default=20)
    args = parser.parse_args()
    if not args.hub or not args.members:
        raise SystemExit("name the hub's kubeconfig (--hub) and the members' (--members a:b); "
                         "start local planes with python -m operator_kit.localcluster up "
                         "--dir D")
    hub = TestCluster(args.hub)
    hub.install_crd(Team)
    paths = [p for p in args.members.split(os.pathsep) if p]
    every = {f"m{i + 1}": TestCluster(p) for i, p in enumerate(paths)}
    one = {"m1": every["m1"]}
    results = {}
    for tag, members in (("one", one), ("all", every)):
        results[tag] = figures = phase(hub, members, args.teams, tag)
        print(f"members={len(members)} teams={args.teams} " + " ".join(
            f"{k}_s={v:.3f}" for k, v in figures.items()), flush=True)
    ratio = results["all"]["ready_p50"] / results["one"]["ready_p50"]
    print(f"fanout: members={len(every)} teams={args.teams} "
          f"ready_p50_s={results['all']['ready_p50']:.2f} ratio_vs_one={ratio:.2f} "
          f"restore_p50_s={results['all']['restore_p50']:.2f} "
          f"delete_p50_s={results['all']['delete_p50']:.2f}")


if __name__ == "__main__":
    main()
