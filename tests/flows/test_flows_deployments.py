"""prefect.yaml: every flow deployed to its pool, under the names the pipeline dispatches to.

The last test runs `prefect deploy --all` for real against the test API (in a copy of the
project's flows and prefect.yaml) and reads the deployments back.
"""

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prefect.flows import load_flow_from_entrypoint

from flows.dispatch import GPU_STAGES, gpu_deployment
from flows.pipeline import STAGES

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "prefect.yaml").read_text())
PIPELINE = "acesql-pipeline/pipeline-cpu"


def _deployments() -> dict[str, dict]:
    """`flow name/deployment name` -> the deployment's entry in prefect.yaml."""
    found = {}
    for entry in CONFIG["deployments"]:
        flow = load_flow_from_entrypoint(str(ROOT / entry["entrypoint"]))
        found[f"{flow.name}/{entry['name']}"] = entry
    return found


def test_every_stage_and_the_pipeline_have_a_deployment_on_their_pool():
    """Named after what they run and where, so that the UI's list of deployment names tells
    them apart: acesql-sft/sft-gpu."""
    deployments = _deployments()
    pools = {"pipeline": "cpu"} | {
        stage: "gpu" if stage in GPU_STAGES else "cpu" for stage in STAGES
    }
    assert set(deployments) == {f"acesql-{job}/{job}-{pool}" for job, pool in pools.items()}
    for name, entry in deployments.items():
        assert entry["work_pool"]["name"] == name.rpartition("-")[2]
    assert len({entry["name"] for entry in deployments.values()}) == len(deployments)
    assert deployments[PIPELINE]["parameters"] == {"gpu_deployments": "auto"}


def test_the_pipeline_dispatches_to_deployments_that_exist():
    deployments = _deployments()
    for stage in GPU_STAGES:
        assert gpu_deployment(stage) in deployments
        assert deployments[gpu_deployment(stage)]["work_pool"]["name"] == "gpu"


def test_runs_start_in_the_project_folder_the_worker_names():
    [step] = CONFIG["pull"]
    assert step == {
        "prefect.deployments.steps.set_working_directory": {
            "directory": "{{ $ACESQL_PROJECT_DIR }}"
        }
    }


@pytest.mark.slow
def test_prefect_deploy_creates_them(prefect_harness, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL

    async def create_pools():
        async with get_client() as client:
            for name in ("cpu", "gpu"):  # other tests of the session may have made them
                pool = WorkPoolCreate(name=name, type="process")
                await client.create_work_pool(pool, overwrite=True)

    async def read_deployments():
        async with get_client() as client:
            return {
                f"{(await client.read_flow(d.flow_id)).name}/{d.name}": d
                for d in await client.read_deployments()
            }

    asyncio.run(create_pools())
    shutil.copy(ROOT / "prefect.yaml", tmp_path)
    shutil.copytree(
        ROOT / "flows", tmp_path / "flows", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop("ACESQL_PROJECT_DIR", None)
    prefect = str(Path(sys.executable).parent / "prefect")
    proc = subprocess.run(
        [prefect, "--no-prompt", "deploy", "--all"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    deployed = asyncio.run(read_deployments())
    assert set(deployed) == set(_deployments())
    sft = deployed[gpu_deployment("sft")]
    assert sft.work_pool_name == "gpu"
    schema = sft.parameter_openapi_schema
    assert set(schema["properties"]) == {"sft", "force", "parent_run_id", "distributed"}
    assert "learning_rate" in schema["definitions"]["SftSectionOverrides"]["properties"]  # the form
    # resolved on the worker when a run starts, not here
    assert sft.pull_steps == CONFIG["pull"]
    assert deployed[PIPELINE].parameters == {"gpu_deployments": "auto"}


def _make(*args, env):
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("target", ["deploy", "worker", "trigger"])
def test_the_deploy_targets_refuse_to_run_without_a_server(target):
    """Without `make ui`'s server or PREFECT_API_URL, each prefect command would start a
    throwaway server of its own: the targets stop at once instead, naming the fix."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = _make(target, "UI_API=", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no Prefect server: run `make ui` first" in done.stderr


@pytest.mark.slow
def test_make_deploy_creates_the_pools_and_deployments(prefect_harness):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    done = _make("deploy", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with get_client(sync_client=True) as client:
        pools = {pool.name: pool for pool in client.read_work_pools()}
        deployed = {
            f"{client.read_flow(d.flow_id).name}/{d.name}" for d in client.read_deployments()
        }
    assert pools["gpu"].concurrency_limit == 1 and pools["cpu"].type == "process"
    assert deployed == set(_deployments())
    # Prefect's hint, once per deployment, fails in a shell without PREFECT_API_URL: the
    # project's own commands instead, once
    assert "prefect worker start" not in done.stdout + done.stderr
    assert done.stdout.count("make worker POOL=gpu") == 1
    assert f"make trigger DEPLOYMENT={PIPELINE}" in done.stdout
