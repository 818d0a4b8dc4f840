"""Simple shapes: one table; projections, filters, one aggregate, ordering."""

from acesql.data.synth.shapes.base import (
    CATEGORICAL,
    DATES,
    NUMERIC,
    TEXTUAL,
    Skip,
    shape,
)


@shape(
    "project_two",
    "projection",
    "simple",
    [
        "List the {label} and {attr} of every {thing}.",
        "Show each {thing}'s {label} together with its {attr}.",
        "What are the {label} and the {attr} of all {things}?",
        "Give me a list of {things} with their {label} and {attr}.",
    ],
)
def project_two(c):
    t = c.table(c.has(None, 2))
    a = c.col(t, exclude=[t.label])
    sql = f"SELECT {c.q(t.label)}, {c.q(a)} FROM {c.q(t)}"
    return sql, dict(thing=c.thing(t), things=c.things(t), label=c.said(t.label), attr=c.said(a))


@shape(
    "filter_equal",
    "filter",
    "simple",
    [
        "List the {label} of {things} whose {attr} is {value}.",
        "Which {things} have {value} as their {attr}? Give their {label}.",
        "Show the {label} for every {thing} with {attr} {value}.",
        "I need the {label} of all {things} where the {attr} equals {value}.",
    ],
)
def filter_equal(c):
    t = c.table(c.has(CATEGORICAL))
    a = c.col(t, CATEGORICAL, exclude=[t.label])
    v = c.value(a)
    sql = f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} = {c.lit(v)}"
    return sql, dict(
        things=c.things(t),
        thing=c.thing(t),
        label=c.said(t.label),
        attr=c.said(a),
        value=c.say(a, v),
    )


@shape(
    "filter_compare",
    "filter",
    "simple",
    [
        "Which {things} have a {attr} greater than {value}? List their {label}.",
        "Show the {label} of {things} with {attr} above {value}.",
        "List every {thing} whose {attr} exceeds {value}, by {label}.",
        "Find the {label} of the {things} where the {attr} is more than {value}.",
    ],
)
def filter_compare(c):
    t = c.table(c.has(NUMERIC))
    a = c.col(t, NUMERIC)
    v = c.number(a)
    sql = f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} > {c.lit(v)}"
    return sql, dict(
        things=c.things(t),
        thing=c.thing(t),
        label=c.said(t.label),
        attr=c.said(a),
        value=c.say(a, v),
    )


@shape(
    "filter_and",
    "filter",
    "simple",
    [
        "List the {label} of {things} whose {attr} is {value} and whose {attr2} is below {value2}.",
        "Which {things} have {attr} {value} and a {attr2} under {value2}? Show their {label}.",
        "Show the {label} of every {thing} with {attr} {value} and {attr2} less than {value2}.",
        "Among {things} with {attr} {value}, which have a {attr2} lower than {value2}? Give the {label}.",
    ],
)
def filter_and(c):
    t = c.table(lambda t: c.cols(t, CATEGORICAL) and c.cols(t, NUMERIC))
    a, b = c.col(t, CATEGORICAL, exclude=[t.label]), c.col(t, NUMERIC)
    v, w = c.value(a), c.number(b)
    sql = (
        f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} = {c.lit(v)} AND {c.q(b)} < {c.lit(w)}"
    )
    return sql, dict(
        things=c.things(t),
        thing=c.thing(t),
        label=c.said(t.label),
        attr=c.said(a),
        value=c.say(a, v),
        attr2=c.said(b),
        value2=c.say(b, w),
    )


@shape(
    "filter_or",
    "filter",
    "simple",
    [
        "List the {label} of {things} whose {attr} is either {value} or {value2}.",
        "Which {things} have {attr} {value} or {value2}? Show their {label}.",
        "Show the {label} of all {things} with a {attr} of {value} or of {value2}.",
        "Give the {label} of each {thing} that has {value} or {value2} as its {attr}.",
    ],
)
def filter_or(c):
    t = c.table(c.has(CATEGORICAL))
    a = c.col(t, CATEGORICAL, exclude=[t.label])
    values = sorted(set(a.present()), key=str)
    if len(values) < 3:
        raise Skip("too few values")
    v, w = c.rng.sample(values, 2)
    sql = (
        f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} = {c.lit(v)} OR {c.q(a)} = {c.lit(w)}"
    )
    return sql, dict(
        things=c.things(t),
        thing=c.thing(t),
        label=c.said(t.label),
        attr=c.said(a),
        value=c.say(a, v),
        value2=c.say(a, w),
    )


@shape(
    "filter_like",
    "filter",
    "simple",
    [
        "Which {things} have a {attr} containing '{part}'? List their {label}.",
        "Show the {label} of {things} whose {attr} includes the text '{part}'.",
        "Find every {thing} with '{part}' somewhere in its {attr}; give the {label}.",
        "List the {label} for {things} where '{part}' appears in the {attr}.",
    ],
)
def filter_like(c):
    t = c.table(c.has(TEXTUAL))
    a = c.col(t, TEXTUAL)
    word = str(c.value(a)).split()[0]
    part = word[: max(3, len(word) - 2)]
    label = t.label if t.label is not a else c.col(t, exclude=[a])
    sql = f"SELECT {c.q(label)} FROM {c.q(t)} WHERE {c.q(a)} LIKE '%{part.replace(chr(39), '')}%'"
    return sql, dict(
        things=c.things(t),
        thing=c.thing(t),
        label=c.said(label),
        attr=c.said(a),
        part=part.replace("'", ""),
    )


@shape(
    "filter_between",
    "filter",
    "simple",
    [
        "List the {label} of {things} with a {attr} between {value} and {value2}.",
        "Which {things} have {attr} from {value} to {value2}? Show the {label}.",
        "Show every {thing} whose {attr} lies between {value} and {value2}, by {label}.",
        "Give the {label} of the {things} whose {attr} falls in the range {value} to {value2}.",
    ],
)
def filter_between(c):
    t = c.table(c.has(NUMERIC + DATES))
    a = c.col(t, NUMERIC + DATES)
    v, w = sorted((c.number(a), c.number(a)), key=str if a.kind in DATES else float)
    if v == w:
        raise Skip("empty range")
    sql = f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} BETWEEN {c.lit(v)} AND {c.lit(w)}"
    return sql, dict(
        things=c.things(t),
        thing=c.thing(t),
        label=c.said(t.label),
        attr=c.said(a),
        value=c.say(a, v),
        value2=c.say(a, w),
    )


@shape(
    "filter_missing",
    "filter",
    "simple",
    [
        "Which {things} have no {attr} recorded? List their {label}.",
        "Show the {label} of {things} whose {attr} is missing.",
        "List every {thing} without a {attr}, by {label}.",
        "For which {things} is the {attr} unknown? Give the {label}.",
    ],
)
def filter_missing(c):
    t = c.table(lambda t: any(None in x.values for x in c.cols(t, exclude=[t.label])))
    a = c.rng.choice([x for x in c.cols(t, exclude=[t.label]) if None in x.values])
    sql = f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} IS NULL"
    return sql, dict(things=c.things(t), thing=c.thing(t), label=c.said(t.label), attr=c.said(a))


@shape(
    "count_all",
    "aggregate",
    "simple",
    [
        "How many {things} are there?",
        "What is the total number of {things}?",
        "Count the {things}.",
        "How many {things} does the database hold in total?",
    ],
)
def count_all(c):
    t = c.table()
    return f"SELECT COUNT(*) FROM {c.q(t)}", dict(things=c.things(t))


@shape(
    "count_filter",
    "aggregate",
    "simple",
    [
        "How many {things} have {attr} {value}?",
        "Count the {things} whose {attr} is {value}.",
        "What is the number of {things} with a {attr} of {value}?",
        "Tell me how many {things} there are with {attr} equal to {value}.",
    ],
)
def count_filter(c):
    t = c.table(c.has(CATEGORICAL + ("bool",)))
    a = c.col(t, CATEGORICAL + ("bool",))
    v = c.value(a)
    sql = f"SELECT COUNT(*) FROM {c.q(t)} WHERE {c.q(a)} = {c.lit(v)}"
    return sql, dict(things=c.things(t), attr=c.said(a), value=c.say(a, v))


@shape(
    "aggregate_one",
    "aggregate",
    "simple",
    [
        "What is the {fn_word} {attr} of all {things}?",
        "Give the {fn_word} {attr} across {things}.",
        "Across every {thing}, what is the {fn_word} {attr}?",
        "Compute the {fn_word} value of {attr} over the {things}.",
    ],
)
def aggregate_one(c):
    t = c.table(c.has(NUMERIC))
    a = c.col(t, NUMERIC)
    fn, word = c.rng.choice(
        [("AVG", "average"), ("MAX", "highest"), ("MIN", "lowest"), ("SUM", "total")]
    )
    sql = f"SELECT {fn}({c.q(a)}) FROM {c.q(t)}"
    return sql, dict(things=c.things(t), thing=c.thing(t), attr=c.said(a), fn_word=word)


@shape(
    "distinct_values",
    "projection",
    "simple",
    [
        "What different {attr} values do the {things} have?",
        "List the distinct {attr} values among {things}.",
        "Show each {attr} that occurs for {things}, without repeats.",
        "Which {attr} values appear in the {things} data? List each once.",
    ],
)
def distinct_values(c):
    t = c.table(c.has(CATEGORICAL + ("city", "country")))
    a = c.col(t, CATEGORICAL + ("city", "country"))
    sql = f"SELECT DISTINCT {c.q(a)} FROM {c.q(t)}"
    return sql, dict(things=c.things(t), attr=c.said(a))


@shape(
    "top_n",
    "order",
    "simple",
    [
        "List the {label} of the {n} {things} with the highest {attr}.",
        "Which {n} {things} have the largest {attr}? Give their {label}.",
        "Show the top {n} {things} by {attr}, with their {label}.",
        "Name the {n} {things} whose {attr} is greatest.",
    ],
)
def top_n(c):
    t = c.table(c.has(NUMERIC))
    a = c.col(t, NUMERIC)
    n = c.rng.choice([3, 5, 10])
    sql = f"SELECT {c.q(t.label)} FROM {c.q(t)} ORDER BY {c.q(a)} DESC LIMIT {n}"
    return sql, dict(things=c.things(t), label=c.said(t.label), attr=c.said(a), n=n)


@shape(
    "argmin",
    "order",
    "simple",
    [
        "Which {thing} has the lowest {attr}? Give its {label}.",
        "What is the {label} of the {thing} with the smallest {attr}?",
        "Name the {thing} whose {attr} is the lowest.",
        "Find the {thing} with the minimum {attr} and report its {label}.",
    ],
)
def argmin(c):
    t = c.table(c.has(NUMERIC + DATES))
    a = c.col(t, NUMERIC + DATES)
    sql = (
        f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} IS NOT NULL "
        f"ORDER BY {c.q(a)} ASC LIMIT 1"
    )
    return sql, dict(thing=c.thing(t), label=c.said(t.label), attr=c.said(a))


@shape(
    "sorted_list",
    "order",
    "simple",
    [
        "List the {label} and {attr} of all {things}, sorted by {attr} from high to low.",
        "Show {things} with their {attr}, highest {attr} first.",
        "Give every {thing}'s {label} and {attr} in descending order of {attr}.",
        "Order the {things} by {attr}, largest first, showing {label} and {attr}.",
    ],
)
def sorted_list(c):
    t = c.table(c.has(NUMERIC))
    a = c.col(t, NUMERIC)
    sql = f"SELECT {c.q(t.label)}, {c.q(a)} FROM {c.q(t)} ORDER BY {c.q(a)} DESC"
    return sql, dict(things=c.things(t), thing=c.thing(t), label=c.said(t.label), attr=c.said(a))


@shape(
    "count_distinct",
    "aggregate",
    "simple",
    [
        "How many different {attr} values do the {things} have?",
        "Count the distinct {attr} values among {things}.",
        "In how many distinct {attr} values are the {things} spread?",
        "What is the number of unique {attr} values across {things}?",
    ],
)
def count_distinct(c):
    t = c.table(c.has(CATEGORICAL + ("city", "country")))
    a = c.col(t, CATEGORICAL + ("city", "country"))
    sql = f"SELECT COUNT(DISTINCT {c.q(a)}) FROM {c.q(t)}"
    return sql, dict(things=c.things(t), attr=c.said(a))


@shape(
    "lookup",
    "projection",
    "simple",
    [
        "What is the {attr} of the {thing} {name}?",
        "Give the {attr} of {name}, a {thing}.",
        "For the {thing} named {name}, what is the {attr}?",
        "Look up the {attr} recorded for the {thing} {name}.",
    ],
)
def lookup(c):
    t = c.table(lambda t: len(t.attrs) >= 2)
    a = c.col(t, exclude=[t.label])
    v = c.value(t.label)
    sql = f"SELECT {c.q(a)} FROM {c.q(t)} WHERE {c.q(t.label)} = {c.lit(v)}"
    return sql, dict(thing=c.thing(t), attr=c.said(a), name=c.say(t.label, v))
