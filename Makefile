# The two commands a fresh clone needs: `make plan` and `make test`. Each creates the project's
# virtualenv on first use (or reuses it) and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev
# The CPU build of PyTorch is enough for the tests (gloo); pin it so a fresh machine doesn't pull a
# several-GB CUDA build. Override with `make test TORCH=torch` on a GPU machine.
TORCH ?= torch==2.13.0

# Bytecode: pip compiles every module of every package it installs, most of which the project never imports
# (pulumi-azure-native alone is 356 MB of generated Python): 50 of the 90 s of a fresh install on 2 cores.
# `--no-compile` skips that, and the interpreter writes a module's bytecode the first time it imports it, which
# needs bytecode writing on: with PYTHONDONTWRITEBYTECODE in the caller's environment every command would
# compile what it imports again (a dev plan 4 s -> 10 s). __pycache__ folders are git-ignored, and the code
# folder's .amlignore keeps them out of what Azure ML uploads.
unexport PYTHONDONTWRITEBYTECODE
PIP := $(BIN)/python -m pip install --quiet --no-compile

RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

# The project's own code: its packages (planning.changes.PACKAGES; a test keeps the two equal), the Pulumi
# program, the tests and the benchmarks. Lint and type checks read these, never a user's own scripts in the
# project folder (docs/migrating.md suggests keeping them there).
PACKAGES := amlgpu planning policies infra jobs importer preflight stack analysis azurefacts kernel
CODE := __main__.py $(PACKAGES) tests bench

.PHONY: plan test test-fast lint typecheck typecheck-program typecheck-workloads format install install-dev policy-docs schema bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	# pip 23's resolver fails on this dependency set: upgrade it first.
	$(BIN)/python -m pip install --quiet --upgrade pip

# setuptools says "Editable installation ... folders with the same name as your package may take
# precedence" for every editable install of a flat layout (ours is fixed: amlgpu/, stack/, infra/...
# at the root); it is information, not a problem, so the one place that installs filters it.
INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(PIP)

$(RUNTIME): pyproject.toml | $(BIN)/python
	$(INSTALL) -e .
	@touch $@

# torch and the dev extras in one resolution (the extras' Lightning, transformers and accelerate need torch): the
# runtime comes with them.
$(DEV): pyproject.toml | $(BIN)/python
	$(INSTALL) "$(TORCH)" -e '.[dev]'
	@touch $(RUNTIME)
	@touch $@

install: $(RUNTIME)
install-dev: $(DEV)

## plan: plan the example stack offline (no Azure credentials), with the policy verdict
plan: $(RUNTIME)
	$(BIN)/amlgpu plan --stack $(STACK)

# Test workers: the suite's real-process tests are independent (own temp folders, OS-chosen ports).
WORKERS ?= 2
# Work stealing: a worker that runs out of tests takes half of what the other has not started (the slow tests
# come first, tests/conftest.py), so neither sits idle while the other runs a long test queued last.
DIST ?= --dist worksteal

# zizmor in each of its personas: regular, then pedantic, then auditor (which also reports secrets read
# outside a protected environment).
ZIZMOR := $(BIN)/zizmor --offline

## test: lint (code and GitHub workflows), type-check and run the whole test suite
# The type checks run beside the suite: each mypy run uses one core for under a minute, and run first they held the
# suite back that long. Their output is kept apart and shown after the suite's; either failing fails `make test`.
test: $(DEV)
	$(BIN)/ruff check $(CODE)
	$(ZIZMOR) --persona=regular .github/workflows
	$(ZIZMOR) --persona=pedantic .github/workflows
	$(ZIZMOR) --persona=auditor .github/workflows
	@echo "$(MYPY_PROGRAM) &"; echo "$(MYPY_WORKLOADS) &"
	@($(MYPY_PROGRAM)) > $(VENV)/mypy-program.log 2>&1 & program=$$!; \
	($(MYPY_WORKLOADS)) > $(VENV)/mypy-workloads.log 2>&1 & workloads=$$!; \
	trap 'kill $$program $$workloads 2>/dev/null; exit 130' INT TERM; \
	$(BIN)/pytest -n $(WORKERS) $(DIST); suite=$$?; \
	wait $$program; program=$$?; wait $$workloads; workloads=$$?; \
	cat $(VENV)/mypy-program.log $(VENV)/mypy-workloads.log; \
	[ $$suite -eq 0 ] && [ $$program -eq 0 ] && [ $$workloads -eq 0 ]

## test-fast: the edit loop's lane: every test but the slow ones (over 5 s, real processes), no lint
test-fast: $(DEV)
	$(BIN)/pytest -m "not slow" -n $(WORKERS) $(DIST)

## typecheck: mypy --strict over the program, the CLI and the packages, and over the training scripts
# (two independent runs, side by side with `make -j2 typecheck` and beside the suite under `make test`: mypy uses
# one core; the scripts' cache stays out of jobs/workloads/, a code snapshot runs upload and tests copy)
typecheck: typecheck-program typecheck-workloads

MYPY_PROGRAM := $(BIN)/mypy __main__.py $(PACKAGES)
MYPY_WORKLOADS := cd jobs/workloads && ../../$(BIN)/mypy --config-file ../../pyproject.toml \
	--cache-dir ../../.mypy_cache/workloads --explicit-package-bases *.py

typecheck-program: $(DEV)
	$(MYPY_PROGRAM)

typecheck-workloads: $(DEV)
	$(MYPY_WORKLOADS)

lint: $(DEV)
	$(BIN)/ruff check $(CODE)
	$(ZIZMOR) --persona=regular .github/workflows
	$(ZIZMOR) --persona=pedantic .github/workflows
	$(ZIZMOR) --persona=auditor .github/workflows

format: $(DEV)
	$(BIN)/ruff format $(CODE)
	$(BIN)/ruff check --fix $(CODE)

## schema: regenerate the stack JSON Schema and docs/config.md from the model
schema: $(RUNTIME)
	$(BIN)/amlgpu schema --write

bench: $(DEV)
	$(BIN)/python bench/plan_bench.py

clean:
	rm -rf build .pytest_cache .ruff_cache .mypy_cache
