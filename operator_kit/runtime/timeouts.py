"""The watchdog over a controller's reconciles: the ones running past ``reconcile_timeout``.

`Watchdog` knows which key each worker is reconciling and since when. Its thread
reports a reconcile that has run longer than ``reconcile_timeout`` (once each) and
starts another worker in its place, so that other keys are still reconciled even with
one worker; the stuck worker exits once its reconcile returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from operator_kit import metrics
from operator_kit.runtime.cache import describe
from operator_kit.runtime.watching import Key

log = logging.getLogger("operator_kit.controller")


class Watchdog:
    """The reconciles of one controller in flight, and the thread that watches them."""

    def __init__(self, controller: str, *, timeout: float, max_spares: int,
                 stop: threading.Event, start_worker: Callable[[str], None],
                 post_event: Callable[[Key, str], None]) -> None:
        self.controller = controller
        self.timeout = timeout
        self.max_spares = max_spares
        self.stop = stop
        self._start_worker = start_worker
        self._post_event = post_event
        # key -> (monotonic start, its worker), for the watchdog
        self._running: dict[Key, tuple[float, threading.Thread]] = {}
        self._running_lock = threading.Lock()
        # Workers a spare replaced while they were stuck; each exits once its reconcile
        # returns, so there are as many spares running as there are workers in here.
        self._retiring: set[threading.Thread] = set()
        self._stuck = metrics.STUCK.labels(controller)

    def start(self) -> threading.Thread:
        """Start the watchdog's thread; it ends when `stop` is set."""
        thread = threading.Thread(target=self._watch_stuck,
                                  name=f"watchdog-{self.controller}", daemon=True)
        thread.start()
        return thread

    def begin(self, key: Key) -> float:
        """The calling worker starts reconciling `key`: its monotonic start."""
        started = time.monotonic()
        with self._running_lock:
            self._running[key] = (started, threading.current_thread())
        return started

    def end(self, key: Key) -> None:
        """The reconcile of `key` returned."""
        with self._running_lock:
            self._running.pop(key, None)

    def retire(self) -> bool:
        """Whether the calling worker was replaced by a spare while it was stuck (then it
        exits now that its reconcile returned)."""
        with self._running_lock:
            current = threading.current_thread()
            if current in self._retiring:  # a spare took its place while it was stuck
                self._retiring.discard(current)
                return True
            return False

    def retiring(self) -> set[threading.Thread]:
        """The workers replaced by a spare that have not exited yet."""
        with self._running_lock:
            return set(self._retiring)

    def _watch_stuck(self) -> None:
        """Report reconciles running past ``reconcile_timeout`` (once each), and replace
        their workers.

        A Python thread cannot be stopped from outside, so a hung reconcile keeps its key
        and its thread. The watchdog makes it visible (an error log, a Warning Event on
        the object, the ``..._stuck_reconciles`` gauge) and starts another worker in its
        place, so other keys are still reconciled even with one worker; the stuck one
        exits once its reconcile returns. At most ``max_concurrent_reconciles`` such
        spares run at once, which bounds the threads when everything hangs."""
        timeout = self.timeout
        reported: set[tuple[Key, float]] = set()
        spares_started = 0
        while not self.stop.wait(min(1.0, timeout / 4)):
            now = time.monotonic()
            with self._running_lock:
                running = dict(self._running)
            stuck = {(key, started) for key, (started, _) in running.items()
                     if now - started > timeout}
            self._stuck.set(len(stuck))
            for key, started in stuck - reported:
                replaced = False
                with self._running_lock:
                    worker = running[key][1]
                    if (len(self._retiring) < self.max_spares
                            and worker not in self._retiring and not self.stop.is_set()):
                        self._retiring.add(worker)
                        replaced = True
                if replaced:
                    spares_started += 1
                    self._start_worker(f"reconcile-{self.controller}-spare-{spares_started}")
                log.error("%s: reconcile of %s has run for %.0fs (reconcile_timeout %gs): "
                          "it may be hung on a call without a timeout; %s", self.controller,
                          describe(key), now - started, timeout,
                          "another worker was started in its place" if replaced else
                          "no spare worker left to start in its place")
                self._post_event(key, f"reconcile has run for more than {timeout:g}s")
            reported = stuck
