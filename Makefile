# The two commands of the README. Each does its own setup: a virtualenv in .venv with the
# package and what it needs, reinstalled whenever pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Most tests wait on sockets, processes and timers: three pytest processes per run keep both
# cores busy (two left them idle a third of the time: 893 s against 644 s for the same suite).
# Tests marked `serial` (they restart PostgreSQL) run alone afterwards.
TEST_PROCS ?= 3
PG_DSN ?= $(or $(OUTLIVE_TEST_POSTGRES),postgresql://postgres@127.0.0.1:5432/postgres)

.PHONY: run test lint bench postgres browser pgbouncer node shell-tools clean mcp-example

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# llama-cpp-python (the local model, tested in CI) comes from PyPI as source only: installing it
# compiles llama.cpp, a few hundred C++ files, which takes about 10 minutes on two cores. It is
# built portably, since a -march=native build dies with "illegal instruction" on VMs that
# advertise AMX/AVX-512 they do not enable. pip's own wheel cache cannot be trusted with this:
# it keys a built wheel by the source's URL only, not by CMAKE_ARGS (pypa/pip#11164), so it
# would hand back a native build someone made with a plain `pip install llama-cpp-python`, and
# --no-cache-dir or PIP_NO_CACHE_DIR turn it off. So the wheel is built once per machine with
# `pip wheel`, showing pip's build output, into a folder outside the clone named after these
# flags; every later install (a fresh clone, `make clean`) takes it from there in seconds.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF
LLAMA_WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/outlive/wheels/llama-$(shell printf '%s' '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-12)
# the version the test tools pin, read from pyproject.toml's `test` extra
LLAMA_REQ = $(shell sed -n '/^test = \[/,/^\]/p' pyproject.toml | grep -o '"llama-cpp-python[^"]*"' | tr -d '"')
LLAMA_FROM_CACHE = $(BIN)/pip install --quiet --no-index --no-deps --find-links "$(LLAMA_WHEELS)" "$(LLAMA_REQ)"

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	@if $(LLAMA_FROM_CACHE) 2>/dev/null; then \
		echo "$(LLAMA_REQ): in place, from the wheel built before (kept in $(LLAMA_WHEELS))"; \
	else \
		echo "building $(LLAMA_REQ) (the local model) for this machine: it compiles llama.cpp from C++ source, about 10 minutes on two cores, and only this once, since the wheel goes to $(LLAMA_WHEELS), where every later clone here finds it. pip's build output follows."; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel --verbose --no-deps --no-cache-dir --wheel-dir "$(LLAMA_WHEELS)" "$(LLAMA_REQ)" && \
		$(LLAMA_FROM_CACHE); \
	fi
	@echo "installing outlive with its test tools"
	$(BIN)/pip install --quiet --find-links "$(LLAMA_WHEELS)" -e ".[test]"
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/outlive serve

# PostgreSQL is started before a session on these machines; start it if it is not up.
postgres:
	@$(BIN)/python scripts/ensure_postgres.py "$(PG_DSN)"

# Browser tests drive Debian's Chromium through Playwright (which cannot download its own).
browser:
	@sh scripts/install_browser.sh

# Store tests also run through Debian's pgbouncer in transaction mode (started by the suite).
pgbouncer:
	@sh scripts/install_pgbouncer.sh

# The front-end acceptance tests drive the real AI SDK and AG-UI clients in Node (20 or newer),
# pinned by tests/frontends/node/package-lock.json; reinstalled when the lockfile changes.
NODE_TESTS := tests/frontends/node

$(NODE_TESTS)/node_modules/.package-lock.json: $(NODE_TESTS)/package-lock.json
	cd $(NODE_TESTS) && npm ci --no-audit --no-fund --loglevel=error

node: $(NODE_TESTS)/node_modules/.package-lock.json

# The demo agent with the tools of a small MCP server (examples/mcp/): in the workbench, send
# `call example__add {"a": 2, "b": 3}` (`--demo-calls`: the demo model calls tools by name).
mcp-example: $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[mcp]"
	$(BIN)/outlive serve --db sqlite:///./mcp-example.db --agents examples/mcp/agents.toml --demo-calls

# The README's "Try it" commands run as a test; they use curl and jq.
shell-tools:
	@sh scripts/install_shell_tools.sh

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

test: $(VENV)/.installed-test postgres browser pgbouncer node shell-tools lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_PROCS) --dist loadfile --no-loadscope-reorder --durations=25 -m "not serial"
	$(BIN)/python -m pytest -q -p no:cacheprovider -m serial

bench: $(VENV)/.installed-test postgres
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(NODE_TESTS)/node_modules *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
