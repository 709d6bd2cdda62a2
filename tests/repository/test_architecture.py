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


# --- the layering the map states, against the import graph -------------------------------------------------

LAYERS = re.compile(r"<!-- layers -->\n(.*?)<!-- /layers -->", re.S)


def _stated_layers(text: str) -> dict[str, set[str]]:
    """The map's table of what each package may import: ``| `package` | `a`, `b` |`` rows between the markers."""
    block = LAYERS.search(text)
    assert block, "docs/architecture.md has no table of layers between <!-- layers --> and <!-- /layers -->"
    rows = {}
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[1]))
    return rows


def _imports_between_packages() -> dict[str, set[str]]:
    """Which parts of course_lib each part imports (a part: a package, or a top-level module), imports inside
    functions included, from the source (nothing is imported)."""
    import ast

    found: dict[str, set[str]] = {}
    for path in (ROOT / "course_lib").rglob("*.py"):
        rel = path.relative_to(ROOT / "course_lib").with_suffix("").parts
        if rel == ("__init__",) or rel[0].startswith("_"):
            continue
        part = rel[0]
        module = ["course_lib", *rel[:-1]] if rel[-1] == "__init__" else ["course_lib", *rel]
        package = module if rel[-1] == "__init__" else module[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                names = [".".join([*base, node.module] if node.module else base) if node.level else node.module or ""]
            for name in names:
                parts = name.split(".")
                if parts[0] == "course_lib" and len(parts) > 1 and parts[1] != part:
                    found.setdefault(part, set()).add(parts[1])
    return found


def test_the_layering_the_map_states_is_the_import_graph() -> None:
    """Every import between course_lib's parts is one the map's table of layers allows; an arrow running back
    up (training importing experiments, models importing training) fails here until the map says so."""
    stated = _stated_layers(MAP.read_text(encoding="utf-8"))
    actual = _imports_between_packages()
    extra = sorted(f"{part} -> {other}" for part, others in actual.items() for other in others
                   if other not in stated.get(part, set()) and not other.startswith("_"))
    assert not extra, f"imports the map's table of layers does not allow: {extra}"
    unused = sorted(f"{part} -> {other}" for part, others in stated.items() for other in others
                    if other not in actual.get(part, set()))
    assert not unused, f"the map allows imports that no longer exist (tighten it): {unused}"


def test_the_layering_rule_can_fail() -> None:
    text = "<!-- layers -->\n| `models` | `validation` |\n| `data` | `models`, `validation` |\n<!-- /layers -->"
    assert _stated_layers(text) == {"models": {"validation"}, "data": {"models", "validation"}}


# --- README's layout, against the package ---------------------------------------------------------------------

def _readme_layout() -> list[str]:
    """The lines of README's layout block that describe course_lib (from ``course_lib/`` to the next top folder)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("course_lib/"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    return lines[start + 1:end]


def _entry(lines: list[str], name: str) -> str:
    """The text of the layout's entry ``name`` (its line and the lines that continue it)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i][2:3].strip()), len(lines))
    return " ".join(lines[start:end])


def test_the_readme_layout_names_every_package_and_every_model_module() -> None:
    lines = _readme_layout()
    text = " ".join(lines)
    packages = sorted(p.name for p in (ROOT / "course_lib").iterdir() if (p / "__init__.py").is_file())
    missing = [f"{p}/" for p in packages if f"{p}/" not in text]
    words = set(re.findall(r"[a-z_0-9]+", _entry(lines, "models/")))
    missing += [f"models/{p.stem}" for p in sorted((ROOT / "course_lib" / "models").glob("*.py"))
                if p.stem != "__init__" and p.stem not in words]
    assert not missing, f"README's layout does not name: {missing}"
