"""Notebook 12's data and training: the standard library's docstrings, BPE with BERT's special tokens, MLM
pre-training and fine-tuning on the course's training loop, and the statistical check of the masking.

References we did not write: Python's own ``ast`` (a docstring is what ``ast.get_docstring`` says),
``F.cross_entropy``, and the binomial spread of a correct masking.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from course_lib.checks.nb12_bert import MASK_TOKENS
from course_lib.data.python_docs import ByteBPE, is_validation_document
from course_lib.data.stdlib_docstrings import TASK_PACKAGES, Docstring, docstring_task, stdlib_docstrings
from course_lib.evaluation.metrics import classifier_accuracy
from course_lib.exercises import Case, output_problems, run_case, run_check, to_plain
from course_lib.exercises.judges import masking_problems
from course_lib.models.bert import BERT, IGNORE_INDEX, mask_tokens
from course_lib.training.pretraining import (
    SPECIAL_TOKENS,
    classification_inputs,
    fine_tune,
    labelled_subset,
    mlm_batches,
    mlm_step,
    pretrain_mlm,
)


def _library(tmp_path):
    """A small fake standard library: a package, a module, a test folder and a file that does not parse."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""The package pkg, which does many things well."""\n')
    (tmp_path / "pkg" / "core.py").write_text(
        'class Widget:\n    """A widget that draws itself on the screen when asked."""\n'
        '    def draw(self):\n        """Draw the widget on the screen, then return nothing at all."""\n'
        'if True:\n    def hidden():\n        """Defined under an if statement, still a docstring of the module."""\n'
        'def short():\n    """Too short."""\n')
    (tmp_path / "tool.py").write_text('"""A single-file module of the library, with its own docstring."""\n')
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_x.py").write_text('"""Tests are not the library\'s own text, skipped."""\n')
    (tmp_path / "broken.py").write_text('"""Does not parse at all, so it is skipped."""\ndef (:\n')
    return tmp_path


def test_docstrings_are_read_with_ast_and_named_by_file_and_qualified_name(tmp_path) -> None:
    found = stdlib_docstrings(root=_library(tmp_path))
    keys = {d.key: d for d in found}
    assert set(keys) == {"pkg/__init__.py:<module>", "pkg/core.py:Widget", "pkg/core.py:Widget.draw",
                         "pkg/core.py:hidden", "tool.py:<module>"}
    assert keys["pkg/core.py:Widget.draw"].package == "pkg" and keys["tool.py:<module>"].package == "tool"
    assert keys["pkg/core.py:Widget"].text == "A widget that draws itself on the screen when asked."


@pytest.mark.slow  # parses the whole standard library (~6 s); the fake library above keeps a fast test
def test_the_task_never_pretrains_on_a_validation_docstring() -> None:
    docs = stdlib_docstrings()
    task = docstring_task(docs)
    assert len(task.classes) == 6 and set(task.train_labels) == set(range(6)) == set(task.valid_labels)
    pretrain = set(task.pretrain_texts)
    held_out = [d for d in docs if d.package in task.classes and is_validation_document(d.key, 4)]
    copies = [d for d in held_out if d.text.strip() in {t.strip() for t in pretrain}]
    assert held_out and len(task.valid_texts) == len(held_out) - len(copies) > 400
    assert not {t.strip() for t in task.valid_texts} & {t.strip() for t in pretrain}
    others = [d for d in docs if d.package not in task.classes]
    assert all(d.text in pretrain for d in others)  # every other package's docstrings are pre-trained on


def test_a_held_out_docstring_copied_from_elsewhere_is_not_scored() -> None:
    keys = [f"{pkg}/m.py:f{i}" for pkg in ("alpha", "beta") for i in range(40)]
    docs = [Docstring(k.split("/")[0], k, f"Own text of {k}.") for k in keys]
    copied = next(k for k in keys if is_validation_document(k, 4))
    docs += [Docstring("gamma", "gamma.py:alias", f"Own text of {copied}.")]  # the same text, another package
    task = docstring_task(docs, classes=("alpha", "beta"))
    assert f"Own text of {copied}." not in task.valid_texts
    held_out = [k for k in keys if is_validation_document(k, 4)]
    assert len(task.valid_texts) == len(held_out) - 1 and task.valid_texts


def _docs(packages: list[str]) -> list[Docstring]:
    """40 made-up docstrings of each package."""
    return [Docstring(pkg, f"{pkg}/m.py:f{i}", f"Text {i} of the package {pkg}.")
            for pkg in packages for i in range(40)]


def test_a_python_without_tkinters_source_gets_importlib_in_its_place_and_a_warning() -> None:
    """Debian's and Ubuntu's Pythons ship tkinter apart (python3-tk): notebook 12 still runs, and says why its
    numbers differ; any other absent class is an error that names it."""
    without_tk = _docs([p for p in TASK_PACKAGES if p != "tkinter"] + ["importlib", "json"])
    with pytest.warns(UserWarning, match="no 'tkinter' source.*python3-tk.*'importlib' in its place"):
        task = docstring_task(without_tk)
    assert task.classes == ("importlib", *TASK_PACKAGES[1:])
    assert set(task.train_labels) == set(range(6)) and any("importlib" in t for t in task.valid_texts)
    with pytest.raises(ValueError, match=r"no docstrings of \['tkinter'\]"):
        docstring_task(without_tk, classes=("tkinter", "asyncio"))
    with pytest.raises(ValueError, match=r"no docstrings of \['tkinter', 'email'\]"):  # two gone: no stand-in
        docstring_task(_docs(["asyncio", "logging", "xml", "unittest", "importlib"]))
    with pytest.raises(ValueError, match=r"no docstrings of \['email'\]"):  # only tkinter has a stand-in
        docstring_task(_docs(["tkinter", "asyncio", "logging", "xml", "unittest", "importlib"]))


def test_the_task_refuses_a_single_class() -> None:
    with pytest.raises(ValueError, match="two different classes"):
        docstring_task([], classes=("tkinter", "tkinter"))


def test_bpe_gives_special_tokens_their_own_ids_and_never_splits_them() -> None:
    bpe = ByteBPE.train(["return the value of the option"] * 5, vocab_size=300, special_tokens=SPECIAL_TOKENS)
    ids = [bpe.token_id(t) for t in SPECIAL_TOKENS]
    assert ids == [1, 2, 3, 4] and bpe.eot_id == 0
    assert bpe.encode("the [MASK] value").count(bpe.token_id("[MASK]")) == 1
    with pytest.raises(KeyError, match=r"\[CLS\]"):
        bpe.token_id("[UNKNOWN]")
    with pytest.raises(ValueError, match="distinct"):
        ByteBPE.train(["x"], vocab_size=300, special_tokens=["[A]", "[A]"])


def _tiny_data():
    bpe = ByteBPE.train(["the cat sat on the mat", "a dog ran in the park"] * 20, vocab_size=290,
                        special_tokens=SPECIAL_TOKENS)
    return bpe, *(bpe.token_id(t) for t in SPECIAL_TOKENS)


def test_classification_inputs_start_with_cls_and_are_padded() -> None:
    bpe, pad, cls, _, _ = _tiny_data()
    x = classification_inputs(bpe, ["the cat", "the cat sat on the mat and the dog ran in the park"], 8, cls, pad)
    assert x.shape == (2, 8) and bool((x[:, 0] == cls).all())
    assert x[0, 1:].tolist() == bpe.encode("the cat") + [pad] * (7 - len(bpe.encode("the cat")))
    assert pad not in x[1].tolist()  # truncated to 7 pieces, no padding


def test_labelled_subset_draws_the_same_count_of_every_class() -> None:
    labels = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)
    chosen = labelled_subset(labels, 3, seed=0)
    assert torch.bincount(labels[chosen]).tolist() == [3, 3, 3] and len(set(chosen.tolist())) == 9
    assert torch.equal(chosen, labelled_subset(labels, 3, seed=0))
    with pytest.raises(ValueError, match="class 2 has 4"):
        labelled_subset(labels, 5, seed=0)


def test_mlm_batches_and_step_score_only_the_selected_positions() -> None:
    bpe, pad, cls, sep, mask = _tiny_data()
    stream = torch.tensor([t for _ in range(20) for t in bpe.encode("the cat sat on the mat") + [sep]])
    batches = mlm_batches(stream, 4, 10, cls, mask, bpe.vocab_size, [pad, cls, sep, 0],
                          generator=torch.Generator().manual_seed(0))
    inputs, labels = next(batches)
    assert inputs.shape == labels.shape == (4, 10) and bool((inputs[:, 0] == cls).all())
    model = BERT(bpe.vocab_size, d_model=16, num_heads=2, num_layers=1, max_len=10, dropout=0.0).eval()
    pred = mlm_step(model, (inputs, labels), "cpu")
    selected = labels != IGNORE_INDEX
    assert pred.logits.shape == (1, int(selected.sum()), bpe.vocab_size) and pred.items == int(selected.sum())
    torch.testing.assert_close(pred.logits[0], model(inputs)[selected])  # the same logits, fewer computed
    nothing = mlm_step(model, (inputs, torch.full_like(labels, IGNORE_INDEX)), "cpu")
    assert nothing.logits.shape == (1, 0, bpe.vocab_size)


def test_pretraining_lowers_the_mlm_loss_and_fine_tuning_learns_a_separable_task() -> None:
    bpe, pad, cls, sep, mask = _tiny_data()
    stream = torch.tensor([t for _ in range(50) for t in bpe.encode("the cat sat on the mat") + [sep]])
    torch.manual_seed(0)
    model = BERT(bpe.vocab_size, d_model=32, num_heads=2, num_layers=1, max_len=12, dropout=0.0, pad_id=pad,
                 num_classes=2)
    history = pretrain_mlm(model, stream, 80, cls, mask, [pad, cls, sep, 0], seq_len=12, lr=3e-3, progress=False)
    assert np.mean(history.losses[-10:]) < np.mean(history.losses[:10]) - 1.0
    texts = ["the cat sat"] * 20 + ["a dog ran"] * 20
    tokens = classification_inputs(bpe, texts, 12, cls, pad)
    labels = torch.tensor([0] * 20 + [1] * 20)
    fine_tune(model, tokens, labels, 40, batch_size=8, lr=1e-3, progress=False)
    assert classifier_accuracy(model, tokens, labels, classify=model.classify) == 1.0


def _masking_case(seed: int = 0) -> Case:
    return MASK_TOKENS.cases("public", seed=seed)[0]


def test_the_masking_judge_accepts_the_reference_whatever_the_seed() -> None:
    for seed in range(5):
        case = _masking_case(seed)
        out = to_plain(run_case(mask_tokens, case, seed=seed))
        assert masking_problems(case, out, out) == []


@pytest.mark.parametrize("junk", ["text", None, 3, [np.zeros((2, 2))], [np.zeros((96, 128)), "x"],
                                  [np.zeros((96, 128)), np.zeros((96, 128))], [np.full((96, 128), np.nan)] * 2,
                                  [np.zeros((96, 128), dtype=np.int64), np.zeros((96, 127), dtype=np.int64)]])
def test_the_masking_judge_turns_any_output_into_problems_never_an_exception(junk) -> None:
    problems = masking_problems(_masking_case(), None, junk)
    assert problems and all(isinstance(p, str) and ":" in p for p in problems)


def test_a_seeded_random_exercise_gives_the_same_verdict_and_leaves_the_global_generator_alone() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first = to_plain(run_case(mask_tokens, _masking_case(), seed=0))
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's random state is restored
    second = to_plain(run_case(mask_tokens, _masking_case(), seed=0))
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_an_all_mask_answer_is_told_its_share_and_the_hint() -> None:
    def all_masked(tokens, mask_id, vocab_size, special_ids, generator=None):
        inputs, labels = mask_tokens(tokens, mask_id, vocab_size, special_ids, generator, mask_prob=1.0,
                                     random_prob=0.0)
        return inputs, labels

    result = run_check("mask_tokens", all_masked)
    assert result.status == "failed" and "[MASK] share" in result.message and "100.0%" in result.message
    assert "10 % get a random token" in result.hint or "80 %" in result.hint


def test_the_unchanged_share_allows_exactly_what_a_random_draw_of_the_same_token_adds() -> None:
    """10 % unchanged, plus the random 10 % that drew the original token again: 1 in 26 ordinary ids here."""
    case = _masking_case()
    tokens, mask_id, vocab_size, special_ids = case.args
    inputs, labels = mask_tokens(tokens, mask_id, vocab_size, special_ids, torch.Generator().manual_seed(0),
                                 mask_prob=1.0, random_prob=0.0)
    problems = masking_problems(case, None, to_plain((inputs, labels)))
    unchanged = [p for p in problems if p.startswith("unchanged share")]
    assert unchanged and "expected 10.0%-10.4%" in unchanged[0]


def test_unsigned_outputs_are_judged_and_a_judge_that_raises_becomes_a_problem() -> None:
    case = _masking_case()
    out = to_plain(run_case(mask_tokens, case, seed=0))
    unsigned = [out[0].astype(np.uint8), out[1].astype(np.uint8)]  # -100 wraps around to 156: wrong labels
    assert any(p.startswith("labels") or p.startswith("special") for p in masking_problems(case, None, unsigned))

    def broken_judge(case, expected, got):
        raise RuntimeError("the judge fell over")

    exercise = dataclasses.replace(MASK_TOKENS, compare=broken_judge)
    assert output_problems(exercise, case, out, out) == [
        "output: could not be judged (RuntimeError: the judge fell over)"]
