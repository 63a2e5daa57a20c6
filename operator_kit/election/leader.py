"""Leader election on a ``coordination.k8s.io/v1`` Lease, modelled on client-go's.

Several replicas of an operator run at once; only the holder of the Lease may reconcile.
A `LeaderElector` runs one thread that first *acquires* the Lease and then *renews* it:

1. **Acquire.** Every ``retry_period`` (with client-go's jitter: 1 to 2.2 times) read the Lease.
   Missing: create it naming us. Free (no holder), ours already, or expired: update it
   naming us. Held by someone else and not expired: wait and try again.
2. **Renew.** Every ``retry_period`` write a fresh ``renewTime``. A leader that has not
   renewed successfully within ``renew_deadline`` of its last success has *lost*: it
   stops being leader at once and calls ``on_stopped_leading`` (the operator exits
   non-zero). Seeing another holder, or a conflicting write, loses at once too.
3. **Release.** On stop the leader clears ``holderIdentity`` (and, like client-go, sets
   ``leaseDurationSeconds: 1``), so a follower takes over within about one retry period
   instead of waiting out a whole lease duration.

**Never two winners.** Every write carries the ``resourceVersion`` it read (or, on
create, none): the API server accepts exactly one of two racing writes and answers the
other 409 Conflict, which always means "someone else won" (this process's own
annotations on the Lease go through `LeaderElector.annotate`, between renewals).

**Expiry by observedTime, not renewTime.** Clocks on different machines disagree;
a follower cannot compare the holder's ``renewTime`` with its own wall clock. Like
client-go it remembers the *local monotonic time at which it last saw the record
change* and considers the Lease expired only ``leaseDurationSeconds`` after that. Each
renewal changes the record (``renewTime`` moves, strictly), so an active leader keeps
pushing that moment forward; a dead one stops, and every follower times out on its
own clock. Only clock *rates* need to agree, never their readings. (A fresh follower
therefore waits a full lease duration even for a Lease that has been stale for hours.)

**Fencing by the renew deadline.** A leader counts its time from the moment it *sent*
its last successful write; a follower counts from the moment it *saw* that write, which
is later. Since ``renew_deadline < lease_duration``, the leader's deadline always falls
before any follower may take the Lease. `LeaderElector.is_leader` is computed from the
clock — it turns False the instant the deadline passes, even while the elector thread
is stuck in a request to an unresponsive API server, or the process was paused — so
workers that ask `may_reconcile()` before each reconcile never start one after their
Lease could have been taken. Every request is bounded by the time left before the
deadline (urllib3 retries included: the request runs in a helper thread and is
abandoned when time is up), so the loss is also *noticed* on time.

**Handover order.** `run` keeps renewing until its ``stop`` event is set and then
releases. An operator that drains reconciles on shutdown should set the elector's own
stop event only after its reconciles have finished (or pass ``release_on_stop=False``
and call `release` itself): releasing earlier would let a follower start while this
replica still writes.

Holder identities must be unique per process: the pod name (``POD_NAME``) when set,
else ``<hostname>_<random hex>``. A process that finds the Lease naming its own identity
(a restarted pod with the same name) continues it, as client-go does. Deleting the Lease
by hand voids the guarantee, as in client-go: a follower creates a new one at once.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.api.rbac import Rule
from operator_kit.client.transport import Api

log = logging.getLogger("operator_kit.leader")

JITTER_FACTOR = 1.2
"""client-go's: acquire retries wait retry_period * (1 + random * 1.2)."""

_DEFAULTS = "client-go's defaults are lease_duration=15, renew_deadline=10, retry_period=2"

Wait = Callable[[threading.Event, float], bool]
"""How the elector sleeps: wait up to `seconds` for `stop`; True when stop is set."""


def rules(lease_name: str) -> list[Rule]:
    """The RBAC leader election needs: create Leases (a create has no name RBAC could
    limit), then get and update only the Lease named `lease_name`."""
    return [Rule(["coordination.k8s.io"], ["leases"], ["create"]),
            Rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [lease_name])]


@dataclass(frozen=True)
class LeaderElection:
    """Where the Lease lives and the timings of the election (seconds, client-go's defaults).

    ``lease_duration``: how long followers wait after last seeing the Lease change before
    taking it. ``renew_deadline``: how long the leader keeps trying to renew before it
    gives up leading. ``retry_period``: the pause between attempts. ``warm_standby``:
    followers start the informers of the controllers they would run and keep their
    caches synced, with no workers and no writes, so a new leader reconciles at once
    instead of listing everything first (controller-runtime's ``EnableWarmup``).
    """

    namespace: str | None = None
    lease_name: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str | None = None
    warm_standby: bool = True

    def __post_init__(self) -> None:
        for field in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"LeaderElection {field} must be a number of seconds greater "
                                 f"than zero, not {value!r}; {_DEFAULTS}")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"LeaderElection lease_duration ({self.lease_duration:g}s) must be greater than "
                f"renew_deadline ({self.renew_deadline:g}s): a leader has to give up before "
                f"a follower may take the Lease; {_DEFAULTS}")
        if self.renew_deadline <= self.retry_period * JITTER_FACTOR:
            raise ValueError(
                f"LeaderElection renew_deadline ({self.renew_deadline:g}s) must be greater than "
                f"retry_period * {JITTER_FACTOR} ({self.retry_period * JITTER_FACTOR:g}s), so "
                f"a leader gets more than one try to renew; {_DEFAULTS}")
        if self.identity is not None and not self.identity:
            raise ValueError("LeaderElection identity must not be empty (an empty holder "
                             "means a free Lease); leave it None for the pod name or "
                             "<hostname>_<random>")

    @property
    def lease_duration_seconds(self) -> int:
        """``spec.leaseDurationSeconds`` as written: whole seconds, rounded up."""
        return max(1, math.ceil(self.lease_duration))


def default_identity() -> str:
    """``$POD_NAME`` when set, else ``<hostname>_<random hex>``: unique per process."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{secrets.token_hex(8)}"


class _Outcome(enum.Enum):
    OK = "ok"              # acquired or renewed
    HELD = "held"          # someone else holds the Lease (or it is no longer ours)
    CONFLICT = "conflict"  # our write lost a race (409)
    ERROR = "error"        # no answer, or an error answer: try again


@dataclass(frozen=True)
class _Attempt:
    outcome: _Outcome
    why: str = ""


class _NoTimeLeft(TimeoutError):
    """A request would have to run past the deadline."""


class LeaderElector:
    """Acquires, renews and releases one Lease for one process; see the module docstring.

    ``on_started_leading`` runs in its own thread (a slow start never delays renewals);
    ``on_stopped_leading`` runs on the elector thread once the Lease is lost, after
    `is_leader` has turned False. They may overlap if a start is still running when the
    Lease is lost. With ``release_on_stop=False`` `run` leaves the Lease held when
    stopped, for the owner to `release` later (or let expire). `wait` replaces the
    sleeping between attempts (tests pair it with a fake `clock`). ``lease_labels`` go
    on the Lease it creates; ``gauge`` (anything with ``set``) replaces the leader gauges
    (a member Lease of `operator_kit.sharding` is not the operator's leadership).
    """

    def __init__(
        self,
        api: Api,
        config: LeaderElection,
        *,
        namespace: str,
        name: str,
        operator: str,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        release_on_stop: bool = True,
        wait: Wait = threading.Event.wait,
        lease_labels: Mapping[str, str] | None = None,
        gauge: Any = None,
    ) -> None:
        self._api = api
        self.config = config
        self._namespace = namespace
        self._name = name
        self.namespace, self.lease_name = namespace, name  # where its Lease is
        self._operator = operator
        # operator_kit_leader{operator} and client-go's leader_election_master_status{name}
        self._gauge = gauge if gauge is not None else metrics.Both(
            metrics.LEADER.labels(operator), metrics.LEADER_MASTER.labels(name))
        self._lease_labels = dict(lease_labels or {})  # put on the Lease when created
        self._identity = config.identity or default_identity()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._release_on_stop = release_on_stop
        self._wait = wait
        self._path = (f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
                      f"/leases/{quote(name, safe='')}")
        self._state = threading.Lock()  # guards the fields below; never held during I/O
        self._io = threading.Lock()     # one write at a time: renew vs release
        self._holding = False           # we hold the Lease as far as we know
        self._renewed_at = -math.inf    # clock() when the last successful write was sent
        self._lease: dict[str, Any] | None = None  # the Lease as we last wrote it
        self._observed: tuple[Any, ...] | None = None  # (resourceVersion, spec) last seen
        self._observed_at = -math.inf   # clock() when the record last changed for us
        self._holder: str | None = None  # holder identity last seen
        self._done = False              # released or lost: never lead again
        self._last_stamp = ""
        self._start_error: BaseException | None = None
        self._starter: threading.Thread | None = None

    # -- what callers ask ------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def holder(self) -> str | None:
        """The holder identity this elector last saw on the Lease (None: free or unseen)."""
        with self._state:
            return self._holder

    def is_leader(self) -> bool:
        """True while we hold the Lease and are within the renew deadline of the last renewal.

        Computed from the clock, so it turns False when the deadline passes even if the
        elector thread is stuck: nobody can take the Lease before then.
        """
        with self._state:
            holding, renewed_at = self._holding, self._renewed_at
        return holding and self._clock() < renewed_at + self.config.renew_deadline

    def may_reconcile(self) -> bool:
        """Whether a worker may start a reconcile now (the fencing check): `is_leader`."""
        return self.is_leader()

    # -- running ---------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run `run` in a thread named ``leader-<lease>``; join it after setting `stop`."""
        thread = threading.Thread(target=self.run, args=(stop,), name=f"leader-{self._name}",
                                  daemon=True)
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew until `stop` is set (then release) or the Lease is lost.

        Returns after releasing (when `stop` was set, the Lease was held and
        ``release_on_stop``), or after calling ``on_stopped_leading`` (when it was lost),
        or at once when `stop` is set before the Lease was acquired.
        """
        gauge = self._gauge
        gauge.set(0)
        try:
            if not self._acquire(stop):
                return
            gauge.set(1)
            if stop.is_set():
                return
            self._starter = threading.Thread(target=self._start_leading,
                                             name=f"leader-{self._name}-started", daemon=True)
            self._starter.start()
            self._renew(stop)
        except Exception as err:  # a broken elector must not leave a silent leader
            log.exception("lease %s: the elector failed", self._describe())
            if not self._done:
                self._lose(f"the elector failed: {err!r}")
        finally:
            if stop.is_set() and self._release_on_stop:
                self.release()
            gauge.set(0)  # no longer renewing: not leading, whether released or not
            if self._starter is not None:
                self._starter.join(self.config.lease_duration)
                if self._starter.is_alive():
                    log.warning("lease %s: on_started_leading still running after %gs",
                                self._describe(), self.config.lease_duration)

    def _acquire(self, stop: threading.Event) -> bool:
        log.info("%s: attempting to acquire lease %s", self._identity, self._describe())
        while not stop.is_set():
            with self._io:
                if self._done:
                    return False
                attempt = self._try(renewing=False)
            if attempt.outcome is _Outcome.OK:
                log.info("%s: acquired lease %s (leaseTransitions=%s)", self._identity,
                         self._describe(), self._spec().get("leaseTransitions"))
                return True
            if attempt.outcome is _Outcome.ERROR:
                log.warning("%s: could not acquire lease %s: %s", self._identity,
                            self._describe(), attempt.why)
            pause = self.config.retry_period * (1 + random.random() * JITTER_FACTOR)
            if self._wait(stop, pause):
                break
        return False

    def _renew(self, stop: threading.Event) -> None:
        retry, deadline_after = self.config.retry_period, self.config.renew_deadline
        with self._state:
            first_deadline = self._renewed_at + deadline_after
        # An acquire that took long (a slow start) leaves less than a retry period or two
        # before the deadline: renew at once rather than lose without having tried.
        next_try = min(self._clock() + retry, first_deadline - 2 * retry)
        why = "no renewal attempted"
        while True:
            with self._state:
                deadline = self._renewed_at + deadline_after
            pause = min(next_try, deadline) - self._clock()
            if pause > 0 and self._wait(stop, pause):
                return
            if stop.is_set():
                return
            if self._start_error is not None:
                self._lose(f"on_started_leading failed: {self._start_error!r}", release=True)
                return
            now = self._clock()
            if now >= deadline:
                self._lose(f"no successful renewal within renew_deadline "
                           f"({deadline_after:g}s); last error: {why}")
                return
            next_try = now + retry
            with self._io:
                if self._done:  # released by another thread
                    return
                attempt = self._try(renewing=True)
            if attempt.outcome is _Outcome.OK:
                continue
            if attempt.outcome in (_Outcome.HELD, _Outcome.CONFLICT):
                self._lose(attempt.why)
                return
            why = attempt.why
            log.warning("%s: failed to renew lease %s: %s", self._identity, self._describe(),
                        why)

    def _start_leading(self) -> None:
        try:
            self._on_started()
        except Exception as err:  # a leader that cannot start must step down
            log.exception("lease %s: on_started_leading failed", self._describe())
            self._start_error = err

    def _lose(self, why: str, *, release: bool = False) -> None:
        """Stop leading (not-leader first), then tell the owner."""
        with self._state:
            self._holding = False
            self._done = True
            lease = self._lease
        self._gauge.set(0)
        log.error("%s: lost lease %s: %s", self._identity, self._describe(), why)
        if release and lease is not None:
            with self._io:
                self._write_release(lease)
        self._on_stopped()

    # -- one attempt -----------------------------------------------------------------------

    def _try(self, *, renewing: bool) -> _Attempt:
        """client-go's tryAcquireOrRenew: one attempt; the caller holds `_io`."""
        now = self._clock()
        with self._state:
            start = self._renewed_at if renewing else now
        deadline = start + self.config.renew_deadline
        stamp = self._stamp()
        record: dict[str, Any] = {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": self.config.lease_duration_seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
        # 1. Fast path: the leader updates optimistically from the Lease it last wrote.
        with self._state:
            mine = self._lease if self._holding else None
        if mine is not None:
            spec = mine.get("spec") or {}
            record["acquireTime"] = spec.get("acquireTime") or stamp
            record["leaseTransitions"] = spec.get("leaseTransitions") or 0
            try:
                written = self._request("PUT", self._path, _with_spec(mine, record), deadline)
            except Exception as err:  # noqa: BLE001 - fall back to reading, as client-go does
                log.debug("lease %s: optimistic renewal failed (%s); reading it",
                          self._describe(), _brief(err))
            else:
                self._wrote(written, now)
                return _Attempt(_Outcome.OK)

        # 2. Read the Lease, or create it.
        try:
            current = self._request("GET", self._path, None, deadline)
        except ApiException as err:
            if err.status != 404:
                return _Attempt(_Outcome.ERROR, f"reading it: {_brief(err)}")
            return self._create(record, now, deadline)
        except Exception as err:  # noqa: BLE001 - any failure to talk is a failed attempt
            return _Attempt(_Outcome.ERROR, f"reading it: {_brief(err)}")

        # 3. Judge it: who holds it, and has it expired by our own observation?
        observed_at = self._observe(current)
        old = current.get("spec") or {}
        holder = old.get("holderIdentity") or ""
        if renewing and holder != self._identity:
            by = f"it now names {holder}" if holder else "its holder was cleared by someone else"
            return _Attempt(_Outcome.HELD, f"the Lease was taken over: {by}")
        duration = old.get("leaseDurationSeconds") or self.config.lease_duration_seconds
        if holder and holder != self._identity and self._clock() < observed_at + duration:
            return _Attempt(_Outcome.HELD, f"held by {holder}")

        # 4. Write it, carrying the resourceVersion we read.
        if holder == self._identity:
            record["acquireTime"] = old.get("acquireTime") or stamp
            record["leaseTransitions"] = old.get("leaseTransitions") or 0
        else:
            record["leaseTransitions"] = (old.get("leaseTransitions") or 0) + 1
        try:
            written = self._request("PUT", self._path, _with_spec(current, record), deadline)
        except ApiException as err:
            if err.status == 409:
                return _Attempt(_Outcome.CONFLICT,
                                "conflict: another replica wrote the Lease first")
            return _Attempt(_Outcome.ERROR, f"updating it: {_brief(err)}")
        except Exception as err:  # noqa: BLE001 - any failure to talk is a failed attempt
            return _Attempt(_Outcome.ERROR, f"updating it: {_brief(err)}")
        self._wrote(written, now)
        return _Attempt(_Outcome.OK)

    def _create(self, record: dict[str, Any], now: float, deadline: float) -> _Attempt:
        meta: dict[str, Any] = {"name": self._name, "namespace": self._namespace}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": record}
        if self._lease_labels:
            meta["labels"] = self._lease_labels
        try:
            written = self._request("POST", self._path.rpartition("/")[0], body, deadline)
        except ApiException as err:
            if err.status == 409:
                return _Attempt(_Outcome.CONFLICT, "conflict: another replica created it first")
            return _Attempt(_Outcome.ERROR, f"creating it: {_brief(err)}")
        except Exception as err:  # noqa: BLE001 - any failure to talk is a failed attempt
            return _Attempt(_Outcome.ERROR, f"creating it: {_brief(err)}")
        self._wrote(written, now)
        return _Attempt(_Outcome.OK)

    def _wrote(self, lease: Any, sent_at: float) -> None:
        """A write of ours succeeded: we hold the Lease from `sent_at` on."""
        with self._state:
            if self._done:  # released or lost meanwhile: never lead again
                return
            self._lease = lease
            self._holding = True
            self._renewed_at = sent_at
        self._observe(lease)

    def _observe(self, lease: dict[str, Any]) -> float:
        """Note the record; when it changed, restart its expiry from now. Returns observedTime."""
        spec = lease.get("spec") or {}
        seen = (lease.get("metadata", {}).get("resourceVersion"),
                tuple(sorted((k, str(v)) for k, v in spec.items())))
        holder = spec.get("holderIdentity") or None
        with self._state:
            if seen != self._observed:
                self._observed, self._observed_at = seen, self._clock()
            changed, self._holder = holder != self._holder, holder
            observed_at = self._observed_at
        if changed:
            if holder is None:
                log.info("lease %s is free (released)", self._describe())
            elif holder != self._identity:
                log.info("lease %s: new leader observed: %s", self._describe(), holder)
        return observed_at

    def annotate(self, annotations: Mapping[str, str]) -> str:
        """Merge `annotations` into the Lease held, between renewals (so neither write
        conflicts with the other); the resourceVersion written. `LookupError`: not held."""
        with self._io:
            if not self.is_leader():
                raise LookupError(f"{self._identity} does not hold lease {self._describe()}")
            written = self._api.request(
                "PATCH", self._path, body={"metadata": {"annotations": dict(annotations)}},
                content_type="application/merge-patch+json", timeout=self.config.renew_deadline)
            with self._state:  # the next renewal writes from this version
                self._lease = written if self._holding else self._lease
            return str(written["metadata"]["resourceVersion"])

    # -- releasing -------------------------------------------------------------------------

    def release(self) -> bool:
        """Give the Lease up now: clear the holder, so a follower takes it at once.

        This elector stops leading first (`is_leader` is False from here on) and never
        leads again. True when the Lease was cleared; False when we did not hold it or
        the write failed (then it simply expires).
        """
        with self._io:
            with self._state:
                lease = self._lease if self._holding else None
                self._holding = False
                self._done = True
            if lease is None:
                return False
            self._gauge.set(0)
            return self._write_release(lease)

    def _write_release(self, lease: dict[str, Any]) -> bool:
        stamp = self._stamp()
        spec = lease.get("spec") or {}
        record = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp,
                  "renewTime": stamp, "leaseTransitions": spec.get("leaseTransitions") or 0}
        deadline = self._clock() + self.config.renew_deadline
        try:
            self._request("PUT", self._path, _with_spec(lease, record), deadline)
        except Exception as err:  # noqa: BLE001 - the Lease then expires on its own
            log.warning("%s: could not release lease %s (%s); it expires in %ss",
                        self._identity, self._describe(), _brief(err),
                        spec.get("leaseDurationSeconds"))
            return False
        log.info("%s: released lease %s", self._identity, self._describe())
        return True

    # -- helpers ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any, deadline: float) -> Any:
        """One API request that returns or fails by `deadline` (on our clock).

        `timeout=` bounds each HTTP attempt, but urllib3 may retry; so the request runs
        in a helper thread that is abandoned when the time is up. An abandoned write
        that lands later only makes followers wait longer.
        """
        timeout = deadline - self._clock()
        if timeout <= 0:
            raise _NoTimeLeft(f"{method} {path}: no time left before the renew deadline")
        result: list[Any] = []
        failure: list[BaseException] = []

        def call() -> None:
            try:
                result.append(self._api.request(method, path, body=body, timeout=timeout))
            except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
                failure.append(err)

        helper = threading.Thread(target=call, name=f"leader-{self._name}-request",
                                  daemon=True)
        helper.start()
        helper.join(timeout)
        if failure:
            raise failure[0]
        if not result:
            raise _NoTimeLeft(f"{method} {path}: no answer within {timeout:.2f}s")
        return result[0]

    def _stamp(self) -> str:
        """Now as RFC 3339 with microseconds, strictly after any stamp we wrote before."""
        now = datetime.now(timezone.utc)
        stamp = _micro_time(now)
        if stamp <= self._last_stamp:
            last = datetime.strptime(self._last_stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
            stamp = _micro_time(last.replace(tzinfo=timezone.utc) + timedelta(microseconds=1))
        self._last_stamp = stamp
        return stamp

    def _spec(self) -> dict[str, Any]:
        with self._state:
            spec: dict[str, Any] = (self._lease or {}).get("spec") or {}
        return spec

    def _describe(self) -> str:
        return f"{self._namespace}/{self._name}"


def _with_spec(lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """`lease` (with its metadata and resourceVersion) carrying `spec` instead."""
    meta = {k: v for k, v in (lease.get("metadata") or {}).items() if k != "managedFields"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": spec}


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _brief(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
