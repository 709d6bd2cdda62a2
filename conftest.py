"""Settings for every test run, notebooks included (pytest imports this first; kernels inherit the env).

nbval reads a cell's messages only after the cell has finished. A long training cell with a widget progress
bar sends a message at every refresh (tqdm's default: ten a second), and the kernel's message socket keeps
at most 1000 unread ones: past that it drops messages, the cell's closing "idle" among them, and nbval
fails with "Timeout of 5 seconds exceeded waiting for output" (seen on notebooks 05 and 07 in CI). In tests
the bars refresh at most every 2 seconds; a learner's JupyterLab, which reads as it goes, keeps tqdm's
default.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_MININTERVAL", "2")
