"""The Backup controller: one CronJob per Backup, status, an Event, and a cleanup.

Each Backup gets a ``batch/v1`` CronJob of the same name, server-side applied with the
Backup as its controller owner (delete the Backup and the garbage collector deletes the
CronJob). The controller also keeps a catalog — a ConfigMap ``backup-catalog`` listing
the namespace's Backups, standing in for an external backup store — and removes the
Backup's entry on deletion through the finalizer ``example.com/cleanup``.

A ConfigMap holds at most 1 MiB, so the catalog has a limit (about 5,000 Backups with
short names): a Backup that no longer fits is not retried forever against a 422; its
``Cataloged`` condition says ``False`` (reason ``CatalogFull``) until room is made.
Workers that race to create the catalog in a fresh namespace do not fail: the one whose
create loses (409) adds its entry to the catalog the other made.
"""

from __future__ import annotations

import copy
import json

from kubernetes.client.exceptions import ApiException

from backup_operator.resources import Backup, BackupStatus
from operator_kit import Action, Context, Controller, Rule, set_condition

CATALOG = "backup-catalog"


def cron_job(backup: Backup) -> dict[str, object]:
    """The CronJob that runs `backup`'s schedule."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": backup.name, "labels": {"app.kubernetes.io/part-of": "backup"}},
        "spec": {
            "schedule": backup.spec.schedule,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{
                    "name": "backup",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", f"echo backing up {backup.spec.database}"],
                }],
            }}}},
        },
    }


class BackupController(Controller[Backup]):
    resource = Backup
    owns = ("batch/v1/CronJob",)
    finalizer = "example.com/cleanup"
    max_concurrent_reconciles = 4
    # The catalog is a ConfigMap this controller reads and writes, not one it owns.
    rules = (Rule([""], ["configmaps"], ["get", "create", "patch"]),)

    def reconcile(self, backup: Backup, ctx: Context) -> Action:
        job = ctx.apply_owned(backup, cron_job(backup))
        cataloged = self._catalog(ctx, backup, add=True)
        last_run = job.get("status", {}).get("lastScheduleTime")
        if backup.status is None or backup.status.observed_generation != backup.generation:
            ctx.event(backup, False, "Scheduled",
                      f"CronJob {backup.name} backs up {backup.spec.database} "
                      f"on '{backup.spec.schedule}'")
        # A copy: patch_status compares with the status `backup` holds now.
        conditions = copy.deepcopy(backup.status.conditions) if backup.status else []
        set_condition(conditions, "Ready", "True", reason="CronJobApplied",
                      message=f"CronJob {backup.name} is up to date",
                      observed_generation=backup.generation)
        if cataloged:
            set_condition(conditions, "Cataloged", "True", reason="InCatalog",
                          message=f"listed in {CATALOG}", observed_generation=backup.generation)
        else:
            set_condition(conditions, "Cataloged", "False", reason="CatalogFull",
                          message=f"{CATALOG} is full (a ConfigMap holds at most 1 MiB): "
                          "delete Backups or shorten names to make room",
                          observed_generation=backup.generation)
        ctx.patch_status(backup, BackupStatus(last_run=last_run,
                                              observed_generation=backup.generation,
                                              conditions=conditions))
        return Action.await_change()

    def cleanup(self, backup: Backup, ctx: Context) -> None:
        self._catalog(ctx, backup, add=False)
        ctx.event(backup, False, "CleanedUp", f"removed {backup.name} from the {CATALOG}")

    def _catalog(self, ctx: Context, backup: Backup, *, add: bool) -> bool:
        """Add or remove `backup` in the namespace's catalog ConfigMap; False when it
        does not fit."""
        entry = json.dumps({"database": backup.spec.database, "schedule": backup.spec.schedule})
        patch = {"data": {backup.name: entry if add else None}}
        for _ in range(3):
            try:
                ctx.patch("v1/ConfigMap", CATALOG, patch)
                return True
            except ApiException as err:
                if err.status == 422 and add and "Too long" in str(err):
                    return False  # the catalog is full: say so in status, not forever
                if err.status != 404:
                    raise
            if not add:
                return True  # no catalog: nothing to remove
            try:
                ctx.create({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": CATALOG, "namespace": backup.namespace},
                            "data": {backup.name: entry}})
                return True
            except ApiException as err:
                if err.status != 409:
                    raise
                # Another worker created it first: add to theirs.
        raise RuntimeError(f"the {CATALOG} ConfigMap kept appearing and disappearing")
