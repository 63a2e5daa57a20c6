"""Who may read the metrics: a request's bearer token checked by the API server.

controller-runtime's ``filters.WithAuthenticationAndAuthorization`` (kubebuilder's
``--metrics-secure``, kube-rbac-proxy before it) in Python: the API server decides, the
operator only asks it.

    Authorization: Bearer <token>
        │ `bearer_token`             none, or not "Bearer <token>": 401
        ▼
    TokenReview (authentication.k8s.io/v1)     not authenticated: 401
        │ the user: name, uid, groups, extra
        ▼
    SubjectAccessReview (authorization.k8s.io/v1), nonResourceURL path + verb
        │                                       not allowed: 403
        ▼
    200: the view runs

`DelegatedAuth.check` returns a `Decision` (status, and why, for the log; the token is in
neither). Both answers are cached as controller-runtime caches them, so a scrape every few
seconds costs no request: an authentication for `AUTHENTICATED_TTL` (one for
`UNAUTHENTICATED_TTL` when the token was refused), an allowed access for `ALLOWED_TTL`, a
denied one for `DENIED_TTL`. The caches (`TtlCache`) are keyed by the token's SHA-256,
never the token, and hold at most `CACHE_SIZE` entries (garbage tokens cannot grow them
without bound). Concurrent requests that miss the cache for the same token send one
review, not one each: the others wait for its answer (`TtlCache.get_or_load`, the API
server's own token cache does the same).

When the API server cannot answer (down, a timeout, the operator not allowed to create
TokenReviews or SubjectAccessReviews), the answer is 503 and an error in the log saying
what failed and what to do; nothing is cached and nobody is let in. The operator's
ServiceAccount needs `RULES` (``python -m operator_kit.manifests ... --metrics-secure``
grants them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from operator_kit.api.rbac import Rule
from operator_kit.client.transport import Api, error_message

__all__ = ["ALLOWED_TTL", "AUTHENTICATED_TTL", "CACHE_SIZE", "DENIED_TTL", "RULES",
           "UNAUTHENTICATED_TTL", "Decision", "DelegatedAuth", "ReviewFailed", "TtlCache",
           "User", "bearer_token"]

log = logging.getLogger("operator_kit.metrics")

# controller-runtime's filters: authentication cached a minute, allowed five, denied 30 s.
AUTHENTICATED_TTL = 60.0
UNAUTHENTICATED_TTL = 10.0
ALLOWED_TTL = 300.0
DENIED_TTL = 30.0
CACHE_SIZE = 1024
REVIEW_TIMEOUT = 10.0

RULES = (Rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
         Rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]))
"""What the operator needs to ask the API server about a request's token."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case),
    or None when the header is missing, of another scheme, or malformed (as the API
    server's own bearer-token authenticator reads it)."""
    if not authorization:
        return None
    parts = authorization.strip().split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    return parts[1]


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """At most `size` entries, each forgotten `ttl` seconds after it was put (its own ttl);
    the oldest put goes first when full. Thread-safe; `clock` is time.monotonic."""

    def __init__(self, size: int = CACHE_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._loading: dict[K, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value put for `key`, None when there is none or it expired."""
        with self._lock:
            return self._fresh(key)

    def _fresh(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        if found[0] <= self._clock():
            del self._entries[key]
            return None
        return found[1]

    def get_or_load(self, key: K, load: Callable[[], tuple[V, float]]) -> V:
        """The value for `key`; when there is none, what `load` returns (a value and its
        ttl), kept. One `load` per key at a time: other threads asking meanwhile wait for
        it and get its value (if it raises, the next of them loads in its turn)."""
        while True:
            with self._lock:
                found = self._fresh(key)
                if found is not None:
                    return found
                pending = self._loading.get(key)
                mine = pending is None
                if pending is None:
                    pending = self._loading[key] = threading.Event()
            if not mine:
                pending.wait()
                continue
            try:
                value, ttl = load()
                self.put(key, value, ttl)
                return value
            finally:
                with self._lock:
                    del self._loading[key]
                pending.set()

    def put(self, key: K, value: V, ttl: float) -> None:
        """Keep `value` for `key` for `ttl` seconds."""
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (self._clock() + ttl, value)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@dataclass(frozen=True)
class User:
    """Who a token belongs to, as the TokenReview said."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Decision:
    """`status` 200 (let in), 401, 403 or 503, and `reason` for the log and the body."""

    status: int
    reason: str
    user: str | None = None

    @property
    def allowed(self) -> bool:
        """True when the request may go on."""
        return self.status == 200


class ReviewFailed(Exception):
    """The API server did not answer a review (down, timed out, refused the operator)."""


class DelegatedAuth:
    """Authenticate a bearer token (TokenReview) and authorize its user for a
    non-resource URL (SubjectAccessReview) through `api`, with cached answers."""

    def __init__(self, api: Api, *, clock: Callable[[], float] = time.monotonic,
                 size: int = CACHE_SIZE) -> None:
        self.api = api
        self._users: TtlCache[str, User | str] = TtlCache(size, clock)
        self._access: TtlCache[tuple[User, str, str], str] = TtlCache(size, clock)

    def check(self, authorization: str | None, path: str, verb: str = "get") -> Decision:
        """May the bearer of `authorization` (the request's Authorization header) `verb`
        `path`? Never raises for the API server's failures: a 503 decision says them."""
        token = bearer_token(authorization)
        if token is None:
            return Decision(401, "no bearer token (send Authorization: Bearer <token>)")
        try:
            who = self.authenticate(token)
            if isinstance(who, str):
                return Decision(401, f"the token was not accepted: {who}")
            denied = self.authorize(who, path, verb)
        except ReviewFailed as err:
            log.error("metrics: %s", err)
            return Decision(503, str(err))
        if denied is not None:
            return Decision(403, f"{who.name} may not {verb} {path}: {denied}", who.name)
        return Decision(200, "allowed", who.name)

    def authenticate(self, token: str) -> User | str:
        """The token's user, or why the API server refused it (cached)."""
        def review() -> tuple[User | str, float]:
            status = self._review("authentication.k8s.io", "tokenreviews",
                                  {"token": token})
            if not status.get("authenticated"):
                return str(status.get("error") or "not authenticated"), UNAUTHENTICATED_TTL
            info = status.get("user") or {}
            return User(str(info.get("username") or ""), str(info.get("uid") or ""),
                        tuple(info.get("groups") or ()),
                        tuple(sorted((k, tuple(v or ())) for k, v in
                                     (info.get("extra") or {}).items()))), AUTHENTICATED_TTL

        return self._users.get_or_load(hashlib.sha256(token.encode()).hexdigest(), review)

    def authorize(self, user: User, path: str, verb: str) -> str | None:
        """None when `user` may `verb` the non-resource URL `path`, else why not (cached)."""
        def review() -> tuple[str, float]:
            spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                                    "nonResourceAttributes": {"path": path, "verb": verb}}
            if user.uid:
                spec["uid"] = user.uid
            if user.extra:
                spec["extra"] = {k: list(v) for k, v in user.extra}
            status = self._review("authorization.k8s.io", "subjectaccessreviews", spec)
            if status.get("allowed") and not status.get("denied"):
                return "", ALLOWED_TTL  # "": allowed
            return str(status.get("reason") or "no RBAC rule allows it"), DENIED_TTL

        return self._access.get_or_load((user, path, verb), review) or None

    def _review(self, group: str, plural: str, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = self.api.request("POST", f"/apis/{group}/v1/{plural}",
                                      body={"apiVersion": f"{group}/v1", "spec": spec,
                                            "kind": _KINDS[plural]},
                                      timeout=REVIEW_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - any failure: 503, said in one line
            status = getattr(err, "status", None)
            fix = (f"give the operator's ServiceAccount the right to create {plural} "
                   f"({group}); python -m operator_kit.manifests --metrics-secure "
                   "generates it" if status == 403 else
                   "the metrics are refused until the API server answers")
            raise ReviewFailed(f"cannot create a {_KINDS[plural]} to check a scrape's "
                               f"token: {_without_token(error_message(err), spec)}; "
                               f"{fix}") from None
        return dict(answer.get("status") or {}) if isinstance(answer, dict) else {}


_KINDS = {"tokenreviews": "TokenReview", "subjectaccessreviews": "SubjectAccessReview"}


def _without_token(message: str, spec: dict[str, Any]) -> str:
    """`message` with the token blanked, should an error ever echo the request body."""
    token = spec.get("token")
    if token:
        message = message.replace(str(token), "<token>").replace(
            json.dumps(token)[1:-1], "<token>")
    return message
