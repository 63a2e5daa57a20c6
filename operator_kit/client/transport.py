"""Connecting to the API server: an ``ApiClient`` from a kubeconfig or the pod's ServiceAccount.

`api_client()` tries, in order: an explicit kubeconfig path, ``$KUBECONFIG``, the
in-cluster ServiceAccount (when ``KUBERNETES_SERVICE_HOST`` is set), then
``~/.kube/config``. When none works the error says which were tried and what to do. A
path may be a list (``KUBECONFIG=a:b``), merged as kubectl merges it
(`operator_kit.client.kubeconfig`).
Its connections use TCP keepalive (probes after 30 s idle, every 10 s, 3 lost ones close
it): a call on a connection whose peer vanished (a node or load balancer gone without a
word) fails in about a minute instead of blocking its thread for good, as a call without
a timeout of its own, in a user's reconcile say, otherwise would.
`current_namespace()` is the namespace this process runs in (the pod's, the
kubeconfig context's, or ``default``).

`Api.request` sends a request the API server refused with a 429 (or a 5xx) and a
``Retry-After`` again after that many seconds, up to `MAX_RETRIES` times within the
request's timeout, as client-go does.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import random
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

from operator_kit import metrics, tracing
from operator_kit.client import deadlines
from operator_kit.client import kubeconfig as kubeconfig_files
from operator_kit.client.kubeconfig import ConfigurationError as ConfigurationError

log = logging.getLogger("operator_kit.client")

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def api_client(
    kubeconfig: str | os.PathLike[str] | None = None, *, pool_size: int = 32
) -> client.ApiClient:
    """An ApiClient for the cluster named by `kubeconfig`, the environment, or the pod.

    `kubeconfig` and ``$KUBECONFIG`` may name several files joined by ``os.pathsep``
    (``a:b``): they are merged as kubectl merges them (`operator_kit.client.kubeconfig`;
    missing files skipped, the first to define a name wins). `ConfigurationError` when
    none exists or one is not a kubeconfig.
    """
    configuration = client.Configuration()
    paths = kubeconfig or os.environ.get("KUBECONFIG")
    if paths:
        _configure(kubeconfig_files.load(paths), configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        default = Path.home() / ".kube" / "config"
        if not default.exists():
            raise ConfigurationError(
                f"no cluster configuration found: tried KUBECONFIG (unset), in-cluster (not "
                f"in a pod), {default}. Set KUBECONFIG, or start a local control plane: "
                "python -m operator_kit.localcluster up"
            )
        _configure(kubeconfig_files.load(default), configuration)
    # Watches and workers share one client; size the connection pool for them.
    configuration.connection_pool_maxsize = pool_size
    configuration.socket_options = keepalive_socket_options()
    return client.ApiClient(configuration)


def _configure(loaded: kubeconfig_files.Kubeconfig, configuration: client.Configuration) -> None:
    """Set `configuration` from a loaded kubeconfig. One file is loaded by the official
    client from the file itself, so that a token its auth provider refreshes is written
    back there; a merged list from the merged document (the paths in it absolute). What
    the official client refuses is a `ConfigurationError` naming the files, in one line."""
    kubeconfig_files.check_connectable(loaded)
    try:
        if len(loaded.files) == 1:
            config.load_kube_config(config_file=str(loaded.files[0]),
                                    client_configuration=configuration)
        else:
            config.load_kube_config_from_dict(loaded.config, client_configuration=configuration,
                                              persist_config=False)
    except (config.ConfigException, AttributeError, KeyError, TypeError, ValueError) as err:
        files = os.pathsep.join(map(str, loaded.files))
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ConfigurationError(f"kubeconfig {files} cannot be used: {reason}") from None


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
    paths = kubeconfig or os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config"
    try:
        context = kubeconfig_files.load(paths).current_context
    except ConfigurationError:
        return "default"
    namespace = (context or {}).get("namespace")
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

        A 429, or a 5xx, that carries ``Retry-After`` is sent again after that many
        seconds, as client-go does (see `retry_delay`), whatever the verb: the server
        did not process it. At most `MAX_RETRIES` times, and never past a number
        `timeout` (the whole request's deadline, as client-go's request timeout is; each
        attempt gets the time left); the last answer is raised. Not when `stream`: a
        watch's caller (the informer) waits out the Retry-After itself, where it can be
        stopped.
        """
        deadline = (time.monotonic() + timeout
                    if isinstance(timeout, int | float) and timeout else None)
        attempt = 1
        while True:
            left = timeout if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                response = self._transport.send(
                    method, path, query=query, body=body, content_type=content_type,
                    accept=accept or "application/json", headers=headers, timeout=left,
                    stream=stream, attempt=attempt,
                )
                break
            except ApiException as err:  # the same error, saying what matters in one line
                delay = None if stream or attempt > MAX_RETRIES else retry_delay(err)
                if delay is None or (deadline is not None
                                     and time.monotonic() + delay >= deadline):
                    raise ApiError.of(err) from None
                log.debug("%s %s: %s %s, retry %d of %d in %.2fs (Retry-After %s)",
                          method.upper(), path, err.status, err.reason, attempt,
                          MAX_RETRIES, delay, (err.headers or {}).get("Retry-After"))
                time.sleep(delay)
                attempt += 1
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
# majors (kubernetes 37 dropped its `query_params`). Each attempt (a retry after a
# Retry-After is one more) is counted in `rest_client_requests_total` /
# `rest_client_request_duration_seconds`, each retry in `rest_client_request_retries_total`
# (client-go's names), and in an in-process tally, `request_counts()`, for tests.

_counts: collections.Counter[tuple[str, str]] = collections.Counter()
_counts_lock = threading.Lock()


def request_counts() -> collections.Counter[tuple[str, str]]:
    """Requests sent through `Api.request` in this process so far, by (verb, path);
    each retry after a Retry-After counts as one more.

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
        self.retries = urllib3_retries(getattr(pool, "connection_pool_kw", {}).get("retries"))
        self.reaped = deadlines.use_reaper(pool)  # requests wait on blocking sockets
        # (code, method) -> the children of the request counter and histogram (`_metrics`)
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}

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
        attempt: int = 1,
    ) -> Any:
        """The urllib3 response to one request (unread when `stream`); ApiException if not
        2xx. An `attempt` after the first also counts in ``rest_client_request_retries``."""
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
        started = time.monotonic()
        code, span = "<error>", tracing.start_call(method, path, sent)
        try:
            try:  # a deadline kept by the reaper, or a socket timeout (deadlines.py)
                response = deadlines.request(
                    self.pool, method, url, timeout, reaped=self.reaped and not stream,
                    body=data, headers=sent, preload_content=False, retries=self.retries)
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
            tracing.end_call(span, code)
            requests, duration = self._metrics(code, method)
            requests.inc()
            if attempt > 1:
                metrics.REST_CLIENT_REQUEST_RETRIES.labels(code, method, self.host).inc()
            duration.observe(time.monotonic() - started)

    def _metrics(self, code: str, method: str) -> tuple[Any, Any]:
        """The request counter's and histogram's children, looked up once (not per request)."""
        children = self._children.get((code, method))
        if children is None:  # two threads may both look up: the same children
            children = self._children[code, method] = (
                metrics.REST_CLIENT_REQUESTS.labels(code, method, self.host),
                metrics.REST_CLIENT_REQUEST_DURATION.labels(method, self.host))
        return children

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


def urllib3_retries(configured: Any) -> Any:
    """urllib3's retries as the Configuration sets them (``retries``; by default urllib3's
    3), less their own answer-based retries: urllib3 would otherwise send a GET, PUT or
    DELETE refused with a Retry-After again up to three times itself, unseen by the
    metrics and waiting as long as the server says. `Api.request` does that instead.
    Connection and read failures are still urllib3's to retry."""
    if configured is False:
        return False
    if configured is None or configured is True:
        configured = urllib3.Retry.DEFAULT
    elif isinstance(configured, int):
        configured = urllib3.Retry.from_int(configured)
    if isinstance(configured, urllib3.Retry):
        return configured.new(status=0, status_forcelist=(), respect_retry_after_header=False)
    return configured


def _encode(client_: client.ApiClient, body: Any) -> bytes:
    """A request body as bytes: str/bytes as given, anything else (dicts, models) as JSON:
    the client's ``sanitize_for_serialization`` runs only on what JSON cannot hold
    (models, datetimes...), so the body's dicts and lists are not all copied first."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()

    def sanitized(value: Any) -> Any:
        result = client_.sanitize_for_serialization(value)
        if result is value:  # nothing JSON can hold (bytes, say): json's own TypeError
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
        return result

    return json.dumps(body, default=sanitized).encode()


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


MAX_RETRIES = 10
"""How many times `Api.request` sends a request again after a Retry-After (client-go's
default ``maxRetries``)."""

MAX_RETRY_AFTER = 10.0
"""The longest one wait after a Retry-After, in seconds, whatever the server asks."""

RETRY_JITTER = 0.2
"""Each wait is Retry-After times 1 to 1 + this, at random: requests refused together do
not all come back in the same instant (client-go spreads them with its client-side rate
limiter, which operator_kit does not have)."""


def retry_after(err: ApiException) -> float | None:
    """The ``Retry-After`` of an answer in seconds, when it is a number of seconds
    (client-go's ``retryAfterSeconds``; a date is not one); None otherwise."""
    value = (err.headers or {}).get("Retry-After")
    try:
        seconds = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def retry_delay(err: ApiException) -> float | None:
    """How long to wait before sending a refused request again, or None when it is not
    to be sent again: client-go's ``checkWait`` (a 429 or a 5xx that carries a
    Retry-After in seconds), at most `MAX_RETRY_AFTER`, spread by `RETRY_JITTER`."""
    status = err.status or 0
    if not (status == 429 or status >= 500):
        return None
    seconds = retry_after(err)
    if seconds is None:
        return None
    return min(seconds, MAX_RETRY_AFTER) * (1 + RETRY_JITTER * random.random())


def throttle_delay(err: ApiException) -> float:
    """The Retry-After of a 429 answer in seconds (1 s when absent; at most 10 s)."""
    seconds = retry_after(err)
    return min(max(1.0 if seconds is None else seconds, 0.1), MAX_RETRY_AFTER)


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
        if getattr(err, "hint", None):  # the caller knows better what to grant
            line += f" — {err.hint}"
        elif found:
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
        made.hint = getattr(err, "hint", None)  # a 403's: what to grant, if not the Rule
        return made

    def __str__(self) -> str:
        return error_message(self)
