"""course_lib.data.treebank: the generated treebank of notebook 13's parsing task.

The trees are well-formed and cover their sentences, the draw is deterministic with its seed, no sentence is in two
splits, and every sentence has exactly one parse under the grammar: a chart parser written here (not the
generator) counts the derivations of each generated sentence, so a perfect parser exists.
"""

from __future__ import annotations

import functools
import random

import pytest

from course_lib.data.translation import SpaceTokenizer, WordTokenizer
from course_lib.data.treebank import (
    GRAMMAR,
    RECURSIVE,
    WORD_CLASSES,
    Tree,
    Word,
    generate_tree,
    linearise,
    make_treebank,
)
from course_lib.evaluation.metrics import labelled_brackets


@pytest.fixture(scope="module")
def bank():
    return make_treebank(600, 60, 120, max_depth=2, seed=5)


def _tags(tree: Tree | Word) -> list[str]:
    return [tree.tag] if isinstance(tree, Word) else [t for child in tree.children for t in _tags(child)]


def _depth(tree: Tree | Word) -> int:
    """The most constituents of the nesting kinds (PP inside an NP, SBAR) on one path from the root."""
    if isinstance(tree, Word):
        return 0
    nested = tree.label == "SBAR" or (tree.label == "PP" and tree.children[0].text in WORD_CLASSES["Pn"][1])
    return nested + max(_depth(child) for child in tree.children)


def count_parses(words: list[str], classes=WORD_CLASSES) -> int:
    """The number of derivations of ``words`` from ``S`` under GRAMMAR (any depth), with the word classes
    ``classes`` (a word may belong to several): a chart parser over spans, memoised."""

    @functools.cache
    def symbol(name: str, i: int, j: int) -> int:
        if name in classes:
            return int(j == i + 1 and words[i] in classes[name][1])
        return sum(sequence(rhs, 0, i, j) for rhs, _ in GRAMMAR[name])

    @functools.cache
    def sequence(rhs: tuple[str, ...], k: int, i: int, j: int) -> int:
        if k == len(rhs):
            return int(i == j)
        # every symbol covers at least one word: the rest of rhs needs len(rhs) - k - 1 words after m
        return sum(symbol(rhs[k], i, m) * sequence(rhs, k + 1, m, j) for m in range(i + 1, j - (len(rhs) - k - 2)))

    return symbol("S", 0, len(words))


def test_the_grammar_is_closed_and_every_word_has_one_class() -> None:
    for name, rules in GRAMMAR.items():
        assert sum(p for _, p in rules) == pytest.approx(1.0), name
        for rhs, _ in rules:
            assert all(s in GRAMMAR or s in WORD_CLASSES for s in rhs), (name, rhs)
        # at the depth limit a symbol still has a rule: every tree is finite
        assert any(not RECURSIVE.intersection(rhs) for rhs, _ in rules), name
    words = [w for _, ws in WORD_CLASSES.values() for w in ws]
    assert len(words) == len(set(words))


def test_trees_are_well_formed_and_cover_their_sentences(bank) -> None:
    tokens = SpaceTokenizer()
    for pair in bank.train + bank.valid + bank.test:
        brackets, leaves = labelled_brackets(pair.tgt)
        assert leaves == len(WordTokenizer().tokenize(pair.src)) == len(pair.src.split())
        assert brackets[("S", 0, leaves)] >= 1
        assert tokens.tokenize(pair.tgt).count(")") == brackets.total()


def test_each_word_gets_its_class_tag_and_depth_stays_within_the_limit() -> None:
    rng = random.Random(11)
    tag_of = {w: tag for tag, ws in WORD_CLASSES.values() for w in ws}
    for max_depth in (0, 1, 2, 3):
        for _ in range(200):
            tree = generate_tree(rng, max_depth)
            assert _tags(tree) == [tag_of[w] for w in tree.words()]
            assert _depth(tree) <= max_depth
    deep = [generate_tree(random.Random(s), 3) for s in range(300)]
    assert max(_depth(t) for t in deep) == 3, "depth 3 is reached"


def test_every_sentence_has_exactly_one_parse(bank) -> None:
    for pair in bank.train[:300] + bank.test:
        assert count_parses(pair.src.split()) == 1, pair.src


def test_the_parse_counter_sees_ambiguity() -> None:
    """The counter is not blind: were "of" also a verb's preposition, a PP after an object would attach two ways."""
    words = "Bob sees the dog of the city".split()
    assert count_parses(words) == 1
    assert count_parses("Bob sees the dog in the city".split()) == 1
    assert count_parses("Bob sees the dog of".split()) == 0
    merged = dict(WORD_CLASSES, Pv=("IN", WORD_CLASSES["Pv"][1] + ("of",)))
    assert count_parses(words, merged) == 2


def test_deterministic_with_its_seed() -> None:
    a, b = make_treebank(200, 20, 20, seed=1), make_treebank(200, 20, 20, seed=1)
    assert (a.train, a.valid, a.test) == (b.train, b.valid, b.test)
    c = make_treebank(200, 20, 20, seed=2)
    assert [p.src for p in c.train] != [p.src for p in a.train]


def test_sentences_are_unique_across_splits(bank) -> None:
    sentences = [p.src for p in bank.train + bank.valid + bank.test]
    assert len(sentences) == len(set(sentences)) == 780
    assert (len(bank.train), len(bank.valid), len(bank.test)) == (600, 60, 120)
    assert "Treebank(train=600, valid=60, test=120, max_depth=2, seed=5)" == repr(bank)


def test_linearise_is_vinyals_format() -> None:
    tree = Tree("S", (Tree("NP", (Word("DT", "the"), Word("NN", "dog"))),
                      Tree("VP", (Word("VBZ", "sees"), Tree("NP", (Word("DT", "a"), Word("NN", "cat")))))))
    assert linearise(tree) == "(S (NP DT NN ) (VP VBZ (NP DT NN ) ) )"
    assert tree.words() == ["the", "dog", "sees", "a", "cat"]


def test_too_few_distinct_sentences_is_a_clear_error(monkeypatch) -> None:
    """A grammar that keeps drawing the same sentence stops with an error instead of drawing forever."""
    import course_lib.data.treebank as treebank

    one = generate_tree(random.Random(0), 0)
    monkeypatch.setattr(treebank, "generate_tree", lambda rng, max_depth: one)
    with pytest.raises(ValueError, match="only 1 distinct sentences in 1040 draws, 2 requested"):
        make_treebank(2, 0, 0, seed=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_train=-1), "n_train must be an int >= 0"),
    (dict(n_test=2.5), "n_test must be an int >= 0"),
    (dict(max_depth=-1), "max_depth must be an int >= 0"),
])
def test_bad_arguments_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_treebank(**{"n_train": 10, "n_valid": 0, "n_test": 0} | kwargs)
