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

import collections
import json
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3
from kubernetes import client, config
from kubernetes.client import rest as kubernetes_rest
from kubernetes.client.exceptions import ApiException
from urllib3.connection import HTTPConnection

from operator_kit import metrics

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


METADATA_ONLY = ("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, "
                 "application/json")
"""An Accept header asking for only the object's metadata in a write's answer (a
``PartialObjectMetadata``; a server that cannot convert sends the object): for a write
whose caller needs the new resourceVersion, not the whole object back."""


class Api:
    """JSON requests to the API server over an ApiClient's connections; errors are
    `ApiError` (an ApiException whose message is one line: code, reason and the Status
    message)."""

    def __init__(self, client_: client.ApiClient) -> None:
        self.client = client_
        self._discovered: dict[tuple[str, str], Resource] = {}
        self._lock = threading.Lock()

    @property
    def client(self) -> client.ApiClient:
        """The ApiClient whose configuration and connections requests use."""
        return self._client

    @client.setter
    def client(self, client_: client.ApiClient) -> None:
        self._client = client_
        self._transport = Transport(client_)

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
        headers: Mapping[str, str] | None = None,
        decode: bool = True,
    ) -> Any:
        """Send one request; the decoded JSON answer, or the raw response when `stream`.

        `accept` asks for another representation (e.g. `METADATA_ONLY`); `headers` are
        sent as well, overriding ours. With ``decode=False`` the answer is read (so the
        connection goes back to the pool) but not decoded, and None returned: for a
        write whose answer nobody reads. A non-2xx answer raises ApiError (status,
        reason, body as str, headers); a TLS failure raises ApiError with status 0;
        connection errors and timeouts are urllib3's exceptions, as the generated
        client's are.
        """
        try:
            response = self._transport.send(
                method, path, query=query, body=body, content_type=content_type,
                accept=accept or "application/json", headers=headers, timeout=timeout,
                stream=stream,
            )
        except ApiException as err:  # the same error, saying what matters in one line
            raise ApiError.of(err) from None
        if stream:
            return response
        data = response.data
        return json.loads(data) if data and decode else None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)


    def get_or_none(self, path: str, **query: Any) -> Any:
        """GET `path`, or None when the API server answers 404 (not found)."""
        try:
            return self.get(path, **query)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
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


# -- the transport ---------------------------------------------------------------------
#
# Requests go out over the ApiClient's own urllib3 pool (so its TLS, proxy, keepalive
# and pool size settings hold) but are built here, from the Configuration's public
# settings: the generated client's `call_api` is private and changes shape between
# majors (kubernetes 37 dropped its `query_params`). Each request is counted in
# `rest_client_requests_total` / `rest_client_request_duration_seconds` (client-go's
# names) and in an in-process tally, `request_counts()`, for tests.

_counts: collections.Counter[tuple[str, str]] = collections.Counter()
_counts_lock = threading.Lock()


def request_counts() -> collections.Counter[tuple[str, str]]:
    """Requests sent through `Api.request` in this process so far, by (verb, path).

    The verb is the HTTP method, except ``WATCH`` for a GET with ``watch=true``; the path
    has no query string. A snapshot (a copy): take one before and one after, and
    subtract, to see what a piece of code sent to the API server.
    """
    with _counts_lock:
        return collections.Counter(_counts)


class Transport:
    """HTTP requests to the API server named by an ApiClient's Configuration."""

    def __init__(self, client_: client.ApiClient) -> None:
        self.client = client_
        self.configuration = client_.configuration
        self.host = urlsplit(str(self.configuration.host)).netloc or str(self.configuration.host)
        rest = getattr(client_, "rest_client", None)
        pool = getattr(rest, "pool_manager", None)
        if pool is None:  # not the generated client we know: a pool of our own, same settings
            pool = kubernetes_rest.RESTClientObject(self.configuration).pool_manager
        self.pool: urllib3.PoolManager = pool

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        headers: Mapping[str, str] | None = None,
        timeout: float | tuple[float, float] | None = 60.0,
        stream: bool = False,
    ) -> Any:
        """The urllib3 response to one request (unread when `stream`); ApiException if not 2xx."""
        method = method.upper()
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        sent = self._headers(params, accept)
        data: bytes | None = None
        if body is not None:
            data = _encode(self.client, body)
            sent["Content-Type"] = content_type
        sent.update(headers or {})
        url = str(self.configuration.host).rstrip("/") + path
        if params:
            url += "?" + urlencode(params)
        watch = method == "GET" and any(k == "watch" and v == "true" for k, v in params)
        with _counts_lock:
            _counts["WATCH" if watch else method, path] += 1
        options: dict[str, Any] = {}
        if isinstance(timeout, tuple):
            options["timeout"] = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        elif timeout:
            options["timeout"] = urllib3.Timeout(total=timeout)
        started = time.monotonic()
        code = "<error>"
        try:
            try:
                response = self.pool.request(method, url, body=data, headers=sent,
                                             preload_content=False, **options)
            except urllib3.exceptions.SSLError as err:
                raise ApiException(status=0, reason=f"{type(err).__name__}\n{err}") from err
            code = str(response.status)
            if not 200 <= response.status <= 299:
                raise _error(response)
            if not stream:
                try:
                    response.data  # noqa: B018 - read it all before the connection goes back
                finally:
                    response.release_conn()
            return response
        finally:
            metrics.REST_CLIENT_REQUESTS.labels(code, method, self.host).inc()
            metrics.REST_CLIENT_REQUEST_DURATION.labels(method, self.host).observe(
                time.monotonic() - started)

    def _headers(self, params: list[tuple[str, str]], accept: str) -> dict[str, str]:
        """The client's default headers (User-Agent), cookie and credentials, and Accept."""
        sent = {str(k): str(v) for k, v in (self.client.default_headers or {}).items()}
        cookie = getattr(self.client, "cookie", None)
        if cookie:
            sent["Cookie"] = str(cookie)
        # auth_settings() runs the Configuration's refresh hook, so expiring tokens renew.
        for setting in (self.configuration.auth_settings() or {}).values():
            if not setting.get("value"):
                continue
            if setting.get("in") == "header":
                sent[str(setting["key"])] = str(setting["value"])
            elif setting.get("in") == "query":
                params.append((str(setting["key"]), str(setting["value"])))
        sent["Accept"] = accept
        return sent


def _encode(client_: client.ApiClient, body: Any) -> bytes:
    """A request body as bytes: str/bytes as given, anything else (dicts, models) as JSON."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(client_.sanitize_for_serialization(body)).encode()


def _error(response: Any) -> ApiException:
    """The ApiException for a non-2xx answer, its body read and its connection released."""
    try:
        raw = response.data or b""
    finally:
        response.release_conn()
    err = ApiException(status=response.status, reason=response.reason)
    err.body = raw.decode("utf-8", "replace")
    err.headers = response.headers
    return err


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
    line = f"{err.status} {' '.join(str(err.reason or '').split())}".strip()
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
