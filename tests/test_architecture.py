"""``docs/architecture.md`` is the map of the house: it names every module of ``course_lib``, and nothing else.

A new module is added to the map in the change that adds it (this test fails otherwise); a module that goes
leaves the map with it.
"""

from __future__ import annotations

import re

from conftest import ROOT

MAP = ROOT / "docs" / "architecture.md"


def _modules() -> set[str]:
    """Every module of course_lib as a path from the root."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "course_lib").rglob("*.py") if "__pycache__" not in p.parts}


def _missing(text: str, modules: set[str]) -> list[str]:
    """Modules the map does not name as a backquoted path (a dotted name in passing does not count)."""
    return sorted(m for m in modules if f"`{m}`" not in text)


def _gone(text: str, modules: set[str]) -> list[str]:
    """Backquoted module paths of the map that are no module."""
    return sorted(set(re.findall(r"`(course_lib/[\w/]+\.py)`", text)) - modules)


def test_the_map_names_every_module() -> None:
    missing = _missing(MAP.read_text(encoding="utf-8"), _modules())
    assert not missing, "modules missing from docs/architecture.md (add each where it belongs):\n" + "\n".join(
        f"  {m}" for m in missing)


def test_every_module_the_map_names_exists() -> None:
    gone = _gone(MAP.read_text(encoding="utf-8"), _modules())
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_the_map_rules_can_fail() -> None:
    modules = {"course_lib/models/attention.py", "course_lib/models/masking.py"}
    text = "`course_lib/models/attention.py`, course_lib.models.masking and `course_lib/models/old.py`"
    assert _missing(text, modules) == ["course_lib/models/masking.py"]
    assert _gone(text, modules) == ["course_lib/models/old.py"]
