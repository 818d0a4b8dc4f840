# acesql — the two commands: `make run` (the main job) and `make test` (the fast suite).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPIDER ?= ../shared/data/spider

export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run ui ui-stop test test-slow lint format bench bench-pcgrad bench-grpo clean

# While `make ui`'s Prefect server runs (its PID lives), `make run` reports to it.
UI_API := $(shell test -f .ui/prefect.api && ps -p $$(cat .ui/prefect.pid 2>/dev/null) >/dev/null 2>&1 && cat .ui/prefect.api)

setup: $(STAMP)

# Re-installs only when the project's dependencies change; pins come from constraints.txt.
# pip takes torch (the CPU build on this machine's disk); uv, which downloads in parallel and
# finds torch already there, installs the rest in seconds where pip took minutes.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0 uv -c constraints.txt
	$(VENV)/bin/uv pip install --quiet --python $(PY) -e '.[dev]' -c constraints.txt
	touch $@

# The pipeline flow: `dvc repro` of each stage, under Prefect's temporary local API (or the
# server of `make ui` while it runs). PROFILE=long first sets profiles/long.yaml's values in
# params.yaml (about 3 hours on 2 cores); PROFILE=cpu sets the 30-minute default back.
run: setup
	$(if $(UI_API),PREFECT_API_URL=$(UI_API) )$(PY) -m flows.pipeline $(if $(PROFILE),--profile $(PROFILE))

# A local Prefect server (:4200) and MLflow UI (:5000) in the background; PIDs and logs in .ui/.
ui: setup
	$(PY) -m flows.ui start

ui-stop:
	$(PY) -m flows.ui stop

# The fast suite; with CI=true (as CI runs it) the slow tests too, but not the external ones.
TEST_MARKS := $(if $(filter true,$(CI)),not gpu and not external,not slow and not gpu)

test: setup
	$(PY) -m pytest -m "$(TEST_MARKS)" -q

test-slow: setup
	$(PY) -m pytest -m "slow or external" -q

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format . && $(PY) -m ruff check --fix .

bench: setup
	$(PY) bench/exec_bench.py --spider $(SPIDER)

# glibc keeps freed memory instead of returning and re-faulting it on every training step
MALLOC_KEEP := glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

bench-pcgrad: setup
	$(PY) bench/pcgrad_bench.py

bench-grpo: setup
	$(VENV)/bin/uv pip install --quiet --python $(PY) -e '.[bench]' -c constraints.txt
	GLIBC_TUNABLES=$(MALLOC_KEEP) $(PY) bench/grpo_step_bench.py

clean:
	rm -rf $(VENV) .prefect results
