"""Kubeconfigs from sources the operator does not own: what they may not carry.

A kubeconfig is code as much as data. Loading one with the official client runs its
``users[].user.exec`` command (and a ``gcp`` ``auth-provider``'s ``cmd-path``) inside the
operator, reads any file its ``tokenFile``, ``client-certificate``, ``client-key`` or
``certificate-authority`` names — the operator's own ServiceAccount token included — and
sends what it read to the ``server`` it names, through its ``proxy-url``, and with
``insecure-skip-tls-verify`` to whoever answers. That is the operator's to decide for the
kubeconfig files it was given (`operator_kit.client.kubeconfig`); a kubeconfig that comes
from elsewhere — a tenant's Secret (`operator_kit.fleet.secrets.KubeconfigSecrets`), any
provider's in-memory `Cluster.config` — gets none of it unless the operator opts in, per
category (as Flux's ``--insecure-kubeconfig-exec`` and ``--insecure-kubeconfig-tls``):

======================  ==================================================================
category (`RISKS`)      what it allows
======================  ==================================================================
``exec``                ``users[].user.exec``: a command the operator runs for a token
``auth-provider``       ``users[].user.auth-provider``: gcp's ``cmd-path`` runs a command,
                        oidc fetches tokens from an issuer the kubeconfig names
``files``               a file path: ``tokenFile``, ``client-certificate``, ``client-key``,
                        ``certificate-authority`` (the ``*-data`` fields are fine)
``proxy``               ``clusters[].cluster.proxy-url``
``insecure-tls``        ``insecure-skip-tls-verify`` anything but false
======================  ==================================================================

`risks` is the pure decision (a document in, the findings out: every user and cluster
entry, not only the current context's); `check_foreign` refuses a document with one line
that names each field found, where it is, and the setting that would allow it
(`ALLOW_FLAG`, `ALLOW_ENV`). Both look only at the fields named above, never into
values, so a document of aliases costs no more than its text; and they never quote a
value, so a message cannot carry a credential.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operator_kit.settings import ENV

RISKS = {
    "exec": "runs a command inside the operator",
    "auth-provider": "runs a command (gcp cmd-path) or fetches tokens from the issuer it "
                     "names (oidc)",
    "files": "reads a file of the operator's host (its ServiceAccount token, say) and sends "
             "it to the server",
    "proxy": "sends the requests through a proxy it names",
    "insecure-tls": "sends the credentials to whoever answers at the server's address",
}
"""Each category of risky kubeconfig content, and what it would do in the operator."""

ALLOW_FLAG = "--insecure-kubeconfig"
"""The operator's flag that allows categories of `RISKS` (comma-separated)."""

ALLOW_ENV = ENV["insecure_kubeconfig"]
"""The environment variable of `ALLOW_FLAG`."""

_FILE_FIELDS = {"users": ("tokenFile", "client-certificate", "client-key"),
                "clusters": ("certificate-authority",)}
_BODY = {"users": "user", "clusters": "cluster"}


class ForeignKubeconfigError(ValueError):
    """A kubeconfig from a source the operator does not own carries what it may not: the
    message is one line naming each finding and the setting that would allow it."""

    def __init__(self, message: str, findings: Iterable[Finding]) -> None:
        super().__init__(message)
        self.findings = tuple(findings)

    @property
    def categories(self) -> tuple[str, ...]:
        """The categories of `RISKS` found (``"invalid"`` for a malformed entry), once
        each, in order."""
        return tuple(dict.fromkeys(f.category for f in self.findings))


@dataclass(frozen=True)
class Finding:
    """One field a foreign kubeconfig may not carry: its `category` (a key of `RISKS`, or
    ``"invalid"`` for an entry that is not a mapping), the `field` and `where` it is
    (``users[0] (admin)``)."""

    category: str
    field: str
    where: str

    def __str__(self) -> str:
        if self.category == "invalid":
            return f"{self.where} is not a mapping"
        return f"{self.where} has {self.field} ({self.category})"


def check_categories(values: Iterable[str], where: str) -> frozenset[str]:
    """`values` as a set of `RISKS` categories; a ValueError naming `where` and the
    categories there are, for any other."""
    chosen = frozenset(v.strip() for v in values if v.strip())
    unknown = sorted(chosen - RISKS.keys())
    if unknown:
        raise ValueError(f"{where}: {', '.join(map(repr, unknown))} is not a kind of "
                         f"kubeconfig content to allow; use any of {', '.join(RISKS)}, "
                         "joined by commas")
    return chosen


def risks(config: Mapping[str, Any]) -> list[Finding]:
    """Every field of `config` (a kubeconfig document) in a category of `RISKS`, and every
    user or cluster entry that is not a mapping (category ``"invalid"``), in order."""
    found: list[Finding] = []
    for section, body_key in _BODY.items():
        entries = config.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            found.append(Finding("invalid", section, section))
            continue
        for i, entry in enumerate(entries):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            where = f"{section}[{i}]" + (f" ({name})" if isinstance(name, str) and
                                          len(name) <= 63 else "")
            body = entry.get(body_key) if isinstance(entry, Mapping) else entry
            if body is None:
                continue
            if not isinstance(body, Mapping):
                found.append(Finding("invalid", body_key, where))
                continue
            found += _body_risks(section, body, where)
    return found


def _body_risks(section: str, body: Mapping[str, Any], where: str) -> list[Finding]:
    found: list[Finding] = []
    if section == "users":
        for key in ("exec", "auth-provider"):
            if body.get(key) is not None:
                found.append(Finding(key, key, where))
    for key in _FILE_FIELDS[section]:
        if body.get(key) not in (None, ""):
            found.append(Finding("files", key, where))
    if section == "clusters":
        if body.get("proxy-url") not in (None, ""):
            found.append(Finding("proxy", "proxy-url", where))
        # The official client skips verification for any value Python finds true:
        # "false" (a string) included. Only false itself, or no value, verifies.
        if body.get("insecure-skip-tls-verify") not in (None, False):
            found.append(Finding("insecure-tls", "insecure-skip-tls-verify", where))
    return found


def check_foreign(config: Mapping[str, Any], where: str, *,
                  allow: Iterable[str] = ()) -> None:
    """Nothing when `config`, a kubeconfig that came from `where` (``Secret ns/name``),
    carries nothing of `RISKS` beyond the categories in `allow`; otherwise
    `ForeignKubeconfigError`, one line naming each finding and what would allow it.
    Call it before the kubernetes client sees the document: loading one runs its
    commands."""
    allowed = frozenset(allow)
    refused = [f for f in risks(config) if f.category not in allowed]
    if not refused:
        return
    invalid = [f for f in refused if f.category == "invalid"]
    if invalid:
        raise ForeignKubeconfigError(
            f"{where}: refused, not a kubeconfig: {'; '.join(map(str, invalid))}", invalid)
    categories = list(dict.fromkeys(f.category for f in refused))
    why = "; ".join(f"{c} {RISKS[c]}" for c in categories)
    raise ForeignKubeconfigError(
        f"{where}: refused: {', '.join(map(str, refused))} — {why}. A kubeconfig that "
        f"does not come from the operator's own files may not; if whoever may write it "
        f"is trusted with the operator's credentials, allow it with "
        f"{ALLOW_FLAG}={','.join(categories)} ({ALLOW_ENV})", refused)
