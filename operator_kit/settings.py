"""The operator's settings: the environment variables and flags' values, and bad input.

A leaf: it imports nothing of operator_kit, so the manifests (which write these variables
into the Deployment), the command line and gunicorn's configuration (which read them)
share one spelling. `Settings` is what the command line and the environment asked for;
`UsageError` is bad input there (exit code 2, one line that names the fix).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ENV", "NAME_ENV", "Address", "Settings", "UsageError", "parse_address"]

# The names of the operator's webhook Service and configurations, when its manifests were
# renamed (a kustomize namePrefix rewrites these values in the Deployment too).
NAME_ENV = {
    "webhook_service": "OPERATOR_KIT_WEBHOOK_SERVICE",
    "validating_configuration": "OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION",
    "mutating_configuration": "OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION",
}

ENV = {
    "namespace": "OPERATOR_KIT_NAMESPACE",
    "watch_namespace": "OPERATOR_KIT_WATCH_NAMESPACE",
    "kubeconfig": "KUBECONFIG",
    "log_level": "OPERATOR_KIT_LOG_LEVEL",
    "log_format": "OPERATOR_KIT_LOG_FORMAT",
    "health_probe_bind_address": "OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS",
    "metrics_bind_address": "OPERATOR_KIT_METRICS_BIND_ADDRESS",
}
PROBE_PORT, METRICS_PORT = 8081, 8080


class UsageError(Exception):
    """Bad input on the command line or in the environment: exit code 2."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Settings:
    """What the command line and the environment asked for."""

    namespace: str | None = None
    watch_namespace: str | None = None
    kubeconfig: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    health_probe_bind_address: Address | None = None
    metrics_bind_address: Address | None = None
    manifests: list[str] | None = None


def parse_address(text: str, where: str) -> Address | None:
    """``HOST:PORT``, ``:PORT`` or ``[V6]:PORT`` as an Address; ``0`` as None (off)."""
    text = text.strip()
    if text == "0":
        return None
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not port.isdigit() or int(port) > 65535 or (":" in host and not
                                                                text.startswith("[")):
        raise UsageError(f"{where} {text!r} is not an address; give HOST:PORT or :PORT "
                         "(for example 127.0.0.1:8081 or :8081), or 0 to turn it off")
    return Address(host or "0.0.0.0", int(port))
