"""One evaluation set-up, built from the `evaluate` params section, shared by the DVC stage
and `acesql eval`:

    with Evaluator(cfg, selection, seed=0, reasoning=False, sample_values=0) as evaluator:
        summary = evaluator.evaluate(examples, dataset="data/prepared", split="dev", out=folder)

The model is loaded once in both roles (`cfg.generation` picks the engine), with the prompt
builder of its tokenizer and one SQL executor (`cfg.timeout_s`); `selection` (the `selection`
params section) says how many candidates are sampled and chosen among. `evaluate` scores a list of
questions: into a restartable result folder when `out` is given (`acesql.eval.runner`),
else in memory. `settings(cfg, ...)` is what decides the results, and so what a result folder's
resume fingerprint covers: the stage and the command line fingerprint alike.

With `candidates_from` (the folder of an earlier `--selection r3` evaluation), nothing is
generated: that run's candidates are scored again, judged by this model
(`acesql.eval.rescore`). While that run is unfinished, its rows so far are scored and the
result folder stays unfinished too; run the same command again later and it goes on.
"""

from __future__ import annotations

from pathlib import Path

from acesql.config import EvaluateSection, SelectionSection
from acesql.data.loaders import Example
from acesql.errors import ConfigError, DataError
from acesql.eval.compare import load_rows
from acesql.eval.rescore import matching_examples
from acesql.eval.runner import (
    CHUNK_SIZE,
    evaluate_in_memory,
    evaluate_to_folder,
    model_digest,
    read_unfinished,
)
from acesql.models.base_model import load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.selection.selector import Selector
from acesql.sql.batch_executor import BatchExecutor


def settings(
    cfg: EvaluateSection,
    selection: SelectionSection | None = None,
    *,
    seed: int,
    reasoning: bool,
    sample_values: int,
    sql_format: str = "direct",
    candidates_from: str | Path | None = None,
) -> dict:
    """`evaluate_examples`' options plus what else changes the rows (engine, prompts, the
    stored candidates rescored). The `selection` section travels whole, as the code runs it
    (its score model by content); keys only a non-default choice needs are left out when
    unused."""
    selection = selection or SelectionSection()
    named = {"sql_format": sql_format} if sql_format != "direct" else {}
    if cfg.unclosed_list != "reject":
        named["unclosed_list"] = cfg.unclosed_list
    named["selection"] = selection.model_dump(mode="json")
    selector = Selector(selection)
    if selector.needs_score_model:
        named["selection"]["prm_model"] = model_digest(selection.prm_model)
    if candidates_from is not None:
        named["candidates_from"] = str(Path(candidates_from).resolve())
    return {
        **named,
        "mode": cfg.match_mode,
        "retriever_samples": cfg.retriever_samples,
        "vote_threshold": cfg.vote_threshold,
        "on_empty": cfg.on_empty_vote,
        "max_new_tokens": cfg.generation.max_new_tokens,
        "candidates": selector.samples,
        "maj_temperature": selection.temperature,
        "seed": seed,
        "engine": cfg.generation.model_dump(mode="json"),
        "reasoning": reasoning,
        "sample_values": sample_values,
    }


class Evaluator:
    """The model at `cfg.model` in both roles, ready to score question lists."""

    def __init__(
        self,
        cfg: EvaluateSection,
        selection: SelectionSection | None = None,
        *,
        seed: int = 0,
        reasoning: bool = False,
        sample_values: int = 0,
        sql_format: str = "direct",
        progress: bool = True,
        candidates_from: str | Path | None = None,
    ):

        self.cfg = cfg
        self.progress = progress
        self.candidates_from = candidates_from
        selection = selection or SelectionSection()
        if candidates_from is not None and not Selector(selection).among_candidates:
            raise ConfigError(
                "rescoring stored candidates scores a selection among them: pass "
                "--selection maj, r3 or prm"
            )
        Selector(selection).check_engine(cfg.generation.engine)
        self.settings = settings(
            cfg,
            selection,
            seed=seed,
            reasoning=reasoning,
            sample_values=sample_values,
            sql_format=sql_format,
            candidates_from=candidates_from,
        )
        self.prompts = PromptBuilder(
            load_tokenizer(cfg.model), reasoning, sample_values, sql_format
        )
        self.engine = open_engine(cfg.generation, cfg.model)
        self.executor = BatchExecutor(timeout_s=cfg.timeout_s)
        # the selection's judge or process scorer, built once for every part evaluated
        selector = Selector.loaded(
            selection,
            mode=cfg.match_mode,
            engine=self.engine,
            prompts=self.prompts,
            executor=self.executor,
        )
        self.tools: dict = {"selector": selector}
        if candidates_from is not None:
            self.tools["stored"] = stored_candidates(str(candidates_from))

    def evaluate(
        self,
        examples: list[Example],
        *,
        dataset: str,
        split: str,
        out: str | Path | None = None,
        chunk_size: int = CHUNK_SIZE,
    ) -> dict:
        """The summary of `examples`; with `out`, also the result folder (resumed if killed).
        When rescoring, the questions without stored candidates are left out."""
        growing = None
        if self.candidates_from is not None:
            source = str(self.candidates_from)
            if out is not None:
                self.tools["selector"].check_rescoring_into(Path(out), Path(source))
            if read_unfinished(source) is not None:
                growing = examples
            examples = matching_examples(examples, self.tools["stored"], source)
        common = dict(model=self.cfg.model, dataset=dataset, split=split, settings=self.settings)
        if out is None:
            summary, _ = evaluate_in_memory(
                examples, self.engine, self.prompts, self.executor, tools=self.tools, **common
            )
        else:
            summary, _ = evaluate_to_folder(
                examples,
                self.engine,
                self.prompts,
                self.executor,
                out,
                chunk_size=chunk_size,
                progress=self.progress,
                tools=self.tools,
                growing=growing,
                **common,
            )
        return summary

    def close(self) -> None:
        self.executor.close()
        self.engine.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stored_candidates(folder: str) -> dict[int, dict]:
    """The rows of an r3 evaluation in `folder` (finished or not), by question index."""

    splits = load_rows(folder)
    if len(splits) != 1:
        found = ", ".join(splits) or "none"
        raise DataError(f"{folder}: expected the rows of one evaluation, found splits: {found}")
    (rows,) = splits.values()
    stored = {r["index"]: r for r in rows if r.get("r3_candidates") is not None}
    for index, row in stored.items():
        kept, match = row.get("r3_candidates"), row.get("r3_candidates_match")
        if not isinstance(kept, list) or not isinstance(match, list) or len(kept) != len(match):
            raise DataError(
                f"{folder} question {index}: its stored candidates need r3_candidates and "
                "r3_candidates_match lists of one length (a row cut or edited by hand?)"
            )
    if not stored:
        raise DataError(
            f"{folder} holds no stored candidates: evaluate with --selection r3 and --out "
            "(rows written before candidates were kept cannot be rescored)"
        )
    return stored
