"""One reconcile of one object, run synchronously against a real API server.

`reconcile_once` builds the runner an `Operator` would (`ControllerRunner`: the same
caches, Context, finalizer and status handling), fills each of its caches with one list
— no watch, no worker or watchdog thread — and runs the runner's own step for one
object: the finalizer state machine (add the finalizer; on deletion, ``cleanup`` then
remove it), then ``reconcile`` with a fresh Context. It returns what reconcile returned
(an `Action`, or None) and lets the reconcile's exception through, where the operator
would log it, post an Event and retry with backoff::

    def test_a_backup_gets_its_cron_job(cluster, namespace):
        namespace.apply(Backup("nightly", BackupSpec(...)).to_dict())
        action = reconcile_once(BackupController(), cluster, "nightly", namespace.name)
        assert action == Action.requeue(60)
        assert namespace.get("batch/v1", "CronJob", "nightly-backup")

The Events reconcile posts and the writes it makes are real; reads are served from the
caches listed just before (including what this reconcile wrote, as in the operator).
"""

from __future__ import annotations

import threading
from typing import Any

from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api
from operator_kit.runtime.controller import Action, Controller
from operator_kit.runtime.finalizers import Conflict
from operator_kit.runtime.objects import decode
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers
from operator_kit.testing.cluster import FIELD_MANAGER, Namespace, TestCluster


def reconcile_once(controller: Controller[Any], cluster: TestCluster, name: str,
                   namespace: Namespace | str | None = None, *,
                   field_manager: str = FIELD_MANAGER) -> Action | None:
    """Run `controller`'s reconcile of the object `name` (in `namespace`, for a namespaced
    kind) once, as the operator's runner would; its Action, or None.

    Raises what reconcile (or cleanup) raised; `LookupError` when the controller does
    not see the object (it does not exist, or the controller's namespace or selectors
    leave it out); `InvalidResource` when the stored object does not decode; and
    `RuntimeError` when the object changed while its finalizer was being added, or kept
    changing while it was being removed (the operator would look again: call this
    again). A cleanup that changes the object itself (``ctx.patch_status``) is not such
    a change: the finalizer's removal is retried on the object read again, as in the
    operator, and cleanup runs once.
    """
    where = namespace.name if isinstance(namespace, Namespace) else namespace
    api = Api(cluster.client)
    stop = threading.Event()
    informers = Informers(api, stop)
    runner = ControllerRunner(controller, api, field_manager=field_manager,
                              recorder=EventRecorder(api, field_manager), stop=stop,
                              informers=informers)
    kind = runner.resource  # by discovery, for any kind
    if kind.namespaced and not where:
        raise ValueError(f"reconcile_once: {kind.kind} is namespaced; give the namespace "
                         f"of {name!r}")
    for informer in informers.values():
        # The operator's first step for each cache, without the watch that follows.
        informer.relist()
        informer.synced.set()
    key = ((where or "") if kind.namespaced else "", name)
    raw = runner.primary_of(key).get(key)
    if raw is None:
        shown = f"{where}/{name}" if kind.namespaced else name
        raise LookupError(f"reconcile_once: controller {controller.name} sees no {kind.kind} "
                          f"{shown} (watching {runner.primary_of(key).description}): create it "
                          "first, in a namespace the controller watches")
    obj = decode(runner.kind, raw, api.client)
    try:
        return runner.finalize_or_reconcile(obj)
    except Conflict as err:
        raise RuntimeError(f"reconcile_once: {kind.kind} {name} changed while its finalizer "
                           "was being written (409 Conflict, after the retries the operator "
                           "makes); call reconcile_once again") from err
