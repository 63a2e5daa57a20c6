"""Kubeconfigs for fleet tests: self-contained, as Cluster API's Secrets, from a token.

- `embedded_kubeconfig(path)`: a kubeconfig file's document with the files it names
  (``certificate-authority``, ``client-certificate``, ``client-key``) put inline as the
  ``*-data`` fields, as Cluster API writes them: it works from a Secret on any machine.
- `kubeconfig_secret(namespace, cluster, document)`: the ``<cluster>-kubeconfig`` Secret
  Cluster API writes for `cluster` (type ``cluster.x-k8s.io/secret``, key ``value``,
  label ``cluster.x-k8s.io/cluster-name``), which `KubeconfigSecrets` reads.
- `token_kubeconfig(api, namespace, secret, server)`: the kubeconfig that acts as a
  ServiceAccount, from its ``kubernetes.io/service-account-token`` Secret (the one
  ``python -m operator_kit.manifests APP --fleet-member`` makes), once the token
  controller has filled it in; None before.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from operator_kit.client.transport import Api
from operator_kit.fleet.secrets import CLUSTER_NAME_LABEL

_FILES = {"clusters": ("cluster", ("certificate-authority",)),
          "users": ("user", ("client-certificate", "client-key"))}


def embedded_kubeconfig(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The kubeconfig at `path` with the files it names inlined (``*-data``, base64)."""
    base = Path(path).parent
    document: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    for section, (body, fields) in _FILES.items():
        for entry in document.get(section) or ():
            values = entry.get(body) or {}
            for name in fields:
                if name in values:
                    content = (base / values.pop(name)).read_bytes()
                    values[f"{name}-data"] = base64.b64encode(content).decode()
    return document


def kubeconfig_secret(namespace: str, cluster: str, document: dict[str, Any]
                      ) -> dict[str, Any]:
    """Cluster API's kubeconfig Secret for `cluster` in `namespace`, holding `document`."""
    value = base64.b64encode(yaml.safe_dump(document).encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": f"{cluster}-kubeconfig", "namespace": namespace,
                         "labels": {CLUSTER_NAME_LABEL: cluster}},
            "data": {"value": value}}


def token_kubeconfig(api: Api, namespace: str, secret: str, server: str
                     ) -> dict[str, Any] | None:
    """A kubeconfig for `server` that acts as the ServiceAccount whose token Secret is
    `namespace`/`secret` (read through `api`); None until its token is filled in."""
    data = (api.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}").get("data")
            or {})
    if not data.get("token") or not data.get("ca.crt"):
        return None
    return {"apiVersion": "v1", "kind": "Config", "current-context": "member",
            "clusters": [{"name": "member", "cluster": {
                "server": server, "certificate-authority-data": data["ca.crt"]}}],
            "users": [{"name": secret, "user": {
                "token": base64.b64decode(data["token"]).decode()}}],
            "contexts": [{"name": "member", "context": {
                "cluster": "member", "user": secret, "namespace": namespace}}]}
