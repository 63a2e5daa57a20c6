"""The operator's settings: the environment variables and flags' values, and bad input.

A leaf: it imports nothing of operator_kit, so the manifests (which write these variables
into the Deployment), the command line and gunicorn's configuration (which read them)
share one spelling. `Settings` is what the command line and the environment asked for;
`UsageError` is bad input there (exit code 2, one line that names the fix).

The checks below read a variable or check a flag's value; each error names the variable
(or flag) and the value, and says what is wrong and what is accepted, on one line
(``OPERATOR_KIT_THREADS='many': not a whole number; give the number of threads per
worker (at least 1)``):

- `env_int`, `env_float`, `env_bool`, `env_choice` and `env_text` read a variable (unset
  or blank: the default); `whole_number` and `number` check a flag's text the same way;
  `env_names` reads the namespaces and the renamed objects' names (`ENV`, `NAME_ENV`),
  `namespace_list` several namespaces joined by commas;
- `env_bool` takes 1, true, yes, on and 0, false, no, off, in any case;
- `check_name` checks a Kubernetes object name (a DNS-1123 label, a DNS-1123 subdomain or,
  for a Service, a DNS-1035 label); `is_label_value`, `check_image` and `check_bind` a
  label value, a container image reference and a gunicorn bind address;
- `ArgumentParser` is argparse whose errors are a `UsageError` instead of an exit, so a
  command prints them as one line, without the usage block.

The full list of variables, where each is read, is docs/reference/configuration.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn

__all__ = ["ENV", "LABEL_VALUE_RULE", "LOG_LIBRARIES_ENV", "NAME_ENV", "Address",
           "ArgumentParser", "Settings", "UsageError", "check_bind", "check_image", "check_name",
           "env_bool", "env_choice", "env_float", "env_int", "env_names", "env_text",
           "is_label_value", "namespace_list", "number", "parse_address", "whole_number"]

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
    "metrics_secure": "OPERATOR_KIT_METRICS_SECURE",
    "metrics_cert_dir": "OPERATOR_KIT_METRICS_CERT_DIR",
    "leader_elect": "OPERATOR_KIT_LEADER_ELECT",
    "insecure_kubeconfig": "OPERATOR_KIT_INSECURE_KUBECONFIG",
}
# A yes or no: the HTTP and Kubernetes client libraries' DEBUG lines too (`logs.configure`).
LOG_LIBRARIES_ENV = "OPERATOR_KIT_LOG_LIBRARIES"
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
    watch_namespaces: tuple[str, ...] = ()  # (): every namespace
    kubeconfig: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    log_libraries: bool = False
    health_probe_bind_address: Address | None = None
    metrics_bind_address: Address | None = None
    # /metrics over HTTPS, each request's bearer token checked by the API server
    metrics_secure: bool = False
    # tls.crt and tls.key for the secure metrics server (None: a self-signed pair)
    metrics_cert_dir: str | None = None
    manifests: list[str] | None = None
    # None: as the Operator declares (its ``leader_election``)
    leader_elect: bool | None = None
    # what kubeconfigs not from the operator's files may carry (kubeconfig_risks.RISKS)
    insecure_kubeconfig: tuple[str, ...] = ()


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


# -- checking a variable's or a flag's value ---------------------------------------------

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors raise `UsageError` (``<what>; run <prog> --help for the
    flags``) instead of printing the usage block and exiting, so the command reports
    them as one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; run {self.prog} --help for the flags")


def _bad(where: str, raw: str, problem: str, fix: str) -> NoReturn:
    raise UsageError(f"{where}={raw!r}: {problem}; {fix}")


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def env_text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Variable `name` of `environ` (default: os.environ) without surrounding whitespace;
    None when it is unset or blank."""
    raw = _environ(environ).get(name)
    return (raw.strip() or None) if raw is not None else None


def whole_number(raw: str, where: str, *, what: str, minimum: int | None = None) -> int:
    """`raw`, the text of `where` (a variable or a flag), as an int of at least `minimum`;
    otherwise `UsageError` saying it should be `what` (``"the number of replicas"``)."""
    fix = f"give {what}" + (f" (at least {minimum})" if minimum is not None else "")
    try:
        value = int(raw.strip())
    except ValueError:
        _bad(where, raw, "not a whole number", fix)
    if minimum is not None and value < minimum:
        _bad(where, raw, "too small", fix)
    return value


def number(raw: str, where: str, *, what: str, minimum: float | None = None,
           above: float | None = None) -> float:
    """`raw`, the text of `where`, as a finite float of at least `minimum` (or more than
    `above`); otherwise `UsageError` saying it should be `what`."""
    bound = (f" (more than {above:g})" if above is not None
             else f" (at least {minimum:g})" if minimum is not None else "")
    fix = f"give {what}{bound}"
    try:
        value = float(raw.strip())
    except ValueError:
        _bad(where, raw, "not a number", fix)
    if not math.isfinite(value):
        _bad(where, raw, "not a finite number", fix)
    if (above is not None and not value > above) or (minimum is not None and value < minimum):
        _bad(where, raw, "too small", fix)
    return value


def env_int(name: str, default: int, *, what: str, minimum: int | None = None,
            environ: Mapping[str, str] | None = None) -> int:
    """Variable `name` as a whole number (`whole_number`); `default` when unset or blank."""
    raw = _environ(environ).get(name)
    if raw is None or not raw.strip():
        return default
    return whole_number(raw, name, what=what, minimum=minimum)


def env_float(name: str, default: float, *, what: str, minimum: float | None = None,
              above: float | None = None, environ: Mapping[str, str] | None = None) -> float:
    """Variable `name` as a number (`number`); `default` when unset or blank."""
    raw = _environ(environ).get(name)
    if raw is None or not raw.strip():
        return default
    return number(raw, name, what=what, minimum=minimum, above=above)


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Variable `name` as a yes or no: 1, true, yes, on or 0, false, no, off (any case);
    `default` when unset or blank; `UsageError` naming it for anything else."""
    raw = _environ(environ).get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    _bad(name, raw, "neither yes nor no", f"use {', '.join(_TRUE[:-1])} or {_TRUE[-1]} to "
         f"turn it on, {', '.join(_FALSE[:-1])} or {_FALSE[-1]} to turn it off (unset: "
         f"{'on' if default else 'off'})")


def env_choice(name: str, default: str, choices: Iterable[str], *, what: str,
               environ: Mapping[str, str] | None = None) -> str:
    """Variable `name`, lower-cased, if it is one of `choices`; `default` when unset or
    blank; otherwise `UsageError` saying it is not `what` (``"a log format"``)."""
    options = tuple(choices)
    raw = _environ(environ).get(name)
    if raw is None or not raw.strip():
        return default
    if raw.strip().lower() not in options:
        _bad(name, raw, f"not {what}", f"use one of {', '.join(options)}")
    return raw.strip().lower()


# -- names and references Kubernetes would refuse ----------------------------------------

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NAME_RULES = {
    "label": (63, re.compile(_LABEL), "at most 63 lowercase letters, digits and '-', "
              "beginning and ending with a letter or digit (a DNS-1123 label)"),
    "subdomain": (253, re.compile(rf"{_LABEL}(?:\.{_LABEL})*"), "at most 253 lowercase "
                  "letters, digits, '-' and '.', each part between dots beginning and "
                  "ending with a letter or digit (a DNS-1123 subdomain)"),
    "service": (63, re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?"), "at most 63 lowercase "
                "letters, digits and '-', beginning with a letter and ending with a letter "
                "or digit (a DNS-1035 label)"),
}


def check_name(value: str, where: str, *, what: str, rule: str = "label") -> str:
    """`value` if it is a valid name by `rule` — ``label`` (DNS-1123 label: a namespace),
    ``subdomain`` (DNS-1123 subdomain: most objects) or ``service`` (DNS-1035 label);
    otherwise `UsageError` naming `where` and saying it is not `what`."""
    limit, pattern, fix = _NAME_RULES[rule]
    if not value:
        _bad(where, value, "empty", f"use {fix}")
    if len(value) > limit:
        _bad(where, value, f"{len(value)} characters, more than {limit}", f"use {fix}")
    if not pattern.fullmatch(value):
        _bad(where, value, f"not {what}", f"use {fix}")
    return value


_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


LABEL_VALUE_RULE = ("at most 63 letters, digits, '-', '_' or '.', beginning and ending "
                    "with a letter or digit")


def is_label_value(value: str) -> bool:
    """True when Kubernetes takes `value` as a label value (`LABEL_VALUE_RULE`)."""
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


# The reference grammar of github.com/distribution/reference, as the kubelet parses an
# image (an image it cannot parse never starts: InvalidImageName).
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
           r"(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
           r"|\[[a-fA-F0-9:]+\])(?::[0-9]+)?")
_IMAGE = re.compile(rf"(?P<name>(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*)"
                    r"(?::[\w][\w.-]{0,127})?"
                    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")


def check_image(value: str, where: str) -> str:
    """`value` if it is a container image reference (``[REGISTRY/]PATH[:TAG][@DIGEST]``,
    the path in lowercase); `UsageError` naming `where` otherwise."""
    match = _IMAGE.fullmatch(value)
    if match is None or len(match["name"]) > 255:
        _bad(where, value, "not an image reference", "give [REGISTRY/]NAME[:TAG][@DIGEST] "
             "with a lowercase name, for example registry.example.com/my-operator:0.1.0")
    return value


_HOST = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9]*[A-Za-z0-9])?"
                   r"(?:\.[A-Za-z0-9](?:[-A-Za-z0-9]*[A-Za-z0-9])?)*")


def _bindable_host(host: str) -> bool:
    """Empty (every interface), an IPv4 address or a host name (not all-numeric)."""
    if not host:
        return True
    if all(part.isdigit() for part in host.split(".")):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    return bool(_HOST.fullmatch(host))


def check_bind(text: str, where: str) -> str:
    """`text` (stripped) if gunicorn can bind it: ``HOST:PORT``, ``HOST`` (port 8000),
    ``[V6]:PORT``, ``unix:PATH`` or ``fd://N``; `UsageError` naming `where` otherwise."""
    address = text.strip()
    if address.startswith("unix:"):
        ok = bool(address.removeprefix("unix:").removeprefix("//"))
    elif address.startswith("fd://"):
        ok = address[5:].isdigit()
    else:
        address = address.removeprefix("tcp://")
        port: str | None
        v6 = re.fullmatch(r"\[([^]]*)\](?::(\d+))?", address)
        if v6:
            host, port = v6[1], v6[2]
            try:
                ipaddress.IPv6Address(host)
                ok = True
            except ValueError:
                ok = False
        else:
            host, sep, port = address.partition(":")
            ok = _bindable_host(host) and (not sep or bool(port))
        ok = ok and (not port or (port.isdigit() and int(port) <= 65535))
    if not ok:
        _bad(where, text, "not an address to bind", "give HOST:PORT (for example "
             "0.0.0.0:8443), [V6]:PORT, unix:PATH or fd://N")
    return text.strip()


def env_names(environ: Mapping[str, str] | None = None, *,
              namespaces: bool = True) -> dict[str, str]:
    """The renamed object names (`NAME_ENV`) and, with `namespaces`, the namespaces
    (`ENV`'s namespace and watch_namespace) the environment gives, by attribute, each
    checked with `check_name`; unset or empty ones are left out."""
    wanted = [("webhook_service", NAME_ENV["webhook_service"], "a Service name", "service"),
              ("validating_configuration", NAME_ENV["validating_configuration"],
               "a webhook configuration name", "subdomain"),
              ("mutating_configuration", NAME_ENV["mutating_configuration"],
               "a webhook configuration name", "subdomain")]
    if namespaces:
        wanted.append(("namespace", ENV["namespace"], "a namespace name", "label"))
    found: dict[str, str] = {}
    for attribute, variable, what, rule in wanted:
        value = _environ(environ).get(variable)
        if value:
            found[attribute] = check_name(value, variable, what=what, rule=rule)
    watched = _environ(environ).get(ENV["watch_namespace"])
    if namespaces and watched:  # several: joined by commas
        found["watch_namespace"] = ",".join(namespace_list(watched, ENV["watch_namespace"]))
    return found


def namespace_list(text: str, where: str) -> tuple[str, ...]:
    """Namespace names joined by commas (``apps,batch``; spaces around each ignored),
    each checked with `check_name`, in order, without repeats."""
    names = [check_name(part.strip(), where, what="a namespace name")
             for part in text.split(",")]
    return tuple(dict.fromkeys(names))
