"""Figures: plots the notebooks share and the paper's architecture diagrams, drawn from the models.

- :mod:`~course_lib.figures.plotting`: attention heatmaps and the Korean-capable font every figure uses;
- :mod:`~course_lib.figures.diagrams`: the paper's Figures 1 and 2, read from a model's own structure, and each
  lesson's map (where the lesson sits in the architecture);
- :mod:`~course_lib.figures.explorer`: an interactive view of a lesson's own model (attention, the next-token
  choice, positions), in the notebook and on the website.
"""
