"""course_lib.evaluation.bag_of_words: the word-count classifier notebook 12 holds a fine-tuned BERT against.

It sees words and nothing else: a label carried by a word is learned perfectly, a label that only word order
carries is not (the two classes below use the same words, in two orders).
"""

from __future__ import annotations

from course_lib.evaluation.bag_of_words import bag_of_words_accuracy


def test_a_label_carried_by_a_word_is_learned() -> None:
    texts = [f"{word} item number {i}" for i in range(40) for word in ("apple", "pear")]
    labels = [i % 2 for i in range(len(texts))]
    assert bag_of_words_accuracy(texts[:60], labels[:60], texts[60:], labels[60:]) == 1.0


def test_word_order_is_invisible_to_it() -> None:
    texts = [("dog bites man" if i % 2 == 0 else "man bites dog") + " " + "x" * (i % 5 + 1) for i in range(80)]
    labels = [i % 2 for i in range(80)]
    assert bag_of_words_accuracy(texts[:60], labels[:60], texts[60:], labels[60:]) <= 0.75
