"""The node's pure parts: the machine check, its configs, the plane's commands with and
without a node, and images written reproducibly. tests/cluster/test_node.py runs one."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

from operator_kit import _pki
from operator_kit.localcluster import __main__ as command_line
from operator_kit.localcluster import binaries, images, node
from operator_kit.localcluster.plane import CONTROLLERS, LocalCluster, _State


def test_a_machine_without_root_cannot_run_a_node_and_says_so_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(node.NodeError) as refused:
        node.check_machine()
    assert "needs root" in str(refused.value) and "without --node" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_missing_program_names_its_package_and_the_install_command(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(node, "_read", lambda path: "nodev\toverlay\n")
    (tmp_path / "memory").mkdir()
    monkeypatch.setattr(node, "_CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(node.shutil, "which",
                        lambda program: None if program == "runc" else "/usr/bin/" + program)
    with pytest.raises(node.NodeError) as refused:
        node.check_machine()
    assert "runc (Debian package runc)" in str(refused.value)
    assert node.INSTALL_COMMAND in str(refused.value)


def test_up_node_on_a_machine_that_cannot_run_one_starts_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(Exception, match="needs root"):
        LocalCluster(tmp_path / "plane").up(node=True)
    assert not (tmp_path / "plane").exists()


def test_packages_prints_the_one_install_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert command_line.main(["packages"]) == 0
    assert capsys.readouterr().out.strip() == node.INSTALL_COMMAND
    assert node.INSTALL_COMMAND.startswith("apt-get update && apt-get install -y containerd")


def test_node_check_says_why_no_node_can_run_without_starting_or_building_anything(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert command_line.main(["node-check", "--dir", str(tmp_path / "plane")]) == 1
    assert capsys.readouterr().err.startswith("no node: a node needs root")
    monkeypatch.setattr(node, "check_machine", lambda: None)
    monkeypatch.setattr(command_line, "check_machine", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.delenv("OPERATOR_KIT_BINARIES", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    assert command_line.main(["node-check", "--dir", str(tmp_path / "plane")]) == 1
    said = capsys.readouterr().err
    assert "the node's binaries are not built" in said
    assert "localcluster build --node` builds them once" in said
    assert not (tmp_path / "cache").exists() and not (tmp_path / "plane").exists()
    built = binaries.node_cache_folder(binaries.resolve(None))
    built.mkdir(parents=True)
    (built / ".complete").write_text("built\n")
    assert command_line.main(["node-check", "--dir", str(tmp_path / "plane")]) == 0
    assert capsys.readouterr().err == "a node can run here\n"


def test_node_check_names_the_node_binaries_missing_from_operator_kit_binaries(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "kubelet").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "kubelet", 0o755)
    monkeypatch.setenv("OPERATOR_KIT_BINARIES", str(tmp_path))
    assert binaries.node_missing() == \
        f"{tmp_path} (OPERATOR_KIT_BINARIES) has no kube-scheduler, pause"


def _plane(tmp_path: Path, *, with_node: bool) -> LocalCluster:
    plane = LocalCluster(tmp_path)
    state = _State(etcd_port=1, etcd_peer_port=2, apiserver_port=3, controller_manager_port=4,
                   binaries={"etcd": "etcd", "kube-apiserver": "kube-apiserver",
                             "kube-controller-manager": "kcm", "kubectl": None})
    if with_node:
        state.node = True
        state.node_ports = {"kubelet": 5, "kubelet-healthz": 6, "kube-scheduler": 7}
        state.binaries.update({"kubelet": "kubelet", "kube-scheduler": "ks", "pause": "p"})
        state.apiserver_args = node.apiserver_args(tmp_path / "pki")
    plane._state = state
    return plane


def test_without_a_node_the_plane_runs_as_before(tmp_path: Path) -> None:
    plane = _plane(tmp_path, with_node=False)
    assert plane.components == ("etcd", "kube-apiserver", "kube-controller-manager")
    kcm = plane._command("kube-controller-manager") or []
    assert f"--controllers={','.join(CONTROLLERS)}" in kcm
    apiserver = plane._command("kube-apiserver") or []
    assert "--authorization-mode=RBAC" in apiserver
    assert not [a for a in apiserver if "kubelet" in a or "aggregator" in a]


def test_with_a_node_the_plane_adds_the_scheduler_containerd_kubelet_and_controllers(
        tmp_path: Path) -> None:
    plane = _plane(tmp_path, with_node=True)
    assert plane.components[-3:] == ("kube-scheduler", "containerd", "kubelet")
    kcm = " ".join(plane._command("kube-controller-manager") or [])
    for controller in (*CONTROLLERS, "node-lifecycle-controller", "deployment-controller",
                       "root-ca-certificate-publisher-controller"):
        assert controller in kcm
    apiserver = plane._command("kube-apiserver") or []
    # The Node authorizer for the kubelet, given once (the API server refuses a repeat).
    assert [a for a in apiserver if a.startswith("--authorization-mode")] == \
        ["--authorization-mode=Node,RBAC"]
    assert "--enable-aggregator-routing=true" in apiserver
    kubelet = plane._command("kubelet") or []
    assert kubelet[0] == "kubelet" and f"--hostname-override={node.NODE_NAME}" in kubelet


def test_the_kubelet_and_containerd_configs_fit_this_kind_of_machine(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = _pki.new_ca("test-ca")
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    (pki / "ca.key").write_bytes(ca.key_pem)
    the_node = node.Node(tmp_path, apiserver_port=6443,
                         ports={"kubelet": 10, "kubelet-healthz": 11, "kube-scheduler": 12},
                         binaries={})
    for sub in ("containerd", "cni/net.d", "kubelet"):
        (the_node.dir / sub).mkdir(parents=True)
    the_node._write_containerd_config()
    the_node._write_cni_config()
    the_node._write_kubelet_files(pki)
    containerd = (the_node.dir / "containerd" / "config.toml").read_text()
    # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails in runc.
    assert "restrict_oom_score_adj = true" in containerd
    assert "netns_mounts_under_state_dir = true" in containerd  # found again by teardown
    assert f"/run/operator-kit-{the_node.ident}/containerd.sock" in containerd
    import yaml
    kubelet = yaml.safe_load((the_node.kubelet_dir / "config.yaml").read_text())
    assert kubelet["cgroupDriver"] == "cgroupfs" and kubelet["failCgroupV1"] is False
    assert kubelet["cgroupRoot"] == f"/operator-kit-{the_node.ident}"
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["readOnlyPort"] == 0 and kubelet["address"] == the_node.node_ip
    assert the_node.node_ip.startswith("10.244.") and the_node.node_ip.endswith(".1")
    assert oct(os.stat(the_node.kubelet_dir / "client.key").st_mode & 0o777) == "0o600"
    cni = json.loads((the_node.dir / "cni" / "net.d" / "10-operator-kit.conflist").read_text())
    assert cni["plugins"][0]["bridge"] == the_node.bridge and len(the_node.bridge) <= 15
    assert cni["plugins"][0]["ipMasq"] is False


def test_image_layers_are_reproducible_and_readable_by_the_pods_user(tmp_path: Path) -> None:
    digests = []
    for attempt in range(2):
        root = tmp_path / f"root{attempt}"
        (root / "opt" / "bin").mkdir(parents=True)
        (root / "opt" / "bin" / "run").write_text("#!/bin/sh\n")
        os.chmod(root / "opt" / "bin" / "run", 0o700)
        (root / "opt" / "data").write_text("x")
        os.chmod(root / "opt", 0o700)
        os.utime(root / "opt" / "data", (attempt * 1000, attempt * 1000))
        out = tmp_path / f"image{attempt}.tar"
        digests.append(images.write_image(root, "operator-kit.local/x:1", out, {"Cmd": ["run"]}))
    assert digests[0] == digests[1]
    assert (tmp_path / "image0.tar").read_bytes() == (tmp_path / "image1.tar").read_bytes()
    with tarfile.open(tmp_path / "image0.tar") as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        assert manifest[0]["RepoTags"] == ["operator-kit.local/x:1"]
        layer = outer.extractfile(manifest[0]["Layers"][0])
        assert layer is not None
        with tarfile.open(fileobj=layer) as inner:
            modes = {m.name: (m.mode, m.mtime, m.uid) for m in inner.getmembers()}
    assert modes == {"opt": (0o755, 0, 0), "opt/bin": (0o755, 0, 0),
                     "opt/bin/run": (0o755, 0, 0), "opt/data": (0o644, 0, 0)}


def test_the_pause_image_holds_the_pause_program_alone(tmp_path: Path) -> None:
    program = tmp_path / "pause-binary"
    program.write_bytes(b"\x7fELF pause")
    tar = images.pause_image(program, tmp_path)
    with tarfile.open(tar) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(outer.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == [node.PAUSE_IMAGE]
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert "signal.Notify" in binaries.PAUSE_SOURCE


def test_an_image_of_a_folder_that_is_no_project_says_so(tmp_path: Path) -> None:
    with pytest.raises(images.ImageError, match="not a Python project"):
        images.build_operator_image(tmp_path, "x:1", tmp_path / "x.tar")


def test_the_default_reference_comes_from_the_projects_name_and_version(
        tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "Backup_Operator"\n'
                                             'version = "0.2.0"\n')
    if sys.version_info < (3, 11):  # no tomllib: told to name the image itself
        with pytest.raises(images.ImageError, match="--tag NAME:VERSION"):
            images.default_reference(tmp_path)
    else:
        assert images.default_reference(tmp_path) == "operator-kit.local/backup_operator:0.2.0"


def test_the_build_path_of_the_venv_is_rewritten_to_the_path_inside_the_image(
        tmp_path: Path) -> None:
    build = str(tmp_path / "rootfs" / "opt" / "venv")
    bin_dir = tmp_path / "rootfs" / "opt" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "gunicorn").write_text(f"#!{build}/bin/python\nimport gunicorn\n")
    (bin_dir / "activate").write_text(f'VIRTUAL_ENV="{build}"\nexport VIRTUAL_ENV\n')
    (bin_dir.parent / "pyvenv.cfg").write_text(f"command = python -m venv {build}\n")
    images._rewrite_shebangs(bin_dir, build, images.VENV)
    assert (bin_dir / "gunicorn").read_text().startswith("#!/opt/venv/bin/python\n")
    assert build not in (bin_dir / "activate").read_text()
    assert build not in (bin_dir.parent / "pyvenv.cfg").read_text()


@pytest.mark.parametrize("tag", ["op", "op:latest", "registry.test:5000/op", "op:"])
def test_an_image_tag_the_kubelet_would_pull_again_is_refused_before_building(
        tag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        command_line.main(["image", str(tmp_path), "--tag", tag, "--dir", str(tmp_path)])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(f"error: --tag {tag}: give a version other than latest")
    assert "imagePullPolicy Always" in said and said.count("\n") == 1
