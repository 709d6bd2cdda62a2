"""Scores a model is judged by, and the simple baselines its scores are held against.

- :mod:`~course_lib.evaluation.metrics` (07): chrF, character BLEU, exact match and token accuracy;
- :mod:`~course_lib.evaluation.bag_of_words` (12): the accuracy of a TF-IDF and logistic-regression classifier,
  the score a fine-tuned BERT must beat.
"""
