"""The local plane's feature gates (operator_kit.localcluster.gates): parsed, passed to
kube-apiserver only, refused in one line when malformed, and none at all by default.
tests/cluster/test_shard_ranges.py starts a plane with ShardedListAndWatch on."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_kit.localcluster import __main__ as command_line
from operator_kit.localcluster.gates import GateError, apiserver_args, gates_of, parse
from operator_kit.localcluster.plane import LocalCluster, _State


def test_gates_parse_into_names_and_booleans() -> None:
    assert parse("ShardedListAndWatch=true, Other=False") == {
        "ShardedListAndWatch": True, "Other": False}


@pytest.mark.parametrize("text,says", [
    ("", "empty entry"),
    ("A=true,,B=true", "empty entry"),
    ("ShardedListAndWatch", "is not Name=true"),
    ("ShardedListAndWatch=yes", "is not Name=true"),
    ("sharded=true", "is not Name=true"),
    ("A=true;--v=9=true", "is not Name=true"),
    ("A=true,A=false", "names A twice"),
    (",".join(f"G{i}=true" for i in range(51)), "more than 50"),
])
def test_a_malformed_gate_list_is_refused_naming_the_bad_part(text: str, says: str) -> None:
    with pytest.raises(GateError, match=says):
        parse(text)


def test_gates_become_one_sorted_apiserver_flag_and_none_without_gates() -> None:
    assert apiserver_args({}) == []
    args = apiserver_args({"ShardedListAndWatch": True, "Alpha": False})
    assert args == ["--feature-gates=Alpha=false,ShardedListAndWatch=true"]
    assert gates_of(["--v=1", *args]) == {"Alpha": False, "ShardedListAndWatch": True}


def test_the_gates_reach_kube_apiserver_only(tmp_path: Path) -> None:
    plane = LocalCluster(tmp_path)
    plane._state = _State(etcd_port=1, etcd_peer_port=2, apiserver_port=3,
                          controller_manager_port=4,
                          binaries={"etcd": "etcd", "kube-apiserver": "kube-apiserver",
                                    "kube-controller-manager": "kcm", "kubectl": None},
                          apiserver_args=apiserver_args({"ShardedListAndWatch": True}))
    assert "--feature-gates=ShardedListAndWatch=true" in (plane._command("kube-apiserver") or [])
    for other in ("etcd", "kube-controller-manager"):
        assert not [a for a in plane._command(other) or [] if "feature-gates" in a]


@pytest.mark.parametrize("argv", [
    ["up", "--feature-gates", "ShardedListAndWatch"],
    ["status", "--feature-gates", "ShardedListAndWatch=true"],
])
def test_a_bad_feature_gates_flag_is_one_line_and_exit_code_2(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        command_line.main([*argv, "--dir", str(tmp_path / "plane")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--feature-gates" in err
    assert not (tmp_path / "plane").exists()
