"""The paper's experiments at small scale (notebook 13).

- :mod:`~course_lib.experiments.paper`: the paper's Tables 2 and 3, the model variations of Table 3,
  checkpoint averaging and training cost;
- :mod:`~course_lib.experiments.ablation`: one run of notebook 13's grid, importable so that runs can go to
  other processes (:func:`course_lib.training.parallel.map_in_processes`).
"""
