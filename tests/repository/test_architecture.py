"""``docs/architecture.md`` is the map of the house: it names every module of ``course_lib``, and nothing else.

A new module is added to the map in the change that adds it (this test fails otherwise); a module that goes
leaves the map with it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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


#: The packages whose entry in README's layout lists its modules ("a module each: a, b (remark), c").
ENUMERATED = ("models", "data", "generation", "evaluation", "experiments", "figures")


def _listed_modules(entry: str) -> list[str]:
    """The modules an entry lists after "a module each:", remarks in parentheses left out."""
    _, found, listed = entry.partition("a module each:")
    return [name.strip() for name in re.sub(r"\([^()]*\)", "", listed).split(",")] if found else []


def _layout_errors(lines: list[str], package: Path) -> list[str]:
    """What README's layout (``lines``) says about the package at ``package`` that its files contradict."""
    text = " ".join(lines)
    subpackages = {p.parent.relative_to(package).as_posix() for p in package.rglob("__init__.py")} - {"."}
    folders = {f"{p.rsplit('/', 1)[-1]}" for p in subpackages}
    errors = [f"{p}/ is not named" for p in sorted(folders) if not re.search(rf"\b{p}/", text)]
    errors += [f"{f}/ is named but is no package" for f in sorted(set(re.findall(r"\b(\w+)/", text)) - folders)]
    modules = {p.name for p in package.glob("*.py") if not p.name.startswith("_")}
    errors += [f"{m} is not named" for m in sorted(modules) if m not in text]
    errors += [f"{m} is named but is no module" for m in sorted(set(re.findall(r"\b\w+\.py\b", text)) - modules)]
    for name in ENUMERATED:
        listed = _listed_modules(_entry(lines, f"{name}/"))
        actual = sorted(p.stem for p in (package / name).glob("*.py") if p.stem != "__init__")
        errors += [f"{name}/{m} is not listed" for m in actual if m not in listed]
        errors += [f"{name}/{m} is listed but is no module" for m in listed if m not in actual]
    return errors


def test_the_readme_layout_is_the_package() -> None:
    """README's layout names every package and sub-package, every public top-level module, and every module of
    the packages it lists module by module; nothing it names is missing from the package."""
    errors = _layout_errors(_readme_layout(), ROOT / "course_lib")
    assert not errors, "README's layout of course_lib:\n" + "\n".join(errors)


def test_the_readme_layout_rule_can_fail(tmp_path: Path) -> None:
    for module in _modules():  # the package's tree of modules, empty
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).touch()
    (tmp_path / "course_lib" / "models" / "mamba.py").write_text("")
    (tmp_path / "course_lib" / "data" / "treebank.py").unlink()
    shutil.rmtree(tmp_path / "course_lib" / "grading" / "records")
    lines = [line.replace("validation.py", "validation.py, helpers.py") for line in _readme_layout()]
    assert _layout_errors(lines, tmp_path / "course_lib") == [
        "records/ is named but is no package", "helpers.py is named but is no module",
        "models/mamba is not listed", "data/treebank is listed but is no module"]


# --- which notebook uses which module, against the notebooks' imports -------------------------------------------

IMPORT = re.compile(r"^\s*(?:from\s+course_lib\.([\w.]+)\s+import\b|import\s+course_lib\.([\w.]+))", re.M)


def _notebook_imports(path) -> set[str]:
    """The course_lib modules a notebook's code cells import, relative to the package (``models.attention``)."""
    import json

    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return {a or b for a, b in IMPORT.findall(code)}


def _all_notebook_imports() -> dict[str, set[str]]:
    """Each notebook's number (``"07"``) and the modules it imports."""
    return {p.name[:2]: _notebook_imports(p) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}


def _named(cell: str) -> set[str]:
    """The dotted module names a table cell states, remarks in parentheses left out (``models.gqa (deep dive)``)."""
    return set(re.findall(r"\b([a-z_0-9]+\.[a-z_0-9]+)\b", re.sub(r"\([^()]*\)", "", cell)))


def _notebook_table(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """The map's section "Notebook -> modules": the modules its opening sentence says every notebook imports,
    and each row's notebook number and the modules it states."""
    section = text.split("## Notebook -> modules", 1)[1].split("\n## ", 1)[0]
    sentence = re.search(r"Every notebook imports (.*?);", section, re.S)
    assert sentence, 'the section "Notebook -> modules" no longer opens with "Every notebook imports ...;"'
    every = set(re.findall(r"`course_lib\.([\w.]+)`", sentence.group(1)))
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.match(r"\d\d ", cells[0]):
            rows[cells[0][:2]] = _named(cells[1])
    return every, rows


def _notebook_table_errors(every: set[str], rows: dict[str, set[str]], imports: dict[str, set[str]]) -> list[str]:
    """What the table states that the notebooks' imports contradict."""
    errors = [f"notebook {nb} does not import {m}, which every notebook imports" for nb, found in imports.items()
              for m in sorted(every - found)]
    errors += [f"notebook {nb} has no row" for nb in sorted(set(imports) - set(rows))]
    errors += [f"a row for notebook {nb}, which does not exist" for nb in sorted(set(rows) - set(imports))]
    for nb in sorted(set(rows) & set(imports)):
        if missing := sorted(imports[nb] - every - rows[nb]):
            errors.append(f"notebook {nb} imports {missing}, not in its row")
        if extra := sorted(rows[nb] - imports[nb]):
            errors.append(f"notebook {nb}'s row names {extra}, which it does not import")
    return errors


def test_the_notebook_table_is_what_the_notebooks_import() -> None:
    every, rows = _notebook_table(MAP.read_text(encoding="utf-8"))
    errors = _notebook_table_errors(every, rows, _all_notebook_imports())
    assert not errors, "docs/architecture.md's notebook -> modules table:\n" + "\n".join(errors)


def test_the_notebook_table_rule_can_fail() -> None:
    text = ("## Notebook -> modules\n\nEvery notebook imports `course_lib.runtime` and `course_lib.checks`; ...\n\n"
            "| notebook | modules |\n|---|---|\n| 00 welcome | figures.plotting (and models.softmax, its exercise) |\n"
            "| 01 attention | models.attention, models.masking |\n| 02 gone | models.gpt |\n\n"
            "## Next\n| 03 x | y.z |\n")
    every, rows = _notebook_table(text)
    assert every == {"runtime", "checks"}
    assert rows == {"00": {"figures.plotting"}, "01": {"models.attention", "models.masking"},
                    "02": {"models.gpt"}}
    imports = {"00": {"runtime", "checks", "figures.plotting"}, "01": {"runtime", "models.attention", "data.bpe"}}
    assert _notebook_table_errors(every, rows, imports) == [
        "notebook 01 does not import checks, which every notebook imports",
        "a row for notebook 02, which does not exist",
        "notebook 01 imports ['data.bpe'], not in its row",
        "notebook 01's row names ['models.masking'], which it does not import"]


def _package_table_notebooks(text: str) -> dict[str, str]:
    """The map's package table: each single-module row's module (``models.attention``) and its notebooks cell."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`course_lib/([\w/]+)\.py`", cells[1]) if len(cells) >= 4 else None
        if match and not match.group(1).endswith("__init__"):
            rows[match.group(1).replace("/", ".")] = cells[3]
    return rows


def _stated_notebooks(cell: str, notebooks: list[str]) -> list[str]:
    """The notebooks a cell names: two-digit numbers, "all", or "all but" numbers (remarks in parentheses left
    out)."""
    stated = re.sub(r"\([^()]*\)", "", cell)
    numbers = re.findall(r"\b\d\d\b", stated)
    if stated.strip().startswith("all"):
        return [nb for nb in notebooks if nb not in numbers] if stated.strip().startswith("all but") else notebooks
    return sorted(numbers)


def _package_table_errors(rows: dict[str, str], imports: dict[str, set[str]]) -> list[str]:
    """Rows whose notebooks cell is not the notebooks that import the module; modules no notebook imports are
    not held to it (the package itself, the grader's)."""
    errors = []
    for module, cell in sorted(rows.items()):
        users = sorted(nb for nb, found in imports.items() if module in found)
        if users and _stated_notebooks(cell, sorted(imports)) != users:
            errors.append(f"{module}: says {cell!r}, imported by {users}")
    return errors


def test_the_package_tables_notebooks_are_those_that_import_each_module() -> None:
    errors = _package_table_errors(_package_table_notebooks(MAP.read_text(encoding="utf-8")), _all_notebook_imports())
    assert not errors, "docs/architecture.md's package table, column notebooks:\n" + "\n".join(errors)


def test_the_package_table_rule_can_fail() -> None:
    text = ("| | `course_lib/models/gpt.py` | the model | 10, 11 | `test_gpt.py` |\n"
            "| | `course_lib/runtime.py` | seeds | all | |\n| | `course_lib/models/bert.py` | BERT | 12 | |\n"
            "| | `course_lib/models/softmax.py` | softmax | 15 (00's exercise) | |\n"
            "| | `course_lib/figures/plotting.py` | plots | all but 15 | |\n")
    rows = _package_table_notebooks(text)
    assert rows["models.softmax"] == "15 (00's exercise)" and len(rows) == 5
    imports = {"00": {"runtime", "models.gpt", "figures.plotting"}, "12": {"runtime", "models.softmax"},
               "15": {"models.softmax", "figures.plotting"}}
    assert _package_table_errors(rows, imports) == [
        "figures.plotting: says 'all but 15', imported by ['00', '15']",
        "models.gpt: says '10, 11', imported by ['00']",
        "models.softmax: says \"15 (00's exercise)\", imported by ['12', '15']",
        "runtime: says 'all', imported by ['00', '12']"]
