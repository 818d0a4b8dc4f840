"""Complex shapes: joins with grouping, two hops, subqueries, set operations, percentages."""

from collections import Counter

from acesql.data.synth.shapes.base import CATEGORICAL, NUMERIC, Skip, shape


def _join(c, child, fk, parent, a="T1", b="T2"):
    return f"{c.q(child)} AS {a} JOIN {c.q(parent)} AS {b} ON {a}.{c.q(fk)} = {b}.{c.q(parent.pk)}"


@shape(
    "join_group_count",
    "join",
    "complex",
    [
        "For each {parent}, how many {things} are {rel} it? Show the {plabel} and the count.",
        "Count the {things} per {parent}, listing the {parent}'s {plabel}.",
        "Show every {parent}'s {plabel} with the number of {things} {rel} it.",
        "How are the {things} distributed over {parents}? Give {plabel} and count.",
    ],
)
def join_group_count(c):
    child, fk, parent = c.edge()
    sql = (
        f"SELECT T2.{c.q(parent.label)}, COUNT(*) FROM {_join(c, child, fk, parent)} "
        f"GROUP BY T2.{c.q(parent.pk)}"
    )
    return sql, {**c.edge_words(child, fk, parent)}


@shape(
    "join_group_having",
    "join",
    "complex",
    [
        "Which {parents} have more than {k} {things} {rel} them? Give their {plabel}.",
        "List the {plabel} of {parents} with over {k} {things}.",
        "Show the {parents} that have more than {k} {things}, by {plabel}.",
        "Find every {parent} with more than {k} {things} and report the {plabel}.",
    ],
)
def join_group_having(c):
    child, fk, parent = c.edge()
    counts = Counter(fk.present())
    if len(counts) < 3:
        raise Skip("too few parents")
    k = sorted(counts.values())[len(counts) * 2 // 3] - 1
    sql = (
        f"SELECT T2.{c.q(parent.label)} FROM {_join(c, child, fk, parent)} "
        f"GROUP BY T2.{c.q(parent.pk)} HAVING COUNT(*) > {k}"
    )
    return sql, {**c.edge_words(child, fk, parent), "k": k}


@shape(
    "join_average",
    "join",
    "complex",
    [
        "What is the average {num} of {things} for each {parent}? Show the {plabel}.",
        "For every {parent}, give its {plabel} and the mean {num} of its {things}.",
        "Show the average {num} of the {things} {rel} each {parent}, by {plabel}.",
        "Per {parent} ({plabel}), what is the typical {num} of the {things}?",
    ],
)
def join_average(c):
    child, fk, parent = c.edge(child=c.table(c.has(NUMERIC)))
    n = c.col(child, NUMERIC)
    sql = (
        f"SELECT T2.{c.q(parent.label)}, AVG(T1.{c.q(n)}) FROM {_join(c, child, fk, parent)} "
        f"GROUP BY T2.{c.q(parent.pk)}"
    )
    return sql, {**c.edge_words(child, fk, parent), "num": c.said(n)}


@shape(
    "two_hop_filter",
    "join",
    "complex",
    [
        "List the {label} of {things} {rel} {mids} that are {rel2} the {top} {value}.",
        "Which {things} belong to {mids} {rel2} the {top} {value}? Give their {label}.",
        "Show the {label} of every {thing} whose {mid} is {rel2} {top} {value}.",
        "Find the {things} linked through their {mid} to the {top} {value}; report the {label}.",
    ],
)
def two_hop_filter(c):
    (t0, fk1, t1), (_, fk2, t2) = c.chain(2)
    v = c.value(t2.label)
    sql = (
        f"SELECT T1.{c.q(t0.label)} FROM {c.q(t0)} AS T1 "
        f"JOIN {c.q(t1)} AS T2 ON T1.{c.q(fk1)} = T2.{c.q(t1.pk)} "
        f"JOIN {c.q(t2)} AS T3 ON T2.{c.q(fk2)} = T3.{c.q(t2.pk)} "
        f"WHERE T3.{c.q(t2.label)} = {c.lit(v)}"
    )
    return sql, dict(
        things=c.things(t0),
        thing=c.thing(t0),
        label=c.said(t0.label),
        mids=c.things(t1),
        mid=c.thing(t1),
        rel=c.rng.choice(fk1.relation),
        rel2=c.rng.choice(fk2.relation),
        top=c.thing(t2),
        value=c.say(t2.label, v),
    )


@shape(
    "above_average",
    "nested",
    "complex",
    [
        "Which {things} have a {attr} above the average {attr}? List their {label}.",
        "Show the {label} of {things} whose {attr} is higher than the average of all {things}.",
        "List every {thing} with an above-average {attr}.",
        "Find the {things} that beat the mean {attr}; give the {label}.",
    ],
)
def above_average(c):
    t = c.table(c.has(NUMERIC))
    a = c.col(t, NUMERIC)
    sql = (
        f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} > (SELECT AVG({c.q(a)}) FROM {c.q(t)})"
    )
    return sql, dict(things=c.things(t), thing=c.thing(t), label=c.said(t.label), attr=c.said(a))


@shape(
    "in_subquery",
    "nested",
    "complex",
    [
        "List the {plabel} of {parents} that have at least one {thing} with {attr} {value}.",
        "Which {parents} have a {thing} whose {attr} is {value}? Give their {plabel}.",
        "Show the {plabel} of every {parent} with some {things} of {attr} {value}.",
        "Find {parents} where any of their {things} has {attr} {value}; report the {plabel}.",
    ],
)
def in_subquery(c):
    child, fk, parent = c.edge(child=c.table(c.has(CATEGORICAL)))
    a = c.col(child, CATEGORICAL, exclude=[child.label])
    v = c.value(a)
    sql = (
        f"SELECT {c.q(parent.label)} FROM {c.q(parent)} WHERE {c.q(parent.pk)} IN "
        f"(SELECT {c.q(fk)} FROM {c.q(child)} WHERE {c.q(a)} = {c.lit(v)})"
    )
    return sql, {**c.edge_words(child, fk, parent), "attr": c.said(a), "value": c.say(a, v)}


@shape(
    "without_children",
    "nested",
    "complex",
    [
        "Which {parents} have no {things} at all? List their {plabel}.",
        "Show the {plabel} of {parents} without any {things}.",
        "List every {parent} that no {thing} is {rel}.",
        "Find the {parents} with zero {things}; give the {plabel}.",
    ],
)
def without_children(c):
    child, fk, parent = c.edge()
    if set(parent.pk.values) <= set(fk.present()):
        raise Skip("every parent has children")
    sql = (
        f"SELECT {c.q(parent.label)} FROM {c.q(parent)} WHERE {c.q(parent.pk)} NOT IN "
        f"(SELECT {c.q(fk)} FROM {c.q(child)} WHERE {c.q(fk)} IS NOT NULL)"
    )
    return sql, {**c.edge_words(child, fk, parent)}


@shape(
    "exists_correlated",
    "nested",
    "complex",
    [
        "Which {parents} have a {thing} with {num} over {value}? Give their {plabel}.",
        "List the {plabel} of {parents} for which some {thing} has {num} above {value}.",
        "Show {parents} having at least one {thing} whose {num} exceeds {value}.",
        "Find every {parent} with any {thing} of {num} greater than {value}, by {plabel}.",
    ],
)
def exists_correlated(c):
    child, fk, parent = c.edge(child=c.table(c.has(NUMERIC)))
    n = c.col(child, NUMERIC)
    v = c.number(n)
    sql = (
        f"SELECT T2.{c.q(parent.label)} FROM {c.q(parent)} AS T2 WHERE EXISTS "
        f"(SELECT 1 FROM {c.q(child)} AS T1 WHERE T1.{c.q(fk)} = T2.{c.q(parent.pk)} "
        f"AND T1.{c.q(n)} > {c.lit(v)})"
    )
    return sql, {**c.edge_words(child, fk, parent), "num": c.said(n), "value": c.say(n, v)}


def _set_operation(c, operator: str):
    """Two filters on one table, joined by a set operator: the shapes below share it."""
    t = c.table(lambda t: len(c.cols(t, CATEGORICAL + NUMERIC)) >= 2)
    a = c.col(t, CATEGORICAL, exclude=[t.label])
    b = c.col(t, NUMERIC)
    v, w = c.value(a), c.number(b)
    sql = (
        f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} = {c.lit(v)} {operator} "
        f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(b)} > {c.lit(w)}"
    )
    words = dict(things=c.things(t), label=c.said(t.label), attr=c.said(a), value=c.say(a, v))
    return sql, {**words, "num": c.said(b), "value2": c.say(b, w)}


@shape(
    "set_union",
    "set_op",
    "complex",
    [
        "List the {label} of {things} that have {attr} {value} or a {num} above {value2}.",
        "Which {things} either have {attr} {value} or {num} over {value2}? Give the {label}.",
        "Combine {things} with {attr} {value} and those with {num} above {value2}; show the {label}.",
        "Give the {label} of all {things} meeting one of two conditions: {attr} {value}, or {num} greater than {value2}.",
    ],
)
def set_union(c):
    return _set_operation(c, "UNION")


@shape(
    "set_intersect",
    "set_op",
    "complex",
    [
        "Which {things} have both {attr} {value} and a {num} above {value2}? Give the {label}.",
        "List the {label} of {things} with {attr} {value} that also have {num} over {value2}.",
        "Show the {things} that satisfy both: {attr} {value} and {num} greater than {value2}.",
        "Give the {label} common to {things} with {attr} {value} and {things} with {num} above {value2}.",
    ],
)
def set_intersect(c):
    return _set_operation(c, "INTERSECT")


@shape(
    "set_except",
    "set_op",
    "complex",
    [
        "Which {things} have {attr} {value} but not a {num} above {value2}? Give the {label}.",
        "List the {label} of {things} with {attr} {value}, excluding those with {num} over {value2}.",
        "Show {things} of {attr} {value} whose {num} is not above {value2}.",
        "Give the {label} of {things} with {attr} {value} minus those having {num} greater than {value2}.",
    ],
)
def set_except(c):
    return _set_operation(c, "EXCEPT")


@shape(
    "join_argmax",
    "join",
    "complex",
    [
        "Which {parent} has the most {things}? Give its {plabel}.",
        "What is the {plabel} of the {parent} with the largest number of {things}?",
        "Name the {parent} that the most {things} are {rel}.",
        "Find the {parent} with the highest count of {things} and report its {plabel}.",
    ],
)
def join_argmax(c):
    child, fk, parent = c.edge()
    sql = (
        f"SELECT T2.{c.q(parent.label)} FROM {_join(c, child, fk, parent)} "
        f"GROUP BY T2.{c.q(parent.pk)} ORDER BY COUNT(*) DESC LIMIT 1"
    )
    return sql, {**c.edge_words(child, fk, parent)}


@shape(
    "percentage",
    "aggregate",
    "complex",
    [
        "What percentage of {things} have {attr} {value}?",
        "Among all {things}, what share in percent has a {attr} of {value}?",
        "Give the percentage of {things} whose {attr} is {value}.",
        "Out of every hundred {things}, how many have {attr} {value}?",
    ],
)
def percentage(c):
    t = c.table(c.has(CATEGORICAL + ("bool",)))
    a = c.col(t, CATEGORICAL + ("bool",))
    v = c.value(a)
    c.hint(f"percentage = COUNT({a.name} = {c.lit(v)}) * 100 / COUNT(*)")
    sql = (
        f"SELECT CAST(SUM(CASE WHEN {c.q(a)} = {c.lit(v)} THEN 1 ELSE 0 END) AS REAL) "
        f"* 100 / COUNT(*) FROM {c.q(t)}"
    )
    return sql, dict(things=c.things(t), attr=c.said(a), value=c.say(a, v))
