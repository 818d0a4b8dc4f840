"""The `data` stage: generate or load examples, filter train, write the prepared splits.

    python -m acesql.stages.data [--params params.yaml]

Reads the `base` and `data` sections. Writes, under `base.data_dir`:

    synth/                      the generated dataset (source synth), in the generator's layout
    wide/                       the wide held-out set (`data.wide`), same layout; empty when off
    prepared/train.jsonl        one `Example` dict per line, after source filtering
    prepared/dev.jsonl          when `data.splits.dev` is set and the split is not empty
    prepared/test_ood.jsonl     likewise (the synthetic source's unseen domains)
    prepared/dev_wide.jsonl     wide/'s dev: wide databases of the training domains
    prepared/test_wide.jsonl    wide/'s test_ood: wide databases of domains no split trains on
    prepared/distribution.png   complexity and domain (or database) per split (not the wide ones)
    metrics.json                counts per split and complexity, filtering, generator summary,
                                and the wide splits' schema shape (tables, columns per database)
    headline.json               the split sizes: the stage's DVC metric

and logs params, metrics, the figure and metrics.json to MLflow. Every example records its
`db_path` as the source gives it; for the default layout that is relative to the project root,
so the outputs do not depend on where the project is checked out.

The params are checked in full before anything is touched, and `synth/`, `wide/` and
`prepared/` are built beside the old ones and swapped in only when the whole stage has succeeded
(`acesql.staging`): a bad config, a generator error or a kill leaves the old outputs as they were.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from contextlib import ExitStack
from pathlib import Path

from acesql.config import BaseSection, DataSection, SynthSection, WideSection
from acesql.data.filtering import filter_examples
from acesql.data.loaders import Example, load_dataset
from acesql.data.stats import distribution_figure, split_counts, wide_split_shape
from acesql.data.synth.generate import SynthConfig, generate_dataset
from acesql.errors import ConfigError, DataError
from acesql.stages.common import run_stage, write_metrics
from acesql.staging import replace_dir
from acesql.tracking import Tracker, flatten

SPLIT_NAMES = ("train", "dev", "test_ood")
WIDE_SPLITS = {"dev": "dev_wide", "test_ood": "test_wide"}  # wide/'s split -> prepared split
WIDE_DB_PREFIX = "wide_"  # its db_ids never meet synth/'s


def prepare_data(base: BaseSection, data: DataSection, tracker: Tracker) -> dict:
    """Run the stage's work inside an open tracker run; return the metrics written."""
    with ExitStack() as swaps:
        # Exits in reverse: wide/ and synth/ are swapped in first, then prepared/, if nothing
        # raised. wide/ is written (empty) when off too: DVC wants every out, and a stale wide
        # set must not outlive its params.
        prepared = swaps.enter_context(replace_dir(base.data_dir / "prepared"))
        generator = None
        if data.source == "synth":
            root = swaps.enter_context(replace_dir(base.data_dir / "synth"))
            generator = _generate(root, data.synth, base.seed)
        else:
            root = data.path
        wide_root = swaps.enter_context(replace_dir(base.data_dir / "wide"))
        wide, wide_splits = None, {}
        if data.wide is not None:
            generated = _generate_wide(wide_root, data.wide)
            wide_splits = _wide_splits(wide_root, base.data_dir / "wide")
            tables = json.loads((wide_root / "tables.json").read_text())
            shapes = {name: wide_split_shape(ex, tables) for name, ex in wide_splits.items()}
            wide = {**shapes, "generator": generated}
        splits = {
            name: load_dataset(root, data.source, getattr(data.splits, name)).examples
            for name in SPLIT_NAMES
            if getattr(data.splits, name) is not None
        }
        if data.source == "synth":
            splits = {n: _moved(ex, root, base.data_dir / "synth") for n, ex in splits.items()}
        before = len(splits["train"])
        splits["train"] = _filter(splits["train"], data, base.seed)
        splits = {name: examples for name, examples in splits.items() if examples}
        for name, examples in {**splits, **wide_splits}.items():
            _write_jsonl(prepared / f"{name}.jsonl", examples)
        figure = distribution_figure(splits)
        figure.savefig(prepared / "distribution.png", dpi=120)

    metrics = {
        "source": data.source,
        "splits": {name: split_counts(ex) for name, ex in {**splits, **wide_splits}.items()},
        "filtering": {"before": before, "after": len(splits["train"])},
    }
    if generator is not None:
        # The run time goes to MLflow only: in metrics.json it would change dvc.lock on every
        # rerun of byte-identical data.
        tracker.log_metrics({"generator.seconds": generator.pop("seconds")})
        metrics["generator"] = generator
    if wide is not None:
        tracker.log_metrics({"wide.generator.seconds": wide["generator"].pop("seconds")})
        metrics["wide"] = wide
    metrics_path = base.data_dir / "metrics.json"
    write_metrics(metrics_path, metrics, "data")

    numbers = {k: v for k, v in flatten(metrics).items() if isinstance(v, int | float)}
    tracker.log_metrics(numbers)
    tracker.log_artifact(base.data_dir / "prepared" / "distribution.png")
    tracker.log_artifact(metrics_path)
    return metrics


def _moved(examples: list[Example], staged: Path, final: Path) -> list[Example]:
    """The examples with database paths under `final`, where the staged folder is swapped to."""
    return [
        dataclasses.replace(e, db_path=str(final / Path(e.db_path).relative_to(staged)))
        for e in examples
    ]


def _generate(root: Path, synth: SynthSection, seed: int) -> dict:
    # Imported here: the generator is only needed for the synthetic source.

    config = SynthConfig(seed=seed, **synth.model_dump())
    try:
        return generate_dataset(root, config, progress=sys.stderr.isatty())
    except ConfigError as exc:
        raise ConfigError(f"data.synth: {exc}") from exc


def _generate_wide(root: Path, wide: WideSection) -> dict:

    config = SynthConfig(**wide.model_dump(), with_train=False, db_prefix=WIDE_DB_PREFIX)
    try:
        return generate_dataset(root, config, progress=sys.stderr.isatty())
    except ConfigError as exc:
        raise ConfigError(f"data.wide: {exc}") from exc


def _wide_splits(staged: Path, final: Path) -> dict[str, list[Example]]:
    """The wide set's non-empty splits under their prepared names, with paths under `final`."""
    splits = {
        name: _moved(load_dataset(staged, "synth", split).examples, staged, final)
        for split, name in WIDE_SPLITS.items()
    }
    return {name: examples for name, examples in splits.items() if examples}


def _filter(train: list[Example], data: DataSection, seed: int) -> list[Example]:
    if all(e.unusable for e in train):
        reasons = sorted({e.unusable for e in train})
        raise DataError(f"none of the {len(train)} train examples is usable ({reasons})")
    rules = data.filtering
    kept = filter_examples(train, rules.complexities, rules.max_per_db, rules.max_examples, seed)
    if not kept:
        present = sorted({e.complexity for e in train if e.unusable is None})
        raise ConfigError(
            f"data.filtering keeps none of the {len(train)} train examples "
            f"(complexities present among usable ones: {present}); relax data.filtering"
        )
    return kept


def _write_jsonl(path: Path, examples: list[Example]) -> None:
    with path.open("w") as fh:
        for example in examples:
            fh.write(json.dumps(example.to_dict(), ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    def work(sections, tracker):
        return prepare_data(sections["base"], sections["data"], tracker)

    def tags(sections):
        return {"source": sections["data"].source}

    run_stage("data", __doc__, ("base", "data"), work, argv, tags=tags)


if __name__ == "__main__":
    main()
