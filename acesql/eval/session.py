"""One evaluation set-up, built from the `evaluate` params section, shared by the DVC stage
and `acesql eval`:

    with Evaluator(cfg, seed=0, reasoning=False, sample_values=0) as evaluator:
        summary = evaluator.evaluate(examples, dataset="data/prepared", split="dev", out=folder)

The model is loaded once in both roles (`cfg.generation` picks the engine), with the prompt
builder of its tokenizer and one SQL executor (`cfg.timeout_s`). `evaluate` scores a list of
questions: into a restartable result folder when `out` is given (`acesql.eval.runner`),
else in memory. `settings(cfg, ...)` is what decides the results, and so what a result folder's
resume fingerprint covers: the stage and the command line fingerprint alike.
"""

from __future__ import annotations

from pathlib import Path

from acesql.config import EvaluateSection
from acesql.data.loaders import Example
from acesql.eval.runner import CHUNK_SIZE, evaluate_in_memory, evaluate_to_folder


def settings(
    cfg: EvaluateSection,
    *,
    seed: int,
    reasoning: bool,
    sample_values: int,
    sql_format: str = "direct",
) -> dict:
    """`evaluate_examples`' options plus what else changes the rows (engine, prompts)."""
    named = {"sql_format": sql_format} if sql_format != "direct" else {}  # older folders resume
    return {
        **named,
        "mode": cfg.match_mode,
        "retriever_samples": cfg.retriever_samples,
        "vote_threshold": cfg.vote_threshold,
        "on_empty": cfg.on_empty_vote,
        "max_new_tokens": cfg.generation.max_new_tokens,
        "maj_k": cfg.maj_k,
        "maj_temperature": cfg.maj_temperature,
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
        *,
        seed: int = 0,
        reasoning: bool = False,
        sample_values: int = 0,
        sql_format: str = "direct",
        progress: bool = True,
    ):
        from acesql.models.base_model import load_tokenizer
        from acesql.models.engine import open_engine
        from acesql.models.prompts import PromptBuilder
        from acesql.sql.batch_executor import BatchExecutor

        self.cfg = cfg
        self.progress = progress
        self.settings = settings(
            cfg,
            seed=seed,
            reasoning=reasoning,
            sample_values=sample_values,
            sql_format=sql_format,
        )
        self.prompts = PromptBuilder(
            load_tokenizer(cfg.model), reasoning, sample_values, sql_format
        )
        self.engine = open_engine(cfg.generation, cfg.model)
        self.executor = BatchExecutor(timeout_s=cfg.timeout_s)

    def evaluate(
        self,
        examples: list[Example],
        *,
        dataset: str,
        split: str,
        out: str | Path | None = None,
        chunk_size: int = CHUNK_SIZE,
    ) -> dict:
        """The summary of `examples`; with `out`, also the result folder (resumed if killed)."""
        common = dict(model=self.cfg.model, dataset=dataset, split=split, settings=self.settings)
        if out is None:
            summary, _ = evaluate_in_memory(
                examples, self.engine, self.prompts, self.executor, **common
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
