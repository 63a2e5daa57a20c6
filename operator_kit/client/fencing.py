"""Fenced writes: an `Api` that refuses every request but a read once its fence closes.

A Python thread cannot be stopped from outside. Code that may go on running after it
lost the right to write — a shard member's reconcile after the member's Lease lapsed
(`operator_kit.election.sharder`), a reconcile past its ``reconcile_timeout``
(`operator_kit.runtime.timeouts`) — writes through a `FencedApi`: once `refusal`
returns a reason, each further write raises `Fenced` instead of reaching the API
server. Reads still go through. A write already sent when the fence closes is not
recalled, and requests made with the kubernetes client's own classes (on
``ctx.client``) do not pass through here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operator_kit.client.transport import Api

READS = ("GET", "HEAD")

Refusal = Callable[[], str | None]
"""A fence: None while writes may pass, else the reason they are refused."""


class Fenced(RuntimeError):
    """A write refused before it was sent, because its writer may no longer write: a
    reconcile past its ``reconcile_timeout`` (its key was released for a retry, which
    may be running), or a shard member's reconcile after its Lease lapsed. The message
    says which; a timed-out reconcile's result is discarded whatever it returns."""


class FencedApi(Api):
    """`api` (the same client, connections and discovery) behind a fence: each request
    but a read first asks `refusal`, and raises `Fenced` with the reason it returns
    (None: the write goes through). Fences nest: the request then passes `api`'s."""

    def __init__(self, api: Api, refusal: Refusal) -> None:
        self.__dict__.update(api.__dict__)  # the same client, connections and discovery
        self._inner = api
        self._refusal = refusal

    def request(self, method: str, path: str, **options: Any) -> Any:
        if method.upper() not in READS:
            reason = self._refusal()
            if reason is not None:
                raise Fenced(f"{method} {path} refused: {reason}")
        return self._inner.request(method, path, **options)


def fenced_like(api: Api, model: Api) -> Api:
    """`api` behind every fence `model` is behind (`api` itself when there is none): a
    reconcile that writes to a second cluster through `api` — a fleet member's reconcile
    writing its entry on the hub — is refused there exactly when its own writes are."""
    refusals: list[Refusal] = []
    while isinstance(model, FencedApi):
        refusals.append(model._refusal)
        model = model._inner
    if not refusals:
        return api

    def refusal() -> str | None:
        return next((r for r in (f() for f in refusals) if r is not None), None)

    return FencedApi(api, refusal)
