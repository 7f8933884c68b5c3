# Two entry points: `make demo` (set up, then a short RL run on CPU) and `make test`
# (set up, then lint, type-check and run every test). Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where torch comes from: empty = pip's configured index. On a plain PyPI, pass PyTorch's CPU
# index (make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu) to avoid CUDA wheels.
TORCH_INDEX_URL ?=
TORCH_SPEC ?= torch==2.13.0
# The GPU path: vLLM pins the torch it is built with (CUDA wheels), so it gets its own venv
# instead of the torch above: `make setup-vllm` on a GPU machine. The pair must be one of
# TESTED_VLLM in src/adapters/inference/vllm_args.py (tests/unit/test_vllm_pins.py checks).
VLLM_SPEC ?= vllm==0.33.0
VLLM_TORCH_SPEC ?= torch==2.14.0
VLLM_VENV ?= .venv-vllm
# An editable install in strict mode maps files one by one: reinstall when the set changes.
FILESET := $(shell find src -name '*.py' 2>/dev/null | sort | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(FILESET)

.PHONY: setup setup-vllm browser demo test test-extended test-vllm lint typecheck unit bench soak mutants hunt clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, from TORCH_INDEX_URL when given (PyTorch's CPU index: no CUDA wheels)
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) "$(TORCH_SPEC)"
	# without setuptools' notice of where a strict editable install keeps its links
	PYTHONWARNINGS="ignore:Editable installation." $(BIN)/python -m pip install -q -e ".[dev]" --config-settings editable_mode=strict
	rm -f $(VENV)/.installed-*
	touch $@

# The browser tests of `arthex view` drive Debian's chromium (never a downloaded one). Installed
# when missing and apt-get may run (root, or passwordless sudo); otherwise a note, and those
# tests skip outside CI (CI=true makes them fail instead).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium chromium-driver; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -q && sudo apt-get install -y -q chromium chromium-driver; \
	  else echo "note: chromium is not installed and apt-get cannot run here; the browser tests of arthex view will skip (apt-get install chromium)"; fi; }

setup: $(STAMP)

setup-vllm:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(VLLM_TORCH_SPEC)" "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -q -e ".[dev,vllm]" --config-settings editable_mode=strict

demo: setup
	$(BIN)/arthex demo

lint: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: setup
	$(BIN)/mypy --strict

unit: setup
	$(BIN)/pytest -q tests/unit

# Test files are spread over one worker per core (at most 4); the tests of one file share a
# worker, so a file's module fixtures are built once.
test: lint typecheck browser
	$(BIN)/pytest -q -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

# The variants CI leaves out (pytest -m extended: the other parametrizations of the two-rank,
# memory-plan and rank-fault checks, the rest of the two-rank contract); about 15 minutes on
# two cores. Run it before a change to distributed training or the memory plan lands.
test-extended: setup
	$(BIN)/pytest -q -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder -m extended

# The vLLM adapter against a real vLLM, no GPU needed (part of `make test`; this runs it alone).
# vLLM with its CUDA torch is about 2.4 GB to download and 9.5 GB on disk, installed with uv
# and cached under ~/.cache/arthex-interop (a few minutes the first time; ARTHEX_VLLM_TESTS=0
# skips it). ARTHEX_VLLM_VERSION=0.26.0 tests the older release.
test-vllm: setup
	$(BIN)/pytest -q tests/vllm_api

# Long fault sweeps (not in CI): a SIGKILL before every write of a training step and of a
# pipeline update, resumed; the 200-step LocalBackend soak; the serve soak
# (ARTHEX_SOAK_SECONDS, default 1800).
soak: setup
	nice -n 10 $(BIN)/pytest -q -p no:xdist -s -m soak tests/faults

bench: setup
	$(BIN)/python -m benchmarks

# Mutation testing against the fast tests, set by set (long; not in CI): the core, then each
# adapter module with its own tests (tools/mutmut/SET.toml). make mutants MUTANT_SETS=lease
MUTANT_SETS ?= core ledger parts stepfile lease record guard tinker emulatorkeys
mutants: setup
	for set in $(MUTANT_SETS); do PYTHON=$(BIN)/python tools/mutants.sh $$set || exit 1; done

# Flaky-test hunt: the whole suite RUNS times in a row (as `make test` runs it) with the CPUs
# kept busy by spinning processes; lists every test that failed in any run (long; not in CI).
# HUNT_ARGS replaces the pytest arguments: make hunt RUNS=2 HUNT_ARGS="tests/unit -q"
RUNS ?= 5
HUNT_ARGS ?=
hunt: setup browser
	$(BIN)/python tools/hunt.py --runs $(RUNS) $(if $(HUNT_ARGS),-- $(HUNT_ARGS))

clean:
	rm -rf $(VENV) $(VLLM_VENV) .mypy_cache .pytest_cache .ruff_cache .mutants .mutants-*
