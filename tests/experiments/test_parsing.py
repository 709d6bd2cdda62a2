"""Notebook 13's parsing task: labelled-bracket scores (course_lib.evaluation.metrics) and one parsing run
(course_lib.experiments.ablation).

The bracket counts are checked against the evalb program's own sample (Sekine and Collins's EVALB, sample/sample.gld,
sample.tst and the per-sentence results it prints in sample.rsl), against hand-computed examples, and on the edge
cases a decoder produces: unbalanced brackets, duplicated brackets, empty output, the wrong number of leaves.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from course_lib.data.translation import SpaceTokenizer
from course_lib.data.treebank import make_treebank
from course_lib.evaluation.metrics import bracket_f1, labelled_brackets, parse_scores
from course_lib.experiments.ablation import ParseSettings, TreebankRecipe, max_tree_tokens, parse_data, train_parser

GOLD = "(S (NP DT NN ) (VP VBZ (NP DT NN ) ) )"   # the dog sees a cat


def _from_evalb(tree: str) -> str:
    """evalb's format, ``(P this)`` for a tagged word, in the course's: the tag alone stands for the word."""
    return re.sub(r"\((\S+) [^()\s]+\)", r"\1", tree)


# EVALB's sample, sentences 1-10 (the others test evalb's options: deleted labels, equivalent words, errors):
# the test tree, and (matched, gold, test) brackets as evalb's sample.rsl reports them. Every gold tree is
# "(S (A (P this)) (B (Q is) (A (R a) (T test))))".
EVALB_GOLD = "(S (A (P this)) (B (Q is) (A (R a) (T test))))"
EVALB_SAMPLE = [
    ("(S (A (P this)) (B (Q is) (A (R a) (T test))))", (4, 4, 4)),
    ("(S (A (P this)) (B (Q is) (C (R a) (T test))))", (3, 4, 4)),
    ("(S (A (P this)) (B (Q is) (A (R a) (U test))))", (4, 4, 4)),
    ("(S (C (P this)) (B (Q is) (A (R a) (U test))))", (3, 4, 4)),
    ("(S (A (P this)) (B (Q is) (R a) (A (T test))))", (3, 4, 4)),
    ("(S (A (P this) (Q is)) (A (R a) (T test)))", (2, 4, 3)),
    ("(S (P this) (Q is) (R a) (T test))", (1, 4, 1)),
    ("(P this) (Q is) (R a) (T test)", (0, 4, 0)),
    ("(S (A (P this)) (B (Q is) (A (A (R a) (T test)))))", (4, 4, 5)),
    ("(S (A (P this)) (B (Q is) (A (A (A (A (A (R a) (T test))))))))", (4, 4, 8)),
]


@pytest.mark.parametrize("test, counts", EVALB_SAMPLE, ids=[f"sentence {i + 1}" for i in range(10)])
def test_each_sentence_of_evalbs_sample(test, counts) -> None:
    matched, gold, n_test = counts
    scores = parse_scores([_from_evalb(test)], [_from_evalb(EVALB_GOLD)])
    assert scores["recall"] == pytest.approx(100 * matched / gold)
    assert scores["precision"] == pytest.approx(100 * matched / n_test if n_test else 0.0)


def test_evalbs_sample_as_one_corpus() -> None:
    """Summed over sentences 1-10, as evalb sums: 28 matched of 40 gold and 37 test brackets."""
    scores = parse_scores([_from_evalb(t) for t, _ in EVALB_SAMPLE], [_from_evalb(EVALB_GOLD)] * 10)
    precision, recall = 100 * 28 / 37, 100 * 28 / 40
    assert (scores["precision"], scores["recall"]) == (pytest.approx(precision), pytest.approx(recall))
    assert scores["F1"] == pytest.approx(2 * precision * recall / (precision + recall))
    assert scores["exact"] == 10.0   # sentence 1 only: a wrong tag is a wrong tree
    assert scores["well-formed"] == 90.0   # sentence 8 is four words, not one tree


def test_labelled_brackets_by_hand() -> None:
    brackets, leaves = labelled_brackets(GOLD)
    assert leaves == 5
    assert sorted(brackets.elements()) == [("NP", 0, 2), ("NP", 3, 5), ("S", 0, 5), ("VP", 2, 5)]
    assert labelled_brackets("(S(NP DT NN)(VP VBZ))") == labelled_brackets("(S (NP DT NN ) (VP VBZ ) )")


def test_f1_by_hand() -> None:
    # the object NP attached wrongly inside a bigger NP: (S (NP DT NN ) (VP VBZ (NP (NP DT NN ) ) ) ) has
    # every gold bracket plus one: P = 4/5, R = 4/4
    extra = "(S (NP DT NN ) (VP VBZ (NP (NP DT NN ) ) ) )"
    assert parse_scores([extra], [GOLD])["precision"] == pytest.approx(80.0)
    assert parse_scores([extra], [GOLD])["recall"] == pytest.approx(100.0)
    assert bracket_f1([extra], [GOLD]) == pytest.approx(2 * 0.8 * 1.0 / 1.8 * 100)
    # a flat VP, the object NP missing: (S (NP DT NN ) (VP VBZ DT NN ) ): its 3 brackets are all right, one of
    # the 4 gold brackets is missed: P = 3/3, R = 3/4
    flat = "(S (NP DT NN ) (VP VBZ DT NN ) )"
    assert bracket_f1([flat], [GOLD]) == pytest.approx(2 * 1.0 * 0.75 / 1.75 * 100)
    # a wrong subject span as well: (S (NP DT ) (VP NN VBZ DT NN ) ): S right only, P = 1/3, R = 1/4
    wrong = "(S (NP DT ) (VP NN VBZ DT NN ) )"
    assert bracket_f1([wrong], [GOLD]) == pytest.approx(2 * (1 / 3) * 0.25 / (1 / 3 + 0.25) * 100)
    # the corpus sums before dividing: the two give P = 4/6, R = 4/8 (not the mean of the sentences' scores)
    corpus = parse_scores([flat, wrong], [GOLD, GOLD])
    assert (corpus["precision"], corpus["recall"]) == (pytest.approx(400 / 6), pytest.approx(50.0))
    assert bracket_f1([GOLD], [GOLD]) == 100.0


def test_duplicate_brackets_match_once() -> None:
    doubled = "(S (S (NP DT NN ) (VP VBZ (NP DT NN ) ) ) )"   # the S bracket twice
    scores = parse_scores([doubled], [GOLD])
    assert (scores["precision"], scores["recall"]) == (pytest.approx(80.0), pytest.approx(100.0))
    both = parse_scores([doubled], [doubled])   # and twice in the reference too: both match
    assert both["F1"] == pytest.approx(100.0)


@pytest.mark.parametrize("output", [
    "",                                              # empty output
    "(S (NP DT NN ) (VP VBZ (NP DT NN ) )",          # one bracket never closed
    "(S (NP DT NN ) ) (VP VBZ (NP DT NN ) ) )",      # a bracket closed that was never opened
    "(S (NP DT NN ) (VP VBZ (NP DT NN ) ) ) )",      # one closing bracket too many
    "(S (NP DT NN ) (VP VBZ (NP DT ) ) )",           # four leaves for five words
    "(S (NP DT NN ) (VP VBZ (NP DT NN NN ) ) )",     # six leaves for five words
    "(S (NP DT NN ) ) (S (VP VBZ (NP DT NN ) ) )",   # two trees
    "( (S (NP DT NN ) (VP VBZ (NP DT NN ) ) ) )",    # a bracket without a label
    "(S (NP ) DT NN VBZ DT NN )",                    # a constituent without a leaf
    "DT NN VBZ DT NN",                               # no tree at all
])
def test_ill_formed_output_counts_no_bracket(output) -> None:
    scores = parse_scores([output, GOLD], [GOLD, GOLD])
    assert scores["well-formed"] == 50.0
    assert scores["precision"] == pytest.approx(100.0)   # only the good tree's brackets are counted...
    assert scores["recall"] == pytest.approx(50.0)       # ...and the bad one's reference is still owed
    assert parse_scores([output], [GOLD])["F1"] == 0.0


@pytest.mark.parametrize("tree, message", [
    ("", "empty"), ("(S DT", "not closed"), ("(S DT ) )", "closes nothing"), ("(S ( ) DT )", "without a label"),
    ("(S )", "no leaf"), ("(S DT ) (S NN )", "second tree"), ("(S DT ) NN", "outside the tree"),
    ("DT (S NN )", "starts with '('"),
])
def test_labelled_brackets_says_why_a_tree_is_ill_formed(tree, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        labelled_brackets(tree)


def test_bad_calls_are_named() -> None:
    with pytest.raises(ValueError, match="reference 1 is not a tree"):
        bracket_f1([GOLD, GOLD], [GOLD, "(S DT"])
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bracket_f1([GOLD, GOLD], [GOLD])
    with pytest.raises(TypeError, match="lists of strings"):
        bracket_f1(GOLD, GOLD)
    with pytest.raises(ValueError, match="no sentences"):
        parse_scores([], [])


def test_scores_of_generated_trees_are_symmetric_and_perfect_on_themselves() -> None:
    bank = make_treebank(100, 0, 100, seed=0)
    hyps, refs = [p.tgt for p in bank.train], [p.tgt for p in bank.test]
    same_length = [(h, r) for h, r in zip(hyps, refs, strict=True)
                   if labelled_brackets(h)[1] == labelled_brackets(r)[1]]
    assert len(same_length) >= 5
    h, r = map(list, zip(*same_length, strict=True))
    forward, backward = parse_scores(h, r), parse_scores(r, h)
    assert forward["precision"] == pytest.approx(backward["recall"]) and forward["F1"] == pytest.approx(backward["F1"])
    assert parse_scores(refs, refs) == {"F1": 100.0, "precision": 100.0, "recall": 100.0, "exact": 100.0,
                                        "well-formed": 100.0}


# ---------------------------------------------------------------------------------------------------
# One parsing run (notebook 13)
# ---------------------------------------------------------------------------------------------------

TINY = ParseSettings(TreebankRecipe(n_train=200, n_valid=20, n_test=30, max_depth=1, seed=0), budgets=(3, 6),
                     d_model=16, num_heads=2, num_layers=1, d_ff=32, batch_size=16, warmup=3)


@pytest.fixture
def one_thread():
    """One PyTorch thread, as each run has in notebook 13's processes (two threads on a busy machine are slow)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def test_no_tree_is_longer_than_the_decoding_bound() -> None:
    bank = make_treebank(3000, 0, 1000, max_depth=3, seed=7)
    slack = min(max_tree_tokens(len(p.src.split())) - len(p.tgt.split()) for p in bank.train + bank.test)
    assert slack >= 1


def test_parse_data_is_notebook_07s_pipeline_on_trees() -> None:
    data = parse_data(TINY.data)
    pair = data.treebank.train[0]
    src, tgt = data.train_set[0]
    assert data.src_vocab.decode(src.tolist()) == pair.src.split()
    assert data.tgt_vocab.decode(tgt.tolist()) == SpaceTokenizer().tokenize(pair.tgt)
    pairs = data.treebank.train + data.treebank.valid + data.treebank.test
    assert data.max_output == max_tree_tokens(max(len(p.src.split()) for p in pairs))


def test_train_parser_scores_each_budget(one_thread) -> None:
    run = train_parser(0, TINY)
    assert run["steps"] == [3, 6] and len(run["scores"]) == 2 and len(run["hypotheses"]) == 30
    assert run["train_seconds"][0] < run["train_seconds"][1]
    for scores in run["scores"]:
        assert set(scores) == {"F1", "precision", "recall", "exact", "well-formed"}
        assert all(0.0 <= v <= 100.0 for v in scores.values())
    assert run["scores"][1] == parse_scores(run["hypotheses"], [p.tgt for p in parse_data(TINY.data).treebank.test])


def test_scoring_between_budgets_changes_nothing_in_the_training(one_thread, monkeypatch) -> None:
    """Scored after 3 and 20 steps or after 20 only: the same 20 batches, so the same parser at 20 steps.
    train() starts a new pass over a loader at every call, so the run must hand it one stream (200 pairs in
    batches of 16: an epoch is 13 batches, and a new pass after step 3 gave a new shuffle)."""
    from course_lib.experiments import ablation

    def batches_seen(budgets: tuple[int, ...]) -> tuple[list[torch.Tensor], dict]:
        seen = []

        def recording_train(model, loader, steps, *args, **kwargs):
            def recorded():
                for batch in loader:  # the real train() draws exactly `steps` batches from this
                    seen.append(batch.src.clone())
                    yield batch
            return real_train(model, recorded(), steps, *args, **kwargs)

        monkeypatch.setattr(ablation, "train", recording_train)
        run = train_parser(1, replace(TINY, budgets=budgets))
        return seen, run

    real_train = ablation.train
    (twice, run_twice), (once, run_once) = batches_seen((3, 20)), batches_seen((20,))
    assert len(twice) == len(once) == 20
    assert all(torch.equal(a, b) for a, b in zip(twice, once, strict=True))
    assert run_twice["hypotheses"] == run_once["hypotheses"] and run_twice["scores"][-1] == run_once["scores"][-1]


@pytest.mark.parametrize("changes, message", [
    (dict(budgets=()), "budgets must be increasing"), (dict(budgets=(5, 3)), "budgets must be increasing"),
    (dict(budgets=(0, 3)), "budgets must be increasing"), (dict(split="train"), "split must be 'test' or 'valid'"),
])
def test_parse_settings_reject_bad_values(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        ParseSettings(TINY.data, **changes)
