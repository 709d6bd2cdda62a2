# Two commands do all the set-up (see README.md):
#   make lab    create/reuse .venv, install the pinned environment and course_lib, open JupyterLab
#   make test   the same environment, then the whole test suite (pytest + nbval on every notebook)
#   make test-fast  the unit tests without the slow ones (pytest -m "not slow"): a couple of minutes
#   make test-all   what `make test` runs, with the sampled sweeps run whole (COURSE_TEST_ALL=1)
# Both reuse the environment: it is reinstalled only when requirements.txt or pyproject.toml change.

# The course supports Python 3.11 to 3.13 (README, "Supported Python"; the pinned numpy 2.4 needs 3.11). CI runs
# 3.11, so it is preferred when installed, then the newest supported python3.X, then plain python3;
# `make lab PYTHON=python3.12` names one.
PYTHON_MIN := 3.11
PYTHON_MAX := 3.13
PYTHON ?= $(shell for p in python3.11 python3.13 python3.12 python3; do \
	command -v $$p 2>/dev/null && break; done)
VENV ?= .venv
PIP_ARGS ?=
PORT ?= 8888
BIN := $(VENV)/bin
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root,)
STAMP := $(VENV)/.course-installed
# JupyterLab settings shipped with the course (jupyter/README.md), installed into the environment.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.d/transformer-course.json

.PHONY: lab test test-fast test-all env solutions release clean-env site

$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "No python3 found: install Python $(PYTHON_MIN) to $(PYTHON_MAX) (3.11 preferred)," \
		"or name one with make ... PYTHON=/path/to/python3.X" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; low, high = (tuple(int(x) for x in v.split(".")) for v in sys.argv[1:]); \
		sys.exit(None if low <= sys.version_info[:2] <= high else "Python $(PYTHON_MIN) to $(PYTHON_MAX) is needed, " \
		"$(PYTHON) is " + sys.version.split()[0] + ": name another with make ... PYTHON=/path/to/python3.X")' \
		$(PYTHON_MIN) $(PYTHON_MAX)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --no-compile $(PIP_ARGS) -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	@# Byte-compiled here on every core: pip compiles one file at a time (15,600 files, 43 CPU s), so a fresh
	@# environment took 64 s and now 52 s (2 idle cores). course_lib too, which pip leaves alone (editable), for
	@# processes started with PYTHONDONTWRITEBYTECODE. A file that does not compile is skipped, as pip skips it.
	@# Not transformers (2,900 files, 5 of the 30 s): a reference for three test files only, which no notebook, kernel
	@# or sandbox imports; a test process that imports it compiles the few modules it uses.
	$(BIN)/python -c 'import compileall, re, sysconfig; [compileall.compile_dir(d, quiet=2, workers=0, \
		rx=re.compile(r"[/\\]site-packages[/\\]transformers[/\\]")) for d in (sysconfig.get_path("purelib"), "course_lib")]'
	@touch $(STAMP)

env: $(STAMP)

$(LAB_SETTINGS): jupyter/lab/settings/overrides.d/transformer-course.json $(STAMP)
	@mkdir -p $(dir $@)
	cp $< $@

lab: $(STAMP) $(LAB_SETTINGS)
	$(BIN)/jupyter lab --notebook-dir=notebooks --port=$(PORT) $(LAB_ARGS)

# The 25 slowest tests close the report, so that CI's log shows where its time goes.
PYTEST_ARGS ?= --durations=25
# `make test` and `make test-all` run on WORKERS pytest-xdist workers (2: CI's machine has two cores, and the suite
# keeps both busy, about 98% during the tests, so a third worker would not help). Each file runs on one worker
# (a notebook's cells share a kernel; a module fixture is built once), but for the sweeps of SPREAD_TESTS, spread
# test by test (tests/scheduling.py); --no-loadscope-reorder
# keeps the order conftest.py gives (notebooks first, the site after them). `make test WORKERS=0` runs serially.
WORKERS ?= 2
XDIST := $(if $(filter 0,$(WORKERS)),-p no:xdist,-n $(WORKERS) --dist loadfile --no-loadscope-reorder)
# The one-verdict sweep runs without xdist (see its skip reason) in a process of its own, beside the xdist run rather
# than after it (after it, it kept one core idle for 10-36 s); its report is printed when both have ended. It runs
# at the lowest priority (nice 19): it takes the cores the workers leave idle (a browser's waits, a pip download, a
# sandbox's start; about 300 core-seconds in a run) instead of a third of each core while both run notebooks. At
# nice 10 it still took a quarter of a core then (80 processor-s in its first 309 s).
ONE_VERDICT := $(BIN)/python -m pytest -p no:xdist -q tests/exercises/test_one_verdict.py
test: $(STAMP)
	@echo "$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)   (beside it, at nice 19: $(ONE_VERDICT))"; \
	nice -n 19 $(ONE_VERDICT) > $(VENV)/one-verdict.log 2>&1 & verdict=$$!; \
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS); suite=$$?; \
	wait $$verdict; one=$$?; echo "$(ONE_VERDICT):"; cat $(VENV)/one-verdict.log; \
	test $$suite -eq 0 -a $$one -eq 0

# `make test` (CI) runs a share of the parameters of the long sweeps (every known mistake of every exercise, every
# benchmark script, every solved notebook, every notebook in JupyterLab), drawn from a seed printed in the report;
# this runs every parameter of them (tests/conftest.py, SAMPLED_TESTS; CONTRIBUTING.md, "Test tiers").
test-all: $(STAMP)
	COURSE_TEST_ALL=1 $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)
	COURSE_TEST_ALL=1 $(ONE_VERDICT)

# Every module's unit tests in tests/, without the slow ones: executing notebooks (every notebook cell is slow,
# so notebooks/ is not even collected), training models, building the API reference, running benchmark
# scripts, sweeping every known mistake. `make test` runs those too. See CONTRIBUTING.md, "Test tiers".
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" tests

solutions: $(STAMP)
	$(BIN)/course-notebooks solutions --out solutions

release: $(STAMP)
	$(BIN)/course-notebooks release --out release

# The course as a website in build/site (tools/build_site.py; see site/README.md). Executed notebooks are cached in
# build/site-cache, so a rebuild re-executes only the notebooks that changed. `make site COURSE_SMOKE=1` shortens
# the training loops (what CI builds). Serve it with: python -m http.server -d build/site
COURSE_SMOKE ?=
site: $(STAMP)
	COURSE_SMOKE=$(COURSE_SMOKE) $(BIN)/python tools/build_site.py --out build/site

clean-env:
	rm -rf $(VENV)
