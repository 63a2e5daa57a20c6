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


ETCD_36_UPSTREAM = """module go.etcd.io/etcd/server/v3

go 1.24

replace (
	go.etcd.io/etcd/api/v3 => ../api
	go.etcd.io/etcd/client/pkg/v3 => ../client/pkg
)

// Bad imports are sometimes causing attempts to pull that code.
// This makes the error more explicit.
replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY

replace go.etcd.io/tests/v3 => ./FORBIDDEN_DEPENDENCY
"""


def test_wrapper_gomod_pins_etcd_siblings_and_skips_its_forbidden_dependency_guards() -> None:
    # etcd v3.6.x's server/go.mod, as the Go module proxy serves it: pinning the guards
    # ("go.etcd.io/etcd v3.6.16") is a go.mod go refuses (v3 without /v3 in the path).
    gomod = binaries.wrapper_gomod(ETCD_36_UPSTREAM, "go.etcd.io/etcd/server/v3", "v3.6.16",
                                   ["go.etcd.io/etcd/server/v3"])
    lines = [line.strip() for line in gomod.splitlines()]
    assert "go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.16" in lines
    assert "go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v3.6.16" in lines
    assert "FORBIDDEN" not in gomod and "go.etcd.io/tests" not in gomod
    assert not any(line.startswith("go.etcd.io/etcd =>") for line in lines)


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


@pytest.mark.parametrize(
    ("written", "kubernetes", "etcd"),
    [
        ("1.35", "v1.35.4", "v3.6.16"),
        ("1.35.x", "v1.35.4", "v3.6.16"),
        (" v1.35.4 ", "v1.35.4", "v3.6.16"),
        ("1.36", "v1.36.3", "v3.6.16"),
        ("1.37.x", "v1.37.2", "v3.7.3"),
        ("v1.37.2", "v1.37.2", "v3.7.3"),
        ("1.37.0", "v1.37.0", "v3.7.3"),  # an exact patch runs with its minor's etcd
    ],
)
def test_each_way_of_writing_a_version_selects_its_release(
    written: str, kubernetes: str, etcd: str
) -> None:
    assert binaries.resolve(written) == binaries.Release(kubernetes, etcd)


def test_the_default_is_1_37_2_the_newest_supported_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(binaries.VERSION_ENV, raising=False)
    newest = max(binaries.SUPPORTED, key=lambda minor: int(minor.split(".")[1]))
    assert binaries.DEFAULT_KUBERNETES_VERSION == binaries.SUPPORTED[newest].kubernetes == "v1.37.2"
    assert binaries.resolve(None) == binaries.SUPPORTED["1.37"]
    assert sorted(binaries.SUPPORTED) == ["1.35", "1.36", "1.37"]
    assert all(r.minor == minor for minor, r in binaries.SUPPORTED.items())


def test_an_explicit_version_beats_the_env_var_and_errors_name_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(binaries.VERSION_ENV, "1.35")
    assert binaries.resolve(None).kubernetes == "v1.35.4"
    assert binaries.resolve("1.36").kubernetes == "v1.36.3"
    monkeypatch.setenv(binaries.VERSION_ENV, "")
    assert binaries.resolve(None).kubernetes == binaries.DEFAULT_KUBERNETES_VERSION
    monkeypatch.setenv(binaries.VERSION_ENV, "2.0")
    with pytest.raises(BinariesError, match=f"^{binaries.VERSION_ENV}='2.0' is not a Kuber"):
        binaries.resolve(None)
    for bad in ("", "1", "1.37.2-rc.0", "1.37.y", "v1.37.2.1"):
        with pytest.raises(BinariesError, match=r"^--kubernetes-version=.* is not a Kubernetes"):
            binaries.resolve(bad)
    with pytest.raises(BinariesError) as unsupported:
        binaries.resolve("1.38")
    message = str(unsupported.value)
    assert "1.38 is not supported" in message and "1.35.x (v1.35.4)" in message
    assert "\n" not in message


def test_cache_layout_one_folder_per_kubernetes_release_and_per_etcd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bin_dir = tmp_path / "operator_kit" / "bin"
    k35, etcd35 = binaries.cache_folders(binaries.SUPPORTED["1.35"])
    assert (k35, etcd35) == (bin_dir / "kubernetes-v1.35.4", bin_dir / "etcd-v3.6.16")
    k37, etcd37 = binaries.cache_folders(binaries.SUPPORTED["1.37"])
    assert (k37, etcd37) == (bin_dir / "kubernetes-v1.37.2", bin_dir / "etcd-v3.7.3")
    assert binaries.cache_folders(binaries.SUPPORTED["1.36"])[1] == etcd35, "etcd 3.6 is shared"


def test_a_cached_release_is_used_without_go_and_only_once_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPERATOR_KIT_BINARIES", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-go-here"))
    release = binaries.resolve("1.35")
    k8s, etcd = binaries.cache_folders(release)
    for folder, names in ((k8s, binaries._KUBERNETES_COMMANDS), (etcd, ("etcd",))):
        folder.mkdir(parents=True)
        for name in names:
            make_executable(folder / name)
    assert not binaries.is_cached(release)
    with pytest.raises(BinariesError, match="Install Go"):  # no marker: a half-done build
        find_or_build("1.35", log=False)
    for folder in (k8s, etcd):
        (folder / ".complete").write_text("done\n")
    assert binaries.is_cached(release)
    assert not binaries.is_cached(binaries.resolve("1.37"))
    found = find_or_build("1.35", log=False)
    assert found.kube_apiserver == k8s / "kube-apiserver"
    assert found.kubectl == k8s / "kubectl"
    assert found.etcd == etcd / "etcd"
    assert found.kubernetes_version == "v1.35.4"


def test_localcluster_command_line_rejects_a_bad_version_as_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator_kit.localcluster.__main__ import main

    monkeypatch.delenv(binaries.VERSION_ENV, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["build", "--kubernetes-version", "1.34"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--kubernetes-version='1.34': Kubernetes 1.34 is not supported" in err
    monkeypatch.setenv(binaries.VERSION_ENV, "newest")
    with pytest.raises(SystemExit) as exited:
        main(["up", "--dir", "/nonexistent/plane"])
    assert exited.value.code == 2
    assert f"{binaries.VERSION_ENV}='newest'" in capsys.readouterr().err
