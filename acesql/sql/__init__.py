"""The SQL engine: schemas, sandboxed execution, matching, columns, parsing, voting.

It imports no torch; everything here runs in SQL worker processes too. The package imports
nothing itself, so that a worker (`acesql.sql.worker`) loads only what it runs.
"""
