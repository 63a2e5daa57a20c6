"""Container images without a registry or a daemon: an operator's image, and the pause image.

``python -m operator_kit.localcluster image PROJECT`` builds an image of an operator
project and loads it into the node's containerd. An image here is a ``docker save``-style
tar that ``ctr images import`` accepts, written with the standard library::

    manifest.json            [{"Config": "<hex>.json", "RepoTags": [ref], "Layers": [...]}]
    <hex>.json               the image config: Env, Cmd, User 65532, rootfs diff_ids
    <hex>/layer.tar          one layer: the whole root filesystem

The operator image's root filesystem:

    <the host's Python prefix>/   the interpreter running the build, at its host path
                                  (its libpython's rpath names it), stdlib only: no
                                  site-packages, tests, tkinter, idlelib, config-*
    /lib, /usr/lib/...            the shared libraries ``ldd`` names for the interpreter
                                  and every extension module, and the dynamic loader
    /opt/venv/                    a venv: the project and its dependencies (operator_kit
                                  from its source tree, the rest from the package index),
                                  its scripts' shebangs rewritten to /opt/venv/bin/python
    /etc/passwd, /etc/group       root and the non-root user 65532 the Deployment runs as

Reproducible: entries sorted, mtimes fixed (`EPOCH`), owners root, modes 0755/0644, byte
code compiled with unchecked hashes (no timestamps), so one project on one host gives
the same layer digest. The pause image holds one static program (`binaries.PAUSE_SOURCE`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from operator_kit.localcluster.binaries import file_lock
from operator_kit.localcluster.node import PAUSE_IMAGE

EPOCH = 0  # every file's mtime in a layer
VENV = "/opt/venv"
USER = "65532:65532"
_STDLIB_SKIPPED = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
                   "lib2to3", "__pycache__"}
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


class ImageError(RuntimeError):
    """An image could not be built; the message names the step and its output."""


def architecture() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isdir():
        info.mode = 0o755
    elif info.isfile():
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def _walk(root: Path) -> Iterator[Path]:
    """Every path under `root`, sorted, parents first, not following symlinks."""
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        yield entry
        if entry.is_dir() and not entry.is_symlink():
            yield from _walk(entry)


def write_layer(rootfs: Path, out: Path) -> str:
    """`rootfs` as one layer tar at `out`; its sha256 (the diff_id)."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(rootfs):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info = _normalized(info)
            if info.isfile():
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return _sha256(out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_image(rootfs: Path, reference: str, out: Path, config: dict[str, object]) -> str:
    """A docker-save-style tar of `rootfs` (one layer) named `reference` at `out`, with
    `config` as the image's run config (Env, Cmd, User...); returns the config's digest
    (the image id)."""
    with tempfile.TemporaryDirectory(prefix="operator-kit-image-") as tmp:
        layer = Path(tmp) / "layer.tar"
        diff_id = write_layer(rootfs, layer)
        image_config = {
            "architecture": architecture(), "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            "history": [{"created": "1970-01-01T00:00:00Z",
                         "created_by": "python -m operator_kit.localcluster image"}],
        }
        config_bytes = json.dumps(image_config, sort_keys=True).encode()
        config_id = hashlib.sha256(config_bytes).hexdigest()
        manifest = [{"Config": f"{config_id}.json", "RepoTags": [reference],
                     "Layers": [f"{diff_id}/layer.tar"]}]
        with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, f"{diff_id}/", None)
            info = _normalized(tar.gettarinfo(str(layer), arcname=f"{diff_id}/layer.tar"))
            with open(layer, "rb") as handle:
                tar.addfile(info, handle)
            _add_bytes(tar, f"{config_id}.json", config_bytes)
            _add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
    return f"sha256:{config_id}"


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name.rstrip("/"))
    if data is None:
        info.type = tarfile.DIRTYPE
    else:
        info.size = len(data)
    tar.addfile(_normalized(info), io.BytesIO(data) if data is not None else None)


def pause_image(pause: Path, folder: Path) -> Path:
    """The pause image (`node.PAUSE_IMAGE`): the static `pause` program alone."""
    out = folder / "pause.tar"
    with tempfile.TemporaryDirectory(prefix="operator-kit-pause-") as tmp:
        root = Path(tmp)
        shutil.copy(pause, root / "pause")
        os.chmod(root / "pause", 0o755)
        write_image(root, PAUSE_IMAGE, out, {"Entrypoint": ["/pause"], "User": "65535:65535"})
    return out


# -- an operator's image --------------------------------------------------------------


def default_reference(project: Path) -> str:
    """``operator-kit.local/<name>:<version>`` from the project's pyproject.toml."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ImageError("name the image with --tag NAME:VERSION (reading pyproject.toml "
                         "needs Python 3.11+)") from None
    try:
        meta = tomllib.loads((project / "pyproject.toml").read_text()).get("project", {})
    except (OSError, ValueError) as err:
        raise ImageError(f"cannot read {project / 'pyproject.toml'}: {err}; "
                         "name the image with --tag NAME:VERSION") from None
    name, version = meta.get("name"), meta.get("version")
    if not name or not version:
        raise ImageError(f"{project / 'pyproject.toml'} has no [project] name and version: "
                         "name the image with --tag NAME:VERSION")
    return f"operator-kit.local/{re.sub(r'[^a-z0-9._-]', '-', name.lower())}:{version}"


def operator_kit_source() -> Path | None:
    """The source tree of the running operator_kit (its setup.cfg names it), if any."""
    import operator_kit

    tree = Path(operator_kit.__file__).resolve().parents[1]
    setup = tree / "setup.cfg"
    if setup.exists() and re.search(r"^name\s*=\s*operator_kit\s*$", setup.read_text(), re.M):
        return tree
    return None


def build_operator_image(project: Path, reference: str, out: Path, *,
                         sources: list[Path] | None = None) -> str:
    """Build the image of the operator project in `project` (its pyproject.toml), named
    `reference`, as a tar at `out`; returns the image id. `sources` are other local
    projects to install from their trees (default: operator_kit's own, when it runs
    from one)."""
    if not (project / "pyproject.toml").exists() and not (project / "setup.py").exists():
        raise ImageError(f"{project} is not a Python project (no pyproject.toml): give the "
                         "folder of the operator's project")
    if sources is None:
        source = operator_kit_source()
        sources = [source] if source and source.resolve() != project.resolve() else []
    # One staging folder per project and reference, the same on every build: the venv's
    # path ends up in pip's RECORD hashes, so a random one would change the layer.
    staging = Path(tempfile.gettempdir()) / ("operator-kit-image-" + hashlib.sha256(
        f"{project.resolve()} {reference}".encode()).hexdigest()[:12])
    with file_lock(staging.with_suffix(".lock")):
        shutil.rmtree(staging, ignore_errors=True)
        try:
            return _build(project, reference, out, sources, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _build(project: Path, reference: str, out: Path, sources: list[Path],
           staging: Path) -> str:
    root = staging / "rootfs"
    root.mkdir(parents=True)
    prefix = Path(sys.base_prefix)
    _copy_python(prefix, root)
    venv = root / VENV.lstrip("/")
    _step(["venv", "--without-pip"], [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _step(["pip install"],
          [sys.executable, "-m", "pip", "--disable-pip-version-check",
           "--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile",
           *map(str, sources), str(project)])
    _rewrite_shebangs(venv / "bin", str(venv), VENV)
    _copy_libraries(root)
    _write_etc(root)
    _step(["compileall"],
          [sys.executable, "-m", "compileall", "-q", "-j", "0",
           "--invalidation-mode", "unchecked-hash", "-s", str(root), "-p", "/",
           str(root / str(prefix).lstrip("/")), str(venv)])
    path = f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin"
    return write_image(root, reference, out, {
        "Env": [f"PATH={path}", f"VIRTUAL_ENV={VENV}", "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONUNBUFFERED=1"],
        "Cmd": ["python", "-m", "operator_kit"],
        "User": USER,
        "WorkingDir": "/",
    })


def _step(what: list[str], cmd: list[str]) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).splitlines()[-20:])
        raise ImageError(f"building the image failed at {' '.join(what)} "
                         f"({' '.join(cmd)}):\n{tail}")


def _inside(root: Path, host_path: str) -> Path:
    return root / host_path.lstrip("/")


def _copy_python(prefix: Path, root: Path) -> None:
    """The interpreter, its shared library and its stdlib, at their host paths."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in (version, "python3", "python"):
        binary = prefix / "bin" / name
        if binary.exists():
            _copy_file(str(binary), root)
    for lib in sorted((prefix / "lib").glob("libpython*.so*")):
        _copy_file(str(lib), root)
    stdlib = prefix / "lib" / version
    target = _inside(root, str(stdlib))

    def skipped(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in _STDLIB_SKIPPED or n.startswith("config-")}

    shutil.copytree(stdlib, target, symlinks=True, ignore=skipped)
    (target / "site-packages").mkdir()


def _copy_file(host_path: str, root: Path) -> None:
    """A host file into `root` at the same path: its real file, and the name asked for as
    a symlink to it when they differ (the host's symlinked folders, /lib -> usr/lib,
    recreated as such)."""
    real = os.path.realpath(host_path)
    _mirror_parents(real, root)
    target = _inside(root, real)
    if not target.exists():
        shutil.copy2(real, target)
    if os.path.abspath(host_path) != real:
        _mirror_parents(host_path, root)
        link = _inside(root, host_path)
        if not link.exists() and not link.is_symlink():
            link.symlink_to(real)


def _mirror_parents(host_path: str, root: Path) -> None:
    """Create `host_path`'s parent folders in `root`, symlinked folders as symlinks."""
    current = Path("/")
    for part in Path(host_path).parent.parts[1:]:
        current = current / part
        inside = _inside(root, str(current))
        if current.is_symlink():
            if not inside.is_symlink():
                inside.symlink_to(os.readlink(current))
            target = os.path.realpath(current)
            _mirror_parents(target + "/x", root)
            current = Path(target)
        elif not inside.exists():
            inside.mkdir()


def _copy_libraries(root: Path) -> None:
    """The shared libraries every ELF file under `root` needs, as ``ldd`` finds them."""
    needed: set[str] = set()
    for path in list(_walk(root)):
        if path.is_file() and not path.is_symlink() and (
                path.suffix == ".so" or ".so." in path.name or path.parent.name == "bin"):
            with open(path, "rb") as handle:
                if handle.read(4) != b"\x7fELF":
                    continue
            result = subprocess.run(["ldd", str(path)], capture_output=True, text=True,
                                    check=False)
            for line in result.stdout.splitlines():
                found = _LDD_PATH.search(line)
                if found and not found[1].startswith(str(root)):
                    needed.add(found[1])
    for library in sorted(needed):
        _copy_file(library, root)


def _rewrite_shebangs(folder: Path, old: str, new: str) -> None:
    """The build's venv path, in the scripts' shebangs and the activate scripts, becomes
    the path inside the image."""
    for script in sorted(folder.iterdir()):
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if b"\0" not in data and old.encode() in data:
                script.write_bytes(data.replace(old.encode(), new.encode()))
    config = folder.parent / "pyvenv.cfg"  # names the build folder too
    if config.exists():
        config.write_text(config.read_text().replace(old, new))


def _write_etc(root: Path) -> None:
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/sbin/nologin\n"
                                "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    (etc / "group").write_text("root:x:0:\nnonroot:x:65532:\n")
