# Every target is one call into Python; `make help` lists them.
PYTHON   ?= python3.11
VENV     ?= .venv
BIN      := $(VENV)/bin
PORT     ?= 5000
DASHBOARD_PORT ?= 8080
DOCS_PORT ?= 8000
STORE    ?= mlruns
ARGS     ?=
PYTEST_ARGS ?=
# pytest workers for make test and make test-slow: a test spends most of its time starting processes (their imports
# run on one core) and waiting on them, so two workers finish a tier in about 0.55x the time on 2 cores. Each test's
# jobs take device locks of its own, and what a test asserts of speed it reads from ratios within its own run.
# TEST_WORKERS=0 runs one test at a time; the SLURM tests keep to one worker (tests/conftest.py).
TEST_WORKERS ?= 2
XDIST    := -n $(TEST_WORKERS) --dist loadgroup

.DEFAULT_GOAL := help
.PHONY: help install demo test test-slow test-gpu optimize report ui dashboard screenshots notebook docs docs-serve \
	docs-examples lint format

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,cluster,docs]"
	touch $@

install: $(VENV)/.installed ## Make .venv with the CPU build of torch 2.13.0 and the pinned stack

demo: install ## Sweep splits 1x4,2x2,4x1 five times (paired rounds) on the tiny CPU model, recorded in MLflow
	$(BIN)/python -m pipeline.train -m batch.split=1x4,2x2,4x1 repeats=5 $(ARGS)

test: install ## Run the default test suite (CPU, under 5 minutes)
	$(BIN)/python -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

test-slow: install ## Run the slow tests: shared studies, real PostgreSQL/SLURM/MLflow servers, a browser
	$(BIN)/python -m pytest -m slow $(XDIST) $(PYTEST_ARGS)

test-gpu: install ## Run the GPU tests (a CUDA device: the allocator cap, CUDA-event phases, NVML)
	$(BIN)/python -m pytest -m gpu $(PYTEST_ARGS)

screenshots: install ## Redraw docs/mlflow-ui.png, docs/report.png, docs/optuna-dashboard.png (browser tests; chromium)
	BATCH_SPLIT_SCREENSHOTS=docs $(BIN)/python -m pytest -m slow tests/test_ui.py "tests/test_dashboard.py::test_the_dashboard_reads_a_real_mixed_study_as_it_printed_itself" $(PYTEST_ARGS)

notebook: install ## Run docs/quickstart.ipynb on the CPU (tiny model) and keep its outputs there (tests/test_notebook.py)
	BATCH_SPLIT_NOTEBOOK=docs $(BIN)/python -m pytest -m slow tests/test_notebook.py $(PYTEST_ARGS)

optimize: install ## Optuna study: fastest config under MEM_CAP (e.g. MEM_CAP=14GiB PRESET=fastest TRIALS=20)
	$(BIN)/python -m pipeline.optimize $(if $(MEM_CAP),mem_cap=$(MEM_CAP),) $(if $(PRESET),optimize=$(PRESET),) $(if $(TRIALS),optimize.trials=$(TRIALS),) $(ARGS)

report: install ## Markdown + HTML report with plots for the latest sweep or study (SWEEP=<id> or STUDY=<name>)
	$(BIN)/python -m pipeline.report $(if $(SWEEP),--sweep $(SWEEP),) $(if $(STUDY),--study $(STUDY),)

ui: install ## MLflow UI over the project's store on http://127.0.0.1:$(PORT) (prints the link to the runs)
	$(BIN)/python -m pipeline.ui --store $(STORE) --host 127.0.0.1 --port $(PORT)

dashboard: install ## optuna-dashboard over the studies (best = fastest that fits) on http://127.0.0.1:$(DASHBOARD_PORT)
	$(BIN)/python -m pipeline.dashboard --storage sqlite:///$(STORE)/optuna.db --host 127.0.0.1 --port $(DASHBOARD_PORT)

docs: install ## Build the documentation site into site/ (offline, strict: a warning fails the build)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install ## Serve the documentation on http://127.0.0.1:$(DOCS_PORT), rebuilt as its pages change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

docs-examples: install ## Run the README's and the docs' examples (CPU, tiny model) and write their outputs there
	$(BIN)/python docs/examples.py $(ARGS)

lint: install ## ruff lint and format check; modules over 400 lines named (carve by concept, not by length)
	$(BIN)/ruff check pipeline tests bench docs
	$(BIN)/ruff format --check pipeline tests bench docs
	@awk 'FNR == 401 { print "warning: " FILENAME " is over 400 lines" }' $$(find pipeline -name '*.py')

format: install ## ruff format and safe fixes
	$(BIN)/ruff check --fix pipeline tests bench docs
	$(BIN)/ruff format pipeline tests bench docs
