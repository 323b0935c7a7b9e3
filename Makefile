# The two commands of the README. Each creates .venv on first use and makes it hold exactly what
# constraints.txt pins (pip-sync: every dependency at its pinned version, nothing else), then the
# project itself, editable. constraints.txt is written by pip-compile: `make lock`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := constraints.txt
LATEST := .venv-latest
LOCKVENV := .venv-lock
TORCH_PIN := $(shell grep '^torch==' constraints.in)

.PHONY: demo test test-latest lock lint bench clean

define need_python
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "xccl-synth needs Python 3.11 or newer (found " + sys.version.split()[0] + "); run: make PYTHON=python3.11 ...")'
endef

$(STAMP): pyproject.toml $(LOCK)
	$(need_python)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(LOCK) pip setuptools wheel pip-tools
	$(BIN)/pip-sync --quiet --pip-args "--disable-pip-version-check" $(LOCK)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -c 'from synth.timing.engine import warm_up; warm_up(); from codegen.kahn import warm_up; warm_up()'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/xccl demo

# The suite on WORKERS processes (pytest-xdist; CI has 2 cores), then the cases marked serial alone:
# they time themselves against limits, send signals or start a process per rank, and a busy
# neighbour would make them slow, not wrong. Both parts run; either failing fails the target.
WORKERS ?= 2
test: $(STAMP)
	@status=0; \
	$(BIN)/python -m pytest -n $(WORKERS) -m 'not slow and not gpu and not serial' || status=1; \
	$(BIN)/python -m pytest -m 'serial and not slow and not gpu' || status=1; \
	exit $$status

# Not in CI: the suite on the newest versions pyproject allows, in a venv of its own, so that a new
# release that breaks us is seen here before a user installs it (torch stays at constraints.in's
# pin: a newer one is a CUDA build of several GB).
test-latest:
	$(need_python)
	@test -x $(LATEST)/bin/python || $(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip setuptools wheel
	$(LATEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade --upgrade-strategy eager --no-build-isolation -e '.[dev,torch]' $(TORCH_PIN)
	$(LATEST)/bin/python -m pip freeze --exclude-editable > $(LATEST)/versions.txt
	$(LATEST)/bin/python -m pytest

# Re-resolve every pin to the newest version pyproject.toml and constraints.in allow, in a venv of
# its own (pip-tools only: nothing is installed from the old lock or the new one).
lock:
	$(need_python)
	@test -x $(LOCKVENV)/bin/python || $(PYTHON) -m venv $(LOCKVENV)
	$(LOCKVENV)/bin/python -m pip install --quiet --disable-pip-version-check -c $(LOCK) pip pip-tools
	$(LOCKVENV)/bin/pip-compile --quiet --upgrade --strip-extras --allow-unsafe --extra dev --extra torch \
		--no-emit-index-url --no-emit-find-links --output-file $(LOCK) pyproject.toml constraints.in

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(LATEST) $(LOCKVENV) build *.egg-info .pytest_cache
