"""The `prm` stage: the trajectory score model R_phi of Reward-SQL's process reward.

    python -m acesql.stages.prm [--params params.yaml]

Reads `base` and `prm`; `{data_dir}/prm/{train,held_out}.jsonl` (the prm_data stage's
labelled prefixes) and the causal LM `prm.base`. Trains a one-logit head and the model under
it with binary cross-entropy on the soft labels (`acesql.prm.model`). Writes
`{models_dir}/prm` (the score model: its own weights, separate from the policy),
`{models_dir}/prm_calibration.png` and `{models_dir}/prm_metrics.json` (losses; held-out
loss, AUC, expected calibration error and calibration curve, before and after), also logged
to MLflow.
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from acesql.data.loaders import parse_jsonl
from acesql.errors import DataError
from acesql.prm.model import train_prm
from acesql.stages.common import run_stage, write_metrics


def read_records(path: Path) -> list[dict]:
    if not path.is_file():
        raise DataError(f"no labelled prefixes at {path}: run the prm_data stage")
    return parse_jsonl(path.read_text().splitlines(), path)


def work(s: dict, tracker) -> dict:

    base, cfg = s["base"], s["prm"]
    if not Path(cfg.base).is_dir():
        raise DataError(f"{cfg.base} not found: run the base_model stage, or set prm.base")
    folder = base.data_dir / "prm"
    train, held_out = read_records(folder / "train.jsonl"), read_records(folder / "held_out.jsonl")
    labels = {record["sigma"] for record in train}
    if len(labels) == 1:
        (label,) = labels
        solved = "none" if label == 0 else "all" if label == 1 else "the same share"
        raise DataError(
            f"all {len(train)} train records of {folder} have sigma {label}: the policy solved "
            f"{solved} of its prefixes, and a score model trained on one label learns a "
            "constant. Label from a stronger cold start (prm_data.model), or with more "
            "prm_data.trajectories or max_questions"
        )
    bar = tqdm(desc="prm", unit="step")
    try:
        metrics = train_prm(
            cfg.base,
            train,
            held_out,
            cfg,
            base.models_dir / "prm",
            seed=base.seed,
            tracker=tracker,
            progress=bar.update,
        )
    finally:
        bar.close()
    figure = base.models_dir / "prm_calibration.png"
    plot_calibration(metrics, figure)
    write_metrics(base.models_dir / "prm_metrics.json", metrics, "prm")
    tracker.log_artifact(figure)
    return {
        k: v
        for k, v in metrics.items()
        if k not in ("losses", "calibration_before", "calibration_after")
    }


def plot_calibration(metrics: dict, path: Path) -> None:
    """Mean label against mean score per bin, before and after training, and the diagonal;
    each point's area grows with its bin's records, and the count is written beside it (a
    bin of one record moves the line as much as one of a hundred)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    ax.plot([0, 1], [0, 1], color="#999999", linewidth=1, label="calibrated")
    for when, color in (("before", "#e08a2c"), ("after", "#3b6fb6")):
        bins = metrics.get(f"calibration_{when}") or []
        if bins:
            ece = metrics.get(f"held_out_{when}/ece")
            xs, ys = [b["score"] for b in bins], [b["label"] for b in bins]
            ax.plot(xs, ys, color=color, linewidth=1, label=f"{when} training (ECE {ece})")
            top = max(b["n"] for b in bins)
            ax.scatter(xs, ys, s=[12 + 150 * b["n"] / top for b in bins], color=color, zorder=3)
            for x, y, b in zip(xs, ys, bins):
                ax.annotate(
                    str(b["n"]),
                    (x, y),
                    xytext=(4, -10),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                )
    ax.set_xlabel("R_phi score (bin mean)")
    ax.set_ylabel("Monte Carlo label sigma (bin mean)")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    run_stage("prm", __doc__, ("base", "prm"), work, argv)


if __name__ == "__main__":
    main()
