"""Streaming initial lists: an informer's first state from a watch, instead of a LIST.

client-go's ``WatchListClient`` (on by default since Kubernetes 1.35), kube-rs's
``InitialListStrategy::StreamingList``. Instead of LISTing a kind — which the API server
answers by building each page of objects in memory at once — an informer opens its
watch with::

    ?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan
    &allowWatchBookmarks=true            (no resourceVersion: a consistent read)

The API server sends every object there is as an ADDED event, one at a time, then a
BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` whose resourceVersion is the
state those events make up (at least as new as the moment the request arrived). The
informer builds the new cache from the events, swaps it in at that bookmark (reporting
the difference from the old one, exactly as a relist does), counts as synced, and goes on
reading the same stream as its watch: one request instead of the LIST's pages and a
watch. After a 410 Gone it streams again the same way.

Servers without it: one whose ``WatchList`` feature gate is off refuses the request with
``422 Invalid`` naming ``sendInitialEvents`` (one older than 1.27 refuses
``resourceVersionMatch`` on a watch the same way), and a server that ignored the
parameters would end the stream without the bookmark. Either way the informer LISTs
instead (`refuses_streaming`, `NoInitialEventsEnd`), and `StreamingLists` — one per
operator, shared by its informers — remembers it for that API group and version, so
their later (re)lists LIST at once; the first refusal is logged at INFO, later ones at
DEBUG. ``Operator(streaming_lists=False)`` (or ``OPERATOR_KIT_STREAMING_LISTS=0``, as
client-go's ``KUBE_FEATURE_WatchListClient=false``) LISTs always.

Reading any watch's stream: `read_lines` (one event a line, each as soon as it is
complete) and `abort` (unblock a read in progress, on shutdown).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Resource

log = logging.getLogger("operator_kit.watching")

__all__ = ["INITIAL_EVENTS_END", "NoInitialEventsEnd", "StreamingLists", "abort",
           "ends_initial_events", "initial_events_query", "read_lines", "refuses_streaming"]

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation on the bookmark that ends the initial events (``metav1``'s
``InitialEventsAnnotationKey``)."""


def initial_events_query() -> dict[str, Any]:
    """The query parameters of a watch that streams the current state first (client-go's
    reflector ``watchList``: ``SendInitialEvents``, ``ResourceVersionMatch:
    NotOlderThan``, ``AllowWatchBookmarks``, and no resourceVersion after a 410)."""
    return {"watch": True, "sendInitialEvents": True,
            "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": True}


def ends_initial_events(event_type: object, obj: dict[str, Any]) -> bool:
    """Whether a watch event is the bookmark that ends the initial events."""
    if event_type != "BOOKMARK":
        return False
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(INITIAL_EVENTS_END) == "true")


def refuses_streaming(err: ApiException) -> bool:
    """Whether an API error is a server refusing a streaming list: a 400 or 422 about
    ``sendInitialEvents`` or ``resourceVersionMatch`` (the WatchList feature gate off, or
    a server older than it), not a failure worth retrying."""
    if err.status not in (400, 422):
        return False
    body = err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else err.body
    text = f"{err.reason} {body or ''}"
    return "sendInitialEvents" in text or "resourceVersionMatch" in text


class NoInitialEventsEnd(Exception):
    """A streaming list's watch ended before the bookmark that ends its initial events:
    the server does not stream lists (it ignored ``sendInitialEvents``)."""


class StreamingLists:
    """Whether informers stream their initial lists, and where the server refused: one per
    operator (its `operator_kit.runtime.watching.Informers`), so every informer of an API
    group and version LISTs once the server refused one of them."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._refused: dict[str, str] = {}
        self._lock = threading.Lock()

    def use(self, resource: Resource) -> bool:
        """Whether an informer of `resource` streams its next initial list."""
        with self._lock:
            return self.enabled and resource.api_version not in self._refused

    def refuse(self, resource: Resource, description: str, reason: str) -> None:
        """Note that the server refused to stream `resource`'s list: its group and version
        LIST from now on. Logged at INFO the first time, at DEBUG after."""
        with self._lock:
            first = not self._refused
            self._refused.setdefault(resource.api_version, reason)
        log.log(logging.INFO if first else logging.DEBUG,
                "the API server does not stream lists of %s (%s): listing instead, for "
                "every informer of %s from now on (said once at INFO). Kubernetes 1.34+ "
                "streams them unless its WatchList feature gate is off; "
                "OPERATOR_KIT_STREAMING_LISTS=0 or Operator(streaming_lists=False) lists "
                "without asking", description, reason, resource.api_version)

    def refused(self) -> dict[str, str]:
        """The API group versions (``"v1"``, ``"apps/v1"``) whose lists the server would
        not stream, and why."""
        with self._lock:
            return dict(self._refused)


def read_lines(response: Any) -> Iterator[bytes]:
    """Split a chunked watch stream into lines, yielding each as soon as it is complete."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        if b"\n" not in chunk:
            pending += chunk
            continue
        # One split per chunk: a chunk of a streaming list holds many events, and
        # cutting them off one by one would copy the rest of the chunk each time.
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def abort(response: Any) -> None:
    """Shut down a streaming response's socket so a blocked read returns at once."""
    if response is None:
        return
    connection = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    try:
        response.close()
    except Exception:  # noqa: BLE001 - best effort on shutdown
        pass
