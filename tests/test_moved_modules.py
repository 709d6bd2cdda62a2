"""The modules that moved into packages (issue #35) keep their old import paths, warning once.

``course_lib.MOVED_MODULES`` maps each old module name to the module that holds its code now;
``tests/old_import_paths.json`` lists the public names those modules had before the move (from the API record of
that day). Every one of them must still import from its old place, be the very object of its new home, and warn
with a :class:`CourseDeprecationWarning` that names the new path. Nothing in the repository itself uses an old
path (``tests/test_repository.py``, ``test_nothing_in_the_repository_uses_an_old_module_path``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import pytest
from conftest import ROOT

import course_lib
from course_lib._deprecation import CourseDeprecationWarning

OLD = json.loads((ROOT / "tests" / "old_import_paths.json").read_text(encoding="utf-8"))["modules"]


def _fresh(old: str) -> None:
    """Forget that ``old`` (an alias) was imported, so that importing it again asks the finder (and warns)."""
    for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
        if sys.modules[name].__name__ != name:  # an alias entry; the module itself stays under its own name
            del sys.modules[name]
    short = old.removeprefix("course_lib.")
    if "." not in short and short in course_lib.MOVED_MODULES:
        course_lib.__dict__.pop(short, None)


def test_every_recorded_old_name_still_imports_and_is_the_new_object() -> None:
    """In a fresh interpreter: each old module imports with a warning naming its new path, and each of its
    recorded names is the object of its new home (the same class: isinstance keeps working)."""
    script = textwrap.dedent("""
        import importlib, json, sys, warnings
        from course_lib._deprecation import CourseDeprecationWarning
        old = json.loads(sys.stdin.read())
        problems = []
        for module_name, names in old.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    module = importlib.import_module(module_name)
                except Exception as err:
                    problems.append(f"{module_name}: {type(err).__name__}: {err}")
                    continue
                for name in names:
                    if not hasattr(module, name):
                        problems.append(f"{module_name}.{name}: missing")
            texts = [str(w.message) for w in caught if issubclass(w.category, CourseDeprecationWarning)]
            if not any(module_name in t for t in texts):
                problems.append(f"{module_name}: no CourseDeprecationWarning naming it ({texts})")
        print(json.dumps(problems))
    """)
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(OLD), capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    problems = json.loads(done.stdout.strip().splitlines()[-1])
    assert not problems, "old import paths that broke:\n" + "\n".join(f"  {p}" for p in problems)


@pytest.mark.parametrize("old", sorted(course_lib.MOVED_MODULES))
def test_an_old_module_is_the_new_module_itself(old: str) -> None:
    new = f"course_lib.{course_lib.MOVED_MODULES[old]}"
    _fresh(f"course_lib.{old}")
    with pytest.warns(CourseDeprecationWarning, match=rf"course_lib\.{old} is deprecated.*use {new} instead") as rec:
        module = __import__(f"course_lib.{old}", fromlist=["_"])
    assert module is sys.modules[new] and module.__name__ == new
    assert module.__spec__.name == new, "the module keeps its own spec"
    assert rec[0].filename == __file__, "the warning points at the line that imported the old name"


def test_the_three_spellings_of_an_old_import_give_one_module_and_warn_once() -> None:
    from course_lib.data import translation

    _fresh("course_lib.text")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import course_lib.text  # noqa: F401
        from course_lib.text import Vocab

        from course_lib import text
    assert text is translation and Vocab is translation.Vocab and course_lib.text is translation
    assert len([w for w in caught if issubclass(w.category, CourseDeprecationWarning)]) == 1
    vocab = Vocab([*text.SPECIALS, "a", "b"])
    assert isinstance(vocab, text.Vocab)


def test_a_moved_package_takes_its_submodules_along() -> None:
    from course_lib.training.cli import cli

    _fresh("course_lib.trainer")
    with pytest.warns(CourseDeprecationWarning) as rec:
        from course_lib.trainer.cli import main
    assert main is cli.main and sys.modules["course_lib.trainer.cli"] is cli
    assert [str(w.message).split(" is deprecated")[0] for w in rec] == ["course_lib.trainer", "course_lib.trainer.cli"]


def test_monkeypatching_through_an_old_path_reaches_the_code(monkeypatch) -> None:
    from course_lib.models import softmax

    _fresh("course_lib.basics")
    with pytest.warns(CourseDeprecationWarning):
        import course_lib.basics as basics
    monkeypatch.setattr(basics, "stable_softmax", "patched")
    assert softmax.stable_softmax == "patched"


@pytest.mark.parametrize(("package", "name", "home"), [
    ("course_lib.training", "train", "course_lib.training.engine"),
    ("course_lib.generation", "generate", "course_lib.generation.sampling"),
    ("course_lib.experiments", "KeySizeAttention", "course_lib.experiments.paper"),
])
def test_a_package_that_took_an_old_module_name_serves_its_names(package: str, name: str, home: str) -> None:
    import importlib

    module, new = importlib.import_module(package), importlib.import_module(home)
    with pytest.warns(CourseDeprecationWarning, match=rf"{package}\.{name} is deprecated.*use {home}\.{name}"):
        assert getattr(module, name) is getattr(new, name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_names_that_moved_out_of_a_module_still_resolve() -> None:
    from course_lib.evaluation import bag_of_words
    from course_lib.models import baselines, complexity, vit

    with pytest.warns(CourseDeprecationWarning, match=r"use course_lib\.models\.complexity\.layer_flops"):
        assert baselines.layer_flops is complexity.layer_flops
    with pytest.warns(CourseDeprecationWarning, match=r"use course_lib\.evaluation\.bag_of_words"):
        assert baselines.bag_of_words_accuracy is bag_of_words.bag_of_words_accuracy
    with pytest.warns(CourseDeprecationWarning, match=r"use course_lib\.models\.baselines\.SmallCNN"):
        assert vit.SmallCNN is baselines.SmallCNN


@pytest.mark.parametrize(("name", "home"), [
    ("classifier_optimizer", "course_lib.training.image_classifier"),
    ("train_classifier", "course_lib.training.image_classifier"),
    ("fit_classifier", "course_lib.training.image_classifier"),
    ("TrainHistory", "course_lib.training.engine"),
    ("warmup_cosine_schedule", "course_lib.training.engine"),
])
def test_the_digits_training_half_resolves_from_its_old_module(name: str, home: str) -> None:
    """The image classifier's training half left ``course_lib.data.digits`` for the training package: the old
    spellings (``course_lib.data.digits.X`` and ``from course_lib.data.digits import X``) give the new object and
    warn, naming its new home; the data module itself no longer imports the training package."""
    import importlib

    from course_lib.data import digits

    new = getattr(importlib.import_module(home), name)
    with pytest.warns(CourseDeprecationWarning, match=rf"course_lib\.data\.digits\.{name} is deprecated.*use "
                                                      rf"{home}\.{name} instead"):
        assert getattr(digits, name) is new
    with pytest.warns(CourseDeprecationWarning, match=rf"use {home}\.{name}") as rec:
        exec(f"from course_lib.data.digits import {name} as old", namespace := {})
    assert namespace["old"] is new and rec[0].filename == "<string>", "the warning points at the importing line"
    assert name not in digits.__all__ and name not in vars(digits)


def test_every_moved_module_is_listed_with_its_old_names() -> None:
    """The alias table and the record of old names describe the same modules."""
    recorded = {m.removeprefix("course_lib.").split(".")[0] for m in OLD}
    packages = {"training", "generation", "experiments"}  # old modules whose name a package took
    assert recorded == set(course_lib.MOVED_MODULES) | packages
