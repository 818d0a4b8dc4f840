"""Highly complex shapes: CTEs, window functions, three-hop joins, nested aggregates."""

from acesql.data.synth.shapes.base import CATEGORICAL, DATES, NUMERIC, shape


@shape(
    "cte_above_average_total",
    "cte",
    "highly complex",
    [
        "Which {parents} have a total {num} of their {things} above the average total per {parent}? Give the {plabel}.",
        "List the {plabel} of {parents} whose {things} add up to more {num} than the typical {parent}.",
        "Show {parents} whose summed {num} over their {things} beats the average of those sums.",
        "Find the {parents} with an above-average total {num} across their {things}; report the {plabel}.",
    ],
)
def cte_above_average_total(c):
    child, fk, parent = c.edge(child=c.table(c.has(NUMERIC)))
    n = c.col(child, NUMERIC)
    sql = (
        f"WITH totals AS (SELECT {c.q(fk)} AS pid, SUM({c.q(n)}) AS total FROM {c.q(child)} "
        f"GROUP BY {c.q(fk)}) SELECT T2.{c.q(parent.label)} FROM totals AS T1 "
        f"JOIN {c.q(parent)} AS T2 ON T1.pid = T2.{c.q(parent.pk)} "
        f"WHERE T1.total > (SELECT AVG(total) FROM totals)"
    )
    return sql, {**c.edge_words(child, fk, parent), "num": c.said(n)}


@shape(
    "window_rank",
    "window",
    "highly complex",
    [
        "Rank the {things} by {num} within each {attr}, showing {label}, {attr} and rank.",
        "For each {attr}, order its {things} by {num} from highest and number them; show {label} and the rank.",
        "Give every {thing}'s {label}, its {attr}, and its {num} rank inside that {attr}.",
        "Within every {attr} group, what rank does each {thing} have by {num}? List {label}, {attr}, rank.",
    ],
)
def window_rank(c):
    t = c.table(lambda t: c.cols(t, CATEGORICAL) and c.cols(t, NUMERIC))
    a, n = c.col(t, CATEGORICAL, exclude=[t.label]), c.col(t, NUMERIC)
    sql = (
        f"SELECT {c.q(t.label)}, {c.q(a)}, RANK() OVER (PARTITION BY {c.q(a)} "
        f"ORDER BY {c.q(n)} DESC) AS rnk FROM {c.q(t)}"
    )
    return sql, dict(
        things=c.things(t), thing=c.thing(t), label=c.said(t.label), attr=c.said(a), num=c.said(n)
    )


@shape(
    "window_top_per_group",
    "window",
    "highly complex",
    [
        "For each {attr}, which {thing} has the highest {num}? Show the {attr} and the {label}.",
        "Find the {thing} with the top {num} in every {attr}; list {attr} and {label}.",
        "Per {attr}, name the {thing} whose {num} is largest.",
        "Show, for every {attr}, the {label} of the {thing} leading on {num}.",
    ],
)
def window_top_per_group(c):
    t = c.table(lambda t: c.cols(t, CATEGORICAL) and c.cols(t, NUMERIC))
    a, n = c.col(t, CATEGORICAL, exclude=[t.label]), c.col(t, NUMERIC)
    sql = (
        f"WITH ranked AS (SELECT {c.q(a)} AS grp, {c.q(t.label)} AS item, ROW_NUMBER() "
        f"OVER (PARTITION BY {c.q(a)} ORDER BY {c.q(n)} DESC, {c.q(t.pk)}) AS rn "
        f"FROM {c.q(t)} WHERE {c.q(n)} IS NOT NULL) SELECT grp, item FROM ranked WHERE rn = 1"
    )
    return sql, dict(thing=c.thing(t), label=c.said(t.label), attr=c.said(a), num=c.said(n))


@shape(
    "running_total",
    "window",
    "highly complex",
    [
        "Show the running total of {num} over {things} ordered by {date}.",
        "List each {thing}'s {date} and the cumulative {num} up to it.",
        "Give the cumulative sum of {num} across {things} in order of {date}.",
        "Track how the total {num} grows over time by {date} for the {things}.",
    ],
)
def running_total(c):
    t = c.table(lambda t: c.cols(t, DATES) and c.cols(t, NUMERIC))
    d, n = c.col(t, DATES), c.col(t, NUMERIC)
    sql = (
        f"SELECT {c.q(d)}, SUM({c.q(n)}) OVER (ORDER BY {c.q(d)}, {c.q(t.pk)}) AS running "
        f"FROM {c.q(t)} WHERE {c.q(d)} IS NOT NULL ORDER BY {c.q(d)}, {c.q(t.pk)}"
    )
    return sql, dict(things=c.things(t), thing=c.thing(t), date=c.said(d), num=c.said(n))


@shape(
    "previous_difference",
    "window",
    "highly complex",
    [
        "For each {thing} in order of {date}, how much did {num} change from the previous one?",
        "Show {label}, {num} and the difference to the previous {thing}'s {num}, ordered by {date}.",
        "List the change in {num} between consecutive {things} sorted by {date}.",
        "By {date}, compare every {thing}'s {num} with the one before it; show the difference.",
    ],
)
def previous_difference(c):
    t = c.table(lambda t: c.cols(t, DATES) and c.cols(t, NUMERIC))
    d, n = c.col(t, DATES), c.col(t, NUMERIC)
    sql = (
        f"SELECT {c.q(t.label)}, {c.q(n)}, {c.q(n)} - LAG({c.q(n)}) OVER (ORDER BY {c.q(d)}, "
        f"{c.q(t.pk)}) AS change FROM {c.q(t)} WHERE {c.q(d)} IS NOT NULL "
        f"ORDER BY {c.q(d)}, {c.q(t.pk)}"
    )
    return sql, dict(
        thing=c.thing(t), things=c.things(t), label=c.said(t.label), date=c.said(d), num=c.said(n)
    )


@shape(
    "three_hop_count",
    "join",
    "highly complex",
    [
        "For each {top}, how many {things} are there through its {mids} and {mids2}? Show the {tlabel}.",
        "Count the {things} per {top}, following {things} to {mids2}, {mids2} to {mids} and {mids} to {tops}.",
        "Show every {top}'s {tlabel} with the number of {things} linked to it via {mids2} and {mids}.",
        "How many {things} does each {top} reach through its {mids} and their {mids2}? Give the {tlabel}.",
    ],
)
def three_hop_count(c):
    (t0, fk1, t1), (_, fk2, t2), (_, fk3, t3) = c.chain(3)
    sql = (
        f"SELECT T4.{c.q(t3.label)}, COUNT(*) FROM {c.q(t0)} AS T1 "
        f"JOIN {c.q(t1)} AS T2 ON T1.{c.q(fk1)} = T2.{c.q(t1.pk)} "
        f"JOIN {c.q(t2)} AS T3 ON T2.{c.q(fk2)} = T3.{c.q(t2.pk)} "
        f"JOIN {c.q(t3)} AS T4 ON T3.{c.q(fk3)} = T4.{c.q(t3.pk)} "
        f"GROUP BY T4.{c.q(t3.pk)}"
    )
    return sql, dict(
        things=c.things(t0),
        mids2=c.things(t1),
        mids=c.things(t2),
        top=c.thing(t3),
        tops=c.things(t3),
        tlabel=c.said(t3.label),
    )


@shape(
    "two_hop_group_having",
    "join",
    "highly complex",
    [
        "Which {tops} have more than {k} {things} through their {mids}? Give the {tlabel}.",
        "List the {tlabel} of {tops} reached by over {k} {things} via {mids}.",
        "Show {tops} with more than {k} {things} linked through {mids}.",
        "Find each {top} whose {mids} together hold more than {k} {things}; report the {tlabel}.",
    ],
)
def two_hop_group_having(c):
    (t0, fk1, t1), (_, fk2, t2) = c.chain(2)
    k = max(1, len(t0.pk.values) // max(1, len(t2.pk.values)))
    sql = (
        f"SELECT T3.{c.q(t2.label)} FROM {c.q(t0)} AS T1 "
        f"JOIN {c.q(t1)} AS T2 ON T1.{c.q(fk1)} = T2.{c.q(t1.pk)} "
        f"JOIN {c.q(t2)} AS T3 ON T2.{c.q(fk2)} = T3.{c.q(t2.pk)} "
        f"GROUP BY T3.{c.q(t2.pk)} HAVING COUNT(*) > {k}"
    )
    return sql, dict(
        things=c.things(t0),
        mids=c.things(t1),
        top=c.thing(t2),
        tops=c.things(t2),
        tlabel=c.said(t2.label),
        k=k,
    )


@shape(
    "nested_max_of_group",
    "nested",
    "highly complex",
    [
        "Which {attr} has the highest average {num} among {things}, and what is that average?",
        "Find the {attr} whose {things} have the largest mean {num}; show the {attr} and the mean.",
        "Among the {attr} groups of {things}, which has the top average {num}?",
        "Give the {attr} with the greatest average {num} over its {things}, with the value.",
    ],
)
def nested_max_of_group(c):
    t = c.table(lambda t: c.cols(t, CATEGORICAL) and c.cols(t, NUMERIC))
    a, n = c.col(t, CATEGORICAL, exclude=[t.label]), c.col(t, NUMERIC)
    sql = (
        f"SELECT grp, avg_value FROM (SELECT {c.q(a)} AS grp, AVG({c.q(n)}) AS avg_value "
        f"FROM {c.q(t)} GROUP BY {c.q(a)}) WHERE avg_value = (SELECT MAX(avg_value) FROM "
        f"(SELECT AVG({c.q(n)}) AS avg_value FROM {c.q(t)} GROUP BY {c.q(a)}))"
    )
    return sql, dict(things=c.things(t), attr=c.said(a), num=c.said(n))


@shape(
    "share_of_parent",
    "cte",
    "highly complex",
    [
        "For each {parent}, what percentage of all {things} are {rel} it? Show the {plabel}.",
        "Give every {parent}'s share of the {things}, in percent, with its {plabel}.",
        "Show the {plabel} of each {parent} and the percent of {things} that belong to it.",
        "What fraction, in percent, of the {things} does each {parent} account for?",
    ],
)
def share_of_parent(c):
    child, fk, parent = c.edge()
    c.hint(f"percentage = COUNT per {parent.name} * 100 / total count of {child.name}")
    sql = (
        f"WITH per_parent AS (SELECT {c.q(fk)} AS pid, COUNT(*) AS n FROM {c.q(child)} "
        f"GROUP BY {c.q(fk)}) SELECT T2.{c.q(parent.label)}, CAST(T1.n AS REAL) * 100 / "
        f"(SELECT COUNT(*) FROM {c.q(child)}) FROM per_parent AS T1 JOIN {c.q(parent)} AS T2 "
        f"ON T1.pid = T2.{c.q(parent.pk)}"
    )
    return sql, {**c.edge_words(child, fk, parent)}
