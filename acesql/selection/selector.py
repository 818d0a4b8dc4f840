"""The choice among one question's candidates, in one place: the `selection` section's method,
what the method needs beyond the candidates, and each question's choice.

    selector = Selector(section, mode="multiset", engine=engine)
    chosen = selector.choose(asked, sqls, results, completions)      # `acesql ask`: answer, why
    row.update(selector.fields(asked, sqls, verdicts, completions))  # evaluation's row fields

The methods (`SelectionSection.method`):

- `greedy`: the greedy answer, candidate 0; nothing is sampled;
- `maj`: the largest group of equal results (`acesql.sql.majority`);
- `r3`: R3-SQL's groupwise ranking (`acesql.ranker.select`) by the ranker's letter judge, read
  from the engine's model (`acesql.ranker.judge.LetterJudge`), with agentic resampling when
  `section.resample` (a resampler, given per question, draws the new candidates);
- `prm`: the candidate with the highest process reward (`acesql.prm.select`), scored by the
  process scorer of the prm model (`load_process_scorer`).

Evaluation, rescoring, `acesql ask` and serving ask a `Selector`; none of them reads
`section.method` itself. The judge is built on first use and kept: its cache of judgments
spans every question one selector is asked about. `choose` is `acesql ask`'s choice (with
r3, a pool of one result is its own answer, nothing is judged); `fields` is what an
evaluation row records of the method's choice, scored by the candidates' verdicts
(`acesql.selection.fields`: r3 writes pointwise best-of-n, ranking and, with resampling,
ranking after it; maj writes nothing beyond maj@n's fields, which every method with
candidates has).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from acesql.config import SelectionSection
from acesql.errors import ConfigError, DataError
from acesql.models.engine import Completion
from acesql.prm.select import ProcessScorer, best_of_n
from acesql.ranker.judge import Context, LetterJudge
from acesql.ranker.select import select_groupwise, select_with_resampling
from acesql.selection.fields import RENAMED_FIELDS, prm_fields, ranked_fields
from acesql.sql.majority import group_results, majority_vote
from acesql.sql.schema import Schema

METHODS: tuple[str, ...] = typing.get_args(SelectionSection.model_fields["method"].annotation)


@dataclass(frozen=True)
class Asked:
    """What a selection reads of one question beside its candidates."""

    context: Context  # the question, the schema text the generator saw, evidence
    db_path: str | Path
    schema: Schema | None = None  # the database's: prm's direct view rewrites against it


@dataclass
class Chosen:
    """One question's choice, for `acesql ask`."""

    index: int | None  # the chosen candidate (the first ones, then any drawn); None: none ran
    groups: list[dict] = field(default_factory=list)  # why, for --explain
    resampled: bool = False  # r3 with resampling: the auditor fired and more were drawn


class Selector:
    """`section`'s method, ready to choose: `mode` is the match mode that groups results,
    `engine` gives r3 its judge (or `judge`: one built elsewhere), `process_scorer` scores
    prm's candidates (`load_process_scorer`)."""

    def __init__(
        self,
        section: SelectionSection,
        *,
        mode: str = "multiset",
        engine=None,
        judge=None,
        process_scorer=None,
    ):
        way = _WAYS.get(section.method)
        if way is None:
            raise ConfigError(f"unknown selection method {section.method!r}: {' | '.join(METHODS)}")
        self.section, self.mode, self._way = section, mode, way
        self.engine, self._judge, self.process_scorer = engine, judge, process_scorer

    @classmethod
    def loaded(cls, section: SelectionSection, *, mode: str, engine, prompts, executor):
        """A selector with what its method needs loaded: prm's process scorer (its own model,
        its SQL run by `executor`), checked against what the policy writes (`prompts`)."""
        scorer = None
        if _WAYS[section.method].score_model:
            scorer = load_process_scorer(section, prompts.tokenizer, executor)
            scorer.require_format(prompts.sql_format)
        return cls(section, mode=mode, engine=engine, process_scorer=scorer)

    @property
    def method(self) -> str:
        return self.section.method

    @property
    def among_candidates(self) -> bool:
        """Whether it chooses among sampled candidates (every method but greedy)."""
        return self._way.sampled

    @property
    def samples(self) -> int:
        """Candidates sampled per question: `section.candidates`, 0 for greedy."""
        return self.section.candidates if self._way.sampled else 0

    @property
    def resamples(self) -> bool:
        """Whether it draws more candidates when its auditor finds none likely right."""
        return self._way.resampling and self.section.resample

    @property
    def judged(self) -> bool:
        """Whether its choice reads a model's judgments (r3, prm) and so writes row fields
        of its own beside maj@n's."""
        return self._way.judged

    @property
    def needs_score_model(self) -> bool:
        """Whether it needs a score model beside the policy (prm's process scorer)."""
        return self._way.score_model

    @property
    def answer_method(self) -> str:
        """Whose row fields are the pipeline's answer (`acesql.selection.answer`): the
        method's, `r3rs` after resampling."""
        return "r3rs" if self.resamples else self.method

    @property
    def judge(self):
        """r3's judge: the letter judge on the engine's model, built once."""
        if self._judge is None:
            if self.engine is None:
                raise ConfigError("selection r3 needs the engine whose model judges")
            self._judge = LetterJudge(self.engine.model, self.engine.tokenizer)
        return self._judge

    @property
    def scorer(self):
        """prm's process scorer."""
        if self.process_scorer is None:
            raise ConfigError("selection prm needs the process scorer (the prm model)")
        return self.process_scorer

    def check_engine(self, engine: str) -> None:
        """ConfigError when the engine named (`generation.engine`) cannot serve the method."""
        if self._way.next_token and engine != "transformers":
            raise ConfigError(
                "selection.method r3 reads the ranker's judgments from the model's next-token "
                "probabilities: set evaluate.generation.engine to transformers"
            )

    def check_format(self, sql_format: str) -> None:
        """ConfigError unless the method can read what a policy writing `sql_format` writes:
        prm's process scorer must be there, trained on that format."""
        if self._way.score_model:
            self.scorer.require_format(sql_format)

    def check_stored(self) -> None:
        """ConfigError unless the method can score stored candidates (only their SQL kept):
        prm needs a score model of the direct view."""
        if self._way.score_model and getattr(self.process_scorer, "view", None) != "direct":
            raise ConfigError(
                "PRM best-of-n on stored candidates needs a score model of the direct view "
                "(prm_data.sql_format: direct): the rows keep SQL, not chains with their tokens"
            )

    def check_rescoring_into(self, out: Path, source: Path) -> None:
        """DataError when rescoring `source`'s stored candidates into `out` would destroy
        them: `out` is the source itself, or a folder whose finished rows keep candidates
        (`r3_candidates`) that this method would not write again (only r3 keeps them)."""
        if out.resolve() == source.resolve():
            raise DataError(
                f"--out {out} is the folder whose candidates are rescored: its rows would be "
                "rewritten without them; give --out another folder"
            )
        rows = out / "rows.jsonl"
        keeps = self.method == "r3"
        if rows.is_file() and not keeps and _keeps_candidates(rows.read_text(errors="replace")):
            raise DataError(
                f"{out} holds stored candidates (rows with r3_candidates) that a {self.method} "
                "rescoring would drop: give --out another folder"
            )

    def choose(
        self,
        asked: Asked,
        sqls: list[str],
        results: list,
        completions: list | None = None,
        resample: Callable | None = None,
        say: Callable[[str], None] = lambda step: None,
    ) -> Chosen:
        """The chosen candidate among `sqls` (their `results` run), and why. `completions`:
        the generations (prm weighs their tokens); `resample(m)`: m new candidates as a
        `acesql.ranker.select.Drawn` (r3 with resampling); `say`: told when ranking starts."""
        return self._way.choose(self, asked, sqls, results, completions, resample, say)

    def fields(
        self,
        asked: Asked,
        sqls: list[str],
        verdicts: list,
        completions: list | None = None,
        resample: Callable | None = None,
    ) -> dict:
        """The method's row fields for one question, scored by its candidates' verdicts
        (`acesql.selection.fields`); `resample(m)`: m new candidates as (SQL, verdicts,
        context or None), r3 with resampling. `completions` None: the SQL alone (stored
        candidates)."""
        return self._way.fields(self, asked, sqls, verdicts, completions, resample)

    def rewards(self, asked: Asked, sqls: list[str], completions: list | None) -> list:
        """prm: each candidate's process reward (None where it cannot be scored)."""
        if completions is None:
            completions = [Completion(sql, [], [], "stop") for sql in sqls]
        context = asked.context
        return self.scorer.rewards(
            context.question,
            context.schema,
            context.evidence,
            asked.db_path,
            completions,
            schema=asked.schema,
        )


def _keeps_candidates(rows: str) -> bool:
    """Whether rows.jsonl's text holds stored candidates (under their old name too)."""
    names = [old for old, new in RENAMED_FIELDS.items() if new == "r3_candidates"]
    return any(f'"{name}"' in rows for name in ("r3_candidates", *names))


def load_process_scorer(section: SelectionSection, tokenizer, executor) -> ProcessScorer:
    """prm's process scorer: the score model at `section.prm_model`, weighting steps by the
    policy's `tokenizer`, running prefixes with `executor`."""
    from acesql.prm.model import TrajectoryScorer  # torch and the model code, for prm only

    if not Path(section.prm_model).is_dir():
        raise ConfigError(f"selection.prm_model: {section.prm_model} not found: run the prm stage")
    return ProcessScorer(TrajectoryScorer.load(section.prm_model), tokenizer, executor)


class _Way:
    """One method: its choice (`acesql ask`) and its row fields (evaluation)."""

    sampled = True  # chooses among sampled candidates
    judged = False  # reads a model's judgments, and writes fields of its own
    resampling = False  # may draw more candidates (with `section.resample`)
    next_token = False  # reads next-token probabilities: the transformers engine
    score_model = False  # needs a score model beside the policy

    def choose(self, s: Selector, asked, sqls, results, completions, resample, say) -> Chosen:
        return _voted(sqls, results, s.mode)  # the largest group of equal results

    def fields(self, s: Selector, asked, sqls, verdicts, completions, resample) -> dict:
        return {}  # maj@n's fields are written for every method with candidates


class _Majority(_Way):
    """maj@n: `_Way`'s choice; its fields are maj@n's own."""


class _Greedy(_Way):
    sampled = False

    def choose(self, s, asked, sqls, results, completions, resample, say) -> Chosen:
        return Chosen(0 if sqls[0] else None)


class _Ranked(_Way):
    judged = resampling = next_token = True

    def choose(self, s, asked, sqls, results, completions, resample, say) -> Chosen:
        if len(group_results(sqls, results, s.mode)) <= 1 and not s.resamples:
            # one result among the candidates leaves nothing to rank: it is the answer
            return _voted(sqls, results, s.mode)
        say("ranking")
        section, judge, context = s.section, s.judge, asked.context
        kept = list(range(len(sqls)))  # the pool ranked, as indices over every candidate
        fired = False
        if s.resamples:
            out = select_with_resampling(
                context,
                sqls,
                results,
                judge,
                resample,
                section.resample_candidates,
                section.audit_threshold,
                s.mode,
                section.tau,
                section.resample_ranked,
            )
            choice, fired, kept = out.choice, out.fired, out.kept
        else:
            choice = select_groupwise(context, sqls, results, judge, s.mode, section.tau)
        groups = [
            {
                "members": [kept[i] for i in g.members],
                "preference": g.preference,
                "utility": round(g.utility, 4),
                "best": kept[g.best],
                "empty_result": empty,
            }
            for g, empty in zip(choice.ranked, choice.empty)
        ]
        return Chosen(choice.index, groups, fired)

    def fields(self, s, asked, sqls, verdicts, completions, resample) -> dict:
        resample = resample if s.resamples else None
        return ranked_fields(asked.context, sqls, verdicts, s.judge, s.mode, s.section, resample)


class _Process(_Way):
    judged = score_model = True

    def choose(self, s, asked, sqls, results, completions, resample, say) -> Chosen:
        rewards = s.rewards(asked, sqls, completions)
        groups = [
            {"members": [i], "process_reward": None if r is None else round(r, 4)}
            for i, r in sorted(enumerate(rewards), key=lambda x: -(x[1] or -1.0))
        ]
        return Chosen(best_of_n(rewards), groups)

    def fields(self, s, asked, sqls, verdicts, completions, resample) -> dict:
        return prm_fields(sqls, verdicts, s.rewards(asked, sqls, completions), s.mode)


def _voted(sqls: list[str], results: list, mode: str) -> Chosen:
    """maj@n's choice, with its groups of equal results."""
    groups = group_results(sqls, results, mode)
    return Chosen(
        majority_vote(sqls, results, mode).winner,
        [{"members": g, "size": len(g)} for g in groups],
    )


_WAYS: dict[str, _Way] = {
    "greedy": _Greedy(),
    "maj": _Majority(),
    "r3": _Ranked(),
    "prm": _Process(),
}
