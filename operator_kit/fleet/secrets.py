"""`KubeconfigSecrets`: the fleet's members are Cluster API's kubeconfig Secrets in the hub.

Cluster API writes, for each workload cluster ``<cluster>`` it manages, a Secret
``<cluster>-kubeconfig`` in the Cluster's namespace of the management (hub) cluster: type
``cluster.x-k8s.io/secret``, the kubeconfig under the key ``value``, and the label
``cluster.x-k8s.io/cluster-name=<cluster>``. The same label is on the cluster's other
Secrets (``<cluster>-ca``, ``-etcd``, ``-sa``, ``-proxy``), so a Secret is a member only
when its name is the label's value plus ``-kubeconfig``.

The provider watches the Secrets its `selector` matches in the namespaces it names (or,
asked explicitly, in all) with an `Informer` of its own per namespace (thread
``watch-secrets``), and answers `clusters` from those caches, so the fleet follows them
at run time: a Secret created is a cluster joining, deleted one leaving, its kubeconfig
changed one rejoining (the `Cluster.version` is a digest of it). The kubeconfig stays in
memory (`Cluster.config`): it is never written to a file by operator_kit (the official
client puts ``*-data`` certificates in private temporary files, mode 0600) and never
logged — messages name the Secret, not what it holds.

Whoever may write such a Secret chooses what the operator runs and reads: a kubeconfig
with ``exec`` runs its command in the operator, ``tokenFile`` sends a file of the
operator's host to the server it names. So a kubeconfig is checked before the client
sees it (`operator_kit.client.kubeconfig_risks`): one that carries exec, an
auth-provider, a file path, a proxy-url or insecure-skip-tls-verify is refused — its
cluster does not join — unless those categories are allowed (`allow`, or the operator's
``--insecure-kubeconfig``). Each refused Secret is one problem line (`problems`, logged
once by the fleet), a Warning Event ``KubeconfigRefused`` on the Secret (once per
version of it) and a count in ``operator_kit_fleet_kubeconfigs_refused{provider,reason}``.

The hub's RBAC follows from `hub_access`: list and watch on Secrets and writing Events,
in a Role of each namespace named; a ClusterRole only with ``all_namespaces=True``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import yaml

from operator_kit import metrics
from operator_kit.api.rbac import Rule
from operator_kit.client.events import RULE as EVENTS_RULE
from operator_kit.client.events import EventRecorder
from operator_kit.client.kubeconfig_risks import RISKS, ForeignKubeconfigError, check_foreign
from operator_kit.client.transport import Api, Resource
from operator_kit.fleet.providers import Cluster, HubAccess, check_name
from operator_kit.runtime.watching import Informer

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
"""The label Cluster API puts on a cluster's Secrets: the cluster's name."""

SECRETS = Resource("", "v1", "secrets", "Secret", True)

REFUSED_REASON = "KubeconfigRefused"
"""The reason of the Warning Event on a Secret whose kubeconfig is refused."""


class Refusal(NamedTuple):
    """A Secret that names no member: its problem line and what it was refused for (the
    categories of `RISKS` it carries, or ``("invalid",)``)."""

    problem: str
    reasons: tuple[str, ...]


class Reading(NamedTuple):
    """What `members` read: the clusters by name, by (namespace, Secret name) for the
    next call's `known`, the problems as lines, and the refusals by (namespace, Secret
    name)."""

    found: dict[str, Cluster]
    by_secret: dict[tuple[str, str], Cluster]
    problems: list[str]
    refused: dict[tuple[str, str], Refusal]


class KubeconfigSecrets:
    """Every Cluster API kubeconfig Secret in the hub's named namespaces is a member.

    - `namespace`: the namespace to watch, or several (a list); the clusters of one keep
      their names, of several are named ``<namespace>.<cluster>`` (Cluster API's names
      are unique per namespace only);
    - `all_namespaces`: watch every namespace instead (clusters named
      ``<namespace>.<cluster>``), with a ClusterRole that reads every Secret of the hub.
      Only when asked: whoever may create a Secret in any namespace then chooses the
      clusters and kubeconfigs the operator uses;
    - `selector`: the label selector of the Secrets (default: those with Cluster API's
      label), e.g. ``"cluster.x-k8s.io/cluster-name,fleet=payments"``;
    - `key`: the data key holding the kubeconfig (Cluster API's ``value``);
    - `allow`: categories of `operator_kit.client.kubeconfig_risks.RISKS` the
      kubeconfigs may carry (default: none; `Fleet.of` adds the operator's
      ``--insecure-kubeconfig``);
    - `api`: the hub's `Api`; `Fleet.of(operator, provider)` gives it the operator's.

    A Secret without the key, whose key is not a kubeconfig, or whose kubeconfig is
    refused, is skipped and named in `problems` (the fleet logs them once); the other
    Secrets still count. Until the Secrets have been listed (at most `sync_timeout`
    seconds), `clusters` raises, so the fleet keeps its members as they are."""

    def __init__(self, *, namespace: str | Sequence[str] | None = None,
                 all_namespaces: bool = False, selector: str = CLUSTER_NAME_LABEL,
                 key: str = "value", allow: Iterable[str] = (), api: Api | None = None,
                 sync_timeout: float = 10.0) -> None:
        names = [namespace] if isinstance(namespace, str) else list(namespace or ())
        if all_namespaces and names:
            raise ValueError("KubeconfigSecrets: give namespace= or all_namespaces=True, "
                             "not both")
        if not names and not all_namespaces:
            raise ValueError(
                "KubeconfigSecrets: name the namespaces of the kubeconfig Secrets "
                "(namespace='capi-clusters', or a list): the operator may read Secrets "
                "there only. all_namespaces=True reads every Secret of the hub, and "
                "whoever may create a Secret in any namespace then chooses the clusters "
                "the operator joins")
        self.namespaces: tuple[str, ...] | None = (
            None if all_namespaces else tuple(dict.fromkeys(names)))
        self.selector = selector
        self.key = key
        self.allow = frozenset(allow)
        self.sync_timeout = sync_timeout
        self.problems: list[str] = []
        """Secrets skipped at the last look, each with the reason."""
        self._hub: Callable[[], Api] | None = (lambda: api) if api is not None else None
        self._reporter = "kubeconfig-secrets"
        self._operator_allows: Callable[[], Iterable[str]] = tuple
        self._stop = threading.Event()
        self._informers: list[Informer] = []
        self._lock = threading.Lock()
        # (namespace, Secret name) -> its Cluster: each kubeconfig parsed once
        self._known: dict[tuple[str, str], Cluster] = {}
        self._announced: dict[tuple[str, str], str] = {}  # refused: resourceVersion
        self._events: EventRecorder | None = None

    @property
    def namespace(self) -> str | None:
        """The one namespace watched; None when several, or all, are."""
        return self.namespaces[0] if self.namespaces and len(self.namespaces) == 1 else None

    def bind(self, hub: Callable[[], Api]) -> None:
        """Read the Secrets through `hub()` (called on first use) unless an `api` was
        given: `Fleet.of` passes the operator's."""
        if self._hub is None:
            self._hub = hub

    def bind_operator(self, name: str, allows: Callable[[], Iterable[str]]) -> None:
        """Report Events as operator `name`, and allow, beside `allow`, what `allows()`
        (the operator's ``--insecure-kubeconfig``) names: `Fleet.of` calls it."""
        self._reporter = name
        self._operator_allows = allows

    def allowed(self) -> frozenset[str]:
        """The categories of risky kubeconfig content allowed now: `allow` and the
        operator's."""
        return self.allow | frozenset(self._operator_allows())

    def hub_access(self) -> HubAccess:
        """List and watch on Secrets, and Events on them, in each namespace named (None:
        every namespace, when asked with ``all_namespaces=True``)."""
        return HubAccess((Rule([""], ["secrets"], ["list", "watch"]), EVENTS_RULE),
                         self.namespaces)

    def clusters(self) -> dict[str, Cluster]:
        """The clusters whose kubeconfig Secrets are in the hub now."""
        informers = self._started()
        objects: list[Mapping[str, Any]] = []
        for informer in informers:
            if not informer.synced.wait(self.sync_timeout):
                failing = informer.failing_for()
                raise RuntimeError(
                    f"the kubeconfig Secrets ({informer.description}) are not listed yet "
                    f"after {self.sync_timeout:g}s" + (
                        f" (the list has failed for {failing:.0f}s: see the watch's log)"
                        if failing else ""))
            objects += informer.objects()
        reading = members(objects, qualified=self.namespace is None, key=self.key,
                          known=self._known, allow=self.allowed())
        self._known, self.problems = reading.by_secret, reading.problems
        self._report(reading.refused, objects)
        return reading.found

    def close(self) -> None:
        """Stop watching the Secrets and join the watches' threads (the fleet does, as
        it stops)."""
        self._stop.set()
        with self._lock:
            informers = list(self._informers)
        for informer in informers:
            informer.interrupt()
        for informer in informers:
            informer.join(10.0)

    def _started(self) -> list[Informer]:
        with self._lock:
            if not self._informers:
                if self._hub is None:
                    raise RuntimeError(
                        "KubeconfigSecrets has no hub to read the Secrets from: pass "
                        "api=Api(...), or make the fleet with Fleet.of(operator, provider), "
                        "which gives it the operator's")
                hub = self._hub()
                self._informers = [
                    Informer(hub, SECRETS, stop=self._stop, namespace=namespace,
                             label_selector=self.selector, transform=self._keep)
                    for namespace in (self.namespaces or (None,))]
                for informer in self._informers:
                    informer.start()
            return list(self._informers)

    def _keep(self, secret: dict[str, Any]) -> dict[str, Any]:
        """What the cache holds of a Secret: its identity, labels and the one key."""
        meta = secret.get("metadata") or {}
        data = secret.get("data") or {}
        return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid",
                                                  "resourceVersion", "labels") if k in meta},
                "data": {self.key: data[self.key]} if self.key in data else {}}

    def _report(self, refused: Mapping[tuple[str, str], Refusal],
                secrets: Iterable[Mapping[str, Any]]) -> None:
        """The refusals in the metric, and a Warning Event on each Secret refused (of
        `secrets`, as cached: with its uid and resourceVersion), once per version."""
        counts = dict.fromkeys((*RISKS, "invalid"), 0)
        for refusal in refused.values():
            for reason in refusal.reasons:
                counts[reason] += 1
        for reason, count in counts.items():
            metrics.FLEET_KUBECONFIGS_REFUSED.labels(self._reporter, reason).set(count)
        self._announced = {k: v for k, v in self._announced.items() if k in refused}
        versions = {_where(secret): secret for secret in secrets}
        for where, refusal in refused.items():
            secret = versions.get(where)
            meta = (secret or {}).get("metadata") or {}
            version = str(meta.get("resourceVersion", ""))
            if secret is None or self._announced.get(where) == version:
                continue
            self._announced[where] = version
            if self._events is None and self._hub is not None:
                self._events = EventRecorder(self._hub(), self._reporter)
            if self._events is not None:
                self._events.event({"apiVersion": "v1", "kind": "Secret", "metadata": meta},
                                   warning=True, reason=REFUSED_REASON, action="JoinCluster",
                                   note=refusal.problem)


def members(secrets: Iterable[Mapping[str, Any]], *, qualified: bool, key: str = "value",
            known: Mapping[tuple[str, str], Cluster] | None = None,
            allow: Iterable[str] = ()) -> Reading:
    """The member clusters that `secrets` (Secrets as the API returns them) name: those
    named ``<label value>-kubeconfig`` (Cluster API's ``cluster.x-k8s.io/cluster-name``;
    without the label, any ``<cluster>-kubeconfig``), each named for its cluster —
    ``<namespace>.<cluster>`` when `qualified` — and whose kubeconfig carries nothing of
    `RISKS` beyond `allow`. Returns a `Reading`: a Secret whose kubeconfig did not change
    keeps its `Cluster` (in `known`), not parsed again."""
    known = known or {}
    allowed = frozenset(allow)
    reading = Reading({}, {}, [], {})
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
            if member is None or member.version != digest or member.name != name \
                    or not member.allow <= allowed:
                config = _kubeconfig(where, key, encoded)
                check_foreign(config, where, allow=allowed)  # before any client sees it
                member = Cluster(name, where, digest, config, allowed)
        except ValueError as err:
            reasons = (err.categories if isinstance(err, ForeignKubeconfigError)
                       else ("invalid",))
            reading.problems.append(str(err))
            reading.refused[(namespace, secret_name)] = Refusal(str(err), reasons)
            continue
        reading.by_secret[(namespace, secret_name)] = reading.found[name] = member
    return reading


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
