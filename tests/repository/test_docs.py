"""The API reference: built from the docstrings by pdoc, here, so that a broken docstring fails CI.

- pdoc builds the reference of ``course_lib`` (the command in docs/instructors.md,
  ``python -m pdoc $(python tools/update_api_record.py --modules) -o docs/api``) into a temporary folder
  without a warning about course_lib, and every name of every public ``__all__`` has its entry in it;
- every public module, function and class has a docstring of its own (not one inherited from PyTorch);
- every public function and class of the model modules shows an example (``>>>``) and, where tensors go in
  or out, their shapes;
- every example in a public docstring runs and prints what it says (doctest).
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import re
import warnings
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from site_cache import load_build_site

_spec = importlib.util.spec_from_file_location("update_api_record", ROOT / "tools" / "update_api_record.py")
api_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_tool)

#: The modules of the models (every file of course_lib/models/, found by walking it): their public names document
#: shapes and an example. Those still to complete are listed, each with what it lacks, so that the list only shrinks.
MODELS_TO_COMPLETE = {"course_lib.models.bert": "mlm_loss has no example",
                      "course_lib.models.kv_cache": "KVCache has no example",
                      "course_lib.models.ngram": "KneserNeyLM names no shapes"}
MODEL_MODULES = tuple(sorted(
    "course_lib.models." + p.stem for p in (ROOT / "course_lib" / "models").glob("*.py")
    if p.stem != "__init__" and "course_lib.models." + p.stem not in MODELS_TO_COMPLETE))
_SHAPES = re.compile(r"shape|\((batch|seq|\.\.\.|max_len|d_model|num_heads|vocab)", re.IGNORECASE)


def _public() -> list[tuple[str, object, list[str]]]:
    """``(module name, module, its __all__)`` for every public module that has an ``__all__``."""
    found = []
    for name in api_tool.public_modules():
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - tests/repository/test_api.py reports modules that do not import
            continue
        if hasattr(module, "__all__"):
            found.append((name, module, list(module.__all__)))
    return found


PUBLIC = _public()


def _documentable(obj: object) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)


def _mentions_tensors(obj: object) -> bool:
    """True when a tensor goes in or out (by the annotations), or the object is a module with a forward."""
    if inspect.isclass(obj):
        if issubclass(obj, torch.nn.Module):
            return True
        target = obj.__init__
    else:
        target = obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return False
    annotations = [str(p.annotation) for p in sig.parameters.values()] + [str(sig.return_annotation)]
    return any("Tensor" in a for a in annotations)


# --- pdoc ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("docformat", ["restructuredtext", "google"])
def test_pdoc_builds_the_reference_without_warnings(tmp_path: Path, docformat: str) -> None:
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat=docformat)  # restructuredtext is the default of `python -m pdoc`
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pdoc.pdoc(*api_tool.public_modules(), output_directory=tmp_path)
    finally:
        pdoc.render.configure()  # back to pdoc's defaults
    # pdoc's own warnings about course_lib (an import error, a name in __all__ that does not resolve, a docstring
    # it cannot process); not those about members inherited from other libraries (jupyter_client's traitlets).
    from_pdoc = [w for w in caught if "/pdoc/" in w.filename.replace("\\", "/") and "course_lib" in str(w.message)
                 and "has already been added" not in str(w.message)]
    assert not from_pdoc, "pdoc warned:\n" + "\n".join(f"  {w.message}" for w in from_pdoc)
    assert (tmp_path / "index.html").exists() and (tmp_path / "course_lib.html").exists()
    missing = []
    for module_name, _module, names in PUBLIC:
        page = tmp_path / (module_name.replace(".", "/") + ".html")
        if not page.exists():
            missing.append(f"{module_name} (no page)")
            continue
        html = page.read_text(encoding="utf-8")
        missing += [f"{module_name}.{n}" for n in names if n != "__version__" and f'id="{n}"' not in html]
    assert not missing, f"public names without an entry in the API reference: {missing}"
    if docformat == "restructuredtext":  # `python -m pdoc`'s default: the site's reference, built once per run
        build_site = load_build_site()
        build_site.store_api_reference(tmp_path, build_site.default_cache())


# --- docstrings ------------------------------------------------------------------------------------------------

def test_every_public_module_function_and_class_has_its_own_docstring() -> None:
    problems = []
    for module_name, module, names in PUBLIC:
        if not (module.__doc__ or "").strip():
            problems.append(f"module {module_name}")
        for name in names:
            obj = getattr(module, name, None)
            if not _documentable(obj) or inspect.ismodule(obj):
                continue
            if not (obj.__doc__ or "").strip():  # a class's __doc__ is never inherited
                problems.append(f"{module_name}.{name}")
    assert not problems, f"public names without a docstring: {sorted(set(problems))}"


def _model_doc_problems(modules: set[str] | tuple[str, ...]) -> list[str]:
    """What the public functions and classes of ``modules`` lack: an example (``>>>``), or shapes."""
    problems = []
    for module_name, module, names in PUBLIC:
        if module_name not in modules:
            continue
        for name in names:
            obj = getattr(module, name, None)
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            doc = obj.__doc__ or ""
            if ">>>" not in doc:
                problems.append(f"{module_name}.{name}: no example (>>>)")
            if _mentions_tensors(obj) and not _SHAPES.search(doc):
                problems.append(f"{module_name}.{name}: takes or returns tensors but names no shapes")
    return problems


def test_model_functions_and_classes_document_shapes_and_an_example() -> None:
    assert {"course_lib.models.attention", "course_lib.models.gpt", "course_lib.models.vit"} <= set(MODEL_MODULES)
    problems = _model_doc_problems(MODEL_MODULES)
    assert not problems, "model docstrings to complete:\n" + "\n".join(f"  {p}" for p in problems)


def test_the_model_modules_still_to_complete_are_incomplete() -> None:
    """A module leaves MODELS_TO_COMPLETE (and comes under the rule) as soon as its docstrings are complete."""
    done = [m for m in MODELS_TO_COMPLETE if not _model_doc_problems({m})]
    assert not done, f"{done}: docstrings complete, remove them from MODELS_TO_COMPLETE"


def _doctests() -> list[doctest.DocTest]:
    """Every doctest in a public module's docstring or a public name's docstring (methods included), once."""
    tests: dict[str, doctest.DocTest] = {}
    for module_name, module, names in PUBLIC:
        for test in doctest.DocTestFinder(recurse=False).find(module, module_name, globs=dict(vars(module))):
            tests.setdefault(test.name, test)
        for name in names:
            obj = getattr(module, name, None)
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            home = inspect.getmodule(obj) or module
            label = f"{home.__name__}.{getattr(obj, '__qualname__', name)}"
            for test in doctest.DocTestFinder().find(obj, label, module=home, globs=dict(vars(home))):
                if test.examples:
                    tests.setdefault(test.name, test)
    return sorted(tests.values(), key=lambda t: t.name)


def test_every_docstring_example_runs() -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures, count = [], 0
    for test in _doctests():
        torch.manual_seed(0)
        report: list[str] = []
        result = runner.run(test, out=report.append)
        count += 1
        if result.failed:
            failures.append(f"{test.name}:\n" + "".join(report)[:1500])
    assert count > 50, f"only {count} docstrings with examples found"
    assert not failures, f"{len(failures)} docstring example(s) broken:\n" + "\n".join(failures)


def test_the_checks_catch_a_missing_docstring_and_a_broken_example() -> None:
    """The rules above can fail: a bare function, an undocumented tensor function, a wrong example."""

    def bare(x):
        return x

    def tensor_fn(x: torch.Tensor) -> torch.Tensor:
        """Doubles x.

        Example:
            >>> 1 + 1
            3
        """
        return x * 2

    assert not (bare.__doc__ or "").strip()
    assert _mentions_tensors(tensor_fn) and not _SHAPES.search(tensor_fn.__doc__)
    test = doctest.DocTestFinder().find(tensor_fn, "tensor_fn", globs={})[0]
    result = doctest.DocTestRunner().run(test, out=lambda s: None)
    assert result.failed == 1
