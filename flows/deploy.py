"""`make deploy`: the work pools and prefect.yaml's deployments, then what to run next.

    PREFECT_API_URL=http://127.0.0.1:4200/api python -m flows.deploy

Runs the prefect commands of `COMMANDS` against the server PREFECT_API_URL names. Prefect
follows each pool and each deployment it creates with a hint, `prefect worker start --pool
'cpu'`: one per deployment, and run in a shell without PREFECT_API_URL that command starts a
throwaway server of its own and times out. So a command's output is shown only when it fails;
at the end come the deployments made and the project's own lines that start a worker and a
run (`make worker`, `make trigger`: they pass the server's URL to prefect).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

CONFIG = Path("prefect.yaml")
COMMANDS = (
    ("work-pool", "create", "cpu", "--type", "process", "--overwrite"),
    ("work-pool", "create", "gpu", "--type", "process", "--overwrite"),
    ("work-pool", "set-concurrency-limit", "gpu", "1"),  # one training at a time on a GPU
    ("--no-prompt", "deploy", "--all"),  # every deployment of prefect.yaml
)
POOL_JOBS = {
    "cpu": "the data stages, evaluate and the pipeline",
    "gpu": "the training stages, on the machine with a GPU",
}


def deployed(names: list[str]) -> list[tuple[str, str]]:
    """(`flow/deployment`, work pool) of the server's deployments named in `names`, in that
    order."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flows = {flow.id: flow.name for flow in client.read_flows()}
        found = [d for d in client.read_deployments() if d.name in names]
    found.sort(key=lambda d: names.index(d.name))
    return [(f"{flows[d.flow_id]}/{d.name}", d.work_pool_name) for d in found]


def next_steps(deployments: list[tuple[str, str]]) -> str:
    """What `make deploy` prints once the deployments exist.

    >>> print(next_steps([("acesql-pipeline/pipeline-cpu", "cpu"), ("acesql-sft/sft-gpu", "gpu")]))
    2 deployments of prefect.yaml:
      acesql-pipeline/pipeline-cpu  pool cpu
      acesql-sft/sft-gpu            pool gpu
    A worker of its pool runs each; start them in this folder, one shell each:
      make worker           # pool cpu: the data stages, evaluate and the pipeline
      make worker POOL=gpu  # pool gpu: the training stages, on the machine with a GPU
    Then a run, or the Run button of a deployment in the UI:
      make trigger DEPLOYMENT=acesql-pipeline/pipeline-cpu
    """
    width = max(len(name) for name, _ in deployments)
    lines = [f"{len(deployments)} deployments of {CONFIG}:"]
    lines += [f"  {name:<{width}}  pool {pool}" for name, pool in deployments]
    lines.append("A worker of its pool runs each; start them in this folder, one shell each:")
    for pool in sorted({pool for _, pool in deployments}):
        command = "make worker" if pool == "cpu" else f"make worker POOL={pool}"
        lines.append(f"  {command:<20}  # pool {pool}: {POOL_JOBS.get(pool, 'its deployments')}")
    pipelines = [name for name, _ in deployments if name.startswith("acesql-pipeline/")]
    if pipelines:
        lines.append("Then a run, or the Run button of a deployment in the UI:")
        lines.append(f"  make trigger DEPLOYMENT={pipelines[0]}")
    return "\n".join(lines)


def main() -> int:
    names = [entry["name"] for entry in yaml.safe_load(CONFIG.read_text())["deployments"]]
    prefect = Path(sys.executable).with_name("prefect")
    for command in COMMANDS:
        print("prefect", *command, flush=True)
        done = subprocess.run([str(prefect), *command], capture_output=True, text=True)
        if done.returncode != 0:
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            return done.returncode
    print(next_steps(deployed(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
