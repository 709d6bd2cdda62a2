"""A stable public API: ``__version__``, a record of every public name and signature, deprecation warnings.

``tests/api_record.json`` lists every name in ``course_lib.__all__`` and in the ``__all__`` of every public
submodule, with its signature (classes: constructor, bases and public methods). The test fails when the live
API differs from the record, and says what was added, removed or changed. If the change is deliberate::

    python tools/update_api_record.py       # then commit tests/api_record.json with the change

and before removing or renaming a released name, keep the old one until a stated release with
``course_lib._deprecation`` (a warning that names the replacement and the release that removes it).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
import types
import warnings

import pytest
from conftest import ROOT

import course_lib
from course_lib._deprecation import (
    CourseDeprecationWarning,
    deprecated,
    deprecated_attributes,
    deprecation_message,
    overdue,
)

_spec = importlib.util.spec_from_file_location("update_api_record", ROOT / "tools" / "update_api_record.py")
api_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_tool)

HOW_TO_UPDATE = ("If the change is deliberate, run `python tools/update_api_record.py` and commit "
                 "tests/api_record.json with it (deprecate a released name before removing it: "
                 "course_lib/_deprecation.py).")


@pytest.fixture(scope="module")
def live():
    return api_tool.collect()


# --- the version and the public names ------------------------------------------------------------------

def test_version_is_public_and_well_formed() -> None:
    assert "__version__" in course_lib.__all__
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?(a|b|rc|dev|post)\d*)?", course_lib.__version__), course_lib.__version__


def test_every_public_module_imports(live) -> None:
    _, errors = live
    assert not errors, "public modules that do not import:\n" + "\n".join(f"  {m}: {e}" for m, e in errors.items())


def test_every_name_in_all_is_defined(live) -> None:
    api, _ = live
    missing = [f"{m}.{n}" for m, names in api.items() for n, e in names.items() if e["kind"] == "missing"]
    assert not missing, f"listed in __all__ but not defined: {missing}"


def test_all_has_no_duplicates() -> None:
    for module_name in api_tool.public_modules():
        exported = getattr(importlib.import_module(module_name), "__all__", [])
        dupes = sorted({n for n in exported if exported.count(n) > 1})
        assert not dupes, f"{module_name}.__all__ lists {dupes} twice"


def test_public_api_matches_the_record(live) -> None:
    api, _ = live
    assert api_tool.RECORD.exists(), f"no API record at {api_tool.RECORD}. {HOW_TO_UPDATE}"
    recorded = api_tool.load_record()
    report = api_tool.format_differences(api_tool.compare(recorded, api))
    assert not report, f"course_lib's public API differs from tests/api_record.json:\n{report}\n\n{HOW_TO_UPDATE}"


def test_record_lists_the_top_level_package() -> None:
    recorded = api_tool.load_record()
    assert "course_lib" in recorded and "__version__" in recorded["course_lib"]


# --- the comparison itself can fail ------------------------------------------------------------------------

def _sample_api() -> dict:
    return {
        "course_lib.m": {
            "f": {"kind": "function", "signature": "(x: 'int', y: 'int' = 1) -> 'int'"},
            "C": {"kind": "class", "bases": ["torch.nn.modules.module.Module"], "signature": "(d_model: 'int')",
                  "methods": {"forward": "(self, x)"}},
        },
        "course_lib.gone": {"g": {"kind": "function", "signature": "()"}},
    }


def test_comparison_reports_added_removed_and_changed_names() -> None:
    recorded = _sample_api()
    live = _sample_api()
    del live["course_lib.gone"]
    live["course_lib.m"]["f"]["signature"] = "(x: 'int', y: 'int' = 2) -> 'int'"  # a default changed
    live["course_lib.m"]["C"]["methods"]["forward"] = "(self, x, mask=None)"  # a method's signature changed
    live["course_lib.m"]["h"] = {"kind": "function", "signature": "(z)"}
    live["course_lib.new"] = {"k": {"kind": "variable", "type": "int"}}
    diff = api_tool.compare(recorded, live)
    assert diff["removed"] == ["module course_lib.gone (had 1 public names)"]
    assert [line.split(":")[0] for line in diff["changed"]] == ["course_lib.m.C", "course_lib.m.f"]
    assert "y: 'int' = 1" in diff["changed"][1] and "y: 'int' = 2" in diff["changed"][1]
    assert diff["added"] == ["course_lib.m.h: function(z)", "module course_lib.new (1 public names)"]
    report = api_tool.format_differences(diff)
    assert report.startswith("removed (1):") and "changed (2):" in report and "added (2):" in report
    assert api_tool.format_differences(api_tool.compare(recorded, _sample_api())) == ""


def test_describe_records_signatures_and_course_methods_only() -> None:
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d_model: int, dropout: float = 0.1) -> None:
            super().__init__()

        def forward(self, x, mask=None):
            return x

        @property
        def width(self):
            return 1

    Block.__module__ = "course_lib.fake"
    entry = api_tool.describe(Block)
    assert entry["kind"] == "class" and entry["signature"] == "(d_model: 'int', dropout: 'float' = 0.1) -> 'None'"
    assert entry["methods"] == {"forward": "(self, x, mask=None)", "width": "property"}  # nothing of nn.Module's
    assert api_tool.describe(lambda a, b=2: a)["signature"] == "(a, b=2)"
    assert api_tool.describe("0.1.0") == {"kind": "variable", "type": "str"}

    class Inherits(nn.Module):  # the constructor is PyTorch's: named, not rendered (it differs across Pythons)
        def forward(self, x):
            return x

    class Plain:
        pass

    Inherits.__module__ = Plain.__module__ = "course_lib.fake"
    assert api_tool.describe(Inherits)["signature"] == "(constructor of torch.nn.modules.module.Module)"
    assert api_tool.describe(Plain)["signature"] == "()"


def test_type_aliases_are_recorded_by_the_type_they_name() -> None:
    """Aliases such as ``grading.judging.judge.Verdict`` are callable, but ``inspect.signature`` describes them
    differently on each Python (3.11/3.12 refuse, 3.13 gives tuple's constructor): the record keeps the type."""
    from typing import Optional

    assert api_tool.describe(tuple[str, int]) == {"kind": "type alias", "value": "tuple[str, int]"}
    assert api_tool.describe(Optional[int]) == {"kind": "type alias", "value": "typing.Optional[int]"}  # noqa: UP045
    assert api_tool.describe(int | None) == {"kind": "type alias", "value": "int | None"}
    assert api_tool.describe(tuple)["kind"] == "class"  # a bare class stays a class
    from course_lib.grading.judging.judge import Verdict
    assert api_tool.describe(Verdict) == {"kind": "type alias", "value": "tuple[str, str, str, int, str]"}


def test_update_script_check_mode(tmp_path) -> None:
    record = tmp_path / "record.json"
    api, _ = api_tool.collect()
    api_tool.write_record(api, record)
    assert api_tool.main(["--check", "--record", str(record)]) == 0
    changed = api_tool.load_record(record)
    changed["course_lib"]["no_such_name"] = {"kind": "function", "signature": "()"}
    api_tool.write_record(changed, record)
    assert api_tool.main(["--check", "--record", str(record)]) == 1


# --- deprecation ------------------------------------------------------------------------------------------------

def test_deprecated_function_warns_naming_the_replacement_and_the_removal_and_still_works() -> None:
    @deprecated(replacement="course_lib.models.masking.causal_mask", since="0.1.0", removal="0.3.0")
    def look_ahead_mask(n: int) -> int:
        """The old name."""
        return n * 2

    with pytest.warns(CourseDeprecationWarning, match=r"use course_lib\.models\.masking\.causal_mask instead") as rec:
        assert look_ahead_mask(3) == 6
    message = str(rec[0].message)
    assert "look_ahead_mask is deprecated since course_lib 0.1.0 and will be removed in 0.3.0" in message
    assert rec[0].filename == __file__, "the warning must point at the caller's line"
    assert look_ahead_mask.__name__ == "look_ahead_mask" and "Deprecated" in look_ahead_mask.__doc__
    assert look_ahead_mask.__deprecated__ == message


def test_deprecated_class_warns_on_construction_and_keeps_isinstance() -> None:
    @deprecated(replacement="course_lib.models.attention.MultiHeadAttention", removal="0.3.0")
    class MHA:
        def __init__(self, d_model: int) -> None:
            self.d_model = d_model

    class Sub(MHA):
        pass

    with pytest.warns(CourseDeprecationWarning, match="MultiHeadAttention instead"):
        obj = MHA(8)
    assert isinstance(obj, MHA) and obj.d_model == 8
    with pytest.warns(CourseDeprecationWarning):
        Sub(4)


def test_deprecated_module_attributes_give_the_new_object_itself() -> None:
    module = types.ModuleType("course_lib.fake_module")

    class NewClass:
        pass

    module.NewClass = NewClass
    module.__getattr__ = deprecated_attributes(module.__name__, {"OldClass": (NewClass, "NewClass")}, since="0.1.0",
                                               removal="0.2.0")
    with pytest.warns(CourseDeprecationWarning, match="course_lib.fake_module.OldClass is deprecated since "
                                                      "course_lib 0.1.0 and will be removed in 0.2.0; use NewClass"):
        assert module.OldClass is NewClass  # the very same class: isinstance and subclassing keep working
    with pytest.raises(AttributeError, match="no attribute 'Other'"):
        module.Other  # noqa: B018


def test_a_deprecation_must_name_its_replacement_and_a_removal_release_still_ahead() -> None:
    with pytest.raises(ValueError, match="replacement"):
        deprecated(replacement="", removal="0.3.0")
    with pytest.raises(ValueError, match="replacement"):
        deprecated_attributes("m", {"Old": (object, "  ")}, removal="0.3.0")
    with pytest.raises(TypeError, match="removal"):
        deprecated(replacement="new_fn")  # type: ignore[call-arg]  # no removal: refused
    with pytest.raises(TypeError, match="removal"):
        deprecated_attributes("m", {"Old": (object, "New")})  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="removal must be a release such as '0.3.0', got 'soon'"):
        deprecated(replacement="new_fn", removal="soon")
    with pytest.raises(ValueError, match=f"removal must be a release after the current {course_lib.__version__}"):
        deprecated(replacement="new_fn", removal=course_lib.__version__)(lambda: None)
    with pytest.raises(ValueError, match="removal must be a release after"):
        deprecated_attributes("m", {"Old": (object, "New")}, removal="0.0.1")
    assert deprecation_message("a", "b", removal="0.3") == "a is deprecated and will be removed in 0.3; use b instead."


def test_no_deprecation_outlives_its_removal_release() -> None:
    """Every deprecation the package declares names a release; once the version reaches it, this fails until
    the old name is removed. The rule can fail: a deprecation removed in 0.3.0 is overdue at 0.3.0."""
    import course_lib.checks  # noqa: F401 - every module of the package that might declare one
    import course_lib.grading  # noqa: F401

    assert overdue() == [], f"remove these deprecated names (their removal release is reached): {overdue()}"

    @deprecated(replacement="new_fn", removal="0.3.0", name="course_lib.demo.old_fn")
    def old_fn() -> None:
        return None

    assert "course_lib.demo.old_fn" in overdue("0.3.0") and "course_lib.demo.old_fn" not in overdue("0.2.9")


def test_deprecation_warnings_are_shown_by_default() -> None:
    """Unlike DeprecationWarning, the course's warning reaches a user's script (and a notebook) unfiltered."""
    code = ("from course_lib._deprecation import deprecated\n"
            "def helper():\n"
            "    @deprecated(replacement='new_fn', removal='99.0.0')\n"
            "    def old_fn():\n"
            "        return 1\n"
            "    return old_fn\n"
            "helper()()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "CourseDeprecationWarning" in result.stderr and "use new_fn instead" in result.stderr


def test_warnings_module_filters_still_apply() -> None:
    @deprecated(replacement="x", removal="99.0.0")
    def f() -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("error", CourseDeprecationWarning)
        with pytest.raises(CourseDeprecationWarning):
            f()


def test_deprecation_docstring_examples_run() -> None:
    import doctest

    import course_lib._deprecation as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0
