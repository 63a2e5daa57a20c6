"""The README's operator, run as written against the real API server: each Greeting gets
the ConfigMap it owns, put back when changed by hand and deleted with it."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from operator_kit.testing import Namespace, TestCluster, eventually, running

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The README's block as the module ``greeting`` it says it is (as written: without
    this file's ``from __future__`` import)."""
    code = re.search(r"^```python\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert code, "README.md has no Python block"
    module = types.ModuleType("greeting")
    monkeypatch.setitem(sys.modules, "greeting", module)
    exec(compile(code.group(1), str(README), "exec", dont_inherit=True), module.__dict__)
    return module


def message(namespace: Namespace, name: str) -> Any:
    config_map = namespace.get("v1", "ConfigMap", name)
    return config_map and config_map.get("data", {}).get("message")


def test_the_readme_operator_keeps_each_greeting_s_config_map(
        cluster: TestCluster, namespace: Namespace, monkeypatch: pytest.MonkeyPatch) -> None:
    greeting = readme_module(monkeypatch)
    cluster.install_crd(greeting.Greeting)
    with running(greeting.operator, cluster):
        namespace.apply(greeting.Greeting("hello", greeting.GreetingSpec("hi")).to_dict())
        eventually(30, lambda: message(namespace, "hello") == "hi",
                   message="the Greeting's ConfigMap")

        namespace.apply({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "hello"}, "data": {"message": "changed"}})
        eventually(30, lambda: message(namespace, "hello") == "hi",
                   message="the ConfigMap put back")

        greetings = namespace.api.resource_for("example.com/v1", "Greeting")
        namespace.api.request("DELETE", greetings.path(namespace.name, "hello"))
        eventually(60, lambda: namespace.get("v1", "ConfigMap", "hello") is None,
                   message="the ConfigMap deleted with its Greeting (garbage collector)")
