"""flows/registry.py is the one list of stages: dvc.yaml, params, stage modules, flows and
deployments must agree with it."""

import inspect
from pathlib import Path

import yaml

from acesql.config import Params
from flows import registry

ROOT = Path(__file__).resolve().parents[2]


def test_the_registry_lists_dvc_yaml_stages_in_their_order():
    stages = list(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])
    assert list(registry.STAGES) == stages


def test_every_stage_has_a_module_and_a_params_section():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for stage in registry.STAGES:
        assert (ROOT / "acesql" / "stages" / f"{stage}.py").is_file(), stage
        assert stage in Params.model_fields and stage in params, stage


def test_each_stage_flow_is_described_by_its_line_and_takes_what_the_stage_needs():
    import flows.stages

    assert list(flows.stages.STAGE_FLOWS) == list(registry.STAGES)
    for stage in registry.REGISTRY:
        flow = flows.stages.STAGE_FLOWS[stage.name]
        assert flow.description.startswith(f"The {stage.name} stage: {stage.does}")
        takes = inspect.signature(flow.fn).parameters
        assert list(takes)[0] == stage.name
        assert ("distributed" in takes) == stage.distributed, stage.name


def test_a_plain_run_is_the_main_stages_and_the_gpu_pool_runs_the_training():
    import flows.dispatch
    import flows.pipeline

    assert registry.STAGES[: registry.STAGES.index("evaluate") + 1] == flows.pipeline.MAIN_STAGES
    assert set(flows.dispatch.GPU_STAGES) == {
        "sft", "grpo", "ranker", "prm", "reasoning_sft", "agent_sft", "reasoning_grpo",
        "agent_grpo",
    }  # fmt: skip
    # a stage that trains with several processes is one the gpu pool runs
    assert {s.name for s in registry.REGISTRY if s.distributed} <= set(registry.GPU_STAGES)


def test_each_stage_declares_its_headline_as_the_dvc_metric_and_its_details_as_an_output():
    """`dvc metrics show` prints the declared metrics files: the few headline numbers of each
    stage, not the hundreds of its full metrics file, which DVC still tracks as an output."""
    stages = yaml.safe_load(Path("dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)
        for metric in stage.get("metrics", []):
            assert metric.endswith("headline.json"), (name, metric)
            details = metric.removesuffix("headline.json") + "metrics.json"
            details = details.replace("base_model_metrics", "base_model")
            assert details in stage["outs"], (name, details)
