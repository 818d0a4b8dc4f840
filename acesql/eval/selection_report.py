"""Every selection of one evaluation against its maj@n, on the same candidates:
`acesql eval --selections RUN`.

    print(selection_report(load_rows("results/heldout/prm-test_ood")))

An evaluation with candidates (`--selection maj | r3 | prm`) scores, per question, several
ways of choosing among the same n samples (`acesql.selection.fields`). Because they share the
candidates, their differences are paired by construction: this table puts each beside maj@n
(the ACE-SQL paper's test-time scaling) with the 95% bootstrap interval of the difference,
the discordant counts and the exact McNemar p-value (`acesql.paired`), and each one's
accuracy on the questions whose pool holds a correct candidate (`given recall`: what the
selection itself is worth, apart from what the sampling found). Questions without candidates
(unusable ones) are left out. A selection that some rows lack (a resumed run whose first rows
were written before it existed) is compared on the rows that have it, their count shown.
"""

from __future__ import annotations

from collections import Counter

from acesql.paired import paired_difference

BASELINE = ("maj_match", "maj@n")
LABEL = 30  # width of the first column
# row field -> label: the other ways of answering, in the order the table shows them
SELECTIONS = (
    ("pipeline_match", "greedy pipeline"),
    ("point_match", "pointwise best-of-n"),
    ("r3_match", "r3 ranking"),
    ("r3rs_match", "r3 + resampling"),
    ("prm_match", "PRM best-of-n"),
    ("prm_vote_match", "PRM-weighted vote"),
    ("oracle_match", "any candidate right"),
)


def selection_report(splits: dict[str, list[dict]]) -> str:
    """Per split, each selection found in the rows against maj@n (see the module doc);
    empty when no row has candidates."""
    blocks = []
    for split, rows in splits.items():
        rows = [r for r in rows if r.get(BASELINE[0]) is not None]
        if rows:
            blocks.append(_split_table(split, rows))
    return "\n\n".join(blocks)


def _split_table(split: str, rows: list[dict]) -> str:
    k = rows[0].get("candidates", "n")
    lines = [
        f"{split}: {len(rows)} questions, {k} candidates each; paired against maj@n",
        f"{'':<{LABEL}}{'EX':>7}{'- maj@n':>9}{'95% interval':>18}{'maj only':>10}"
        f"{'it only':>9}{'McNemar p':>11}{'given recall':>14}",
        _line(BASELINE[1], rows, BASELINE[0], None),
    ]
    for field, label in SELECTIONS:
        # rows written before a field existed lack it: such a selection is paired with
        # maj@n on the questions it scored, their count beside its name
        scored = [r for r in rows if r.get(field) is not None]
        if scored:
            label = label.replace("-n", f"-{k}")
            if len(scored) < len(rows):
                label += f" ({len(scored)} q)"
            lines.append(_line(label, scored, field, BASELINE[0]))
    notes = [note for note in (_recall(rows), _decisions(rows)) if note]
    return "\n".join([*lines, *notes])


def _recall(rows: list[dict]) -> str:
    """Candidate recall of the first pool against the pool ranked after resampling, paired,
    with what the resampling cost (rows that resampled)."""
    resampled = [r for r in rows if r.get("r3rs_oracle") is not None]
    if not resampled:
        return ""
    first = [bool(r.get("oracle_match")) for r in resampled]
    after = [bool(r["r3rs_oracle"]) for r in resampled]
    paired = paired_difference(first, after)
    fired = [r for r in resampled if r.get("r3rs_fired")]
    recorded = [r for r in fired if "r3rs_drawn_oracle" in r]  # rows written since it exists
    drawn = sum(bool(r["r3rs_drawn_oracle"]) for r in recorded)
    of = "" if len(recorded) == len(fired) else f" of the {len(recorded)} that record it"
    generated = sum(r.get("r3rs_generated", 0) for r in resampled) / len(resampled)
    return (
        f"recall, {len(resampled)} questions: first pool {100 * sum(first) / len(first):.1f}%, "
        f"ranked after resampling {100 * sum(after) / len(after):.1f}%: "
        f"{100 * paired.diff:+.1f} [{100 * paired.low:+.1f}, {100 * paired.high:+.1f}] "
        f"(lost {paired.only_a}, gained {paired.only_b}, p {paired.p_value:.3g}); "
        f"resampling fired on {len(fired)}, its new candidates alone held a right one on "
        f"{drawn}{of}; {generated:.1f} candidates generated per question"
    )


def _decisions(rows: list[dict]) -> str:
    """What put r3's answer first on the questions with several groups (rows that record it)."""
    several = [r for r in rows if r.get("r3_ties") is not None and r.get("r3_judged_pairs")]
    if not several:
        return ""
    by = Counter(r["r3_decided_by"] for r in several)
    pairs = sum(r["r3_judged_pairs"] for r in several)
    ties = sum(r["r3_ties"] for r in several)
    return (
        f"r3's top group, {len(several)} questions with several groups: by preference "
        f"{by['preference']}, by utility {by['utility']}, by sampling order {by['order']}; "
        f"{ties} of {pairs} judged pairs were ties"
    )


def _line(label, rows, field, baseline) -> str:
    mine = [bool(r.get(field)) for r in rows]
    share = f"{100 * sum(mine) / len(mine):>6.1f}%"
    recalled = [r for r in rows if r.get("oracle_match")]
    given = (
        f"{sum(bool(r.get(field)) for r in recalled)}/{len(recalled)}"
        if recalled and field != "oracle_match"
        else ""
    )
    if baseline is None:
        return f"{label:<{LABEL}}{share}{'':>57}{given:>14}"
    r = paired_difference([bool(x.get(baseline)) for x in rows], mine)
    interval = f"[{100 * r.low:+.1f}, {100 * r.high:+.1f}]"
    return (
        f"{label:<{LABEL}}{share}{100 * r.diff:>+9.1f}{interval:>18}{r.only_a:>10}"
        f"{r.only_b:>9}{r.p_value:>11.3g}{given:>14}"
    )
