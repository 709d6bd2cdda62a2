"""A generated treebank (notebook 13, the paper's section 6.3): sentences of a tiny grammar and their trees.

The paper's last experiment parses English: a sentence in, its constituency tree out, written as a sequence of
tokens (Vinyals et al., 2015, "Grammar as a Foreign Language"), and trained on the Wall Street Journal part of
the Penn Treebank (about 40,000 sentences). The course cannot ship that treebank, so this module generates the
same kind of data offline from a small probabilistic context-free grammar, with the Penn Treebank's labels and
shapes: noun phrases with prepositional phrases (``the man of the city``), verb phrases with objects and
prepositional phrases, clauses inside clauses (``Bob thinks that the dog sleeps``) and relative clauses
(``the man who sees a cat sleeps``), nested up to ``max_depth`` times::

    the dog sees a cat   ->   (S (NP DT NN ) (VP VBZ (NP DT NN ) ) )

The tree is linearised as in Vinyals et al.: an opening bracket and its label as one token (``(NP``), each word
replaced by its part-of-speech tag (``DT``), a plain ``)`` closing each constituent (:func:`linearise`).

The grammar is unambiguous by construction: every word belongs to one word class (so its tag is known), and
where English would leave a prepositional phrase's attachment open, the preposition decides it (``of`` and
``with`` attach to a noun, ``in``, ``on``, ``near`` and ``behind`` to a verb). Every sentence thus has exactly
one tree, and a perfect parser exists: ``tests/data/test_treebank.py`` counts the parses of generated sentences with
a chart parser of its own. Real English is not so kind (the treebank's parsers disagree with its annotators on
about one constituent in ten); that is one of the things notebook 13 says does not transfer.

:func:`make_treebank` draws sentences with a seed, keeps each sentence once, and cuts them into training,
validation and test splits, so no test sentence is seen in training. The splits hold
:class:`course_lib.data.translation.Pair` objects (``src`` the sentence, ``tgt`` the linearised tree), which
notebook 07's
pipeline (tokenisers, vocabularies, batches) takes as they are.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from course_lib.data.translation import Pair

__all__ = ["Word", "Tree", "WORD_CLASSES", "GRAMMAR", "RECURSIVE", "generate_tree", "linearise", "Treebank",
           "make_treebank"]


@dataclass(frozen=True)
class Word:
    """A leaf of a tree: the word and its part-of-speech tag (``Word("DT", "the")``)."""

    tag: str
    text: str


@dataclass(frozen=True)
class Tree:
    """A constituent: its label (``"NP"``) and its children, constituents or words, in order."""

    label: str
    children: tuple[Tree | Word, ...]

    def words(self) -> list[str]:
        """The sentence the tree covers, word by word."""
        return [w for child in self.children for w in ([child.text] if isinstance(child, Word) else child.words())]


#: The word classes: name -> (part-of-speech tag, words). Each word belongs to one class only, so a word gives
#: its tag and its role: ``Vt`` verbs take an object, ``Vc`` verbs a clause, ``Pn`` prepositions attach to a noun
#: and ``Pv`` prepositions to a verb.
WORD_CLASSES: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "Det": ("DT", ("the", "a", "every", "some", "this")),
    "Adj": ("JJ", ("big", "small", "tall", "young", "red", "happy")),
    "Noun": ("NN", ("dog", "cat", "man", "woman", "child", "bird", "teacher", "farmer", "student", "hat", "book",
                    "box", "city", "garden", "river", "house")),
    "Name": ("NNP", ("Alice", "Bob", "Carol", "Dave", "Eve")),
    "Vi": ("VBZ", ("sleeps", "runs", "waits", "sings", "laughs")),
    "Vt": ("VBZ", ("sees", "likes", "finds", "follows", "helps", "paints")),
    "Vc": ("VBZ", ("thinks", "says", "hopes", "knows")),
    "Pn": ("IN", ("of", "with")),
    "Pv": ("IN", ("in", "on", "near", "behind")),
    "Comp": ("IN", ("that",)),
    "Wh": ("WP", ("who",)),
}

#: The rules: symbol -> ((right-hand side, probability), ...). A symbol's label in the tree is its name up to
#: ``:`` (``NP:base`` is an ``NP``); the part after it only tells the grammar which rules apply there (an
#: ``NP:base`` takes no prepositional phrase; a subject, ``NP:subj``, is an ``NP`` that may also take a relative
#: clause). The shapes
#: are the Penn Treebank's: a noun phrase with a prepositional phrase is ``(NP (NP DT NN ) (PP IN (NP ...) ) )``,
#: a relative clause ``(SBAR (WHNP WP ) (S (VP ...) ) )`` (the treebank's empty subject removed).
GRAMMAR: Mapping[str, tuple[tuple[tuple[str, ...], float], ...]] = {
    "S": ((("NP:subj", "VP"), 1.0),),
    "NP:subj": ((("Det", "Noun"), 0.28), (("Det", "Adj", "Noun"), 0.16), (("Name",), 0.16),
                (("NP:base", "PP:n"), 0.2), (("NP:base", "SBAR:rel"), 0.2)),
    "NP": ((("Det", "Noun"), 0.35), (("Det", "Adj", "Noun"), 0.2), (("Name",), 0.2), (("NP:base", "PP:n"), 0.25)),
    "NP:base": ((("Det", "Noun"), 0.5), (("Det", "Adj", "Noun"), 0.25), (("Name",), 0.25)),
    "PP:n": ((("Pn", "NP"), 1.0),),
    "PP:v": ((("Pv", "NP"), 1.0),),
    "VP": ((("Vi",), 0.2), (("Vi", "PP:v"), 0.15), (("Vt", "NP"), 0.3), (("Vt", "NP", "PP:v"), 0.15),
           (("Vc", "SBAR:comp"), 0.2)),
    "SBAR:comp": ((("Comp", "S"), 1.0),),
    "SBAR:rel": ((("WHNP", "S:rel"), 1.0),),
    "WHNP": ((("Wh",), 1.0),),
    "S:rel": ((("VP",), 1.0),),
}

#: The symbols that nest: each one entered adds a level of depth. At ``max_depth`` levels, the rules that would
#: enter one more are left out (and the others' probabilities renormalised), so every tree is finite.
RECURSIVE: frozenset[str] = frozenset({"PP:n", "SBAR:comp", "SBAR:rel"})


def _label(symbol: str) -> str:
    return symbol.split(":")[0]


def _expand(symbol: str, depth: int, max_depth: int, rng: random.Random) -> Tree | Word:
    """Expand ``symbol`` at nesting ``depth``: a word for a word class, else a constituent drawn from its rules."""
    if symbol in WORD_CLASSES:
        tag, words = WORD_CLASSES[symbol]
        return Word(tag, rng.choice(words))
    depth += symbol in RECURSIVE
    rules = [(rhs, p) for rhs, p in GRAMMAR[symbol] if depth < max_depth or not RECURSIVE.intersection(rhs)]
    rhs = rng.choices([r for r, _ in rules], weights=[p for _, p in rules])[0]
    return Tree(_label(symbol), tuple(_expand(child, depth, max_depth, rng) for child in rhs))


def generate_tree(rng: random.Random, max_depth: int = 2) -> Tree:
    """One sentence's tree, drawn from :data:`GRAMMAR` with ``rng``, nested at most ``max_depth`` times.

    Example:
        >>> tree = generate_tree(random.Random(1), max_depth=0)
        >>> " ".join(tree.words())
        'Alice sings behind a big house'
        >>> linearise(tree)
        '(S (NP NNP ) (VP VBZ (PP IN (NP DT JJ NN ) ) ) )'
    """
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"generate_tree: max_depth must be an int >= 0, got {max_depth!r}")
    return _expand("S", 0, max_depth, rng)


def linearise(tree: Tree | Word) -> str:
    """The tree as one line of tokens: ``(LABEL`` opens a constituent, a tag stands for a word, ``)`` closes.

    Example:
        >>> linearise(Tree("NP", (Word("DT", "the"), Word("NN", "dog"))))
        '(NP DT NN )'
    """
    if isinstance(tree, Word):
        return tree.tag
    return f"({tree.label} " + " ".join(linearise(child) for child in tree.children) + " )"


@dataclass(frozen=True)
class Treebank:
    """Three disjoint splits of (sentence, linearised tree) pairs; no sentence appears twice."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    max_depth: int
    seed: int

    def __repr__(self) -> str:
        return (f"Treebank(train={len(self.train)}, valid={len(self.valid)}, test={len(self.test)}, "
                f"max_depth={self.max_depth}, seed={self.seed})")


def make_treebank(n_train: int = 4_000, n_valid: int = 200, n_test: int = 400, max_depth: int = 2,
                  seed: int = 0) -> Treebank:
    """Generate sentences and their trees, each sentence once, cut into training, validation and test splits.

    Trees are drawn with :func:`generate_tree` from ``random.Random(seed)`` until ``n_train + n_valid + n_test``
    distinct sentences are found (a sentence drawn again is skipped, so no sentence is in two splits); the
    sentences are then shuffled and cut. Each :class:`~course_lib.data.translation.Pair` holds the sentence as
    ``src``, its
    linearised tree as ``tgt``, and its place in the draw as ``number``. The same arguments give the same
    treebank on any machine.

    Example:
        >>> bank = make_treebank(50, 5, 5, seed=0)
        >>> len(bank.train), {p.src for p in bank.train} & {p.src for p in bank.test}
        (50, set())
    """
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"make_treebank: {name} must be an int >= 0, got {value!r}")
    total = n_train + n_valid + n_test
    rng = random.Random(seed)
    trees: dict[str, str] = {}           # sentence -> linearised tree, in the order first drawn
    draws, limit = 0, 20 * total + 1000
    while len(trees) < total:
        if draws == limit:
            raise ValueError(f"make_treebank: only {len(trees)} distinct sentences in {draws} draws, "
                             f"{total} requested; ask for fewer or raise max_depth (got {max_depth})")
        tree = generate_tree(rng, max_depth)
        trees.setdefault(" ".join(tree.words()), linearise(tree))
        draws += 1
    pairs = [Pair(i, sentence, tree) for i, (sentence, tree) in enumerate(trees.items())]
    rng.shuffle(pairs)
    return Treebank(train=pairs[:n_train], valid=pairs[n_train:n_train + n_valid],
                    test=pairs[n_train + n_valid:], max_depth=max_depth, seed=seed)
