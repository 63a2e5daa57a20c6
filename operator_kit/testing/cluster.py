"""The test cluster: connecting to it, fresh namespaces, CRDs, polling, processes.

`TestCluster.from_env()` reads ``OPERATOR_KIT_TEST_KUBECONFIG``; without it a test that
needs a cluster is skipped (`NoTestCluster`), or fails with instructions when
``OPERATOR_KIT_TEST_REQUIRE_KUBERNETES`` is set. `operator_kit.testing` re-exports
everything here.
"""


from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api, api_client

if TYPE_CHECKING:
    from operator_kit.api.resources import CustomResource
    from operator_kit.operator import Operator

T = TypeVar("T")

KUBECONFIG_ENV = "OPERATOR_KIT_TEST_KUBECONFIG"
REQUIRE_ENV = "OPERATOR_KIT_TEST_REQUIRE_KUBERNETES"
TEST_LABEL = "operator-kit-test"
FIELD_MANAGER = "operator-kit-test"

HOW_TO_START = (
    "Start a cluster and point the tests at it:\n"
    "  export OPERATOR_KIT_TEST_KUBECONFIG=$(python -m operator_kit.localcluster up)\n"
    "(or the kubeconfig of a kind/k3d cluster you can throw away)."
)


class NoTestCluster(RuntimeError):
    """No cluster is configured for the tests."""


def eventually(
    timeout: float, fn: Callable[[], T], *, interval: float = 0.1, message: str | None = None
) -> T:
    """Call `fn` until it returns something truthy, and return that; fail after `timeout`.

    Exceptions raised by `fn` count as "not yet"; the last one is shown on timeout, so an
    assertion inside `fn` explains what never became true.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    last_value: T | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
            last_value, last_error = value, None
        except Exception as err:  # noqa: BLE001 - "not yet": retried until the deadline
            last_error = err
        if time.monotonic() >= deadline:
            what = message or getattr(fn, "__name__", "condition")
            detail = f": {last_error!r}" if last_error else f" (last value: {last_value!r})"
            raise AssertionError(f"{what} did not hold within {timeout:g}s{detail}") from last_error
        time.sleep(interval)


@dataclass
class Namespace:
    """A throw-away namespace ``<prefix>-<random>``, labelled ``operator-kit-test=true``."""

    name: str
    cluster: TestCluster

    @property
    def api(self) -> Api:
        """The cluster's `Api` client."""
        return self.cluster.api

    def apply(self, obj: Mapping[str, Any]) -> Any:
        """Server-side apply `obj` in this namespace."""
        body = dict(obj)
        body["metadata"] = {**obj.get("metadata", {}), "namespace": self.name}
        return self.cluster.api.apply(body, field_manager=FIELD_MANAGER)

    def get(self, api_version: str, kind: str, name: str) -> Any | None:
        """The object as a dict, or None when it does not exist."""
        resource = self.cluster.api.resource_for(api_version, kind)
        try:
            return self.cluster.api.get(resource.path(self.name, name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, **query: Any) -> list[Any]:
        """The objects of `kind` in this namespace, as dicts; `query` goes to the list call
        (``labelSelector=...``)."""
        resource = self.cluster.api.resource_for(api_version, kind)
        return list(self.cluster.api.get(resource.path(self.name), **query)["items"])

    def delete(self, wait: bool = False, timeout: float = 60.0,
               kinds: Sequence[type[CustomResource]] = ()) -> None:
        """Delete the namespace (and so everything in it); optionally wait until it is gone.

        When it is still there after `timeout`, the AssertionError says why: the
        namespace's own conditions (which finalizers, of which kinds) and each object of
        `kinds` still in it, with its finalizers and how to remove them."""
        core = client.CoreV1Api(self.cluster.client)
        try:
            core.delete_namespace(self.name)
        except ApiException as err:
            if err.status != 404:
                raise
        if wait:
            try:
                eventually(
                    timeout,
                    lambda: not self.cluster.exists(f"/api/v1/namespaces/{self.name}"),
                    message=f"namespace {self.name} finishing deletion",
                )
            except AssertionError as err:
                raise AssertionError(f"{err}; {self._why_stuck(kinds)}") from None

    def _why_stuck(self, kinds: Sequence[type[CustomResource]]) -> str:
        from operator_kit.client.uninstall import Leftover, finalizer_patch_command

        namespace = self.cluster.api.get_or_none(f"/api/v1/namespaces/{self.name}") or {}
        reasons = [c.get("message", c["type"]) for c in
                   namespace.get("status", {}).get("conditions", [])
                   if c.get("status") == "True"]
        left = [Leftover(kind.kind, kind.plural, kind.group, self.name,
                         item["metadata"]["name"],
                         tuple(item["metadata"].get("finalizers") or ()))
                for kind in kinds
                for item in self.list(kind.api_version(), kind.kind)]
        lines = [leftover.describe() for leftover in left]
        if left:
            lines.append("the operator removes its finalizers while it runs: delete such "
                         "objects before stopping it, or drop one by hand (its cleanup "
                         f"skipped): {finalizer_patch_command(left[0])}")
        return "; ".join(reasons + lines) or "nothing in it names a cause"


class TestCluster:
    """A real cluster the tests may change freely."""

    __test__ = False  # not a pytest test class

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.client = api_client(kubeconfig)
        self.api = Api(self.client)

    @classmethod
    def from_env(cls) -> TestCluster:
        """The cluster in OPERATOR_KIT_TEST_KUBECONFIG; `NoTestCluster` when unset or missing."""
        path = os.environ.get(KUBECONFIG_ENV)
        if not path:
            raise NoTestCluster(f"{KUBECONFIG_ENV} is not set. {HOW_TO_START}")
        if not os.path.exists(path):
            raise NoTestCluster(f"{KUBECONFIG_ENV}={path} does not exist. {HOW_TO_START}")
        cluster = cls(path)
        try:
            client.VersionApi(cluster.client).get_code(_request_timeout=10)
        except Exception as err:
            raise NoTestCluster(
                f"the cluster in {KUBECONFIG_ENV}={path} does not answer ({err}). {HOW_TO_START}"
            ) from err
        return cluster

    @staticmethod
    def required() -> bool:
        """True when ``OPERATOR_KIT_TEST_REQUIRE_KUBERNETES`` is set: a missing cluster then fails
        tests instead of skipping them."""
        return os.environ.get(REQUIRE_ENV, "").lower() not in ("", "0", "false", "no")

    def exists(self, path: str) -> bool:
        """True when a GET of the API path `path` finds an object (False on 404)."""
        try:
            self.api.get(path)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def namespace(self, prefix: str = "test") -> Namespace:
        """A fresh namespace ``<prefix>-<random>``, labelled as a test namespace; delete it when
        done."""
        name = f"{prefix}-{secrets.token_hex(3)}"
        core = client.CoreV1Api(self.client)
        core.create_namespace({"metadata": {"name": name, "labels": {TEST_LABEL: "true"}}})
        return Namespace(name, self)

    def ensure_namespace(self, name: str) -> Namespace:
        """The namespace `name`, created unless it exists already (not labelled as a
        test namespace: it is the caller's to keep or delete)."""
        try:
            client.CoreV1Api(self.client).create_namespace({"metadata": {"name": name}})
        except ApiException as err:
            if err.status != 409:
                raise
        return Namespace(name, self)

    def install_crd(self, crd_or_kind: Mapping[str, Any] | type, timeout: float = 60.0) -> Any:
        """Server-side apply a CRD (a dict, or a CustomResource class) and wait until served.

        A CRD of that name still being deleted (by an earlier test's clean-up, say) is
        waited out first: applying to it would not stop its deletion, and the CRD would
        vanish under the caller."""
        if isinstance(crd_or_kind, type):
            from operator_kit.manifests import crd as make_crd

            definition: Mapping[str, Any] = make_crd(crd_or_kind)
        else:
            definition = crd_or_kind
        name = definition["metadata"]["name"]
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

        def not_terminating() -> bool:
            try:
                return not self.api.get(path)["metadata"].get("deletionTimestamp")
            except ApiException as err:
                if err.status == 404:
                    return True
                raise

        try:
            eventually(timeout, not_terminating, message=f"CRD {name} being deleted is gone")
        except AssertionError as err:
            raise AssertionError(f"{err}; {self._held(definition)}") from None
        self.api.apply(definition, field_manager=FIELD_MANAGER)
        group = definition["spec"]["group"]
        plural = definition["spec"]["names"]["plural"]
        versions = [v["name"] for v in definition["spec"]["versions"] if v.get("served", True)]

        def established() -> Any:
            crd = self.api.get(path)
            conditions = {
                c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])
            }
            assert conditions.get("Established") == "True", f"conditions: {conditions}"
            return crd

        crd = eventually(timeout, established, message=f"CRD {name} Established")

        def served() -> bool:
            for version in versions:
                listing = self.api.get(f"/apis/{group}/{version}")
                plurals = {r["name"] for r in listing.get("resources", [])}
                assert plural in plurals, f"{group}/{version} serves {sorted(plurals)}"
            return True

        eventually(timeout, served, message=f"CRD {name} served")
        return crd

    def _held(self, definition: Mapping[str, Any]) -> str:
        """What holds a CRD being deleted: the objects of its kind still there."""
        from operator_kit.client.uninstall import Leftover, custom_kinds

        [(group, version, plural, kind)] = custom_kinds([definition])
        listing = self.api.get_or_none(f"/apis/{group}/{version}/{plural}") or {}
        held = [Leftover(kind, plural, group, i["metadata"].get("namespace"),
                         i["metadata"]["name"], tuple(i["metadata"].get("finalizers") or ()))
                for i in listing.get("items", [])]
        if not held:
            return "no object of it is left"
        return ("; ".join(h.describe() for h in held) + ": an operator stopped before they "
                "were deleted never removes their finalizers")


@contextmanager
def running(operator: Operator, cluster: TestCluster, *,
            sync_timeout: float = 30.0) -> Iterator[Operator]:
    """Run `operator` in this process against `cluster` for the duration of a with-block."""
    operator.use(cluster.client)
    operator.start()
    try:
        if operator.leader_election is None and not operator.wait_synced(sync_timeout):
            raise AssertionError(f"operator {operator.name}: caches did not sync within "
                                 f"{sync_timeout:g}s")
        yield operator
    finally:
        operator.stop(timeout=10)


def stop_process(process: subprocess.Popen[Any], timeout: float = 30.0) -> int:
    """SIGTERM `process` if it still runs, wait up to `timeout`, then SIGKILL it; its exit
    code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
