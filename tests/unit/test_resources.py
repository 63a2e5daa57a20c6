"""operator_kit.resources: declaring a kind, building objects, the API dict round-trip."""

from __future__ import annotations

import copy
import datetime as dt
import enum
import json
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from operator_kit.api.resources import CustomResource, InvalidResource, PrinterColumn


class Mode(enum.Enum):
    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass
class Window:
    start: str
    hours: int = 1


@dataclass
class BackupSpec:
    """What to back up and when."""

    schedule: str = field(metadata={"description": "Cron schedule"})
    database: str
    retain: int = 7
    tags: dict[str, str] = field(default_factory=dict)
    mode: Mode = Mode.FULL
    window: Optional[Window] = None  # noqa: UP045
    not_before: Optional[dt.datetime] = None  # noqa: UP045


@dataclass
class BackupStatus:
    last_run: Optional[str] = None  # noqa: UP045


class Backup(CustomResource):
    group = "example.com"
    version = "v1"
    kind = "Backup"
    short_names = ("bk",)
    printer_columns = (PrinterColumn("Schedule", ".spec.schedule"),)
    spec: BackupSpec
    status: BackupStatus


@dataclass
class BackupSpecV2:
    schedule: str
    databases: list[str]


class BackupV2(CustomResource, version_of=Backup):
    version = "v2"
    spec: BackupSpecV2
    status: BackupStatus


def api_object() -> dict[str, Any]:
    """A Backup as the API server returns it, with fields this code does not know."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Backup",
        "metadata": {
            "name": "nightly",
            "namespace": "default",
            "uid": "1234",
            "generation": 3,
            "resourceVersion": "42",
            "labels": {"app": "db"},
            "annotations": {"note": "x"},
            "finalizers": ["example.com/cleanup"],
            "deletionTimestamp": "2024-01-02T03:04:05Z",
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "9"}],
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "schedule": "0 * * * *",
            "database": "orders",
            "retain": 3,
            "mode": "incremental",
            "window": {"start": "01:00", "future_knob": True},
            "not_before": "2024-01-02T03:04:05Z",
            "added_in_v3": {"x": [1, 2]},
        },
        "status": {"last_run": None, "observedGeneration": 3},
        "topLevelExtra": "kept",
    }


# ---------------------------------------------------------------------- declaring


def test_root_declares_group_version_kind_and_defaults() -> None:
    assert Backup.api_version() == "example.com/v1"
    assert Backup.plural == "backups"
    assert Backup.namespaced is True
    assert Backup.short_names == ("bk",)


def test_plural_can_be_set() -> None:
    class Policy(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Policy"
        plural = "policies"
        spec: BackupSpec

    assert Policy.plural == "policies"


@pytest.mark.parametrize("missing", ["group", "version", "kind"])
def test_a_root_without_group_version_or_kind_is_a_type_error_naming_it(missing: str) -> None:
    attrs: dict[str, Any] = {"group": "example.com", "version": "v1", "kind": "Thing"}
    del attrs[missing]
    attrs["__annotations__"] = {"spec": BackupSpec}
    with pytest.raises(TypeError, match=rf"^Thing: a custom resource needs {missing} "):
        type("Thing", (CustomResource,), attrs)


@pytest.mark.parametrize(
    ("attr", "value", "message"),
    [
        ("group", "example", "group 'example' must be a lowercase DNS name with a dot"),
        ("version", "V1", "version 'V1' must be a lowercase DNS label"),
        ("kind", "my-kind", "kind 'my-kind' must be alphanumeric"),
        ("plural", "Things", "plural 'Things' must be a lowercase DNS label"),
    ],
)
def test_malformed_names_are_refused(attr: str, value: str, message: str) -> None:
    attrs: dict[str, Any] = {"group": "example.com", "version": "v1", "kind": "Thing"}
    attrs[attr] = value
    attrs["__annotations__"] = {"spec": BackupSpec}
    with pytest.raises(TypeError, match=f"^Thing: {message}"):
        type("Thing", (CustomResource,), attrs)


def test_spec_must_be_annotated_with_a_dataclass() -> None:
    with pytest.raises(TypeError, match=r"^NoSpec: annotate spec with a dataclass"):

        class NoSpec(CustomResource):
            group = "example.com"
            version = "v1"
            kind = "NoSpec"

    with pytest.raises(TypeError, match=r"^DictSpec: annotate spec with a dataclass .*not dict"):

        class DictSpec(CustomResource):
            group = "example.com"
            version = "v1"
            kind = "DictSpec"
            spec: dict[str, Any]


def test_status_must_be_a_dataclass_when_annotated() -> None:
    with pytest.raises(TypeError, match=r"^Bad: annotate status with a dataclass"):

        class Bad(CustomResource):
            group = "example.com"
            version = "v1"
            kind = "Bad"
            spec: BackupSpec
            status: str


def test_a_spec_the_schema_cannot_express_fails_at_class_creation() -> None:
    @dataclass
    class SetSpec:
        tags: set[str]

    with pytest.raises(TypeError, match=r"^Tagged\.spec\.tags: cannot express set\[str\]"):

        class Tagged(CustomResource):
            group = "example.com"
            version = "v1"
            kind = "Tagged"
            spec: SetSpec


def test_spec_annotation_may_name_a_class_local_to_the_function() -> None:
    @dataclass
    class LocalInner:
        n: int

    @dataclass
    class LocalSpec:
        inner: LocalInner  # a string here: this module postpones annotations

    class Local(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Local"
        spec: LocalSpec

    assert Local.from_dict({"spec": {"inner": {"n": 1}}}).spec == LocalSpec(LocalInner(1))


def test_status_is_optional_and_may_be_annotated_optional() -> None:
    class NoStatus(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "NoStatus"
        spec: BackupSpec

    class MaybeStatus(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "MaybeStatus"
        spec: BackupSpec
        status: Optional[BackupStatus]  # noqa: UP045

    assert NoStatus.status_type() is None
    assert MaybeStatus.status_type() is BackupStatus
    assert Backup.spec_type() is BackupSpec


def test_the_base_class_is_not_a_kind() -> None:
    with pytest.raises(TypeError, match="CustomResource is not a custom resource kind"):
        CustomResource("x", BackupSpec(schedule="s", database="d"))


# ----------------------------------------------------------------------- versions


def test_versions_lists_the_root_first_then_in_declaration_order() -> None:
    assert Backup.versions() == (Backup, BackupV2)
    assert BackupV2.versions() == (Backup, BackupV2)


def test_a_version_inherits_the_kinds_names_from_the_root() -> None:
    assert BackupV2.api_version() == "example.com/v2"
    assert (BackupV2.group, BackupV2.kind, BackupV2.plural) == ("example.com", "Backup", "backups")
    assert BackupV2.short_names == ("bk",)
    assert BackupV2.namespaced is True
    assert BackupV2.printer_columns == Backup.printer_columns


def test_the_root_is_the_storage_version_by_default() -> None:
    assert Backup.storage_version() is Backup
    assert BackupV2.storage_version() is Backup


def _kind(name: str, **attrs: Any) -> type[CustomResource]:
    body: dict[str, Any] = {"group": "example.com", "version": "v1", "kind": name}
    body.update(attrs)
    body["__annotations__"] = {"spec": BackupSpec}
    return type(name, (CustomResource,), body)


def _version(name: str, root: type[CustomResource], **attrs: Any) -> type[CustomResource]:
    body: dict[str, Any] = {"__annotations__": {"spec": BackupSpec}, **attrs}
    return type(name, (CustomResource,), body, version_of=root)


def test_a_version_with_storage_true_is_the_storage_version() -> None:
    root = _kind("Db")
    v2 = _version("DbV2", root, version="v2", storage=True)
    _version("DbV3", root, version="v3")
    assert root.storage_version() is v2


def test_two_storage_versions_are_refused() -> None:
    root = _kind("Db")
    _version("DbV2", root, version="v2", storage=True)
    with pytest.raises(TypeError, match=r"^DbV3: DbV2 is already the storage version of Db"):
        _version("DbV3", root, version="v3", storage=True)


def test_no_storage_version_is_refused() -> None:
    root = _kind("Db", storage=False)
    _version("DbV2", root, version="v2")
    with pytest.raises(TypeError, match=r"^Db: no storage version; set storage = True"):
        root.storage_version()


def test_a_version_needs_its_own_distinct_version_name() -> None:
    root = _kind("Db")
    with pytest.raises(TypeError, match=r"^DbV2: a version of Db needs its own version"):
        _version("DbV2", root)
    with pytest.raises(TypeError, match=r"^DbV1: version 'v1' is already declared by Db"):
        _version("DbV1", root, version="v1")


def test_a_version_cannot_change_what_all_versions_share() -> None:
    root = _kind("Db")
    with pytest.raises(TypeError, match=r"^DbV2: group is shared by every version of Db"):
        _version("DbV2", root, version="v2", group="other.com")
    with pytest.raises(TypeError, match=r"^DbV2: namespaced is shared by every version"):
        _version("DbV2", root, version="v2", namespaced=False)


def test_version_of_a_version_joins_the_same_kind() -> None:
    root = _kind("Db")
    v2 = _version("DbV2", root, version="v2")
    v3 = _version("DbV3", v2, version="v3")
    assert root.versions() == (root, v2, v3)


def test_version_of_must_be_a_kind() -> None:
    with pytest.raises(TypeError, match=r"^Stray: version_of must be a CustomResource kind"):
        _version("Stray", CustomResource, version="v2")


def test_each_kind_keeps_its_own_versions() -> None:
    first, second = _kind("Db"), _kind("Db")
    _version("DbV2", first, version="v2")
    assert second.versions() == (second,)


def test_a_version_may_set_its_own_printer_columns() -> None:
    columns = (PrinterColumn("Databases", ".spec.databases"),)
    v = _version("DbV2", _kind("Db"), version="v2", printer_columns=columns)
    assert v.printer_columns == columns


# ------------------------------------------------------------------ building one


def test_constructor_builds_metadata_spec_and_default_status() -> None:
    spec = BackupSpec(schedule="0 * * * *", database="orders")
    b = Backup("nightly", spec, namespace="default", labels={"a": "b"}, annotations={"c": "d"})
    assert b.metadata == {
        "name": "nightly",
        "namespace": "default",
        "labels": {"a": "b"},
        "annotations": {"c": "d"},
    }
    assert b.spec is spec
    assert b.status == BackupStatus()
    assert (b.name, b.namespace) == ("nightly", "default")


def test_constructor_leaves_out_namespace_when_not_given() -> None:
    b = Backup("nightly", BackupSpec(schedule="s", database="d"))
    assert b.metadata == {"name": "nightly"}
    assert b.namespace is None


def test_status_is_none_when_its_dataclass_has_required_fields() -> None:
    @dataclass
    class StrictStatus:
        phase: str

    class Job(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Job"
        spec: BackupSpec
        status: StrictStatus

    assert Job("j", BackupSpec(schedule="s", database="d")).status is None
    given = StrictStatus("Running")
    assert Job("j", BackupSpec(schedule="s", database="d"), status=given).status is given


def test_spec_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^Backup: spec must be a BackupSpec, got dict"):
        Backup("nightly", {"schedule": "s"})


def test_a_cluster_scoped_object_takes_no_namespace() -> None:
    cluster = _kind("Cluster", namespaced=False)
    with pytest.raises(ValueError, match="Cluster is cluster-scoped; 'c' cannot have a namespace"):
        cluster("c", BackupSpec(schedule="s", database="d"), namespace="default")


def test_metadata_properties_read_the_api_metadata() -> None:
    b = Backup.from_dict(api_object())
    assert b.uid == "1234"
    assert b.generation == 3
    assert b.resource_version == "42"
    assert b.deletion_timestamp == "2024-01-02T03:04:05Z"
    assert b.labels == {"app": "db"}
    assert b.annotations == {"note": "x"}
    assert b.finalizers == ["example.com/cleanup"]
    assert b.owner_references == [{"kind": "Thing", "name": "t", "uid": "9"}]


def test_unset_metadata_properties_are_none() -> None:
    b = Backup("nightly", BackupSpec(schedule="s", database="d"))
    assert (b.uid, b.generation, b.resource_version, b.deletion_timestamp) == (None,) * 4


def test_labels_annotations_finalizers_are_mutable_views_created_when_missing() -> None:
    b = Backup("nightly", BackupSpec(schedule="s", database="d"))
    b.labels["example.com/managed"] = "true"
    b.annotations["note"] = "hi"
    b.finalizers.append("example.com/cleanup")
    b.owner_references.append({"kind": "Thing"})
    assert b.metadata["labels"] == {"example.com/managed": "true"}
    assert b.metadata["annotations"] == {"note": "hi"}
    assert b.metadata["finalizers"] == ["example.com/cleanup"]
    assert b.metadata["ownerReferences"] == [{"kind": "Thing"}]
    assert b.to_dict()["metadata"]["finalizers"] == ["example.com/cleanup"]


# ------------------------------------------------------------------ the round-trip


def test_from_dict_then_to_dict_loses_nothing() -> None:
    data = api_object()
    assert Backup.from_dict(data).to_dict() == data


def test_from_dict_gives_typed_spec_and_status() -> None:
    b = Backup.from_dict(api_object())
    assert b.spec.mode is Mode.INCREMENTAL
    assert b.spec.window == Window(start="01:00", hours=1)
    assert b.spec.not_before == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert b.spec.tags == {}
    assert b.status == BackupStatus(last_run=None)


def test_changes_show_in_to_dict_and_unknown_fields_stay() -> None:
    b = Backup.from_dict(api_object())
    b.spec.retain = 10
    assert b.spec.window is not None
    b.spec.window.hours = 4
    b.status.last_run = "2024-01-02T03:04:05Z"
    out = b.to_dict()
    assert out["spec"]["retain"] == 10
    assert out["spec"]["window"] == {"start": "01:00", "hours": 4, "future_knob": True}
    assert out["spec"]["added_in_v3"] == {"x": [1, 2]}
    assert out["status"] == {"last_run": "2024-01-02T03:04:05Z", "observedGeneration": 3}
    assert out["metadata"]["managedFields"] == [{"manager": "kubectl"}]
    assert out["topLevelExtra"] == "kept"


def test_to_dict_emits_api_version_kind_metadata_spec_status() -> None:
    b = Backup("nightly", BackupSpec(schedule="s", database="d"), namespace="default")
    assert b.to_dict() == {
        "apiVersion": "example.com/v1",
        "kind": "Backup",
        "metadata": {"name": "nightly", "namespace": "default"},
        "spec": {"schedule": "s", "database": "d", "retain": 7, "tags": {}, "mode": "full"},
        "status": {},
    }


def test_to_dict_omits_status_when_none() -> None:
    b = Backup("nightly", BackupSpec(schedule="s", database="d"))
    b.status = None  # type: ignore[assignment]  # annotate BackupStatus | None to allow it
    assert "status" not in b.to_dict()


def test_a_missing_status_reads_as_the_default_status_and_stays_missing() -> None:
    data = api_object()
    del data["status"]
    b = Backup.from_dict(data)
    assert b.status == BackupStatus()
    assert b.to_dict() == data
    b.status.last_run = "now"
    assert b.to_dict()["status"] == {"last_run": "now"}


def test_a_null_status_reads_as_none() -> None:
    data = api_object()
    data["status"] = None
    assert Backup.from_dict(data).status is None


def test_a_missing_spec_with_required_fields_is_invalid() -> None:
    data = api_object()
    del data["spec"]
    with pytest.raises(InvalidResource, match=r"^Backup default/nightly: spec: required field"):
        Backup.from_dict(data)


def test_to_dict_and_from_dict_copy_rather_than_share() -> None:
    data = api_object()
    b = Backup.from_dict(data)
    data["metadata"]["labels"]["app"] = "changed"
    data["spec"]["added_in_v3"]["x"].append(3)
    out = b.to_dict()
    assert out["metadata"]["labels"] == {"app": "db"}
    assert out["spec"]["added_in_v3"] == {"x": [1, 2]}
    out["metadata"]["labels"]["app"] = "changed"
    assert b.labels == {"app": "db"}


def test_wrong_type_is_invalid_resource_naming_kind_object_and_field() -> None:
    data = api_object()
    data["spec"]["retain"] = "x"
    with pytest.raises(InvalidResource) as e:
        Backup.from_dict(data)
    assert str(e.value) == "Backup default/nightly: spec.retain: expected int, got str 'x'"
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["spec"].pop("database"),
            "Backup default/nightly: spec.database: required field is missing",
        ),
        (
            lambda d: d["spec"]["window"].update(hours="2"),
            "Backup default/nightly: spec.window.hours: expected int, got str '2'",
        ),
        (
            lambda d: d["spec"].update(mode="FULL"),
            "Backup default/nightly: spec.mode: expected one of 'full', 'incremental'",
        ),
        (
            lambda d: d["status"].update(last_run=5),
            "Backup default/nightly: status.last_run: expected str, got int 5",
        ),
        (
            lambda d: d.update(apiVersion="example.com/v2"),
            "Backup default/nightly: apiVersion: expected example.com/v1, got str",
        ),
        (
            lambda d: d.update(kind="Restore"),
            "Backup default/nightly: kind: expected Backup, got str 'Restore'",
        ),
        (lambda d: d.update(metadata=[]), "Backup: metadata: expected an object, got list"),
        (lambda d: d.update(spec="x"), "Backup default/nightly: spec: expected object, got str"),
    ],
)
def test_invalid_dicts_are_refused_with_a_clear_message(change: Any, message: str) -> None:
    data = api_object()
    change(data)
    with pytest.raises(InvalidResource) as e:
        Backup.from_dict(data)
    assert str(e.value).startswith(message)


def test_a_non_mapping_is_refused() -> None:
    with pytest.raises(InvalidResource, match=r"^Backup: expected an object, got list"):
        Backup.from_dict([])  # type: ignore[arg-type]


def test_cluster_scoped_objects_are_named_without_namespace_in_errors() -> None:
    cluster = _kind("Cluster", namespaced=False)
    with pytest.raises(InvalidResource, match=r"^Cluster c: spec.schedule: required"):
        cluster.from_dict({"metadata": {"name": "c"}, "spec": {"database": "d"}})


def test_each_version_class_reads_its_own_api_version() -> None:
    data = {
        "apiVersion": "example.com/v2",
        "kind": "Backup",
        "metadata": {"name": "n"},
        "spec": {"schedule": "s", "databases": ["a", "b"]},
    }
    v2 = BackupV2.from_dict(data)
    assert v2.spec == BackupSpecV2(schedule="s", databases=["a", "b"])
    assert v2.to_dict() == data


def test_a_kind_without_status_keeps_a_status_key_as_unknown() -> None:
    class NoStatus(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "NoStatus"
        spec: BackupSpec

    data = {"metadata": {"name": "n"}, "spec": {"schedule": "s", "database": "d"}, "status": 1}
    obj = NoStatus.from_dict(data)
    assert obj.status is None
    assert obj.to_dict()["status"] == 1


def test_to_dict_is_a_body_the_kubernetes_client_accepts() -> None:
    from kubernetes.client import ApiClient

    body = Backup.from_dict(api_object()).to_dict()
    assert ApiClient().sanitize_for_serialization(body) == body
    assert json.loads(json.dumps(body)) == body


def test_objects_compare_by_their_api_dict() -> None:
    a = Backup.from_dict(api_object())
    b = Backup.from_dict(copy.deepcopy(api_object()))
    assert a == b
    b.spec.retain = 1
    assert a != b
    assert a != BackupV2("nightly", BackupSpecV2(schedule="s", databases=[]))


def test_repr_shows_name_namespace_spec_and_status() -> None:
    b = Backup("nightly", BackupSpec(schedule="s", database="d"), namespace="default")
    assert repr(b).startswith("Backup(name='nightly', namespace='default', spec=BackupSpec(")
