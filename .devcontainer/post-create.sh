#!/usr/bin/env bash
# The dev container's set-up (VS Code, GitHub Codespaces): the environment `make lab` uses, nothing else.
# `make env` creates .venv from requirements.txt and installs course_lib (editable); PIP_ARGS (devcontainer.json)
# takes PyTorch's CPU build, as the README says for a machine without an NVIDIA GPU. bubblewrap is for course-grade.
set -euo pipefail
sudo apt-get update -qq
sudo apt-get install -y -qq --no-install-recommends bubblewrap make >/dev/null
make env PIP_ARGS="${PIP_ARGS:-}"
.venv/bin/python -m ipykernel install --user --name transformer-course --display-name "Python (transformer-course)"
