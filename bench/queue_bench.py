"""Work queue microbenchmark: what fairness costs per operation, with no API server.

Usage::

    python bench/queue_bench.py                  # 100,000 keys, 5 rounds (~1 min)
    python bench/queue_bench.py --keys 20000 --rounds 2

Method
------
One thread drives a `WorkQueue` directly (no watch, no reconcile, no API server), so
the figures are the queue's own CPU per operation. Three queues:

``off``
    ``flows=None`` (``Controller.fairness = None``): one first-in, first-out queue per
    priority.
``fair, 1 flow``
    `ObjectFlows` over ``Fairness()`` (each namespace a flow), every key in one
    namespace: the deficit round robin with nothing to share.
``fair, F flows``
    the same, keys spread over ``--flows`` namespaces (10,000 by default) in turn.

Each round, for each queue in turn (the order rotates from round to round):

1. *add*: ``add`` of ``--keys`` distinct keys (each a new ready key);
2. *get+done*: ``get(timeout=0)`` and ``done`` until the queue is empty;
3. *steady*: ``--depth`` keys ready, then ``--keys`` times ``get``, ``done``, ``add`` of
   the key just done (a worker's loop beside a watch re-adding what was reconciled:
   the queue stays ``--depth`` deep, flows keep joining and leaving the round).

It prints each phase's operations a second (an add, a get+done pair, a
get+done+add cycle is one operation), the best of the rounds, and the fair queues'
ratio to ``off``. Timing is this process's CPU time (``time.process_time``) around
each phase, so that other processes on a shared machine do not count; each figure is the
best of the rounds (as ``timeit`` advises: the slower rounds measure the machine, not
the queue). The garbage collector runs as usual.

Last, the cost of a scrape, which is where the per-flow gauges are computed (never on an
add or a get): with ``--depth`` keys ready over ``--flows`` flows, the time
``flow_stats`` holds the queue's lock, and a whole collection of the flow gauges (the
top-N flows and ``(other)``), the best of ``--rounds`` scrapes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's operator_kit, not an installed one

from operator_kit.runtime.fairness import Fairness, ObjectFlows  # noqa: E402
from operator_kit.runtime.queueing import WorkQueue  # noqa: E402

Key = tuple[str, str]
clock = time.process_time  # this process's CPU: other processes' load does not count
PHASES = ("add", "get+done", "steady")


def make_queue(flows: bool) -> WorkQueue[Key]:
    policy = ObjectFlows(Fairness(), "queue-bench") if flows else None
    return WorkQueue("queue-bench", flows=policy)


def keys_over(count: int, flows: int) -> list[Key]:
    """`count` distinct keys, spread over `flows` namespaces in turn."""
    return [(f"ns-{i % flows:05d}", f"obj-{i:06d}") for i in range(count)]


def phase_add(queue: WorkQueue[Key], keys: Sequence[Key]) -> float:
    add = queue.add
    started = clock()
    for key in keys:
        add(key)
    return len(keys) / (clock() - started)


def phase_drain(queue: WorkQueue[Key], count: int) -> float:
    get, done = queue.get, queue.done
    started = clock()
    taken = 0
    while (key := get(0)) is not None:
        done(key)
        taken += 1
    elapsed = clock() - started
    if taken != count:
        raise SystemExit(f"the queue handed out {taken} keys, not {count}")
    return count / elapsed


def phase_steady(queue: WorkQueue[Key], keys: Sequence[Key], depth: int) -> float:
    for key in keys[:depth]:
        queue.add(key)
    get, done, add = queue.get, queue.done, queue.add
    started = clock()
    for _ in range(len(keys)):
        taken = get(0)
        assert taken is not None
        done(taken)
        add(taken)
    elapsed = clock() - started
    while (left := get(0)) is not None:
        done(left)
    return len(keys) / elapsed


def one_round(name: str, fair: bool, keys: Sequence[Key], depth: int) -> dict[str, float]:
    queue = make_queue(fair)
    try:
        return {"add": phase_add(queue, keys), "get+done": phase_drain(queue, len(keys)),
                "steady": phase_steady(queue, keys, depth)}
    finally:
        queue.shut_down()


def scrape_cost(options: argparse.Namespace) -> tuple[float, float, int]:
    """Seconds `flow_stats` takes (the queue's lock held) and a whole collection of the
    flow gauges takes, with `depth` keys ready over `flows` flows; the series collected."""
    from operator_kit import metrics

    queue = make_queue(True)
    try:
        for key in keys_over(options.depth, options.flows):
            queue.add(key)
        locked, collected, series = [], [], 0
        for _ in range(options.rounds):
            started = clock()
            queue.flow_stats()
            locked.append(clock() - started)
            started = clock()
            families = list(metrics.WORKQUEUE_FLOW_GAUGES.collect())
            collected.append(clock() - started)
            series = sum(len(family.samples) for family in families)
        return min(locked), min(collected), series
    finally:
        queue.shut_down()


def bench(options: argparse.Namespace) -> int:
    import operator_kit

    print(f"# operator_kit from {Path(operator_kit.__file__).parent}; Python "
          f"{sys.version.split()[0]}", flush=True)
    print(f"# keys={options.keys} flows={options.flows} depth={options.depth} "
          f"rounds={options.rounds}", flush=True)
    setups: list[tuple[str, bool, list[Key]]] = [
        ("off", False, keys_over(options.keys, options.flows)),
        ("fair, 1 flow", True, keys_over(options.keys, 1)),
        (f"fair, {options.flows} flows", True, keys_over(options.keys, options.flows)),
    ]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in setups}
    print(f"{'queue':>18} {'round':>5} " + " ".join(f"{p + ' ops/s':>15}" for p in PHASES),
          flush=True)
    for round_ in range(options.rounds):
        shift = round_ % len(setups)
        for name, fair, keys in setups[shift:] + setups[:shift]:
            figures = one_round(name, fair, keys, options.depth)
            results[name].append(figures)
            print(f"{name:>18} {round_:>5} "
                  + " ".join(f"{figures[p]:>15,.0f}" for p in PHASES), flush=True)

    def best(name: str, phase: str) -> float:
        return max(r[phase] for r in results[name])

    print()
    for name, _, _ in setups:
        print(f"{name}: " + ", ".join(
            f"{phase} {best(name, phase):,.0f} ops/s ({1e6 / best(name, phase):.1f} us)"
            for phase in PHASES), flush=True)
    for name, _, _ in setups[1:]:
        print(f"{name} / off: " + ", ".join(
            f"{phase} {best(name, phase) / best('off', phase):.2f}x" for phase in PHASES),
            flush=True)
    locked, collected, series = scrape_cost(options)
    print(f"scrape with {options.depth} keys ready over {min(options.flows, options.depth)} "
          f"flows: flow_stats holds the queue's lock {locked * 1000:.1f} ms, the flow "
          f"gauges' collection takes {collected * 1000:.1f} ms ({series} series)", flush=True)
    return 0


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=100_000, help="keys per phase (100000)")
    parser.add_argument("--flows", type=int, default=10_000,
                        help="namespaces of the many-flows queue (10000)")
    parser.add_argument("--depth", type=int, default=20_000,
                        help="ready keys during the steady phase (20000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    options = parser.parse_args(argv)
    if min(options.keys, options.flows, options.depth, options.rounds) < 1:
        parser.error("--keys, --flows, --depth and --rounds must be at least 1")
    options.depth = min(options.depth, options.keys)
    return options


def main(argv: Sequence[str] | None = None) -> int:
    return bench(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
