"""`KubeconfigSecrets`: the fleet's members are Cluster API's kubeconfig Secrets in the hub.

Cluster API writes, for each workload cluster ``<cluster>`` it manages, a Secret
``<cluster>-kubeconfig`` in the Cluster's namespace of the management (hub) cluster: type
``cluster.x-k8s.io/secret``, the kubeconfig under the key ``value``, and the label
``cluster.x-k8s.io/cluster-name=<cluster>``. The same label is on the cluster's other
Secrets (``<cluster>-ca``, ``-etcd``, ``-sa``, ``-proxy``), so a Secret is a member only
when its name is the label's value plus ``-kubeconfig``.

The provider watches the Secrets its `selector` matches (one namespace, or all) with an
`Informer` of its own (thread ``watch-secrets``), and answers `clusters` from that cache,
so the fleet follows them at run time: a Secret created is a cluster joining, deleted one
leaving, its kubeconfig changed one rejoining (the `Cluster.version` is a digest of it).
The kubeconfig stays in memory (`Cluster.config`): it is never written to a file by
operator_kit (the official client puts ``*-data`` certificates in private temporary
files, mode 0600) and never logged — messages name the Secret, not what it holds.

The hub's RBAC follows from `hub_access`: list and watch on Secrets, in a Role of
`namespace` when one is given (least privilege), else in a ClusterRole.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from operator_kit.api.rbac import Rule
from operator_kit.client.transport import Api, Resource
from operator_kit.fleet.providers import Cluster, HubAccess, check_name
from operator_kit.runtime.watching import Informer

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
"""The label Cluster API puts on a cluster's Secrets: the cluster's name."""

SECRETS = Resource("", "v1", "secrets", "Secret", True)


class KubeconfigSecrets:
    """Every Cluster API kubeconfig Secret in the hub is a member cluster.

    - `namespace`: the namespace to watch (its Secrets' clusters keep their names), or
      None for all namespaces (a cluster is then named ``<namespace>.<cluster>``: Cluster
      API's names are unique per namespace only);
    - `selector`: the label selector of the Secrets (default: those with Cluster API's
      label), e.g. ``"cluster.x-k8s.io/cluster-name,fleet=payments"``;
    - `key`: the data key holding the kubeconfig (Cluster API's ``value``);
    - `api`: the hub's `Api`; `Fleet.of(operator, provider)` gives it the operator's.

    A Secret without the key, or whose key is not a kubeconfig, is skipped and named in
    `problems` (the fleet logs them once); the other Secrets still count. Until the
    Secrets have been listed (at most `sync_timeout` seconds), `clusters` raises, so the
    fleet keeps its members as they are."""

    def __init__(self, *, namespace: str | None = None, selector: str = CLUSTER_NAME_LABEL,
                 key: str = "value", api: Api | None = None,
                 sync_timeout: float = 10.0) -> None:
        self.namespace = namespace
        self.selector = selector
        self.key = key
        self.sync_timeout = sync_timeout
        self.problems: list[str] = []
        """Secrets skipped at the last look, each with the reason."""
        self._hub: Callable[[], Api] | None = (lambda: api) if api is not None else None
        self._stop = threading.Event()
        self._informer: Informer | None = None
        self._lock = threading.Lock()
        # (namespace, Secret name) -> its Cluster: each kubeconfig parsed once
        self._known: dict[tuple[str, str], Cluster] = {}

    def bind(self, hub: Callable[[], Api]) -> None:
        """Read the Secrets through `hub()` (called on first use) unless an `api` was
        given: `Fleet.of` passes the operator's."""
        if self._hub is None:
            self._hub = hub

    def hub_access(self) -> HubAccess:
        """List and watch on Secrets, in `namespace` (None: every namespace)."""
        return HubAccess((Rule([""], ["secrets"], ["list", "watch"]),), self.namespace)

    def clusters(self) -> dict[str, Cluster]:
        """The clusters whose kubeconfig Secrets are in the hub now."""
        informer = self._started()
        if not informer.synced.wait(self.sync_timeout):
            failing = informer.failing_for()
            raise RuntimeError(
                f"the kubeconfig Secrets ({informer.description}) are not listed yet after "
                f"{self.sync_timeout:g}s" + (f" (the list has failed for {failing:.0f}s: see "
                                              "the watch's log)" if failing else ""))
        found, self._known, self.problems = members(
            informer.objects(), qualified=self.namespace is None, key=self.key,
            known=self._known)
        return found

    def close(self) -> None:
        """Stop watching the Secrets and join the watch's thread (the fleet does, as it
        stops)."""
        self._stop.set()
        with self._lock:
            informer = self._informer
        if informer is not None:
            informer.interrupt()
            informer.join(10.0)

    def _started(self) -> Informer:
        with self._lock:
            if self._informer is None:
                if self._hub is None:
                    raise RuntimeError(
                        "KubeconfigSecrets has no hub to read the Secrets from: pass "
                        "api=Api(...), or make the fleet with Fleet.of(operator, provider), "
                        "which gives it the operator's")
                self._informer = Informer(self._hub(), SECRETS, stop=self._stop,
                                          namespace=self.namespace,
                                          label_selector=self.selector,
                                          transform=self._keep)
                self._informer.start()
            return self._informer

    def _keep(self, secret: dict[str, Any]) -> dict[str, Any]:
        """What the cache holds of a Secret: its identity, labels and the one key."""
        meta = secret.get("metadata") or {}
        data = secret.get("data") or {}
        return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid",
                                                  "resourceVersion", "labels") if k in meta},
                "data": {self.key: data[self.key]} if self.key in data else {}}


def members(secrets: Iterable[Mapping[str, Any]], *, qualified: bool, key: str = "value",
            known: Mapping[tuple[str, str], Cluster] | None = None,
            ) -> tuple[dict[str, Cluster], dict[tuple[str, str], Cluster], list[str]]:
    """The member clusters that `secrets` (Secrets as the API returns them) name: those
    named ``<label value>-kubeconfig`` (Cluster API's ``cluster.x-k8s.io/cluster-name``;
    without the label, any ``<cluster>-kubeconfig``), each named for its cluster —
    ``<namespace>.<cluster>`` when `qualified`. Returns them by name, by (namespace,
    Secret name) for the next call's `known` (a Secret whose kubeconfig did not change
    keeps its `Cluster`, not parsed again), and the problems of the Secrets skipped."""
    known = known or {}
    found: dict[str, Cluster] = {}
    by_secret: dict[tuple[str, str], Cluster] = {}
    problems: list[str] = []
    for secret in sorted(secrets, key=_where):
        namespace, secret_name = _where(secret)
        cluster = ((secret.get("metadata") or {}).get("labels") or {}).get(
            CLUSTER_NAME_LABEL) or secret_name.removesuffix("-kubeconfig")
        if secret_name != f"{cluster}-kubeconfig":
            continue  # the cluster's CA, etcd, service account keys...: not a member
        where = f"Secret {namespace}/{secret_name}"
        name = f"{namespace}.{cluster}" if qualified else cluster
        encoded = (secret.get("data") or {}).get(key)
        try:
            check_name(name, where)
            if not encoded:
                raise ValueError(f"{where} has no key {key!r}: put the cluster's kubeconfig "
                                 "there (Cluster API's format)")
            digest = hashlib.sha256(str(encoded).encode()).hexdigest()
            member = known.get((namespace, secret_name))
            if member is None or member.version != digest or member.name != name:
                member = Cluster(name, where, digest, _kubeconfig(where, key, encoded))
        except ValueError as err:
            problems.append(str(err))
            continue
        by_secret[(namespace, secret_name)] = found[name] = member
    return found, by_secret, problems


def _where(secret: Mapping[str, Any]) -> tuple[str, str]:
    meta = secret.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _kubeconfig(where: str, key: str, encoded: object) -> dict[str, Any]:
    """The kubeconfig document in a Secret's `key`; a ValueError that names the Secret and
    never quotes what it holds."""
    try:
        text = base64.b64decode(str(encoded), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError(f"{where}: {key} is not base64-encoded UTF-8 text") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ValueError(f"{where}: {key} is not valid YAML{at}") from None
    if not isinstance(document, dict) or not isinstance(document.get("clusters"), list):
        raise ValueError(f"{where}: {key} is not a kubeconfig (a mapping with clusters, "
                         "users and contexts)")
    return document
