"""The SQL engine: schemas, sandboxed execution, matching, columns, parsing, voting.

It imports no torch; everything here runs in SQL worker processes too.
"""

from acesql.sql.batch_executor import BatchExecutor, Verdict
from acesql.sql.column_vote import vote_columns
from acesql.sql.columns import extract_columns, has_order_by
from acesql.sql.matching import MATCH_MODES, MatchResult, execution_match
from acesql.sql.parsing import parse_columns, parse_sql
from acesql.sql.sandbox import ExecResult, execute
from acesql.sql.schema import Schema, canonical_id

__all__ = [
    "MATCH_MODES",
    "BatchExecutor",
    "ExecResult",
    "MatchResult",
    "Schema",
    "Verdict",
    "canonical_id",
    "execute",
    "execution_match",
    "extract_columns",
    "has_order_by",
    "parse_columns",
    "parse_sql",
    "vote_columns",
]
