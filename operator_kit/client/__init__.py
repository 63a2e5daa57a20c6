"""The client: every request operator_kit sends to the API server.

`transport` wraps the official client's ApiClient (`Api`: one call per verb on a REST
endpoint, `Resource`; request metrics, keepalive sockets, retries after a 429's
Retry-After, errors that say what to do); `kubeconfig` reads a kubeconfig, or a
``KUBECONFIG`` list merged as kubectl merges it; `events` records events.k8s.io/v1 Events;
`installation` reads which namespace an operator is already installed in; `delegated`
asks it whether a request's bearer token may read a path (``--metrics-secure``).

Layer: above `operator_kit.api`; below the runtime, election, webhooks and everything
built on them.
"""

from operator_kit.client.kubeconfig import ConfigurationError
from operator_kit.client.transport import (
    Api,
    ApiError,
    Resource,
    api_client,
    current_namespace,
    error_message,
)

__all__ = [
    "Api",
    "ApiError",
    "ConfigurationError",
    "Resource",
    "api_client",
    "current_namespace",
    "error_message",
]
