"""Data sets, tokenisers, vocabularies and batches: everything made without a download.

- :mod:`~course_lib.data.translation` (07, 13): English-to-German numbers, generated with ``num2words``; word,
  character and byte-pair tokenisers, vocabularies, padded batches and length buckets;
- :mod:`~course_lib.data.python_docs` (11, 12): the running Python's own documentation as a corpus, its
  byte-level BPE and the windows a language model trains on;
- :mod:`~course_lib.data.stdlib_docstrings` (12): the standard library's docstrings, unlabelled text and a
  labelled task (which package does a docstring come from?);
- :mod:`~course_lib.data.treebank` (13): a generated treebank, sentences of a small grammar and their
  linearised trees, for the parsing task of the paper's section 6.3;
- :mod:`~course_lib.data.digits` (08): scikit-learn's handwritten digits as tensors, split and shifted (training
  a classifier on them is :mod:`course_lib.training.image_classifier`'s).

A data module trains nothing and imports nothing from :mod:`course_lib.training`
(``tests/repository/test_repository.py``).
"""
