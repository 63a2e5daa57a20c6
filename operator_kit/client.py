"""Connecting to the API server: an ``ApiClient`` from a kubeconfig or the pod's ServiceAccount.

`api_client()` tries, in order: an explicit kubeconfig path, ``$KUBECONFIG``, the
in-cluster ServiceAccount (when ``KUBERNETES_SERVICE_HOST`` is set), then
``~/.kube/config``. When none works the error says which were tried and what to do.
Its connections use TCP keepalive (probes after 30 s idle, every 10 s, 3 lost ones close
it): a call on a connection whose peer vanished (a node or load balancer gone without a
word) fails in about a minute instead of blocking its thread for good, as a call without
a timeout of its own, in a user's reconcile say, otherwise would.
`current_namespace()` is the namespace this process runs in (the pod's, the
kubeconfig context's, or ``default``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.connection import HTTPConnection

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ConfigurationError(RuntimeError):
    """No usable cluster configuration was found."""


def api_client(
    kubeconfig: str | os.PathLike[str] | None = None, *, pool_size: int = 32
) -> client.ApiClient:
    """An ApiClient for the cluster named by `kubeconfig`, the environment, or the pod."""
    configuration = client.Configuration()
    tried: list[str] = []
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        path = str(path).split(os.pathsep)[0]
        if not Path(path).exists():
            raise ConfigurationError(
                f"kubeconfig {path} does not exist. Point KUBECONFIG at a valid file, or start "
                "a local control plane: python -m operator_kit.localcluster up"
            )
        config.load_kube_config(config_file=path, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        default = Path.home() / ".kube" / "config"
        tried.append(f"KUBECONFIG (unset), in-cluster (not in a pod), {default}")
        if not default.exists():
            raise ConfigurationError(
                "no cluster configuration found: tried " + "; ".join(tried) + ". Set KUBECONFIG, "
                "or start a local control plane: python -m operator_kit.localcluster up"
            )
        config.load_kube_config(config_file=str(default), client_configuration=configuration)
    # Watches and workers share one client; size the connection pool for them.
    configuration.connection_pool_maxsize = pool_size
    configuration.socket_options = keepalive_socket_options()
    return client.ApiClient(configuration)


KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3


def keepalive_socket_options() -> list[tuple[int, int, int | bytes]]:
    """urllib3's default socket options plus TCP keepalive (see the module docstring)."""
    options: list[tuple[int, int, int | bytes]] = list(HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                        ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        if hasattr(socket, name):  # Linux; macOS has only some of them
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def current_namespace(kubeconfig: str | os.PathLike[str] | None = None) -> str:
    """The namespace this process belongs to: the pod's, the kubeconfig context's, or default."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    if _SA_NAMESPACE.exists():
        return _SA_NAMESPACE.read_text().strip()
    try:
        _, active = config.list_kube_config_contexts(
            config_file=str(kubeconfig or os.environ.get("KUBECONFIG") or "") or None
        )
    except (config.ConfigException, OSError, TypeError):
        return "default"
    namespace = (active or {}).get("context", {}).get("namespace")
    return str(namespace) if namespace else "default"


# -- a thin JSON layer over the ApiClient --------------------------------------------
#
# The generated typed APIs cover built-in kinds one method at a time; operators need
# the same few verbs on any kind (custom or built-in, given as a dict). `Resource` names
# a kind's REST endpoint, `Api` sends JSON to it through the ApiClient (so auth,
# TLS and token refresh stay the client's), and discovery maps apiVersion+kind to
# the endpoint once per client.


@dataclass(frozen=True)
class Resource:
    """A kind's REST endpoint: ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


class Api:
    """JSON requests to the API server through an ApiClient; errors are `ApiError` (an
    ApiException whose message is one line: code, reason and the Status message)."""

    def __init__(self, client_: client.ApiClient) -> None:
        self.client = client_
        self._discovered: dict[tuple[str, str], Resource] = {}
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = 60.0,
        stream: bool = False,
        accept: str | None = None,
    ) -> Any:
        """Send one request; the decoded JSON answer, or the raw response when `stream`.

        `accept` asks for another representation, e.g. metadata only
        (``application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1``)."""
        headers = {"Accept": accept or "application/json", "Content-Type": content_type}
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        try:
            response = self.client.call_api(
                path,
                method,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout,
            )
        except ApiException as err:  # the same error, saying what matters in one line
            raise ApiError.of(err) from None
        if stream:
            return response
        data = response.data
        return json.loads(data) if data else None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Server-side apply `obj` (a full object as a dict) as `field_manager`."""
        resource = self.resource_for(str(obj["apiVersion"]), str(obj["kind"]))
        meta = obj.get("metadata", {})
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        query: dict[str, Any] = {"fieldManager": field_manager, "force": force or None}
        if dry_run:
            query["dryRun"] = "All"
        return self.request(
            "PATCH", path, query=query, body=obj, content_type="application/apply-patch+yaml"
        )

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The REST endpoint for a kind, found by discovery once per client."""
        key = (api_version, kind)
        with self._lock:
            found = self._discovered.get(key)
        if found is not None:
            return found
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        try:
            listing = self.get(path)
        except ApiException as err:
            if err.status == 404:
                raise LookupError(
                    f"the API server does not serve {api_version}: is its "
                    "CustomResourceDefinition installed?"
                ) from err
            raise
        with self._lock:
            for item in listing.get("resources", []):
                name = str(item["name"])
                if "/" in name:
                    continue
                self._discovered[(api_version, str(item["kind"]))] = Resource(
                    group, version, name, str(item["kind"]), bool(item["namespaced"])
                )
            found = self._discovered.get(key)
        if found is None:
            raise LookupError(f"the API server serves no kind {kind} in {api_version}")
        return found


THROTTLE_RETRIES = 10
"""How often one request is retried after 429 Too Many Requests (client-go's number)."""


def throttle_delay(err: ApiException) -> float:
    """The Retry-After of a 429 answer in seconds (1 s when absent; at most 10 s)."""
    try:
        seconds = float((err.headers or {}).get("Retry-After", 1))
    except (TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.1), 10.0)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- errors users read -------------------------------------------------------------------

_FORBIDDEN = re.compile(r'cannot (?P<verb>[\w]+) resource "(?P<resource>[^"]+)" in API group '
                        r'"(?P<group>[^"]*)"')


def error_message(err: BaseException) -> str:
    """One line saying what went wrong: ``"<code> <reason>: <the Status message>"`` for
    an API error (not its HTTP headers), ``"<Type>: <message>"`` otherwise; a 403 adds
    the `Rule` that would grant what was refused."""
    if not isinstance(err, ApiException):
        text = str(err).strip().splitlines()
        return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")
    return _api_error_message(err)


def _api_error_message(err: Any) -> str:
    message = ""
    body = err.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body:
        try:
            status = json.loads(body)
            message = str(status.get("message") or "") if isinstance(status, dict) else ""
        except ValueError:
            message = body.strip().splitlines()[0][:300] if body.strip() else ""
    line = f"{err.status} {err.reason or ''}".strip()
    if message:
        line += f": {' '.join(message.split())}"
    if err.status == 403:
        found = _FORBIDDEN.search(message)
        if found:
            line += (f" — grant it with Rule([{found['group']!r}], "
                     f"[{found['resource']!r}], [{found['verb']!r}]) in the controller's "
                     "`rules`, then regenerate the manifests")
    return line


class ApiError(ApiException):  # type: ignore[misc]  # the client is untyped
    """An `ApiException` whose ``str()`` is one line: ``"404 Not Found: <message>"``."""

    @classmethod
    def of(cls, err: ApiException) -> ApiError:
        if isinstance(err, ApiError):
            return err
        made = cls(status=err.status, reason=err.reason)
        made.body, made.headers = err.body, err.headers
        return made

    def __str__(self) -> str:
        return error_message(self)
