"""The pinned environment: requirements.txt and environment.yml agree, and every pin is exact."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata

from conftest import ROOT

PIN = re.compile(r"^\s*(?:-\s+)?(?P<name>[A-Za-z0-9_.\-]+)==(?P<version>[A-Za-z0-9_.+\-]+)\s*$")


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        assert match, f"requirements.txt: {line!r} is not an exact pin (name==version)"
        pins[match["name"].lower()] = match["version"]
    return pins


def _environment_yml() -> dict[str, str]:
    """The pip section of environment.yml (read as text: the file is simple and PyYAML is not pinned)."""
    pins, in_pip = {}, False
    for raw in (ROOT / "environment.yml").read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if line.strip() == "- pip:":
            in_pip = True
            continue
        if in_pip and line.strip().startswith("- "):
            match = PIN.match(line.strip())
            assert match, f"environment.yml: {line.strip()!r} is not an exact pin"
            pins[match["name"].lower()] = match["version"]
        elif in_pip and line.strip():
            in_pip = False
    return pins


def test_requirements_and_environment_yml_pin_the_same_packages() -> None:
    req, env = _requirements(), _environment_yml()
    assert req, "requirements.txt pins nothing"
    only_req = {k: v for k, v in req.items() if env.get(k) != v}
    only_env = {k: v for k, v in env.items() if req.get(k) != v}
    assert not only_req and not only_env, f"drift: requirements.txt {only_req} vs environment.yml {only_env}"


def _makefile_python_range() -> tuple[tuple[int, int], tuple[int, int]]:
    """The oldest and newest Python the Makefile accepts (its PYTHON_MIN and PYTHON_MAX)."""
    text = (ROOT / "Makefile").read_text()
    bounds = []
    for name in ("PYTHON_MIN", "PYTHON_MAX"):
        match = re.search(rf"^{name}\s*:?=\s*3\.(\d+)\s*$", text, re.MULTILINE)
        assert match, f"Makefile: no {name} := 3.X line"
        bounds.append((3, int(match[1])))
    return bounds[0], bounds[1]


def test_environment_yml_python_matches_the_supported_range() -> None:
    """environment.yml, the Makefile and the README name the same Python range."""
    low, high = _makefile_python_range()
    assert low == (3, 11) and high >= low, f"Makefile accepts {low} to {high}; numpy==2.4.6 needs 3.11 at least"
    text = (ROOT / "environment.yml").read_text()
    spec = rf"^\s*-\s*python>=3\.{low[1]},<3\.{high[1] + 1}\s*(#.*)?$"
    assert re.search(spec, text, re.MULTILINE), f"environment.yml must ask for python>=3.{low[1]},<3.{high[1] + 1}"
    readme = (ROOT / "README.md").read_text()
    assert f"**Supported Python:** 3.{low[1]} to 3.{high[1]}" in readme, "README's Supported Python line differs"


def test_torch_is_pinned_to_the_course_version() -> None:
    assert _requirements()["torch"] == "2.13.0"


def test_torchtext_is_not_a_dependency() -> None:
    """torchtext is retired upstream and does not import beside torch 2.13 (see the README)."""
    assert "torchtext" not in _requirements()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(dep.lower().startswith("torchtext") for dep in project["dependencies"])


def test_package_dependencies_are_all_pinned_for_the_course() -> None:
    """Every dependency course_lib declares is pinned in requirements.txt, at a version it accepts."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    req = _requirements()
    for dep in project["dependencies"]:
        name = re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0].lower()
        assert name in req, f"pyproject.toml depends on {name}, which requirements.txt does not pin"


def test_this_environment_is_the_pinned_one() -> None:
    """The environment the tests run in is the one requirements.txt describes (no silent drift)."""
    low, high = _makefile_python_range()
    assert low <= sys.version_info[:2] <= high, f"Python {sys.version.split()[0]} is outside {low} to {high}"
    for name, version in _requirements().items():
        installed = metadata.version(name)
        assert installed.split("+")[0] == version, f"{name}: pinned {version}, installed {installed}"
