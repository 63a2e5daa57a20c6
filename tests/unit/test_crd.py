"""operator_kit.manifests._crd: the CustomResourceDefinition written from the classes."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import yaml

from operator_kit.api.resources import CustomResource, PrinterColumn
from operator_kit.manifests import WebhookTarget
from operator_kit.manifests._crd import crd, with_conversion_webhook


@dataclass
class BackupSpec:
    """What to back up and when."""

    schedule: str = field(metadata={"description": "Cron schedule"})
    database: str


@dataclass
class BackupSpecV2:
    schedule: str
    databases: list[str] = field(default_factory=list)


@dataclass
class BackupStatus:
    last_run: Optional[str] = None  # noqa: UP045


class Backup(CustomResource):
    """A database backup on a schedule."""

    group = "example.com"
    version = "v1"
    kind = "Backup"
    short_names = ("bk",)
    printer_columns = (
        PrinterColumn("Schedule", ".spec.schedule"),
        PrinterColumn("Last run", ".status.last_run", type="string"),
    )
    spec: BackupSpec
    status: BackupStatus


class BackupV2(CustomResource, version_of=Backup):
    version = "v2"
    printer_columns = (
        PrinterColumn("Databases", ".spec.databases", description="what", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )
    spec: BackupSpecV2
    status: BackupStatus


@dataclass
class Settings:
    level: int = 1


class Tenant(CustomResource):
    group = "example.com"
    version = "v1alpha1"
    kind = "Tenant"
    namespaced = False
    categories = ("all",)
    spec: Settings


def _versions(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in doc["spec"]["versions"]}


def test_crd_is_named_plural_dot_group() -> None:
    doc = crd(Backup)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"] == {"name": "backups.example.com"}
    assert doc["spec"]["group"] == "example.com"


def test_names_come_from_the_kind() -> None:
    assert crd(Backup)["spec"]["names"] == {
        "kind": "Backup",
        "listKind": "BackupList",
        "plural": "backups",
        "singular": "backup",
        "shortNames": ["bk"],
    }


def test_short_names_are_omitted_when_none_and_categories_listed_when_set() -> None:
    names = crd(Tenant)["spec"]["names"]
    assert "shortNames" not in names
    assert names["categories"] == ["all"]


def test_scope_follows_namespaced() -> None:
    assert crd(Backup)["spec"]["scope"] == "Namespaced"
    assert crd(Tenant)["spec"]["scope"] == "Cluster"


def test_every_version_is_listed_in_order_with_one_storage_version() -> None:
    versions = crd(Backup)["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1", True, True),
        ("v2", True, False),
    ]


def test_any_version_class_gives_the_same_crd() -> None:
    assert crd(BackupV2) == crd(Backup)


def test_storage_true_moves_storage_to_that_version() -> None:
    class Db(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Db"
        spec: Settings

    class DbV2(CustomResource, version_of=Db):
        version = "v2"
        storage = True
        served = False
        spec: Settings

    assert [(v["name"], v["served"], v["storage"]) for v in crd(Db)["spec"]["versions"]] == [
        ("v1", True, False),
        ("v2", False, True),
    ]


def test_no_storage_version_is_a_clear_error() -> None:
    class Db(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Db"
        storage = False
        spec: Settings

    with pytest.raises(TypeError, match="Db: no storage version; set storage = True on one"):
        crd(Db)


def test_version_schema_has_spec_and_status_from_the_dataclasses() -> None:
    schema = _versions(crd(Backup))["v1"]["schema"]["openAPIV3Schema"]
    assert schema == {
        "description": "A database backup on a schedule.",
        "type": "object",
        "properties": {
            "spec": {
                "description": "What to back up and when.",
                "type": "object",
                "properties": {
                    "schedule": {"description": "Cron schedule", "type": "string"},
                    "database": {"type": "string"},
                },
                "required": ["schedule", "database"],
            },
            "status": {
                "type": "object",
                "properties": {"last_run": {"type": "string", "nullable": True}},
            },
        },
        "required": ["spec"],
    }


def test_each_version_has_its_own_schema() -> None:
    spec = _versions(crd(Backup))["v2"]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["databases"] == {
        "type": "array",
        "items": {"type": "string"},
        "default": [],
    }


def test_spec_is_not_required_when_all_its_fields_have_defaults() -> None:
    schema = _versions(crd(Tenant))["v1alpha1"]["schema"]["openAPIV3Schema"]
    assert "required" not in schema
    assert "description" not in schema


def test_status_subresource_only_when_the_kind_has_a_status() -> None:
    assert _versions(crd(Backup))["v1"]["subresources"] == {"status": {}}
    tenant = _versions(crd(Tenant))["v1alpha1"]
    assert "subresources" not in tenant
    assert "status" not in tenant["schema"]["openAPIV3Schema"]["properties"]


def test_printer_columns_become_additional_printer_columns() -> None:
    versions = _versions(crd(Backup))
    assert versions["v1"]["additionalPrinterColumns"] == [
        {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
        {"name": "Last run", "type": "string", "jsonPath": ".status.last_run"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    assert versions["v2"]["additionalPrinterColumns"] == [
        {
            "name": "Databases",
            "type": "string",
            "jsonPath": ".spec.databases",
            "description": "what",
            "priority": 1,
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def test_printer_columns_are_omitted_when_empty() -> None:
    assert "additionalPrinterColumns" not in _versions(crd(Tenant))["v1alpha1"]


def test_printer_column_type_and_json_path_are_checked() -> None:
    with pytest.raises(ValueError, match="PrinterColumn 'X': type 'text' is not one of string"):
        PrinterColumn("X", ".spec.x", type="text")
    with pytest.raises(ValueError, match=r"json_path 'spec\.x' must start with '\.'"):
        PrinterColumn("X", "spec.x")


def test_crd_is_deterministic_with_stable_key_order() -> None:
    assert json.dumps(crd(Backup)) == json.dumps(crd(Backup))


def test_crd_is_plain_yaml() -> None:
    doc = crd(Backup)
    assert yaml.safe_load(yaml.safe_dump(doc)) == doc


def test_crd_returns_a_new_dict_each_time() -> None:
    doc = crd(Backup)
    doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"].clear()
    assert crd(Backup)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]


# ----------------------------------------------------------- conversion webhook


def test_with_conversion_webhook_adds_the_webhook_strategy() -> None:
    doc = with_conversion_webhook(
        crd(Backup), WebhookTarget("backup-operator", "ops", ca_bundle=b"PEM"))
    assert doc["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {
                    "name": "backup-operator",
                    "namespace": "ops",
                    "path": "/convert",
                    "port": 443,
                },
                "caBundle": base64.b64encode(b"PEM").decode(),
            },
        },
    }


def test_with_conversion_webhook_takes_path_and_port_and_may_omit_ca_bundle() -> None:
    doc = with_conversion_webhook(crd(Backup), WebhookTarget("s", "n", port=8443),
                                  "/convert-backups")
    client_config = doc["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client_config == {
        "service": {"name": "s", "namespace": "n", "path": "/convert-backups", "port": 8443}
    }


def test_with_conversion_webhook_leaves_its_input_unchanged() -> None:
    original = crd(Backup)
    before = copy.deepcopy(original)
    doc = with_conversion_webhook(original, WebhookTarget("s", "n"))
    assert original == before
    assert {k: v for k, v in doc["spec"].items() if k != "conversion"} == original["spec"]


def test_with_conversion_webhook_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="needs a CustomResourceDefinition"):
        with_conversion_webhook({"kind": "Service"}, WebhookTarget("s", "n"))
    with pytest.raises(ValueError, match="path 'convert' must start with '/'"):
        with_conversion_webhook(crd(Backup), WebhookTarget("s", "n"), "convert")


def test_a_deprecated_version_says_so_with_its_warning_and_the_others_do_not() -> None:
    @dataclass
    class Spec:
        size: int = 0

    class Old(CustomResource):
        group = "deprecation.operator-kit.test"
        version = "v1"
        kind = "Old"
        spec: Spec

    class OldV2(CustomResource, version_of=Old):
        version = "v2"
        spec: Spec
        storage = True

    class OldV1beta1(CustomResource, version_of=Old):
        version = "v1beta1"
        spec: Spec
        deprecated = True

    Old.deprecated = "example.com/v1 Old is deprecated; use v2"
    try:
        versions = {v["name"]: v for v in crd(Old)["spec"]["versions"]}
    finally:
        del Old.deprecated
    assert versions["v1"]["deprecated"] is True
    assert versions["v1"]["deprecationWarning"] == "example.com/v1 Old is deprecated; use v2"
    assert versions["v1beta1"]["deprecated"] is True
    assert "deprecationWarning" not in versions["v1beta1"]
    assert "deprecated" not in versions["v2"]
