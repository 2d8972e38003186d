# Developer commands; CI runs the same test command through .ci/run.
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install test unit integration fault lint format typecheck layers check demo bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python  ## install agentflow with the development tools
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DLLAVA_BUILD=OFF" $(BIN)/pip install -e '.[dev,local-embeddings,realmodel]'

test:  ## every test: unit, integration, fault, e2e, and the code-quality checks
	$(BIN)/pytest

unit:
	$(BIN)/pytest tests/unit

integration:
	$(BIN)/pytest tests/integration

fault:
	$(BIN)/pytest tests/fault

lint:
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format:
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

typecheck:
	$(BIN)/mypy

layers:
	$(BIN)/lint-imports

check: lint typecheck layers test

demo:
	$(BIN)/agentflow demo

bench:
	$(BIN)/agentflow bench --json bench-results/latest.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench-results
