"""Server-side sharding at run time: a member's slots claimed, served and released.

In server mode (``Sharding(mode="server")``, or ``"auto"`` on an API server that filters
by shard: `operator_kit.election.shard_probe`) no label is written. Every member runs a
`RangeKeeper` (thread ``ranges-<operator>``) that computes, from the live members
(`operator_kit.election.sharder.Members`), its target slots (`shard_ranges.assign`: the
same answer on every member) and moves toward it with today's guarantee — a slot is
served by one member at a time:

1. **Release first.** Slots it serves but should not: it stops its current *generation*
   (the sharded controllers' runners and their informers, `Generation`): no new key is
   handed out, and the reconciles in flight return. Only then does it start a new
   generation on the slots it keeps — its caches filled from the old one's, so the
   objects it keeps are not reconciled again (`operator_kit.election.generation`) —
   and publish — the annotation
   ``shard.operator-kit.io/slots`` on its member Lease — that it no longer holds them.
2. **Claim, confirm, start.** Target slots that no live member claims: it publishes the
   claim, waits until its own watch of the member Leases shows the write, and looks
   again. The watch delivers the Lease writes in their order, so of two members that
   claimed a slot at once, the later writer sees the earlier's claim and withdraws (both
   may withdraw; each retries after a random pause). The winner then starts a generation
   whose primary informers list and watch with the selector of its slots.

A claim counts only while its member is alive (`Members`: its Lease seen renewed within
the lease duration, by this process's own clock, so clock skew between machines does not
matter): a member that crashed or was paused past its Lease is fenced by then (it exits
at its renew deadline), and its slots are claimed by their new targets — within one
lease duration plus a round (`PERIOD`) plus the new generation's list. An annotation that
is not a slot mask (another party wrote it) is taken as a claim of every slot — safe,
nothing is reconciled twice — until that Lease expires; it is logged once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

from operator_kit import metrics
from operator_kit.election.generation import Carried, RunnerGeneration, generations
from operator_kit.election.modes import lease_mode, live_leases
from operator_kit.election.shard_probe import SelectorRefused
from operator_kit.election.shard_ranges import (
    SLOTS,
    SLOTS_ANNOTATION,
    assign,
    decode_slots,
    encode_slots,
)
from operator_kit.election.sharder import Members
from operator_kit.election.sharding import MODE

__all__ = ["Generation", "RangeKeeper", "RunnerGeneration", "generations", "readiness"]

log = logging.getLogger("operator_kit.sharding")


class Generation(Protocol):
    """The sharded controllers running on one set of slots."""

    def stop(self) -> None:
        """Hand out no more keys, wait for every reconcile in flight, stop the informers."""

    def cached(self) -> int:
        """Objects in its primary caches."""

    def carry(self) -> Carried:
        """After `stop`: what the next generation starts from (`Carried`)."""


def _spans(slots: frozenset[int]) -> str:
    """``0-3,7,9-12``: slots for a log line."""
    out: list[str] = []
    for slot in sorted(slots):
        if out and out[-1].rpartition("-")[2] == str(slot - 1):
            out[-1] = f"{out[-1].partition('-')[0]}-{slot}"
        else:
            out.append(str(slot))
    return ",".join(out) or "none"


class RangeKeeper:
    """This member's slots in server mode (module docstring). `make` starts a generation
    on a set of slots, from what the previous one carried (`Carried`: the objects of the
    slots it keeps are not reconciled again); `may_reconcile` is the member Lease's fence."""

    PERIOD = 0.5
    """Seconds between rounds when nothing changes (expiries are noticed this late)."""
    CONFIRM = 10.0
    """Seconds to wait for the member Leases' watch to show a claim before withdrawing."""

    def __init__(self, members: Members, *, operator: str, identity: str,
                 may_reconcile: Callable[[], bool],
                 make: Callable[[frozenset[int], Carried | None], Generation],
                 annotate: Callable[[dict[str, str]], str], stop: threading.Event,
                 slots: int = SLOTS, on_fall_back: Callable[[], None] = lambda: None) -> None:
        self._members = members
        self._operator = operator
        self._identity = identity
        self._may_reconcile = may_reconcile
        self._make = make
        self._stop = stop
        self._slots = slots
        # Writes the member Lease's annotation between the elector's renewals
        # (`LeaderElector.annotate`): a renewal racing a write of its own would conflict
        # (409) and end the membership.
        self._annotate = annotate
        self._on_fall_back = on_fall_back  # told, on its thread, once it fell back
        self.fell_back = False
        """Whether a live member in label mode made this one give up server mode."""
        self.held: frozenset[int] = frozenset()
        self._published: frozenset[int] | None = None
        self._generation: Generation | None = None
        self._wake = threading.Event()
        self._lock = threading.Lock()  # one round, or the final stop, at a time
        self._thread: threading.Thread | None = None
        self._waiting: frozenset[int] = frozenset()
        self._distrusted: set[str] = set()
        self._gauge = metrics.SHARD_SLOTS.labels(operator)

    def start(self) -> None:
        self._members.on_change(self._wake.set)
        self._thread = threading.Thread(target=self._run, name=f"ranges-{self._operator}",
                                        daemon=True)
        self._thread.start()

    def alive_thread(self) -> bool:
        return (self._thread is None or self._thread.is_alive() or self._stop.is_set()
                or self.fell_back)

    def cached(self) -> int:
        """Objects of the sharded kinds in this member's primary caches now."""
        generation = self._generation
        return generation.cached() if generation is not None else 0

    def stop(self, timeout: float) -> None:
        """On the operator's stop: end the rounds, stop the generation (its reconciles
        finish first); the member Lease's deletion then releases the slots at once."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.1, timeout))
        with self._lock:
            if self._generation is not None:
                self._generation.stop()
                self._generation = None

    # -- the rounds ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set() and not self.fell_back:
            self._wake.wait(self.PERIOD)
            self._wake.clear()
            if self._stop.is_set():
                return
            # Not joined yet, or fenced; or the other members' Leases not listed yet (their
            # claims and modes unknown): start nothing.
            if not self._may_reconcile() or not self._members.informer.synced.is_set():
                continue
            try:
                with self._lock:
                    self._round()
            except _FellBack:
                break
            except Exception as err:  # noqa: BLE001 - the next round tries again
                log.warning("sharding %s: member %s: a round failed (%s); trying again in "
                            "%.1fs", self._operator, self._identity, err, self.PERIOD)
        if self.fell_back and not self._stop.is_set():
            self._on_fall_back()

    def target(self) -> frozenset[int]:
        """This member's slots among the live members (itself included)."""
        alive = self._members.alive() | {self._identity}
        return assign(alive, self._slots).get(self._identity, frozenset())

    def claims(self) -> dict[str, frozenset[int]]:
        """What each other live member claims (its Lease's annotation)."""
        out: dict[str, frozenset[int]] = {}
        for holder, meta in live_leases(self._members, self._operator, self._identity):
            raw = (meta.get("annotations") or {}).get(SLOTS_ANNOTATION)
            if raw is None:
                continue
            slots = decode_slots(raw, self._slots)
            if slots is None:
                if holder not in self._distrusted:
                    self._distrusted.add(holder)
                    log.warning("sharding %s: member %s's Lease carries %s=%r, which is not "
                                "a slot mask: taken as a claim of every slot (nothing moves "
                                "to this member meanwhile) until its Lease expires or the "
                                "member publishes again", self._operator, holder,
                                SLOTS_ANNOTATION, str(raw)[:80])
                slots = frozenset(range(self._slots))
            out[holder] = slots
        return out

    def in_label_mode(self) -> list[str]:
        """The other live members that run label mode (`operator_kit.election.modes`)."""
        return sorted(member for member, meta in live_leases(
            self._members, self._operator, self._identity) if lease_mode(meta) == "labels")

    def _fall_back(self, why: str) -> None:
        """Give server mode up for the group: stop serving (reconciles return first), then
        publish no slots and label mode; `on_fall_back` runs label mode next."""
        log.warning("sharding %s: %s: member %s stops serving hash slots %s, and runs "
                    "label mode once its reconciles of them returned; the whole group "
                    "follows (each member sees this one's Lease) and runs label mode until "
                    "its members restart", self._operator, why, self._identity,
                    _spans(self.held))
        self.fell_back = True
        self._serve(frozenset())
        self._annotate({SLOTS_ANNOTATION: encode_slots((), self._slots), MODE: "labels"})
        self._published = frozenset()

    def _round(self) -> None:
        labels = self.in_label_mode()
        if labels:
            self._fall_back(_in_labels(labels))
            return
        target = self.target()
        lose = self.held - target
        if lose:
            log.info("sharding %s: member %s releases slots %s: its reconciles of them "
                     "finish first", self._operator, self._identity, _spans(lose))
            self._serve(self.held & target)
            self._publish(self.held)
        claimed: set[int] = set()
        for slots in self.claims().values():
            claimed |= slots
        free = target - self.held - claimed
        waiting = frozenset(target - self.held - free)
        if waiting != self._waiting:
            self._waiting = waiting
            if waiting:
                log.info("sharding %s: member %s waits for slots %s: another live member "
                         "still claims them (it releases them once its reconciles return, "
                         "or its Lease expires)", self._operator, self._identity,
                         _spans(waiting))
        if free:
            self._claim(frozenset(free))
        elif self._published != self.held:
            self._publish(self.held)

    def _claim(self, free: frozenset[int]) -> None:
        version = self._publish(self.held | free)
        if not self._members.informer.wait_seen(version, self.CONFIRM):
            log.warning("sharding %s: member %s: its claim of slots %s did not show in the "
                        "member Leases' watch within %.0fs: withdrawn, tried again later",
                        self._operator, self._identity, _spans(free), self.CONFIRM)
            self._publish(self.held)
            return
        labels = self.in_label_mode()  # joined before our claim: it waits for us
        if labels:
            self._publish(self.held)
            self._fall_back(_in_labels(labels))
            return
        contested: set[int] = set()
        for slots in self.claims().values():
            contested |= free & slots
        if contested:
            log.info("sharding %s: member %s: slots %s were claimed by another member "
                     "first: withdrawn, tried again after a pause", self._operator,
                     self._identity, _spans(frozenset(contested)))
            self._publish(self.held | (free - contested))
            self._stop.wait(random.uniform(0.2, 1.0))
            free = frozenset(free - contested)
        if free:
            self._serve(self.held | free)
            log.info("sharding %s: member %s serves slots %s (%d of %d)", self._operator,
                     self._identity, _spans(self.held), len(self.held), self._slots)

    # -- acting ----------------------------------------------------------------------------

    def _serve(self, slots: frozenset[int]) -> None:
        """Stop the current generation (its reconciles return first), start one on
        `slots` (none: serve nothing) from what the stopped one carries."""
        started = time.monotonic()
        carried: Carried | None = None
        if self._generation is not None:
            self._generation.stop()
            carried = self._generation.carry() if slots else None
            self._generation = None
        self.held = slots
        self._gauge.set(len(slots))
        if slots and not self.fell_back:
            try:
                self._generation = self._make(slots, carried)
            except SelectorRefused as err:  # nothing started
                self.held = frozenset()
                self._gauge.set(0)
                self._fall_back(str(err))
                raise _FellBack() from None
        log.debug("sharding %s: member %s switched to slots %s in %.2fs", self._operator,
                  self._identity, _spans(slots), time.monotonic() - started)

    def _publish(self, slots: frozenset[int]) -> str:
        """Write `slots` on this member's Lease; the resourceVersion written."""
        version = self._annotate({SLOTS_ANNOTATION: encode_slots(slots, self._slots)})
        self._published = slots
        return version


class _FellBack(Exception):
    """A round ended in the fall back to label mode."""


def _in_labels(members: list[str]) -> str:
    return (f"member(s) {', '.join(members)} run label mode (forced to, or their API "
            "server does not filter by shard)")


def readiness(mode: str | None, ranges: RangeKeeper | None) -> str:
    """``/readyz``'s line about sharding: ``sharding: mode=server slots=21/64`` (the
    slots this member serves), ``sharding: mode=labels``, or nothing (not sharded)."""
    if mode is None:
        return ""
    slots = f" slots={len(ranges.held)}/{SLOTS}" if mode == "server" and ranges else ""
    return f"sharding: mode={mode}{slots}\n"
