"""The distribution's metadata: declared in setup.cfg, built into the installed METADATA (one
version, the license, the Pythons supported, the dependencies), and every third-party module
that operator_kit imports declared as a dependency."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import operator_kit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator_kit"
STALE = "the installed metadata is not setup.cfg's: reinstall (pip install -e '.[test]')"
# Imported by a module that only its host loads, so not an install requirement: pytest loads
# the plugin (the pytest11 entry point) and is there whenever the plugin is.
LOADED_BY_ITS_HOST = {"operator_kit/testing/plugin.py": {"pytest"}}
# Imports an extra provides (module -> the extra), each guarded or in a module only that
# extra's users import: operator_kit.tracing works without it (tested below).
OPTIONAL = {"operator_kit/tracing.py": {"opentelemetry": "tracing"},
            "operator_kit/testing/tracing.py": {"opentelemetry": "test"}}
# Standard library modules newer than the oldest supported Python, imported where an
# ImportError on it is handled (tomllib: 3.11).
NEWER_STDLIB = {"tomllib"}


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    assert config.read(ROOT / "setup.cfg"), "setup.cfg is the metadata's home"
    return config


def lines(value: str) -> list[str]:
    """A setup.cfg list (one a line; configparser has dropped the comment lines)."""
    return [line.strip() for line in value.splitlines() if line.strip()]


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return split(requirement)[0]


def split(requirement: str) -> tuple[str, str]:
    """A requirement's distribution name (normalized) and what follows it."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, requirement
    return normalized(match.group()), requirement.strip()[match.end():].strip()


def installed_requirements() -> tuple[list[str], dict[str, list[str]]]:
    """The installed METADATA's Requires-Dist: the unconditional ones, and each extra's."""
    plain: list[str] = []
    extras: dict[str, list[str]] = {}
    for line in importlib.metadata.metadata("operator_kit").get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        extra = re.fullmatch(r'\s*extra == "([^"]+)"\s*', marker)
        assert marker == "" or extra, f"an unexpected marker: {line}"
        (extras.setdefault(extra.group(1), []) if extra else plain).append(requirement.strip())
    return plain, extras


def comparable(requirements: list[str]) -> set[tuple[str, str, frozenset[str]]]:
    """Requirements as their parts, so `a<38,>=36` and `a>=36,<38` are one."""
    parts = set()
    for requirement in requirements:
        name, rest = split(requirement)
        extras, bracket, specifiers = rest.rpartition("]")
        parts.add((name, extras + bracket,
                   frozenset(s.strip() for s in specifiers.split(",") if s.strip())))
    return parts


def test_the_installed_version_is_operator_kit_version() -> None:
    assert importlib.metadata.version("operator_kit") == operator_kit.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|(a|b|rc)\d+)?", operator_kit.__version__)


def test_the_version_is_written_once_in_the_package_and_read_from_it() -> None:
    assert setup_cfg()["metadata"]["version"] == "attr: operator_kit._version.__version__"
    assert re.search(r'^__version__ = "[^"]+"$', (PACKAGE / "_version.py").read_text(), re.M)
    assert "version" not in (ROOT / "setup.py").read_text()


def test_setup_cfg_holds_the_metadata_and_pyproject_the_build_system_and_tools() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    tables = re.findall(r"^\[\[?([^\]]+)\]\]?\s*$", pyproject, re.M)
    assert tables[0] == "build-system"
    assert all(t.startswith("tool.") for t in tables[1:]), tables
    assert not [t for t in tables if t.startswith(("project", "tool.setuptools"))]
    build_system = pyproject.split("[build-system]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^requires = \["setuptools>=77"\]$', build_system, re.M)
    # setup.py is a shim: setup() with no arguments, all of it in setup.cfg
    shim = ast.parse((ROOT / "setup.py").read_text())
    assert [ast.dump(node) for node in shim.body] == [
        ast.dump(node) for node in ast.parse("from setuptools import setup\nsetup()").body]


def test_license_is_apache_2_in_the_pep_639_form_and_shipped() -> None:
    metadata = setup_cfg()["metadata"]
    assert metadata["license_expression"] == "Apache-2.0"
    assert lines(metadata["license_files"]) == ["LICENSE"]
    assert "license" not in metadata, "License-Expression, not the older License field"
    meta = importlib.metadata.metadata("operator_kit")
    assert meta["License-Expression"] == "Apache-2.0", STALE
    assert "License" not in meta
    assert meta.get_all("License-File") == ["LICENSE"]
    assert not [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_classifiers_name_each_supported_python_and_requires_python_agrees() -> None:
    meta = importlib.metadata.metadata("operator_kit")
    classifiers = meta.get_all("Classifier") or []
    assert classifiers == lines(setup_cfg()["metadata"]["classifiers"]), STALE
    pythons = sorted(
        c.rsplit(" ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert pythons == ["3.10", "3.11", "3.12", "3.13"]
    assert setup_cfg()["options"]["python_requires"] == ">=3.10"
    assert meta["Requires-Python"] == ">=3.10"


def test_project_urls_are_declared() -> None:
    declared = importlib.metadata.metadata("operator_kit").get_all("Project-URL") or []
    urls = dict(u.split(", ", 1) for u in declared)
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    in_setup_cfg = dict(
        (part.strip() for part in line.split("=", 1))
        for line in lines(setup_cfg()["metadata"]["project_urls"]))
    assert urls == in_setup_cfg, STALE


def test_the_installed_dependencies_extras_and_entry_point_are_setup_cfg_s() -> None:
    config = setup_cfg()
    plain, extras = installed_requirements()
    assert comparable(plain) == comparable(lines(config["options"]["install_requires"])), STALE
    declared_extras = config["options.extras_require"]
    assert set(extras) == set(declared_extras) == {"test", "docs", "tracing"}, STALE
    for extra, requirements in extras.items():
        assert comparable(requirements) == comparable(lines(declared_extras[extra])), STALE
    (plugin,) = importlib.metadata.entry_points(group="pytest11", name="operator_kit")
    assert plugin.value == "operator_kit.testing.plugin"
    assert lines(config["options.entry_points"]["pytest11"]) == [
        "operator_kit = operator_kit.testing.plugin"]
    assert "py.typed" in lines(config["options.package_data"]["operator_kit"])
    assert (PACKAGE / "py.typed").exists()


def test_every_data_file_in_the_package_is_package_data() -> None:
    """A file under operator_kit/ that is not Python ships in the wheel only when
    [options.package_data] names it (an editable install would not miss it)."""
    shipped: set[Path] = set()
    for package, patterns in setup_cfg()["options.package_data"].items():
        folder = ROOT.joinpath(*package.split("."))
        for pattern in lines(patterns):
            shipped.update(folder.glob(pattern))
    data = {
        path for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc")
        and "__pycache__" not in path.parts
    }
    assert not sorted(str(p.relative_to(ROOT)) for p in data - shipped)


def third_party_imports() -> dict[str, set[str]]:
    """Each top-level module that an absolute import under operator_kit/ names (in a
    function, or under TYPE_CHECKING, too), outside the standard library and operator_kit
    itself: the files that import it."""
    imported: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".", 1)[0]
                if top in sys.stdlib_module_names or top in NEWER_STDLIB or top == "operator_kit":
                    continue
                if top in LOADED_BY_ITS_HOST.get(where, set()) or top in OPTIONAL.get(where, {}):
                    continue
                imported.setdefault(top, set()).add(where)
    return imported


def test_every_third_party_module_operator_kit_imports_is_an_install_requirement() -> None:
    declared = {requirement_name(r) for r in lines(setup_cfg()["options"]["install_requires"])}
    distributions = importlib.metadata.packages_distributions()
    imported = third_party_imports()
    assert {"kubernetes", "flask", "werkzeug", "urllib3", "yaml"} <= set(imported)
    undeclared = {
        module: sorted(files)
        for module, files in imported.items()
        # a module no installed distribution provides is named by its own name
        if not {normalized(d) for d in distributions.get(module, [module])} & declared
    }
    assert not undeclared, f"imported, not in setup.cfg's install_requires: {undeclared}"


def test_an_optional_import_is_in_its_extra_and_operator_kit_runs_without_it() -> None:
    config = setup_cfg()["options.extras_require"]
    for where, modules in OPTIONAL.items():
        for module, extra in modules.items():
            names = {requirement_name(r) for r in lines(config[extra])}
            assert any(name.startswith(module) for name in names), (where, module, extra)
    without = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['opentelemetry'] = None\n"
         "from operator_kit import tracing, Operator\n"
         "assert not tracing.enabled() and tracing.start_call('GET', '/', {}) is None\n"
         "with tracing.reconcile('c', 'K', 'ns', 'n', []) as span: assert span is None"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert without.returncode == 0, without.stderr
