"""Cache transforms against a real API server: what the cache holds — and what reconcile and
``ctx.owned`` read from it — is the object as its transforms left it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from operator_kit import Action, Context, Operator, Owns
from operator_kit.client.transport import Api, Resource, api_client
from operator_kit.runtime.transforms import drop_fields
from operator_kit.runtime.watching import Informers
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import Widget, WidgetController, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)


class Slim(WidgetController):
    """Owns its ConfigMaps without their data, and reads Widgets without annotations."""

    owns = (Owns("v1/ConfigMap", transform=drop_fields("data")),)
    transform = drop_fields("metadata.annotations")

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.seen: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        action = super().reconcile(obj, ctx)
        self.seen.append((dict(obj.metadata), ctx.owned(obj, "v1/ConfigMap")))
        return action


def test_reconcile_and_ctx_owned_read_the_objects_as_transformed(
        namespace: Namespace, run_operator: Callable[..., Operator]) -> None:
    controller = Slim(namespace.name)
    operator = run_operator(controller)
    create_widget(namespace, "a", size=3, annotations={"big": "x" * 2000})
    # The owned ConfigMap's event reconciles the Widget again, which then owns it.
    eventually(20, lambda: any(owned for _, owned in controller.seen))
    metadata, owned = next((m, o) for m, o in controller.seen if o)
    assert "big" not in (metadata.get("annotations") or {}), "the Widget's transform ran"
    assert "managedFields" not in metadata, "the default transform ran first"
    [config_map] = owned
    assert "data" not in config_map and config_map["metadata"]["name"] == "a"
    served = namespace.get("v1", "ConfigMap", "a")
    assert served is not None and served["data"]["size"] == "3", \
        "the API server keeps the data: only the cache is slimmer"
    cached = [i for i in operator.informers.of(CONFIG_MAPS) if i.transform is not None]
    assert cached and all("data" not in o for o in cached[0].objects())


@pytest.mark.parametrize("default, kept", [(None, True), ("default", False)])
def test_the_operator_wide_default_drops_managed_fields_unless_turned_off(
        cluster: TestCluster, namespace: Namespace, default: str | None, kept: bool) -> None:
    namespace.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"},
                     "data": {"k": "v"}})
    stop = threading.Event()
    options: dict[str, Any] = {} if default == "default" else {"default_transform": None}
    informer = Informers(Api(api_client(cluster.kubeconfig)), stop,
                         **options).informer(CONFIG_MAPS, namespace=namespace.name)
    informer.start()
    try:
        assert informer.synced.wait(30)
        cached = informer.get((namespace.name, "m"))
        assert cached is not None and cached["data"] == {"k": "v"}
        assert ("managedFields" in cached["metadata"]) is kept
    finally:
        stop.set()
        informer.interrupt()
        informer.join(5)
