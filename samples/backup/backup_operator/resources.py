"""The Backup kind: v1 (stored) and v2 (served), declared as dataclasses.

v2 groups what to back up under ``source`` so more sources can join later; the
conversion between the two (see webhooks.py) is a pure re-shaping, so nothing is lost
in either direction. Each version has its own printer columns (the database is at
another path in v2). The status keeps v1's field names (``last_run`` beside
``observedGeneration``); its conditions are the standard `operator_kit.Conditions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataclasses_json import config

from operator_kit import Conditions, CustomResource, PrinterColumn


@dataclass
class BackupSpec:
    """What to back up, and when."""

    database: str = field(metadata={"description": "The database to back up"})
    # Not required by the schema, so that the validating webhook can explain what is missing.
    schedule: str = field(default="", metadata={"description": "Cron schedule, e.g. '0 3 * * *'"})


@dataclass
class BackupStatus:
    """What the operator last saw and did."""

    last_run: str | None = None
    observed_generation: int | None = field(
        default=None, metadata=config(field_name="observedGeneration"))
    conditions: Conditions = field(default_factory=list)


class Backup(CustomResource):
    """A scheduled backup of one database."""

    group = "example.com"
    version = "v1"
    kind = "Backup"
    plural = "backups"
    short_names = ("bk",)
    printer_columns = (
        PrinterColumn("Schedule", ".spec.schedule"),
        PrinterColumn("Database", ".spec.database"),
        PrinterColumn("Last run", ".status.last_run"),
    )
    spec: BackupSpec
    status: BackupStatus


@dataclass
class Source:
    """Where the data comes from."""

    database: str


@dataclass
class BackupSpecV2:
    """v2: the source is a structure of its own."""

    schedule: str
    source: Source


class BackupV2(CustomResource, version_of=Backup):
    """A scheduled backup of one database (v2 shape)."""

    version = "v2"
    printer_columns = (
        PrinterColumn("Schedule", ".spec.schedule"),
        PrinterColumn("Database", ".spec.source.database"),
        PrinterColumn("Last run", ".status.last_run"),
    )
    spec: BackupSpecV2
    status: BackupStatus
