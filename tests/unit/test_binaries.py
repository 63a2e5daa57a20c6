"""Finding the control plane's binaries: clear errors when they cannot be had."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operator_kit.localcluster import binaries
from operator_kit.localcluster.binaries import BinariesError, find_or_build


def make_executable(path: Path) -> None:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def test_folder_named_by_env_is_used_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("etcd", "kube-apiserver"):
        make_executable(tmp_path / name)
    monkeypatch.setenv("OPERATOR_KIT_BINARIES", str(tmp_path))
    found = find_or_build(log=False)
    assert found.kube_apiserver == tmp_path / "kube-apiserver"
    assert found.kube_controller_manager is None
    assert found.missing() == ["kube-controller-manager", "kubectl"]


def test_folder_without_the_api_server_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_executable(tmp_path / "etcd")
    monkeypatch.setenv("OPERATOR_KIT_BINARIES", str(tmp_path))
    with pytest.raises(BinariesError, match="no executable kube-apiserver"):
        find_or_build(log=False)


def test_no_go_and_no_binaries_says_what_to_install_or_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPERATOR_KIT_BINARIES", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BinariesError) as missing:
        find_or_build(log=False)
    assert "Install Go" in str(missing.value)
    assert "OPERATOR_KIT_BINARIES" in str(missing.value)


def test_wrapper_modules_pin_every_staging_module_to_the_kubernetes_release() -> None:
    gomod = (Path(binaries.__file__).parent / "gomod" / "kubernetes" / "go.mod").read_text()
    minor = binaries.KUBERNETES_VERSION.lstrip("v").split(".", 1)[1]
    requires = [line.split()[:2] for line in gomod.splitlines() if "k8s.io/kubernetes v" in line]
    assert ["k8s.io/kubernetes", binaries.KUBERNETES_VERSION] in requires
    replaced = [line for line in gomod.splitlines() if "=> k8s.io/" in line]
    assert len(replaced) > 25
    assert all(line.rstrip().endswith(f"v0.{minor}") for line in replaced), replaced
    assert os.access(Path(binaries.__file__).parent / "gomod" / "etcd" / "go.mod", os.R_OK)
