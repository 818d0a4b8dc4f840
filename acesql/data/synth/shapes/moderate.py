"""Moderate shapes: grouping, one join, date and string functions, CASE and arithmetic."""

from collections import Counter

from acesql.data.synth.shapes.base import CATEGORICAL, DATES, NUMERIC, TEXTUAL, Skip, shape


@shape(
    "group_count",
    "group",
    "moderate",
    [
        "How many {things} are there for each {attr}?",
        "For every {attr}, count the {things}.",
        "Show each {attr} with its number of {things}.",
        "Break down the number of {things} by {attr}.",
    ],
)
def group_count(c):
    t = c.table(c.has(CATEGORICAL + ("city", "country")))
    a = c.col(t, CATEGORICAL + ("city", "country"))
    sql = f"SELECT {c.q(a)}, COUNT(*) FROM {c.q(t)} GROUP BY {c.q(a)}"
    return sql, dict(things=c.things(t), attr=c.said(a))


@shape(
    "group_average",
    "group",
    "moderate",
    [
        "What is the average {num} of {things} for each {attr}?",
        "For each {attr}, give the mean {num} of the {things}.",
        "Show the average {num} per {attr} across {things}.",
        "Group the {things} by {attr} and report the average {num} of each group.",
    ],
)
def group_average(c):
    t = c.table(lambda t: c.cols(t, CATEGORICAL) and c.cols(t, NUMERIC))
    a, n = c.col(t, CATEGORICAL), c.col(t, NUMERIC)
    sql = f"SELECT {c.q(a)}, AVG({c.q(n)}) FROM {c.q(t)} GROUP BY {c.q(a)}"
    return sql, dict(things=c.things(t), attr=c.said(a), num=c.said(n))


@shape(
    "group_having",
    "group",
    "moderate",
    [
        "Which {attr} values are shared by more than {k} {things}?",
        "List each {attr} that has over {k} {things}.",
        "Show the {attr} values with more than {k} {things} each.",
        "For which {attr} are there more than {k} {things}?",
    ],
)
def group_having(c):
    t = c.table(c.has(CATEGORICAL + ("city", "country")))
    a = c.col(t, CATEGORICAL + ("city", "country"))
    counts = sorted(Counter(a.present()).values())
    if len(counts) < 2:
        raise Skip("one group")
    k = counts[len(counts) // 2] - 1
    sql = f"SELECT {c.q(a)} FROM {c.q(t)} GROUP BY {c.q(a)} HAVING COUNT(*) > {k}"
    return sql, dict(things=c.things(t), attr=c.said(a), k=k)


@shape(
    "group_top",
    "group",
    "moderate",
    [
        "Which {attr} is the most common among {things}?",
        "What {attr} do the most {things} have?",
        "Find the {attr} with the largest number of {things}.",
        "Among all {things}, which {attr} occurs most often?",
    ],
)
def group_top(c):
    t = c.table(c.has(CATEGORICAL + ("city", "country")))
    a = c.col(t, CATEGORICAL + ("city", "country"))
    sql = f"SELECT {c.q(a)} FROM {c.q(t)} GROUP BY {c.q(a)} ORDER BY COUNT(*) DESC LIMIT 1"
    return sql, dict(things=c.things(t), attr=c.said(a))


@shape(
    "join_filter",
    "join",
    "moderate",
    [
        "List the {label} of {things} {rel} the {parent} {pvalue}.",
        "Which {things} are {rel} the {parent} {pvalue}? Give their {label}.",
        "Show the {label} of every {thing} {rel} {parent} {pvalue}.",
        "Find all {things} {rel} the {parent} called {pvalue}, with their {label}.",
    ],
)
def join_filter(c):
    child, fk, parent = c.edge()
    v = c.value(parent.label)
    sql = (
        f"SELECT T1.{c.q(child.label)} FROM {c.q(child)} AS T1 JOIN {c.q(parent)} AS T2 "
        f"ON T1.{c.q(fk)} = T2.{c.q(parent.pk)} WHERE T2.{c.q(parent.label)} = {c.lit(v)}"
    )
    return sql, {
        **c.edge_words(child, fk, parent),
        "label": c.said(child.label),
        "pvalue": c.say(parent.label, v),
    }


@shape(
    "join_count",
    "join",
    "moderate",
    [
        "How many {things} are {rel} {parents} whose {attr} is {value}?",
        "Count the {things} {rel} a {parent} with {attr} {value}.",
        "What is the number of {things} {rel} {parents} having {attr} {value}?",
        "Tell me how many {things} are {rel} {parents} with a {attr} of {value}.",
    ],
)
def join_count(c):
    child, fk, parent = c.edge()
    a = c.col(parent, CATEGORICAL + ("city", "country"), exclude=[parent.label])
    v = c.value(a)
    sql = (
        f"SELECT COUNT(*) FROM {c.q(child)} AS T1 JOIN {c.q(parent)} AS T2 "
        f"ON T1.{c.q(fk)} = T2.{c.q(parent.pk)} WHERE T2.{c.q(a)} = {c.lit(v)}"
    )
    return sql, {**c.edge_words(child, fk, parent), "attr": c.said(a), "value": c.say(a, v)}


@shape(
    "join_project",
    "join",
    "moderate",
    [
        "List each {thing}'s {label} together with the {plabel} of the {parent} it is {rel}.",
        "For every {thing}, show its {label} and the {plabel} of its {parent}.",
        "Give the {label} of all {things} and the {plabel} of the {parent} they are {rel}.",
        "Show {things} by {label} next to the {plabel} of their {parent}.",
    ],
)
def join_project(c):
    child, fk, parent = c.edge()
    sql = (
        f"SELECT T1.{c.q(child.label)}, T2.{c.q(parent.label)} FROM {c.q(child)} AS T1 "
        f"JOIN {c.q(parent)} AS T2 ON T1.{c.q(fk)} = T2.{c.q(parent.pk)}"
    )
    return sql, {**c.edge_words(child, fk, parent), "label": c.said(child.label)}


@shape(
    "year_filter",
    "date_string",
    "moderate",
    [
        "How many {things} have a {attr} in {year}?",
        "Count the {things} whose {attr} falls in the year {year}.",
        "What number of {things} had their {attr} during {year}?",
        "In {year}, how many {things} were recorded by {attr}?",
    ],
)
def year_filter(c):
    t = c.table(c.has(DATES))
    a = c.col(t, DATES)
    year = str(c.value(a))[:4]
    c.hint(f"year refers to strftime('%Y', {a.name})")
    sql = f"SELECT COUNT(*) FROM {c.q(t)} WHERE strftime('%Y', {c.q(a)}) = '{year}'"
    return sql, dict(things=c.things(t), attr=c.said(a), year=year)


@shape(
    "date_after",
    "date_string",
    "moderate",
    [
        "Which {things} have a {attr} after {date}? List their {label}.",
        "Show the {label} of {things} whose {attr} is later than {date}.",
        "List every {thing} with {attr} after {date}, by {label}, earliest first.",
        "Give the {label} of the {things} whose {attr} comes after {date}.",
    ],
)
def date_after(c):
    t = c.table(c.has(DATES))
    a = c.col(t, DATES)
    date = c.number(a)[:10]
    sql = f"SELECT {c.q(t.label)} FROM {c.q(t)} WHERE {c.q(a)} > '{date}' ORDER BY {c.q(a)}"
    return sql, dict(
        things=c.things(t), thing=c.thing(t), label=c.said(t.label), attr=c.said(a), date=date
    )


@shape(
    "string_length",
    "date_string",
    "moderate",
    [
        "Which {thing} has the longest {attr}? Give the {attr}.",
        "Find the {attr} with the most characters among {things}.",
        "What is the longest {attr} of any {thing}?",
        "Among {things}, whose {attr} is the longest? Show it.",
    ],
)
def string_length(c):
    t = c.table(c.has(TEXTUAL))
    a = c.col(t, TEXTUAL)
    sql = f"SELECT {c.q(a)} FROM {c.q(t)} ORDER BY LENGTH({c.q(a)}) DESC LIMIT 1"
    return sql, dict(thing=c.thing(t), things=c.things(t), attr=c.said(a))


@shape(
    "case_bucket",
    "aggregate",
    "moderate",
    [
        "How many {things} have a {attr} above {value}, and how many do not?",
        "Split the {things} into those with {attr} over {value} and the rest, and count each group.",
        "Count {things} with {attr} greater than {value} versus at most {value}.",
        "Give the number of {things} with high {attr} (over {value}) and with low {attr}.",
    ],
)
def case_bucket(c):
    t = c.table(c.has(NUMERIC))
    a = c.col(t, NUMERIC)
    v = c.number(a)
    bucket = f"CASE WHEN {c.q(a)} > {c.lit(v)} THEN 'high' ELSE 'low' END"
    sql = f"SELECT {bucket} AS level, COUNT(*) FROM {c.q(t)} GROUP BY level"
    return sql, dict(things=c.things(t), attr=c.said(a), value=c.say(a, v))


@shape(
    "ratio_columns",
    "aggregate",
    "moderate",
    [
        "What is the ratio of total {num} to total {num2} over all {things}?",
        "Divide the sum of {num} by the sum of {num2} across {things}.",
        "Across {things}, how large is the total {num} relative to the total {num2}?",
        "Compute total {num} divided by total {num2} for the {things}.",
    ],
)
def ratio_columns(c):
    t = c.table(c.has(NUMERIC, 2))
    a = c.col(t, NUMERIC)
    b = c.col(t, NUMERIC, exclude=[a])
    c.hint(f"ratio = SUM({a.name}) / SUM({b.name})")
    sql = f"SELECT CAST(SUM({c.q(a)}) AS REAL) / SUM({c.q(b)}) FROM {c.q(t)}"
    return sql, dict(things=c.things(t), num=c.said(a), num2=c.said(b))
