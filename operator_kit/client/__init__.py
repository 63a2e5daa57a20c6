"""The client: every request operator_kit sends to the API server.

`transport` wraps the official client's ApiClient (`Api`: one call per verb on a REST
endpoint, `Resource`; request metrics, keepalive sockets, throttling, errors that say
what to do); `events` records core Events; `installation` reads which namespace an
operator is already installed in.

Layer: above `operator_kit.api`; below the runtime, election, webhooks and everything
built on them.
"""

from operator_kit.client.transport import (
    Api,
    ApiError,
    ConfigurationError,
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
