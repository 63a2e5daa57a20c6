"""The Backup webhooks: validation, defaulting, and v1 <-> v2 conversion."""

from __future__ import annotations

from typing import Any

from backup_operator.resources import Backup
from operator_kit.webhooks import AdmissionRequest, Denied, Webhooks

MANAGED_LABEL = "example.com/managed"


def register(webhooks: Webhooks) -> None:
    """Register the Backup webhooks on the operator's app."""

    @webhooks.validate(Backup, "/validate-backup")
    def validate(request: AdmissionRequest[Backup]) -> None:
        backup = request.object
        if backup is not None and not backup.spec.schedule.strip():
            raise Denied("spec.schedule is required")

    @webhooks.mutate(Backup, "/mutate-backup")
    def label(backup: Backup, request: AdmissionRequest[Backup]) -> Backup:
        backup.labels[MANAGED_LABEL] = "true"
        return backup

    @webhooks.convert("/convert", kind=Backup)
    def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
        return convert_backup(obj, desired_api_version)


def convert_backup(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
    """v1 ``spec.database`` <-> v2 ``spec.source.database``; every other field kept."""
    spec = dict(obj.get("spec", {}))
    if desired_api_version == "example.com/v2" and "database" in spec:
        spec["source"] = {"database": spec.pop("database")}
    elif desired_api_version == "example.com/v1" and "source" in spec:
        source = dict(spec.pop("source"))
        spec["database"] = source.pop("database", "")
        if source:  # fields v1 cannot hold would be lost: refuse rather than drop them
            raise Denied(f"spec.source fields {sorted(source)} have no v1 equivalent")
    return {**obj, "spec": spec}
