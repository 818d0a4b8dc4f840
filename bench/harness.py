"""What the benchmarks share: the model to run, a timed call, a timed generation, and the
table and JSON line each prints.

Every benchmark here runs its variants in one process, after a warm-up, so that a ratio
compares like with like on whatever else the machine is doing; it prints a table of the runs
with their ratio to the first (the baseline), then one JSON line with every number.

    from harness import model_or_tiny, report, timed_generation
    runs = {name: timed_generation(engine, prompts, max_new_tokens=32)[0] for name in ...}
    report(runs, "tokens_per_s", header="model m, 8 prompts", extra={"model": "m"})
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable


def model_or_tiny(model_dir: str | None, scratch: str) -> str:
    """`model_dir`, or a tiny random model built in `scratch` when it is None."""
    if model_dir is not None:
        return model_dir
    from acesql.models.tiny import build_tiny_model

    return build_tiny_model(scratch)


def timed(run: Callable[[], object]) -> tuple[object, float]:
    """`run()`'s result and its wall time in seconds."""
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def timed_generation(
    engine, prompts: list[str], outer=contextlib.nullcontext, **options
) -> tuple[dict, list[list[int]]]:
    """One `engine.generate(prompts, **options)` inside `outer()`: its tokens, seconds and
    tokens/s (the tokens the completions keep), and each completion's token ids."""
    with outer():
        groups, seconds = timed(lambda: engine.generate(prompts, **options))
    tokens = [list(c.token_ids) for group in groups for c in group]
    count = sum(len(t) for t in tokens)
    seconds = max(seconds, 1e-9)  # a clock that did not tick
    row = {"tokens": count, "seconds": round(seconds, 3), "tokens_per_s": round(count / seconds, 2)}
    return row, tokens


def ratios(runs: dict[str, dict], key: str, baseline: str | None = None) -> dict[str, float]:
    """Each run's `key` over the baseline's (the first run by default), as `<run>_vs_<base>`.

    >>> ratios({"a": {"t": 2.0}, "b": {"t": 5.0}}, "t")
    {'b_vs_a': 2.5}
    """
    baseline = baseline or next(iter(runs))
    base = runs[baseline][key]
    return {f"{n}_vs_{baseline}": round(r[key] / base, 2) for n, r in runs.items() if n != baseline}


def table(runs: dict[str, dict], key: str, baseline: str | None = None) -> str:
    """The runs as a text table: their numeric fields, then `key` over the baseline's.

    >>> print(table({"fp32": {"tokens": 8, "seconds": 4.0}, "bf16": {"tokens": 8, "seconds": 1.0}},
    ...             "seconds"))
    run   tokens  seconds  vs fp32
    fp32       8     4.00    1.00x
    bf16       8     1.00    0.25x
    """
    baseline = baseline or next(iter(runs))
    fields = [k for k, v in runs[baseline].items() if isinstance(v, int | float)]
    width = max(len("run"), *(len(n) for n in runs))
    cells = [
        [f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in fields]
        for r in runs.values()
    ]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(fields)]
    head = f"vs {baseline}"
    lines = ["  ".join([f"{'run':<{width}}", *(f"{k:>{w}}" for k, w in zip(fields, widths)), head])]
    for (name, run), row in zip(runs.items(), cells):
        ratio = f"{run[key] / runs[baseline][key]:.2f}x"
        lines.append(
            "  ".join(
                [
                    f"{name:<{width}}",
                    *(f"{c:>{w}}" for c, w in zip(row, widths)),
                    f"{ratio:>{len(head)}}",
                ]
            )
        )
    return "\n".join(lines)


def report(
    runs: dict[str, dict],
    key: str,
    header: str,
    extra: dict | None = None,
    baseline: str | None = None,
) -> dict:
    """Print `header`, the table of `runs` and the JSON line (`extra`, the runs, the ratios of
    `key`); return what the JSON line holds."""
    numbers = {**(extra or {}), **runs, **ratios(runs, key, baseline)}
    print(header)
    print(table(runs, key, baseline))
    print(json.dumps(numbers))
    return numbers
