"""Source filtering: complexity selection, per-database caps, round-robin total cap."""

from collections import Counter

import pytest

from acesql.data.filtering import filter_examples
from acesql.data.loaders import Example


def _examples(sizes: dict[str, int], levels=("simple", "complex")) -> list[Example]:
    """`sizes[db]` examples per database, complexities alternating through `levels`."""
    rows = []
    for db_id, n in sizes.items():
        for k in range(n):
            rows.append(
                Example(
                    len(rows), db_id, f"q{k}", "SELECT 1", "", complexity=levels[k % len(levels)]
                )
            )
    return rows


def _per_db(examples) -> dict[str, int]:
    return dict(sorted(Counter(e.db_id for e in examples).items()))


def test_no_rule_keeps_every_usable_example_in_order():
    rows = _examples({"a": 3, "b": 2})
    rows[1].unusable = "database missing"
    assert filter_examples(rows) == [rows[0], *rows[2:]]


def test_complexities_are_matched_case_insensitively():
    rows = _examples({"a": 4}, levels=("Simple", "Highly Complex"))
    kept = filter_examples(rows, complexities=["highly complex"])
    assert [e.complexity for e in kept] == ["Highly Complex"] * 2


def test_max_per_db_caps_each_database():
    rows = _examples({"a": 10, "b": 2, "c": 5})
    assert _per_db(filter_examples(rows, max_per_db=3)) == {"a": 3, "b": 2, "c": 3}


@pytest.mark.parametrize(
    "budget,expected",
    [
        (3, {"a": 1, "b": 1, "c": 1}),
        (7, {"a": 3, "b": 2, "c": 2}),  # b is exhausted; a and c share the rest
        (9, {"a": 5, "b": 2, "c": 2}),  # largest database absorbs what the others lack
        (100, {"a": 6, "b": 2, "c": 2}),
    ],
)
def test_max_examples_is_dealt_round_robin(budget, expected):
    rows = _examples({"a": 6, "b": 2, "c": 2})
    kept = filter_examples(rows, max_examples=budget)
    assert _per_db(kept) == expected and len(kept) == min(budget, 10)


def test_seven_over_three_databases_differs_by_at_most_one_or_exhaustion():
    rows = _examples({"a": 6, "b": 2, "c": 6})
    counts = _per_db(filter_examples(rows, max_examples=7))
    assert counts["b"] == 2 and sorted([counts["a"], counts["c"]]) == [2, 3]


def test_rules_compose_in_order():
    rows = _examples({"a": 8, "b": 8, "c": 1})
    kept = filter_examples(rows, complexities=["complex"], max_per_db=3, max_examples=4)
    assert all(e.complexity == "complex" for e in kept)
    assert _per_db(kept) == {"a": 2, "b": 2}  # c's one example is "simple"


def test_deterministic_under_seed_and_keeps_input_order():
    rows = _examples({"a": 20, "b": 20})
    first = filter_examples(rows, max_per_db=5, seed=7)
    assert first == filter_examples(rows, max_per_db=5, seed=7)
    assert first != filter_examples(rows, max_per_db=5, seed=8)
    assert [e.index for e in first] == sorted(e.index for e in first)


def test_nothing_kept_is_an_empty_list():
    assert filter_examples(_examples({"a": 2}), complexities=["challenging"]) == []
    assert filter_examples([], max_examples=3) == []


def test_a_larger_budget_keeps_every_question_of_a_smaller_one():
    # so an evaluation grown from --limit 160 to 240 takes the 160 rows it has
    rows = _examples({"a": 9, "b": 4, "c": 12, "d": 7})
    kept = [{e.index for e in filter_examples(rows, max_examples=n, seed=3)} for n in range(33)]
    assert all(smaller <= larger for smaller, larger in zip(kept, kept[1:]))
    assert [len(k) for k in kept] == list(range(33))
