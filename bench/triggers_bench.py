"""Triggers benchmark: what knowing "why did it run" costs per watch event.

Usage::

    python bench/triggers_bench.py                       # 1,000 keys, 10 events each, 7 rounds
    python bench/triggers_bench.py --keys 200 --rounds 3 # smoke run

Method
------
In-process, no API server: the part of the watch thread's path that triggers change.
Each round builds ``--keys`` pairs of objects (a Deployment-sized dict decoded from JSON
twice, so the old and new share nothing, as two watch events' objects; the new one with
a changed ``spec`` and ``metadata.labels``) and feeds ``--events`` MODIFIED events per
key into a `WorkQueue` (so the queue coalesces ``--events`` triggers per key), then
drains it as a worker does (``get``, ``triggers``, ``done``). Contenders, alternating
in order from round to round:

``plain``
    ``queue.add(key, priority=...)`` without a trigger (the path as it was, plus one
    ``is None`` test);
``triggers``
    ``Trigger.of_event("primary", event, kind)`` then ``queue.add(..., trigger=...)``,
    as the runner's handlers do; the drain reads each key's triggers as the worker's
    outcome line does at DEBUG (``as_list()``: the kept triggers' changed fields are
    compared then, ``MAX_KEPT`` of the ``--events`` per key);
``unread``
    the same, but the drain does not read the triggers (the outcome line at INFO, no
    ``ctx.triggers`` in the reconcile): the watch thread's share alone.

For scale, ``decode`` is what every such event costs the watch thread already: parsing
the object's JSON (``json.loads`` of its text, as the watch stream's line is parsed).

It prints each round's nanoseconds per event (adds and drain included) for each, then
the medians (CPU time of this process, ``time.process_time``, so that other processes
on a shared machine weigh less than on a wall clock), the ratio triggers / plain, and
the extra cost of triggers as a share of decode + plain. The last line: ``triggers:
keys=<n> events=<n> decode_ns=<ns> plain_ns=<ns> triggers_ns=<ns> ratio=<x.xx>
share_of_event=<p>% unread_ns=<ns> unread_share=<p>%``. The absolute figures still move
with the machine's load (caches, frequency); compare within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.queueing import WorkQueue
from operator_kit.runtime.triggers import Trigger


def deployment(name: str, replicas: int, labels: dict[str, str]) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": f"registry.example.com/app-{i}:1.2.{i}",
                   "ports": [{"containerPort": 8000 + i, "protocol": "TCP"}],
                   "env": [{"name": f"VAR_{j}", "value": str(j)} for j in range(10)],
                   "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}
                  for i in range(3)]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}",
                         "resourceVersion": str(replicas), "generation": replicas,
                         "labels": labels, "annotations": {"a": "b" * 40}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": containers}}},
            "status": {"replicas": 1, "readyReplicas": 1,
                       "conditions": [{"type": "Available", "status": "True"}]}}


def events(keys: int, per_key: int) -> list[WatchEvent]:
    result = []
    for k in range(keys):
        for e in range(per_key):
            old = json.loads(json.dumps(deployment(f"d{k}", e, {"app": f"d{k}"})))
            new = json.loads(json.dumps(deployment(f"d{k}", e + 1,
                                                   {"app": f"d{k}", "rev": str(e)})))
            result.append(WatchEvent("MODIFIED", new, old))
    return result


def run(stream: list[WatchEvent], with_triggers: bool, name: str, read: bool = True) -> float:
    queue: WorkQueue[tuple[str, str]] = WorkQueue(name)
    started = time.process_time()
    for event in stream:
        meta = event.object["metadata"]
        key = (meta["namespace"], meta["name"])
        if with_triggers:
            queue.add(key, priority=0, trigger=Trigger.of_event("primary", event, "Deployment"))
        else:
            queue.add(key, priority=0)
    while (key := queue.get(timeout=0)) is not None:
        if read:
            queue.triggers(key).as_list()  # the worker's log line: the kept ones compared
        queue.done(key)
    return (time.process_time() - started) * 1e9 / len(stream)


def decode(texts: list[str]) -> float:
    started = time.process_time()
    for text in texts:
        json.loads(text)
    return (time.process_time() - started) * 1e9 / len(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--events", type=int, default=10, help="events per key")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    stream = events(args.keys, args.events)
    texts = [json.dumps(event.object) for event in stream]
    figures: dict[str, list[float]] = {"decode": [], "plain": [], "triggers": [],
                                       "unread": []}
    for round_ in range(args.rounds):
        order = ["plain", "triggers", "unread"]
        for contender in order[round_ % 3:] + order[:round_ % 3]:
            ns = run(stream, contender != "plain", f"bench-{contender}-{round_}",
                     read=contender == "triggers")
            figures[contender].append(ns)
        figures["decode"].append(decode(texts))
        print(f"round {round_ + 1}: " + ", ".join(
            f"{name} {values[-1]:.0f} ns/event" for name, values in figures.items()),
            flush=True)
    decoded, plain, triggers, unread = (statistics.median(figures[name])
                                        for name in ("decode", "plain", "triggers", "unread"))
    print(f"triggers: keys={args.keys} events={args.events} decode_ns={decoded:.0f} "
          f"plain_ns={plain:.0f} triggers_ns={triggers:.0f} ratio={triggers / plain:.2f} "
          f"share_of_event={100 * (triggers - plain) / (decoded + plain):.0f}% "
          f"unread_ns={unread:.0f} unread_share={100 * (unread - plain) / (decoded + plain):.0f}%")


if __name__ == "__main__":
    main()
