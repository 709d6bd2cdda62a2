"""The score a text classifier gets from word counts alone (notebook 12's yardstick for a fine-tuned BERT).

A logistic regression on TF-IDF-scaled word counts (scikit-learn) sees no word order and nothing from outside
the labelled texts: what a label's surface words alone give away. A fine-tuned BERT that does not beat it has
learned nothing the words did not say.
"""

from __future__ import annotations

import torch

__all__ = ["bag_of_words_accuracy"]


def bag_of_words_accuracy(train_texts: list[str], train_labels: list[int], valid_texts: list[str],
                          valid_labels: list[int]) -> float:
    """Validation accuracy of a logistic regression on word counts (scikit-learn), trained on the given texts.

    Words are runs of letters, lower-cased; counts are scaled by TF-IDF. No word order, no knowledge from
    outside the labelled texts: what a label's surface words alone give away.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(token_pattern=r"[A-Za-z]+", lowercase=True)
    features = vectorizer.fit_transform(train_texts)
    classifier = LogisticRegression(max_iter=2000).fit(features, train_labels)
    predicted = classifier.predict(vectorizer.transform(valid_texts))
    return float((predicted == torch.tensor(valid_labels).numpy()).mean())
