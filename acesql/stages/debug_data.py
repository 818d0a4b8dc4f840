"""The `debug_data` stage: SQL debugging tasks drawn from the prepared splits.

    python -m acesql.stages.debug_data [--params params.yaml]

Reads `base` and `debug_data`, and `{data_dir}/prepared/{train,dev,test_ood}.jsonl` (the
data stage's output, whatever its source). For each database of each split, draws
`tasks_per_db` tasks in the configured shares of query, management and personalization tasks
(`acesql.debug.build`): real gold queries and real databases, broken on purpose, each task
kept only when running it shows the broken SQL fails and the solution passes. Tasks keep the
split of their database. Writes `{data_dir}/debug/<split>.jsonl` (one `DebugTask` per line)
and `{data_dir}/debug_metrics.json` (counts by split, category and bug, drafts dropped by
reason), also logged to MLflow. Every statement runs on a private view of a replica
(`acesql.sql.replicas`): the databases are never written.
"""

from __future__ import annotations

import tempfile
from collections import Counter

from tqdm import tqdm

from acesql.data.loaders import read_prepared
from acesql.debug.build import BuildConfig, build_tasks, summarize
from acesql.debug.task import write_tasks
from acesql.errors import DataError
from acesql.sql.replicas import Replicas
from acesql.stages.common import run_stage, write_metrics
from acesql.staging import replace_dir
from acesql.tracking import flatten

SPLITS = ("train", "dev", "test_ood")


def work(s: dict, tracker) -> dict:

    base, cfg = s["base"], s["debug_data"]
    prepared = base.data_dir / "prepared"
    present = [split for split in SPLITS if (prepared / f"{split}.jsonl").is_file()]
    if not present:
        raise DataError(f"no prepared split in {prepared}: run the data stage first")
    config = BuildConfig(
        tasks_per_db=cfg.tasks_per_db,
        shares=(cfg.query_share, cfg.management_share, cfg.personalization_share),
        seed=base.seed,
    )
    all_tasks, rejected, by_split = [], Counter(), {}
    with (
        tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
        Replicas(scratch, timeout_s=cfg.timeout_s) as replicas,
        replace_dir(base.data_dir / "debug") as out,
    ):
        for split in tqdm(present, desc="debug_data", unit="split"):
            examples = read_prepared(prepared / f"{split}.jsonl")
            tasks, dropped = build_tasks(examples, split, replicas, config)
            write_tasks(out / f"{split}.jsonl", tasks)
            by_split[split] = summarize(tasks, dropped)
            all_tasks += tasks
            rejected += dropped
    metrics = {**summarize(all_tasks, rejected), "splits": by_split}
    write_metrics(base.data_dir / "debug_metrics.json", metrics, "debug_data")
    tracker.log_metrics(
        {f"debug_data/{k}": v for k, v in flatten(metrics).items() if isinstance(v, int | float)}
    )
    return metrics


def main(argv=None) -> None:
    run_stage("debug_data", __doc__, ("base", "debug_data"), work, argv)


if __name__ == "__main__":
    main()
