# DraftPair: `make run` opens the app on the demo pair, `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test setup sysdeps blas demo lint bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP) sysdeps blas

# Linux: system libraries for Qt and an optimized BLAS (apt as root, else a hint).
sysdeps:
	@bash packaging/linux-deps.sh

# Linux: make sure an optimized BLAS is present for MLX's CPU backend (installed by sysdeps).
blas: $(STAMP) sysdeps
	@$(PY) -m app.engine.platform ensure-blas

demo: setup
	$(PY) -m app demo prepare

run: setup
	$(PY) -m app

# The import contracts (pyproject.toml [tool.importlinter]), ruff and mypy (pyproject.toml
# [tool.mypy]) first, then the suite.
test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check app tests
	$(VENV)/bin/mypy
	DRAFTPAIR_REQUIRE_DEMO=1 QT_QPA_PLATFORM=offscreen $(PY) -m app.engine.platform exec -- $(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check app tests
	$(VENV)/bin/mypy

bench-quick: setup
	$(PY) -m app bench --quick --out bench-out

clean:
	rm -rf $(VENV) build dist *.egg-info

# `make test` first prepares the demo target (once: later runs find it cached in the user data
# folder and return at once), so the demo-pair tests run in CI instead of being skipped. A
# preparation that fails stops `make test` here, and the suite runs with
# DRAFTPAIR_REQUIRE_DEMO=1: a demo test never skips under `make test` (tests/demo_gate.py).
.PHONY: demo-target
test: demo-target
demo-target: setup
	@$(PY) -m app demo prepare >/dev/null || { echo "make test: the demo target could not be prepared (see above); the demo tests cannot run." >&2; exit 1; }
