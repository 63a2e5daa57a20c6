"""Cluster providers: which clusters are members of the fleet, now.

A provider answers one question, `ClusterProvider.clusters`: the member clusters at
this moment, by name, each with the kubeconfig that reaches it. The fleet supervisor
(`operator_kit.fleet.supervisor`) asks it every second and compares the answer with the
clusters it runs: a new name is a cluster joining, a missing one a cluster leaving, and
a changed `Cluster` (another kubeconfig, or the same file rewritten) leaves and joins
again. So a provider needs no threads or callbacks of its own — it is a snapshot.

- `StaticClusters`: a fixed mapping of names to kubeconfig paths.
- `KubeconfigDirectory`: every kubeconfig file in a directory; the file's name without
  its extension is the cluster's name. Adding a file while the operator runs joins a
  cluster; removing it leaves.
- `KubeconfigSecrets` (`operator_kit.fleet.secrets`): Cluster API's kubeconfig Secrets in
  the hub cluster, watched; its `Cluster`s hold the kubeconfig in memory (`config`).

A provider that reads the hub cluster says what it needs there with `hub_access`
(`HubAccess`): the hub's manifests grant exactly that (`operator_kit.manifests`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as kube_config

from operator_kit.api.rbac import Rule
from operator_kit.client.kubeconfig_risks import check_foreign
from operator_kit.client.transport import api_client, keepalive_socket_options

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


SECRET_FIELDS = ("token", "password", "client-key-data", "client-certificate-data",
                 "certificate-authority-data")
"""The fields of a kubeconfig's users and clusters never shown in a message."""


@dataclass(frozen=True)
class Cluster:
    """One member cluster: its `name` and the `kubeconfig` file that reaches it — or,
    with `config`, the kubeconfig document itself, held in memory only (a Secret's), and
    `kubeconfig` then says where it came from (``Secret hub/east-kubeconfig``) for logs.

    `version` tells two readings of the same kubeconfig apart (the directory provider
    uses its file's modification time and size, the Secrets provider a digest): a
    changed version makes the cluster rejoin.

    An in-memory `config` does not come from the operator's own files, so it may carry
    nothing of `operator_kit.client.kubeconfig_risks.RISKS` (exec, auth-provider, file
    paths, proxy-url, insecure-skip-tls-verify) beyond the categories in `allow`: it is
    checked before the kubernetes client sees it, as a provider should have checked it
    before naming the cluster."""

    name: str
    kubeconfig: str
    version: str = ""
    config: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    allow: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def api_client(self, *, pool_size: int) -> k8s.ApiClient:
        """A new ApiClient that reaches the cluster (its connection pool `pool_size`). An
        in-memory kubeconfig is never written out, and a message about one that cannot
        be used names where it came from, never its credentials."""
        if self.config is None:
            return api_client(self.kubeconfig, pool_size=pool_size)
        # Before the client loads it: loading runs exec commands and reads files.
        check_foreign(self.config, f"cluster {self.name}: the kubeconfig of "
                      f"{self.kubeconfig}", allow=self.allow)
        configuration = k8s.Configuration()
        try:
            # Certificate data goes to private temporary files (mode 0600), as the
            # official client does for every kubeconfig with *-data fields.
            kube_config.load_kube_config_from_dict(dict(self.config),
                                                   client_configuration=configuration,
                                                   persist_config=False)
        except (kube_config.ConfigException, AttributeError, KeyError, TypeError,
                ValueError) as err:
            reason = redact(" ".join(str(err).split()) or type(err).__name__, self.config)
            raise ValueError(f"cluster {self.name}: the kubeconfig of {self.kubeconfig} "
                             f"cannot be used: {reason}") from None
        configuration.connection_pool_maxsize = pool_size
        configuration.socket_options = keepalive_socket_options()
        return k8s.ApiClient(configuration)


def redact(message: str, config: Mapping[str, Any]) -> str:
    """`message` with every credential of kubeconfig `config` (`SECRET_FIELDS` of its
    users and clusters) replaced by ``<redacted>``."""
    for section, body in (("users", "user"), ("clusters", "cluster")):
        for entry in config.get(section) or ():
            values = (entry.get(body) or {}) if isinstance(entry, Mapping) else {}
            if not isinstance(values, Mapping):
                continue
            for name in SECRET_FIELDS:
                value = values.get(name)
                if isinstance(value, str) and len(value) >= 4:
                    message = message.replace(value, "<redacted>")
    return message


@dataclass(frozen=True)
class HubAccess:
    """What a provider reads in the hub cluster: `rules`, in each of `namespaces` (a Role
    and RoleBinding in each; one name is taken as a tuple of one), or in every namespace
    (None: a ClusterRole — for Secrets, whoever may create one in any namespace then
    holds what the provider reads)."""

    rules: tuple[Rule, ...]
    namespaces: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.namespaces, str):
            object.__setattr__(self, "namespaces", (self.namespaces,))


class ClusterProvider(Protocol):
    """Where the fleet's member clusters come from."""

    def clusters(self) -> dict[str, Cluster]:
        """The member clusters now, by name."""
        ...


def check_name(name: str, where: str) -> str:
    """`name` if it can name a cluster (lower case DNS label characters), else a
    ValueError that says where it came from and what would do."""
    if not _NAME.match(name) or len(name) > 63:
        raise ValueError(f"{where}: {name!r} cannot name a cluster: use lower case letters, "
                         "digits, '-' and '.', starting and ending with a letter or digit "
                         "(at most 63 characters)")
    return name


class StaticClusters:
    """A fixed set of clusters: ``StaticClusters({"east": "/etc/fleet/east.yaml"})``."""

    def __init__(self, kubeconfigs: Mapping[str, str | os.PathLike[str]]) -> None:
        self._clusters = {
            check_name(name, "StaticClusters"): Cluster(name, os.fspath(path))
            for name, path in kubeconfigs.items()}

    def clusters(self) -> dict[str, Cluster]:
        """The same clusters every time."""
        return dict(self._clusters)


class KubeconfigDirectory:
    """Every kubeconfig file in `directory` is a member cluster, named for the file.

    ``east.yaml``, ``east.yml``, ``east.kubeconfig`` and ``east`` all name cluster
    ``east``; hidden files (a leading ``.``, as editors and ``kubectl`` write while
    saving) and subdirectories are ignored, and so are files whose name cannot name a
    cluster (logged once by the supervisor as a problem of this provider). A missing
    directory is an empty fleet, not an error: it may be a volume still being mounted."""

    SUFFIXES = (".yaml", ".yml", ".kubeconfig", ".conf")

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.problems: list[str] = []
        """Files skipped at the last look, each with the reason."""

    def clusters(self) -> dict[str, Cluster]:
        """The clusters whose kubeconfig files are in the directory now."""
        found: dict[str, Cluster] = {}
        problems: list[str] = []
        try:
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except FileNotFoundError:
            self.problems = []
            return found
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_file():
                continue
            name = entry.name
            for suffix in self.SUFFIXES:
                if name.endswith(suffix):
                    name = name[: -len(suffix)]
                    break
            try:
                check_name(name, f"{self.directory}/{entry.name}")
            except ValueError as err:
                problems.append(str(err))
                continue
            if name in found:
                problems.append(f"{self.directory}/{entry.name}: cluster {name!r} is named by "
                                f"{Path(found[name].kubeconfig).name} already; this file is "
                                "ignored (remove one)")
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:  # removed while we looked
                continue
            found[name] = Cluster(name, entry.path, f"{stat.st_mtime_ns}:{stat.st_size}")
        self.problems = problems
        return found
