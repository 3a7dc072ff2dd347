# The two commands: `make demo` (the demo fleet on embedded SQLite) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BASE := $(VENV)/.base-installed
HOST ?= 127.0.0.1
PORT ?= 8050

.PHONY: setup demo serve test test-services lint format bench clean

$(STAMP): pyproject.toml scripts/install_torch.sh
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	bash scripts/install_torch.sh $(BIN)/python
	touch $(STAMP)

setup: $(STAMP) ## create .venv and install the project with its dev and torch extras

# The demo is a simulated fleet: the base package alone (no torch, no dev tools).
$(BASE): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(BASE)

demo: $(BASE) ## install the base package, load the demo fleet into ~/.ett/ett.db (first run), serve it
	$(BIN)/ett demo --host $(HOST) --port $(PORT)

serve: $(BASE) ## serve whatever ETT_DATABASE_URL holds
	$(BIN)/ett db upgrade
	$(BIN)/ett serve --host $(HOST) --port $(PORT)

test-services: ## start/install what the tests need: Postgres, Chromium, Alertmanager, Prometheus
	bash scripts/test_services.sh

test: setup test-services ## the whole suite, against Postgres and SQLite
	$(BIN)/python -m pytest

lint: ## ruff, and the import-linter layering contracts of docs/ARCHITECTURE.md
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: setup test-services ## the benchmarks of docs/PERFORMANCE.md
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .import_linter_cache .hypothesis
