"""Naming a kind: a CustomResource class, a "group/version/Kind" string or a client model."""

from __future__ import annotations

import pytest
from kubernetes import client

from operator_kit import Kind
from operator_kit.api.kinds import Kind as KindAgain

from .test_resources import Backup


def test_a_string_names_group_version_and_kind() -> None:
    job = Kind.of("batch/v1/Job")
    assert (job.api_version, job.kind, job.group, job.version) == ("batch/v1", "Job", "batch",
                                                                   "v1")
    assert job.resource_name == "jobs"
    core = Kind.of("v1/ConfigMap")
    assert (core.group, core.version, str(core)) == ("", "v1", "v1/ConfigMap")


def test_a_client_model_class_names_its_built_in_kind() -> None:
    assert Kind.of(client.V1Job) == Kind.of("batch/v1/Job")
    assert Kind.of(client.V1ConfigMap) == Kind.of("v1/ConfigMap")
    assert Kind.of(client.V1Deployment).api_version == "apps/v1"
    assert Kind.of(client.V1Job).resource is client.V1Job


def test_a_custom_resource_class_names_itself() -> None:
    kind = Kind.of(Backup)
    assert kind.custom_resource is Backup
    assert kind.api_version == Backup.api_version() and kind.plural == Backup.plural


def test_bad_kinds_say_how_to_write_one() -> None:
    with pytest.raises(ValueError, match="group/version/Kind"):
        Kind.of("ConfigMap")
    with pytest.raises(TypeError, match="does not name a kind"):
        Kind.of(42)  # type: ignore[arg-type]
    assert KindAgain is Kind
