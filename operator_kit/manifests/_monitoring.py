"""Scraping the operator with the Prometheus Operator: a ServiceMonitor and its Service.

``python -m operator_kit.manifests APP --service-monitor`` (``service_monitor=True`` to
`operator_manifests`) adds two documents, both labelled component ``metrics``:

- `metrics_service`: a Service ``<operator>-metrics`` in front of the pods' metrics port,
  the TLS port gunicorn serves ``/metrics`` on (8443, ``https``), or, for an operator
  without webhooks, the command line's metrics port (8080, ``metrics``);
- `service_monitor`: a ``monitoring.coreos.com/v1`` ServiceMonitor selecting that Service
  by its labels and scraping ``/metrics`` on its ``metrics`` port. Over TLS it checks the
  certificate the pods serve: the CA is ``ca.crt`` of the certificate Secret (the one the
  operator keeps, or the one brought along with ``--certificate-secret``), the name the
  webhook Service's, which the certificate is issued for: its bare name for the
  operator's own certificate (an overlay's namePrefix rewrites it, its namespace leaves
  it right), ``<service>.<namespace>.svc`` for a brought one (the name cert-manager
  Certificates for webhooks carry).

Without ``--metrics-secure`` the metrics are served without authentication (the
NetworkPolicy lets any pod reach the port). With it (``metrics_secure=True``), each scrape
must bring a bearer token the API server allows to ``get /metrics`` (`operator_kit.probes`):

- `metrics_reader_role`: the ClusterRole ``<operator>-metrics-reader`` (nonResourceURLs
  ``/metrics``, verb ``get``; kubebuilder's ``metrics_reader_role.yaml``), for you to bind
  to Prometheus's ServiceAccount;
- the ServiceMonitor sends Prometheus's own ServiceAccount token (``bearerTokenFile``) over
  HTTPS: on the webhook port checking the certificate as above; on the command line's
  metrics port, whose certificate is self-signed at start, without checking it
  (``insecureSkipVerify``, as kubebuilder's scaffold does).

The ServiceMonitor needs the Prometheus Operator's CRDs in the cluster, and a Prometheus
whose ``serviceMonitorSelector`` and ``serviceMonitorNamespaceSelector`` pick it up.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPONENT", "SERVICE_ACCOUNT_TOKEN", "metrics_reader_role", "metrics_service",
           "service_monitor"]

COMPONENT = "metrics"
"""The ``app.kubernetes.io/component`` of the two documents (the ServiceMonitor's selector
tells the metrics Service from the webhook Service by it)."""


SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""Where a pod's ServiceAccount token is mounted: Prometheus sends its own."""


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": COMPONENT,
            "app.kubernetes.io/managed-by": "operator-kit"}


def metrics_service(name: str, namespace: str, *, port: int, target_port: str
                    ) -> dict[str, Any]:
    """The Service ``<name>-metrics`` in front of operator `name`'s pods: its ``metrics``
    port `port` goes to their port named `target_port`."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{name}-metrics", "namespace": namespace,
                     "labels": _labels(name)},
        "spec": {
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "metrics", "port": port, "targetPort": target_port,
                       "protocol": "TCP"}],
        },
    }


def metrics_reader_role(name: str) -> dict[str, Any]:
    """The ClusterRole ``<name>-metrics-reader``: ``get`` on the non-resource URL
    ``/metrics``, what a scraper's ServiceAccount needs when the metrics are secure."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": f"{name}-metrics-reader", "labels": _labels(name)},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }


def service_monitor(name: str, namespace: str, *, tls_secret: str | None = None,
                    server_name: str | None = None, secure: bool = False) -> dict[str, Any]:
    """The ServiceMonitor that scrapes operator `name`'s metrics Service: over HTTPS,
    trusting ``ca.crt`` of `tls_secret` for `server_name`, when `tls_secret` is given;
    else over HTTP. `secure` (``--metrics-secure``): with Prometheus's ServiceAccount
    token, over HTTPS (without `tls_secret`, not checking the self-signed certificate)."""
    endpoint: dict[str, Any] = {"port": "metrics", "path": "/metrics", "scheme": "http"}
    if secure:
        endpoint["scheme"] = "https"
        endpoint["bearerTokenFile"] = SERVICE_ACCOUNT_TOKEN
        if tls_secret is None:
            endpoint["tlsConfig"] = {"insecureSkipVerify": True}
    if tls_secret is not None:
        if not server_name:
            raise ValueError("a ServiceMonitor over TLS needs the name the certificate is "
                             "issued for (server_name)")
        endpoint["scheme"] = "https"
        endpoint["tlsConfig"] = {"ca": {"secret": {"name": tls_secret, "key": "ca.crt"}},
                                 "serverName": server_name}
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name,
                                         "app.kubernetes.io/component": COMPONENT}},
            "endpoints": [endpoint],
        },
    }
