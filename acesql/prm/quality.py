"""How well a score model's scores order and match their labels: pure functions, no torch.

    auc(scores, positive)                 # any right record against any wrong one
    auc_within(scores, positive, groups)  # right against wrong of the same question only
    calibration(scores, labels)           # per score bin: mean score, mean label; the ECE

The `prm` stage reports them on held-out prefixes; an evaluation with `--selection prm`
reports `auc_within` on the candidates it scored (`acesql.eval.metrics`).
"""

from __future__ import annotations

CALIBRATION_BINS = 10


def auc(scores: list[float], positive: list[bool]) -> float | None:
    """The area under the ROC curve (ties count half); None without both classes.

    >>> auc([0.9, 0.8, 0.3, 0.1], [True, False, True, False])
    0.75
    """
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    if not pos or not neg:
        return None
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def auc_within(scores: list[float], positive: list[bool], groups: list) -> float | None:
    """The AUC over pairs from the same group only (a right and a wrong record of one
    question): what best-of-n needs, which never compares two questions. None without such
    a pair.

    >>> auc_within([0.9, 0.8, 0.3, 0.1], [True, False, True, False], ["a", "a", "b", "b"])
    1.0
    """
    wins = pairs = 0.0
    by_group: dict = {}
    for score, pos, group in zip(scores, positive, groups):
        by_group.setdefault(group, ([], []))[0 if pos else 1].append(score)
    for pos, neg in by_group.values():
        wins += sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
        pairs += len(pos) * len(neg)
    return wins / pairs if pairs else None


def calibration(scores: list[float], labels: list[float], bins: int = CALIBRATION_BINS) -> dict:
    """Per bin of scores: how many, the mean score and the mean label; and the expected
    calibration error (the bins' |score - label| weighted by their share).

    >>> c = calibration([0.05, 0.15, 0.95], [0.0, 1.0, 1.0], bins=2)
    >>> c["bins"], round(c["ece"], 4)
    ([{'n': 2, 'score': 0.1, 'label': 0.5}, {'n': 1, 'score': 0.95, 'label': 1.0}], 0.2833)
    """
    groups: list[list[tuple[float, float]]] = [[] for _ in range(bins)]
    for s, y in zip(scores, labels):
        groups[min(bins - 1, int(s * bins))].append((s, y))
    rows, ece = [], 0.0
    for g in groups:
        if not g:
            continue
        score = sum(s for s, _ in g) / len(g)
        label = sum(y for _, y in g) / len(g)
        rows.append({"n": len(g), "score": round(score, 4), "label": round(label, 4)})
        ece += len(g) / len(scores) * abs(score - label)
    return {"bins": rows, "ece": ece}
