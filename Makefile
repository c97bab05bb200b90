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

# The import contracts (pyproject.toml [tool.importlinter]) first, then the suite.
test: setup
	$(VENV)/bin/lint-imports
	QT_QPA_PLATFORM=offscreen $(PY) -m app.engine.platform exec -- $(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check app tests

bench-quick: setup
	$(PY) -m app bench --quick --out bench-out

clean:
	rm -rf $(VENV) build dist *.egg-info
