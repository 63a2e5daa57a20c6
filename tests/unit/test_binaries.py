"""Finding the control plane's binaries: clear errors when they cannot be had."""

from __future__ import annotations

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


UPSTREAM = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require k8s.io/api v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/streaming => ./staging/src/k8s.io/streaming
)
"""


def test_wrapper_gomod_keeps_go_and_godebug_and_pins_staging_modules() -> None:
    gomod = binaries.wrapper_gomod(UPSTREAM, "k8s.io/kubernetes", "v1.37.2", ["k8s.io/x/cmd/a"])
    lines = [line.strip() for line in gomod.splitlines()]
    assert "go 1.26.0" in lines and "godebug default=go1.26" in lines
    assert "require k8s.io/kubernetes v1.37.2" in lines
    assert "k8s.io/api => k8s.io/api v0.37.2" in lines
    assert "k8s.io/streaming => k8s.io/streaming v0.37.2" in lines
    assert "./staging" not in gomod


def test_versions_resolve_to_pinned_patches_and_bad_ones_say_what_is_supported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(binaries.VERSION_ENV, raising=False)
    assert binaries.resolve(None).kubernetes == binaries.DEFAULT_KUBERNETES_VERSION
    assert binaries.resolve("1.35.x") == binaries.SUPPORTED["1.35"]
    assert binaries.resolve("v1.36.1").kubernetes == "v1.36.1"
    monkeypatch.setenv(binaries.VERSION_ENV, "1.36")
    assert binaries.resolve(None).kubernetes == "v1.36.3"
    with pytest.raises(BinariesError, match=r"1\.34 is not supported"):
        binaries.resolve("1.34")
    with pytest.raises(BinariesError, match="not a Kubernetes version"):
        binaries.resolve("latest")
