"""What being installed costs: pytest loads operator_kit's plugin in every run of an
environment that has it, and an operator that serves no webhooks runs without Flask.

Each check runs in a fresh interpreter and reads its ``sys.modules``. The figures
(``python -X importtime`` of ``import operator_kit`` and of a bare pytest run) are in
docs/how-to/testing.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB = ("flask", "werkzeug", "gunicorn", "jinja2")


def loaded_after(code: str) -> set[str]:
    """The top-level packages and operator_kit modules imported by running `code`."""
    script = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env=env, cwd=ROOT).stdout
    names = json.loads(out.splitlines()[-1])
    return {n if n.startswith("operator_kit") else n.split(".")[0] for n in names}


def test_import_operator_kit_imports_neither_flask_nor_the_kubernetes_client() -> None:
    loaded = loaded_after("import operator_kit")
    assert not loaded & {*WEB, "kubernetes", "urllib3", "prometheus_client"}
    assert "operator_kit.operator" not in loaded


def test_the_pytest_plugin_imports_nothing_heavy_until_a_fixture_is_used() -> None:
    loaded = loaded_after("import operator_kit.testing.plugin")
    assert not loaded & {*WEB, "kubernetes"}
    assert "operator_kit.testing.cluster" not in loaded


def test_the_public_names_are_all_there_and_load_on_first_use() -> None:
    loaded = loaded_after("import operator_kit\n"
                          "assert all(getattr(operator_kit, n) is not None "
                          "for n in operator_kit.__all__)\n"
                          "from operator_kit import Operator, Webhooks\n"
                          "assert Webhooks.__module__ == 'operator_kit.webhooks.server'\n"
                          "from operator_kit.testing import TestCluster, eventually\n"
                          "import operator_kit.filters, operator_kit.transforms")
    assert {"operator_kit.operator", "operator_kit.webhooks.server", "flask"} <= loaded


SERVE_PROBES = """
import urllib.request
from dataclasses import dataclass
from operator_kit import Context, Controller, CustomResource, Operator, cli

@dataclass
class GizmoSpec:
    size: int = 0

class Gizmo(CustomResource):
    group = "imports.operator-kit.test"
    version = "v1"
    kind = "Gizmo"
    spec: GizmoSpec

class Gizmos(Controller[Gizmo]):
    resource = Gizmo
    def reconcile(self, obj: Gizmo, ctx: Context) -> None:
        pass

operator = Operator("gizmo-operator", [Gizmos()])
from operator_kit.localcluster.plane import free_port
settings = cli.parse(["--health-probe-bind-address", f"127.0.0.1:{free_port()}",
                      "--metrics-bind-address", f"127.0.0.1:{free_port()}"], environ={})
servers = cli.servers(operator, settings)
for server in servers:
    server.start()
try:
    probes, metrics = servers
    for url in (f"http://{probes.address}/livez", f"http://{metrics.address}/metrics"):
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200, (url, answer.status)
    operator.rules()
    WEBHOOKS
finally:
    for server in servers:
        server.stop()
"""


def test_an_operator_without_webhooks_serves_probes_and_metrics_without_flask() -> None:
    loaded = loaded_after(SERVE_PROBES.replace("WEBHOOKS", "pass"))
    assert not loaded & set(WEB)
    assert not {m for m in loaded if m.startswith("operator_kit.webhooks.server")}


def test_an_operator_with_webhooks_does_import_flask() -> None:
    """The check above can fail: asking for the webhooks app loads Flask."""
    loaded = loaded_after(SERVE_PROBES.replace("WEBHOOKS", "operator.webhooks"))
    assert "flask" in loaded
