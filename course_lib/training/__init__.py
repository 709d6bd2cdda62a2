"""Training: the course's one training engine and what runs on it.

- :mod:`~course_lib.training.engine` (07 on): the loop (``train``), its history, the steps that turn a batch
  into a prediction, the paper's loss, optimiser and learning-rate schedule;
- :mod:`~course_lib.training.image_classifier` (08): training an image classifier on the digits;
- :mod:`~course_lib.training.language_model` (11): training and evaluating a language model on a token stream;
- :mod:`~course_lib.training.pretraining` (12): masked-language-model pre-training and fine-tuning;
- :mod:`~course_lib.training.lessons`: each lesson's model configuration and training recipe, in one place (the
  notebooks, ``course-train`` and the benchmarks read it);
- :mod:`~course_lib.training.parallel` (13): independent runs in several processes, and the progress bar
  that reports from them;
- :mod:`~course_lib.training.cli`: the ``course-train`` command (configuration files, tasks, checkpoints,
  ``torchrun``), around the same engine.
"""
