"""Turning a trained model into text: decoding and sampling.

- :mod:`~course_lib.generation.decoding` (07): greedy decoding and beam search for the encoder-decoder;
- :mod:`~course_lib.generation.sampling` (11): temperature, top-k and top-p sampling and generation with a
  key/value cache for a decoder-only language model.
"""
