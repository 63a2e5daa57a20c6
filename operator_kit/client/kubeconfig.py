"""Reading kubeconfig files: a ``KUBECONFIG`` list merged as kubectl merges it.

`load` takes one path or several joined by ``os.pathsep`` (``KUBECONFIG=a:b:c``) and
returns one kubeconfig, by client-go's rules (``clientcmd.ClientConfigLoadingRules.Load``):

- the files are read in order; empty entries and repeated paths are dropped, ``~`` is
  expanded;
- a file that does not exist is skipped; when none exists, `ConfigurationError` names
  them all;
- a file that cannot be read (a directory) or is not a kubeconfig (not YAML, not a
  mapping, a ``clusters``/``users``/``contexts`` entry without a name or whose body is not
  a mapping, a current-context that is not a string) is a `ConfigurationError` naming that
  file, whatever the others hold;
- ``clusters``, ``users`` and ``contexts`` are merged by name: the first file to define a
  name wins, and its entry is taken whole (a later file's entry of the same name is
  ignored, even the fields the first did not set);
- ``current-context`` comes from the first file that sets it;
- the file paths inside an entry — a cluster's ``certificate-authority``, a user's
  ``client-certificate``, ``client-key`` and ``tokenFile``, and an ``exec`` command that
  contains a ``/`` — are made absolute relative to the folder of the file that defined
  the entry, so pieces of one configuration can live in different folders.

`check_connectable` is what connecting needs on top (`operator_kit.client.transport.api_client`
calls it): a current-context among the contexts, naming a cluster that has an
``http(s)://`` server; each failure is one line naming the files.

`merge` is the pure part (documents in, one kubeconfig out), for tests.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SECTIONS = {"clusters": "cluster", "users": "user", "contexts": "context"}
"""Each named list of a kubeconfig and the key of an entry's body."""

FILE_FIELDS = {"clusters": ("certificate-authority",),
               "users": ("client-certificate", "client-key", "tokenFile")}
"""The fields that name a file, resolved relative to the kubeconfig that defines them
(client-go's ``GetClusterFileReferences`` and ``GetAuthInfoFileReferences``)."""


class ConfigurationError(RuntimeError):
    """No usable cluster configuration was found."""


@dataclass
class Kubeconfig:
    """One kubeconfig merged from a list of files: the document, and which files it came
    from (`files`) and which of the list did not exist (`missing`)."""

    config: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def current_context(self) -> dict[str, Any] | None:
        """The body of the current context (``cluster``, ``user``, ``namespace``), or None."""
        name = self.config.get("current-context")
        for entry in self.config.get("contexts", []):
            if entry.get("name") == name:
                body = entry.get("context")
                return dict(body) if isinstance(body, Mapping) else {}
        return None


def split(paths: str | os.PathLike[str]) -> list[str]:
    """The files a ``KUBECONFIG`` value names, in order: split on ``os.pathsep``, ``~``
    expanded, empty entries and repeats dropped (as client-go's ``deduplicate``)."""
    found: list[str] = []
    for part in os.fspath(paths).split(os.pathsep):
        if part and os.path.expanduser(part) not in found:
            found.append(os.path.expanduser(part))
    return found


def load(paths: str | os.PathLike[str]) -> Kubeconfig:
    """The kubeconfig that `paths` (one file, or several joined by ``os.pathsep``) make
    together; `ConfigurationError` when none exists or one is not a kubeconfig."""
    names = split(paths)
    documents: list[tuple[str, Mapping[str, Any]]] = []
    missing: list[str] = []
    for name in names:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except FileNotFoundError:
            missing.append(name)
            continue
        except IsADirectoryError:
            raise ConfigurationError(f"kubeconfig {name} cannot be read: it is a directory, "
                                     "not a kubeconfig file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigurationError(f"kubeconfig {name} cannot be read: "
                                     f"{err.strerror if isinstance(err, OSError) else err}"
                                     ) from None
        documents.append((name, parse(name, text)))
    if not documents:
        if len(missing) == 1:
            what = f"kubeconfig {missing[0]} does not exist"
        else:
            what = f"no kubeconfig of {os.pathsep.join(missing) or '(none)'} exists"
        raise ConfigurationError(
            f"{what}. Point KUBECONFIG at a valid file, or start a local control plane: "
            "python -m operator_kit.localcluster up")
    return Kubeconfig(merge(documents), [Path(name) for name, _ in documents], missing)


def parse(name: str, text: str) -> Mapping[str, Any]:
    """One kubeconfig file's document (an empty file is an empty kubeconfig, as in
    client-go); `ConfigurationError` naming the file when it is not one."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())
        raise ConfigurationError(f"kubeconfig {name} is not valid YAML: {reason}") from None
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigurationError(f"kubeconfig {name} is not a kubeconfig: a "
                                 f"{type(document).__name__}, not a mapping")
    for section in SECTIONS:
        entries = document.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ConfigurationError(f"kubeconfig {name}: {section} is not a list")
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) \
                    or not entry["name"]:
                raise ConfigurationError(f"kubeconfig {name}: {section}[{i}] has no name")
            body = entry.get(SECTIONS[section])
            if body is not None and not isinstance(body, Mapping):
                raise ConfigurationError(
                    f"kubeconfig {name}: {section}[{i}] ({entry['name']}): its "
                    f"{SECTIONS[section]} is not a mapping (got {type(body).__name__})")
    current = document.get("current-context")
    if current is not None and not isinstance(current, str):
        raise ConfigurationError(f"kubeconfig {name}: current-context is not a context's "
                                 f"name (got {type(current).__name__})")
    return document


def check_connectable(loaded: Kubeconfig) -> None:
    """`ConfigurationError` (one line naming the files) unless `loaded` says where to
    connect: a current-context that is among its contexts, naming a cluster it defines
    with an ``http(s)://`` server."""
    where = f"kubeconfig {os.pathsep.join(map(str, loaded.files))}"
    config = loaded.config
    clusters = {str(c["name"]): c.get("cluster") or {} for c in config.get("clusters", [])}
    fix = ("point KUBECONFIG at the cluster's kubeconfig (python -m operator_kit.localcluster "
           "up prints one)")
    if not clusters:
        raise ConfigurationError(f"{where} has no clusters, so no API server to connect to; "
                                 f"{fix}")
    name = config.get("current-context")
    if not name:
        raise ConfigurationError(f"{where} sets no current-context; choose one with kubectl "
                                 "config use-context NAME")
    context = loaded.current_context
    if context is None:
        known = ", ".join(str(c["name"]) for c in config.get("contexts", [])) or "none"
        raise ConfigurationError(f"{where}: current-context {name!r} is not one of its "
                                 f"contexts ({known})")
    cluster = context.get("cluster")
    if not isinstance(cluster, str) or cluster not in clusters:
        raise ConfigurationError(f"{where}: context {name!r} names cluster {cluster!r}, which "
                                 f"it does not define (clusters: {', '.join(clusters)})")
    server = clusters[cluster].get("server")
    if not isinstance(server, str) or not _URL.fullmatch(server.strip()):
        raise ConfigurationError(f"{where}: cluster {cluster!r} has server {server!r}, not a "
                                 "URL; give https://HOST[:PORT]")


_URL = re.compile(r"https?://(?:\[[0-9A-Fa-f:.]+\]|[^/?#\[\]@:\s]+)(?::\d{1,5})?(?:/\S*)?")


def merge(documents: Sequence[tuple[str | os.PathLike[str], Mapping[str, Any]]]
          ) -> dict[str, Any]:
    """One kubeconfig from `documents`, (the file's path, its parsed document) in
    ``KUBECONFIG`` order, by the rules in the module docstring. The documents are not
    changed; relative file paths in the result are absolute."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config",
                              **{section: [] for section in SECTIONS}}
    seen: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for path, document in documents:
        base = os.path.dirname(os.path.abspath(os.fspath(path)))
        for section in SECTIONS:
            for entry in document.get(section) or ():
                name = str(entry["name"])
                if name in seen[section]:
                    continue  # the first file to define a name wins
                seen[section].add(name)
                merged[section].append(_resolved(section, copy.deepcopy(dict(entry)), base))
        if document.get("current-context") and "current-context" not in merged:
            merged["current-context"] = str(document["current-context"])
        for key, value in document.items():  # preferences, extensions: the first one's
            if key not in SECTIONS and key not in merged and value:
                merged[key] = copy.deepcopy(value)
    return merged


def _resolved(section: str, entry: dict[str, Any], base: str) -> dict[str, Any]:
    """`entry` with its relative file paths joined to `base` (client-go's
    ``ResolveLocalPaths``: empty and absolute paths are left as they are)."""
    body = entry.get(SECTIONS[section])
    if not isinstance(body, dict):
        return entry
    for key in FILE_FIELDS.get(section, ()):
        value = body.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            body[key] = os.path.join(base, value)
    exec_ = body.get("exec") if section == "users" else None
    command = exec_.get("command") if isinstance(exec_, dict) else None
    if isinstance(exec_, dict) and isinstance(command, str) and os.sep in command \
            and not os.path.isabs(command):
        exec_["command"] = os.path.join(base, command)  # a path, not a name on PATH
    return entry
