"""events.k8s.io/v1 Events on objects, as ``kubectl describe`` shows them; repeats are a series.

An Event says who reported it (``reportingController``: the operator's name;
``reportingInstance``: the replica, its pod name or else its host name), what it is
about (``regarding``, and optionally a ``related`` object), what the reporter was doing
(``action``), why (``reason``, CamelCase), for people (``note``), ``type`` (Normal or
Warning) and when (``eventTime``, a MicroTime).

Repeats, as client-go's ``tools/events`` broadcaster records them: the second occurrence
of an event gives it a ``series`` (``count: 2``, ``lastObservedTime``), each further one
raises the count and moves the time; it stays one object. Unlike client-go, which
remembers its events in one process only, the Event's name is derived from what makes
two events the same (the regarding object's uid, the related object, the reporting
controller, action, type, reason and note), so a repeat from another replica, or after a
restart, finds the existing Event by a 409 on create and continues its series (its
``reportingInstance`` stays the first reporter's: the API server keeps it immutable).
Each repeat is one PATCH guarded by the resourceVersion this recorder last saw: the
threads of one recorder record the same Event one at a time (other Events go on in
parallel), so within a process no repeat is lost to a conflict; a conflict with another
replica reads the Event again and retries after a short random pause (5 tries; a
repeat still in conflict then is logged and not counted). A recorder remembers the
series of its last `REMEMBERED` events, so only a forgotten one costs a GET first. An
Event the API server expired (after ``--event-ttl``, an hour by default, without a
repeat) starts over.

Recording is best effort: a refused request is logged, never raised into a reconcile.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import logging
import os
import random
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.api.rbac import Rule
from operator_kit.client.transport import Api

log = logging.getLogger("operator_kit.events")

REMEMBERED = 4096
"""How many events' series one recorder keeps in memory (older ones are read again)."""

NOTE_LIMIT = 1024
"""The longest note the API server accepts, in bytes; longer ones are cut."""

FIELD_LIMIT = 128
"""The longest ``reason``, ``action`` and ``reportingInstance`` the API server accepts."""

RULE = Rule(["events.k8s.io"], ["events"], ["create", "get", "patch"])
"""What recording Events needs: create, patch for a repeat, and get for a repeat of an
Event this recorder did not write (another replica's, or from before a restart)."""

_TRIES = 5
_STRIPES = 64
_PAUSE = 0.01  # seconds, times the attempt: at most 0.1 s in all
_QUALIFIED = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def micro_time(when: datetime.datetime | None = None) -> str:
    """`when` (default: now) as the API's MicroTime, ``2026-12-05T06:01:02.123456Z``."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_instance() -> str:
    """This replica's name for ``reportingInstance``: ``$POD_NAME``, else the host name."""
    return (os.environ.get("POD_NAME") or socket.gethostname())[:FIELD_LIMIT]


def reporting_controller(name: str) -> str:
    """`name` as a valid ``reportingController`` (a qualified name, like a label key):
    kept when it is one, else its invalid characters become ``-`` (at most 63 of them)."""
    if "/" in name:
        prefix, _, rest = name.rpartition("/")
        if len(prefix) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", prefix) \
                and _QUALIFIED.match(rest) and len(rest) <= 63:
            return name
    if _QUALIFIED.match(name) and len(name) <= 63:
        return name
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "-", name)[:63].strip("-_.")
    return cleaned or "operator"


def reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An ObjectReference to `obj` (an API object as a dict), as client-go's GetReference."""
    meta = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
           "name": meta.get("name"), "namespace": meta.get("namespace"),
           "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    return {key: value for key, value in ref.items() if value}


def check_field(what: str, value: str) -> None:
    """A ValueError unless `value` is a non-empty ``reason`` or ``action`` the API server
    accepts (at most `FIELD_LIMIT` characters)."""
    if not value or len(value) > FIELD_LIMIT:
        raise ValueError(f"an Event's {what} must be 1 to {FIELD_LIMIT} characters (a "
                         f"CamelCase word such as 'Reconcile'), not {value!r}")


def clip_note(note: str) -> str:
    """`note` cut to `NOTE_LIMIT` bytes of UTF-8, never inside a character."""
    encoded = note.encode()
    if len(encoded) <= NOTE_LIMIT:
        return note
    return encoded[:NOTE_LIMIT].decode(errors="ignore")


@dataclass(frozen=True)
class EventKey:
    """What makes two events the same (client-go's isomorphic events), plus the note and
    the type: the same reason with another note is another Event, as ``kubectl describe``
    lists it."""

    regarding: tuple[str, ...]
    related: tuple[str, ...]
    controller: str
    action: str
    type: str
    reason: str
    note: str

    def name(self, regarding_name: str) -> str:
        """The Event's name: the regarding object's name and a digest of the key."""
        digest = hashlib.sha256("\0".join(
            [*self.regarding, "", *self.related, "", self.controller, self.action, self.type,
             self.reason, self.note]).encode()).hexdigest()[:12]
        base = re.sub(r"[^a-z0-9.-]", "-", regarding_name.lower())[:240].strip("-.") or "event"
        return f"{base}.{digest}"


def _identity(ref: Mapping[str, Any]) -> tuple[str, ...]:
    if ref.get("uid"):
        return (str(ref["uid"]),)
    return tuple(str(ref.get(k) or "") for k in ("apiVersion", "kind", "namespace", "name"))


def new_event(obj: Mapping[str, Any], *, controller: str, instance: str, action: str,
              warning: bool, reason: str, note: str,
              related: Mapping[str, Any] | None = None,
              now: str | None = None) -> dict[str, Any]:
    """The body of a new events.k8s.io/v1 Event on `obj` (its namespace's,
    ``default`` for a cluster-scoped object)."""
    regarding = reference(obj)
    related_ref = reference(related) if related is not None else None
    note = clip_note(note)
    type_ = "Warning" if warning else "Normal"
    key = EventKey(_identity(regarding), _identity(related_ref) if related_ref else (),
                   controller, action, type_, reason, note)
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": key.name(str(regarding.get("name") or "")),
                     "namespace": regarding.get("namespace") or "default"},
        "eventTime": now or micro_time(),
        "reportingController": controller, "reportingInstance": instance,
        "action": action, "reason": reason, "note": note, "type": type_,
        "regarding": regarding,
    }
    if related_ref:
        body["related"] = related_ref
    return body


def series_patch(count: int, resource_version: str | None, now: str | None = None
                 ) -> dict[str, Any]:
    """The merge patch that records one more occurrence of an Event seen `count` times:
    ``series.count`` (at least 2), ``series.lastObservedTime``, guarded by
    `resource_version` when known."""
    patch: dict[str, Any] = {"series": {"count": max(count + 1, 2),
                                        "lastObservedTime": now or micro_time()}}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


def occurrences(event: Mapping[str, Any]) -> int:
    """How many times the Event `event` (as read) has been observed."""
    return int((event.get("series") or {}).get("count") or 1)


class EventRecorder:
    """Posts events.k8s.io/v1 Events as `controller` (the operator's name; made a valid
    ``reportingController``) from `instance` (default: `default_instance`)."""

    def __init__(self, api: Api, controller: str, instance: str | None = None) -> None:
        self.api = api
        self.controller = reporting_controller(controller)
        self.instance = (instance or default_instance())[:FIELD_LIMIT]
        self._lock = threading.Lock()
        # One Event is recorded by one thread at a time: a lock per stripe of Event paths.
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        # event path -> (times observed, resourceVersion) as this recorder last wrote it
        self._known: collections.OrderedDict[str, tuple[int, str]] = collections.OrderedDict()

    def event(self, obj: Mapping[str, Any], *, warning: bool, reason: str, note: str,
              action: str, related: Mapping[str, Any] | None = None) -> None:
        """Record that `action` on `obj` happened for `reason` (a ValueError for a reason
        or action the API server would refuse); a repeat adds to the Event's series."""
        check_field("reason", reason)
        check_field("action", action)
        body = new_event(obj, controller=self.controller, instance=self.instance,
                         action=action, warning=warning, reason=reason, note=note,
                         related=related)
        meta = body["metadata"]
        collection = f"/apis/events.k8s.io/v1/namespaces/{meta['namespace']}/events"
        path = f"{collection}/{meta['name']}"
        try:
            with self._stripes[hash(path) % _STRIPES]:
                self._record(collection, path, body)
        except ApiException as err:
            # Events are best effort: failing to record one must not fail a reconcile.
            log.warning("could not record event %s on %s %s: %s %s", reason,
                        body["regarding"].get("kind"), _where(body["regarding"]),
                        err.status, err.reason)

    def _record(self, collection: str, path: str, body: dict[str, Any]) -> None:
        known = self._recall(path)
        for attempt in range(1, _TRIES + 1):
            if known is None:
                try:
                    created = self.api.request("POST", collection, body=body)
                    self._remember(path, 1, created["metadata"]["resourceVersion"])
                    return
                except ApiException as err:
                    if err.status != 409:  # 409: it exists (a repeat from before, or elsewhere)
                        raise
                current = self.api.get(path)
                known = (occurrences(current), current["metadata"]["resourceVersion"])
            count, version = known
            try:
                patched = self.api.request(
                    "PATCH", path, body=series_patch(count, version),
                    content_type="application/merge-patch+json")
                self._remember(path, occurrences(patched), patched["metadata"]["resourceVersion"])
                return
            except ApiException as err:
                if err.status == 404:  # expired or deleted: start over
                    known = None
                elif err.status == 409:  # counted meanwhile by another replica
                    # A random pause, so that two replicas repeating it at once fall apart.
                    time.sleep(random.uniform(0, _PAUSE * attempt))
                    current = self.api.get_or_none(path)
                    known = None if current is None else (
                        occurrences(current), current["metadata"]["resourceVersion"])
                else:
                    raise
        raise ApiException(status=409, reason=f"Conflict {_TRIES} times in a row")

    def _recall(self, path: str) -> tuple[int, str] | None:
        with self._lock:
            return self._known.get(path)

    def _remember(self, path: str, count: int, version: str) -> None:
        with self._lock:
            self._known[path] = (count, version)
            self._known.move_to_end(path)
            while len(self._known) > REMEMBERED:
                self._known.popitem(last=False)


def _where(ref: Mapping[str, Any]) -> str:
    namespace, name = ref.get("namespace"), ref.get("name")
    return f"{namespace}/{name}" if namespace else str(name)
