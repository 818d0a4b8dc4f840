# acesql — the two commands: `make run` (the main job) and `make test` (the fast suite).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPIDER ?= ../shared/data/spider

export PREFECT_HOME ?= $(CURDIR)/.prefect
include telemetry.env
export $(shell grep -o '^[A-Z_]*' telemetry.env)
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run exps heldout ui ui-stop deploy worker trigger test test-slow test-gpu lint format bench bench-pcgrad bench-grpo bench-replicas bench-dist clean

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
# server of `make ui` while it runs). PROFILE=long runs profiles/long.yaml's values (about an
# hour on 2 cores) as a DVC experiment (make exps) and leaves params.yaml the default.
run: setup
	$(if $(UI_API),PREFECT_API_URL=$(UI_API) )$(PY) -m flows.pipeline $(if $(PROFILE),--profile $(PROFILE))

# The runs saved as DVC experiments (`make run PROFILE=...`): the params that differ between
# them and each stage's headline numbers, without the code and data hashes.
exps: setup
	$(VENV)/bin/dvc exp show --only-changed --drop '^[^:]*/[^:]*$$' $(ARGS)

# A local Prefect server (:4200) and MLflow UI (:5000) in the background; PIDs and logs in .ui/.
ui: setup
	$(PY) -m flows.ui start

ui-stop:
	$(PY) -m flows.ui stop

# Deployments need a Prefect server that outlives one command: `make ui`'s, or a team's server
# named by PREFECT_API_URL. Without one, prefect commands would each start a throwaway server.
API := $(or $(PREFECT_API_URL),$(UI_API))
PREFECT := PREFECT_API_URL=$(API) $(VENV)/bin/prefect
NEED_API = @test -n "$(API)" || { echo "no Prefect server: run \`make ui\` first (or export PREFECT_API_URL)" >&2; exit 2; }

# The cpu and gpu work pools (one training at a time on gpu) and prefect.yaml's deployments
# (flows/deploy.py); it ends with the `make worker` and `make trigger` lines to run next.
deploy: setup
	$(NEED_API)
	PREFECT_API_URL=$(API) $(PY) -m flows.deploy

# A worker in the foreground; its runs work in this folder. POOL=gpu on the machine with a GPU.
POOL ?= cpu
worker: setup
	$(NEED_API)
	ACESQL_PROJECT_DIR=$(CURDIR) $(PREFECT) worker start --pool $(POOL)

# A run of a deployment, as the UI's Run button makes one; PARAMS is JSON of flow parameters.
DEPLOYMENT ?= acesql-pipeline/pipeline-cpu
PARAMS ?= {}
trigger: setup
	$(NEED_API)
	$(PREFECT) deployment run $(DEPLOYMENT) --params '$(PARAMS)'

# The fast suite, one worker a core (pytest-xdist; TEST_WORKERS=0 runs it in one process);
# with CI=true (as CI runs it) the slow tests too, but not the external ones, in one process:
# they time and kill processes of their own.
TEST_MARKS := $(if $(filter true,$(CI)),not gpu and not external,not slow and not gpu)
TEST_WORKERS ?= $(if $(filter true,$(CI)),0,auto)

test: setup
	$(PY) -m pytest -m "$(TEST_MARKS)" -q -n $(TEST_WORKERS)

test-slow: setup
	$(PY) -m pytest -m "slow or external" -q

# The CUDA paths (engine, SFT, GRPO in bf16) on a tiny random model: on a machine with a GPU.
test-gpu: setup
	$(PY) -m pytest -m gpu -q tests/models/test_gpu.py

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format . && $(PY) -m ruff check --fix .

# The held-out evaluations of docs/results.md on this checkout's models (base, sft, grpo):
# Spider dev (300) where SPIDER exists and test_ood (200), then the paired comparisons.
# Hours on a CPU; resumable: run it again after a kill.
heldout: setup
	SPIDER=$(SPIDER) sh scripts/heldout . results/heldout

bench: setup
	$(PY) bench/exec_bench.py --spider $(SPIDER)

# glibc keeps freed memory instead of returning and re-faulting it on every training step
MALLOC_KEEP := glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184

bench-pcgrad: setup
	$(PY) bench/pcgrad_bench.py

bench-grpo: setup
	$(VENV)/bin/uv pip install --quiet --python $(PY) -e '.[bench]' -c constraints.txt
	GLIBC_TUNABLES=$(MALLOC_KEEP) $(PY) bench/grpo_step_bench.py

bench-replicas: setup
	$(PY) bench/replica_bench.py

# GRPO on 1 and 2 CPU processes (gloo), replicated and FSDP2: step time, memory, agreement
bench-dist: setup
	$(PY) bench/dist_bench.py

clean:
	rm -rf $(VENV) .prefect results
