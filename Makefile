# Everything a fresh machine needs is installed from here: `make demo`, `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install system-deps demo test lint bench mutate clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/wgstore run examples.train:train_fn --workers 4

# The report test renders HTML in headless Chromium (Debian's package).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the report test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not found: the HTML report test will be skipped (fails in CI)"; fi; }

test: $(STAMP) system-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/lint_imports.py

bench: $(STAMP)
	$(BIN)/python bench/store.py

# Mutation testing of the pure modules (scripts/mutate.py: the module table, equivalents in
# scripts/mutate_equivalents.txt). One mutant at a time, niced; MUTATE_ARGS picks modules.
mutate: $(STAMP)
	nice $(BIN)/python scripts/mutate.py $(MUTATE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
