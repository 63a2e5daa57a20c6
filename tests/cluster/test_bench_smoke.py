"""The benches of this round, run once at a small size in CI so that a change that breaks
one is seen there: the figures themselves are measured outside CI, at full size
(bench/README.md). Each run must end with its fixed last line; where a bench states a
guarantee (no two members reconcile an object at once, server mode writes no label),
the smoke run holds it too.

- fairness_bench.py on the suite's plane: 200 noisy objects, 3 quiet flows, one round
  (~10 s);
- sharding_bench.py on the plane with ShardedListAndWatch (`sharded_cluster`), both modes,
  60 objects, 4 s Leases (~45 s);
- queue_bench.py, no API server, a few thousand keys (< 1 s).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from operator_kit.testing import TestCluster

ROOT = Path(__file__).resolve().parents[2]

NUMBER = r"[0-9]+(?:\.[0-9]+)?"


def bench(script: str, *args: str, timeout: float) -> list[str]:
    """The lines a bench printed; its output (and error) in the failure if it fails."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout.strip().splitlines()


def test_the_fairness_bench_ends_with_its_line(cluster: TestCluster) -> None:
    lines = bench("fairness_bench.py", "--kubeconfig", cluster.kubeconfig, "--noisy", "200",
                  "--quiet-flows", "3", "--rounds", "1", timeout=300)
    assert re.fullmatch(
        rf"fairness: noisy=200 quiet_flows=3 quiet_p99_ms={NUMBER} "
        rf"fifo_quiet_p99_ms={NUMBER} noisy_s={NUMBER} fifo_noisy_s={NUMBER}", lines[-1]), lines


def test_the_sharding_bench_ends_with_a_line_per_mode_and_no_overlap(
    sharded_cluster: TestCluster,
) -> None:
    lines = bench("sharding_bench.py", "--kubeconfig", sharded_cluster.kubeconfig,
                  "--objects", "60", "--lease", "4", "3", "0.5", "--mode", "both",
                  timeout=600)
    figures = rf"speedup={NUMBER} overlaps=0 moved_on_join={NUMBER}% takeover_s={NUMBER}"
    assert re.fullmatch(
        rf"sharding: mode=labels members=3 {figures} writes_per_object={NUMBER} "
        rf"cache_share={NUMBER}", lines[-2]), lines[-12:]
    assert re.fullmatch(
        rf"sharding: mode=server members=3 {figures} writes_per_object=0\.00 "
        rf"cache_share={NUMBER}", lines[-1]), lines[-12:]


def test_the_queue_bench_compares_fairness_with_fifo() -> None:
    lines = bench("queue_bench.py", "--keys", "2000", "--flows", "100", "--depth", "500",
                  "--rounds", "1", timeout=120)
    assert any(re.fullmatch(rf"fair, 100 flows / off: add {NUMBER}x, get\+done {NUMBER}x, "
                            rf"steady {NUMBER}x", line) for line in lines), lines
    assert lines[-1].startswith("scrape with 500 keys ready over 100 flows:"), lines
