# Two commands do all the set-up (see README.md):
#   make lab    create/reuse .venv, install the pinned environment and course_lib, open JupyterLab
#   make test   the same environment, then the whole test suite (pytest + nbval on every notebook)
# Both reuse the environment: it is reinstalled only when requirements.txt or pyproject.toml change.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
PIP_ARGS ?=
PORT ?= 8888
BIN := $(VENV)/bin
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root,)
STAMP := $(VENV)/.course-installed
# JupyterLab settings shipped with the course (jupyter/README.md), installed into the environment.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.d/transformer-course.json

.PHONY: lab test env solutions release clean-env

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is needed, found " + sys.version.split()[0]'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install $(PIP_ARGS) -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	@touch $(STAMP)

env: $(STAMP)

$(LAB_SETTINGS): jupyter/lab/settings/overrides.d/transformer-course.json $(STAMP)
	@mkdir -p $(dir $@)
	cp $< $@

lab: $(STAMP) $(LAB_SETTINGS)
	$(BIN)/jupyter lab --notebook-dir=notebooks --port=$(PORT) $(LAB_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest

solutions: $(STAMP)
	$(BIN)/course-notebooks solutions --out solutions

release: $(STAMP)
	$(BIN)/course-notebooks release --out release

clean-env:
	rm -rf $(VENV)
