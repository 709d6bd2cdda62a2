"""What students receive works as they receive it (issue 44): the class edition declares its dependencies and
installs into a fresh virtual environment, its README says what is graded and how to hand it in, and an
assignment's student folder ships only what the instructor's manifest names.

The install test is in ``test_install_anywhere.py``, beside the other installs into a fresh venv that share its
PyTorch install.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from conftest import ROOT

from course_lib.edition.build import EDITION_NEEDS, SHIP, edition_pins, readme, shipped_files


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return pins


def test_the_editions_pins_are_the_courses() -> None:
    pins = dict(p.split("==") for p in edition_pins())
    assert set(pins) == set(EDITION_NEEDS) and {"torch", "numpy", "ipykernel", "nbclient"} <= set(pins)
    course = _requirements()
    assert all(course[name] == version for name, version in pins.items()), (pins, course)


def test_the_readme_says_what_is_graded_and_how_to_hand_it_in() -> None:
    text = readme("04_masking", edition_pins())
    assert "**Graded: `notebooks/04_masking.ipynb`**" in text
    assert "hand in **that one file**, `04_masking.ipynb`" in text and "`04_masking_<your login>.ipynb`" in text
    assert "torch 2.13.0" in text


def test_an_assignment_ships_only_what_its_manifest_names_and_warns_of_the_rest(tmp_path: Path) -> None:
    kv = ROOT / "assignments" / "kv_cache"
    folder = tmp_path / "hw"
    folder.mkdir()
    for name in ("kv_cache.ipynb", "kv_cache_checks.py", "kv_cache_reference.py"):
        (folder / name).write_bytes((kv / name).read_bytes())
    (folder / "solution_draft.py").write_text("def append_kv(*a): ...\n")
    (folder / "test_hw.py").write_text("def test(): ...\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = shipped_files(folder, folder / "kv_cache.ipynb", "kv_cache_checks")
    # No manifest: the modules the notebook imports; every other file is named in a warning.
    assert [p.name for p in chosen] == ["kv_cache_reference.py"]
    said = "\n".join(str(w.message) for w in caught)
    assert "solution_draft.py is not shipped" in said and "test_hw.py is not shipped" in said
    (folder / SHIP).write_text("# what students receive\nkv_cache_reference.py\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [p.name for p in shipped_files(folder, folder / "kv_cache.ipynb", "kv_cache_checks")] == \
            ["kv_cache_reference.py"]
    assert "not named in ship.txt" in "\n".join(str(w.message) for w in caught)
    (folder / SHIP).write_text("kv_cache_checks.py\n")
    with pytest.raises(ValueError, match="kv_cache_checks.py"):
        shipped_files(folder, folder / "kv_cache.ipynb", "kv_cache_checks")
