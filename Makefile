# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-heavy test-all lint docs install clean checkpoints

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/robust-train demo

# Both tiers use every core (pytest-xdist); each worker runs torch on one thread. Whole modules
# go to a worker, the longest first (tests/support/schedule.py: the seconds each module took in
# the last full run, from pytest's cache, else an estimate from its `slow` marks; xdist's own
# reorder, by number of tests, would leave long one-test modules for the end).
XDIST := -n auto --dist loadscope --no-loadscope-reorder

# Three tiers: `make test` (the package, its CLI and docs; within 5 minutes on 2 cores),
# `make test-fast` (in-process tests only), `make test-heavy` (the `heavy` end-to-end runs of what
# surrounds the package: the wheel in a fresh venv, the site in a browser, DDP, the studies' and
# benchmarks' quick runs, the fits that reproduce a shipped model or a training dynamic). `make test-all` runs every test; CI runs test and test-heavy.
test: $(STAMP)
	$(BIN)/pytest -q $(XDIST) -m "not heavy"

test-fast: $(STAMP)
	$(BIN)/pytest -q $(XDIST) -m "not slow and not heavy"

test-heavy: $(STAMP)
	$(BIN)/pytest -q $(XDIST) -m heavy

test-all: $(STAMP)
	$(BIN)/pytest -q $(XDIST)

# The documentation site (mkdocs-material + mkdocstrings), warnings as errors, into site/. The
# marker file says so: tests/docs/test_site.py opens this build when it is newer than its sources.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict
	touch site/.strict-build

lint: $(STAMP)
	$(BIN)/ruff check robust_train tests benchmarks experiments
	$(BIN)/ruff format --check robust_train tests benchmarks experiments
	$(BIN)/mypy robust_train

clean:
	rm -rf runs lightning_logs .pytest_cache site

# The shipped configs and checkpoints are package data (robust_train.core.resources); the top-level
# configs/ is a link to their folder, and checkpoints/ holds the run folders of fits.
ASSETS := robust_train/assets

# Rebuild the shipped digits checkpoints from their configs (about a minute on 2 CPU cores).
checkpoints: $(STAMP)
	for name in digits_baseline digits_robust; do \
	  OMP_NUM_THREADS=1 $(BIN)/robust-train fit --config $(ASSETS)/configs/$$name.yaml \
	    --trainer.logger=false --trainer.enable_progress_bar=false --checkpoint_root runs/ship && \
	  $(BIN)/robust-train export runs/ship/$$name/latest/best.ckpt \
	    $(ASSETS)/checkpoints/$$name.ckpt || exit 1; \
	done
