"""Turning a trained model into text: decoding and sampling.

- :mod:`~course_lib.generation.decoding` (07): greedy decoding and beam search for the encoder-decoder;
- :mod:`~course_lib.generation.sampling` (10): temperature, top-k and top-p sampling and generation with a
  key/value cache for a decoder-only language model.

``course_lib.generation`` was the sampling module before it became this package: its names still work, with a
warning naming ``course_lib.generation.sampling``.
"""

from course_lib._deprecation import moved_attributes

__getattr__ = moved_attributes(__name__, names_of="course_lib.generation.sampling")
