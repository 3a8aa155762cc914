# edgespec: everything installs itself into .venv; no step needs doing by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# llama-cpp-python compiles llama.cpp from source; use every core for it.
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc 2>/dev/null || echo 2)
# ...with llama.cpp's RPC backend (edgespec rpc-server, --rpc); your own CMAKE_ARGS (CUDA, Metal) come first.
override CMAKE_ARGS := $(strip $(CMAKE_ARGS) -DGGML_RPC=ON)
export CMAKE_ARGS
LLAMA_PIN := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
HAS_RPC   := $(PY) -c "import sys, llama_cpp; sys.exit(not llama_cpp.llama_supports_rpc())"

.PHONY: setup demo chat test test-fast bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[dev]'
	@# pip's cache may hold a wheel built without RPC (it keys on the version, not the flags): rebuild it
	$(HAS_RPC) || $(PY) -m pip install --progress-bar off --no-cache-dir --force-reinstall --no-deps '$(LLAMA_PIN)'
	$(HAS_RPC)
	touch $(STAMP)

demo: setup
	$(VENV)/bin/edgespec models prepare demo
	$(VENV)/bin/edgespec run --pair demo --max-tokens 128 --prompt "Write a haiku about speculative decoding, then explain it."

chat: setup
	$(VENV)/bin/edgespec models prepare demo
	$(VENV)/bin/edgespec chat --pair demo

test: setup
	$(VENV)/bin/edgespec models prepare demo
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not real and not slow"

bench: setup
	$(VENV)/bin/edgespec models prepare demo demo-bad
	$(VENV)/bin/edgespec bench --out bench-out
	$(PY) -m edgespec.frontends.bench.row_timing
	$(PY) -m edgespec.frontends.bench.python_share

lint: setup
	$(VENV)/bin/ruff check edgespec tui tests
	$(VENV)/bin/ruff format --check edgespec tui tests
	$(VENV)/bin/mypy edgespec
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) bench-out .pytest_cache .mypy_cache .ruff_cache
