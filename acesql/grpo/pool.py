"""The empirical column-set pool (the ACE-SQL paper, section 3.3.1.3).

Per question, a map from column set to weight. After each rollout every existing weight is
multiplied by gamma, then each set gets the number of this rollout's execution-correct
generator SQLs that used exactly it. The retriever's target S*(q) is the set (or the tied
sets) of maximal weight.

    pool = EmpiricalPool(gamma=0.5)
    pool.update("q1", [{"t.a", "t.b"}, {"t.a", "t.b"}, {"t.a"}])
    pool.targets("q1")  # [frozenset({"t.a", "t.b"})]
    pool.save("pool.json"); EmpiricalPool.load("pool.json")
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from acesql.errors import DataError

ColumnSet = frozenset[str]
_REL_TOL = 1e-9


def _key(columns: Iterable[str]) -> ColumnSet:
    return frozenset(columns)


class EmpiricalPool:
    """Column sets the generator executed correctly, per question, with decaying weights."""

    def __init__(self, gamma: float = 0.5):
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.gamma = gamma
        self._weights: dict[str, dict[ColumnSet, float]] = {}

    # -- updates ---------------------------------------------------------------------------

    def seed(self, question: str, matched_sets: Iterable[Iterable[str]]) -> None:
        """Start (or restart) a question's pool from counts alone: the initial rollout."""
        self._weights[question] = {}
        self._add(question, matched_sets)

    def update(self, question: str, matched_sets: Iterable[Iterable[str]]) -> list[ColumnSet]:
        """Decay every weight of the question by gamma, then add this rollout's counts.

        Returns the targets before the update, so callers can tell whether they changed.
        """
        before = self.targets(question)
        weights = self._weights.setdefault(question, {})
        for s in weights:
            weights[s] *= self.gamma
        self._add(question, matched_sets)
        return before

    def _add(self, question: str, matched_sets: Iterable[Iterable[str]]) -> None:
        weights = self._weights.setdefault(question, {})
        for s, n in Counter(_key(m) for m in matched_sets).items():
            weights[s] = weights.get(s, 0.0) + n

    # -- queries ---------------------------------------------------------------------------

    def __contains__(self, question: str) -> bool:
        return question in self._weights

    def __len__(self) -> int:
        return len(self._weights)

    def questions(self) -> list[str]:
        return list(self._weights)

    def weights(self, question: str) -> dict[ColumnSet, float]:
        return dict(self._weights.get(question, {}))

    def targets(self, question: str) -> list[ColumnSet]:
        """The sets of maximal (positive) weight, ties kept, in sorted order; [] if none."""
        weights = self._weights.get(question, {})
        top = max(weights.values(), default=0.0)
        if top <= 0:
            return []
        best = [s for s, w in weights.items() if math.isclose(w, top, rel_tol=_REL_TOL)]
        return sorted(best, key=sorted)

    def support(self, question: str) -> list[ColumnSet]:
        """Every set with a positive weight (the dense reward's B^q)."""
        return sorted((s for s, w in self._weights.get(question, {}).items() if w > 0), key=sorted)

    def stats(self) -> dict:
        """Questions with a target, distinct sets in all, and questions with tied targets."""
        with_target = [q for q in self._weights if self.targets(q)]
        return {
            "questions": len(self._weights),
            "with_target": len(with_target),
            "distinct_sets": sum(len(w) for w in self._weights.values()),
            "tied_targets": sum(len(self.targets(q)) > 1 for q in with_target),
        }

    # -- persistence -----------------------------------------------------------------------

    def to_dict(self) -> dict:
        """Canonical form: questions sorted, columns sorted, sets sorted."""
        return {
            "gamma": self.gamma,
            "questions": {
                q: {
                    "weights": sorted([sorted(s), w] for s, w in ws.items()),
                    "targets": [sorted(s) for s in self.targets(q)],
                }
                for q, ws in sorted(self._weights.items())
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> EmpiricalPool:
        try:
            pool = cls(gamma=float(data["gamma"]))
            for q, entry in data["questions"].items():
                pool._weights[q] = {_key(cols): float(w) for cols, w in entry["weights"]}
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"not an empirical pool ({type(e).__name__}: {e})") from e
        return pool

    def save(self, path: str | Path) -> None:
        """Canonical JSON, written atomically (a kill mid-write leaves the old file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> EmpiricalPool:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path} not found: the grpo_data stage writes the initial pool")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise DataError(f"{path} is not valid JSON: {e}") from e
        return cls.from_dict(data)


def replay(events: Iterable[dict], gamma: float = 0.5) -> EmpiricalPool:
    """Replay JSON-line events `{"question": q, "matched": [[col, ...], ...]}` into a pool.

    The first event of a question seeds it (the initial rollout); later ones update it.
    """
    pool = EmpiricalPool(gamma)
    for i, event in enumerate(events, 1):
        if not isinstance(event, dict) or "question" not in event or "matched" not in event:
            raise DataError(f"event {i}: expected an object with 'question' and 'matched'")
        matched = event["matched"]
        if not isinstance(matched, list) or not all(isinstance(m, list) for m in matched):
            raise DataError(f"event {i}: 'matched' must be a list of column lists")
        q = str(event["question"])
        if q in pool:
            pool.update(q, matched)
        else:
            pool.seed(q, matched)
    return pool
