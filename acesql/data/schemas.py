"""Schemas and gold column sets of examples: read once, shared by SFT data, RL and evaluation."""

from __future__ import annotations

from acesql.data.loaders import Example
from acesql.sql.columns import extract_columns
from acesql.sql.schema import Schema


class SchemaCache:
    """Schemas of the examples' databases, read once each."""

    def __init__(self, sample_values: int):
        self.sample_values = sample_values
        self._schemas: dict[str, Schema] = {}

    def __call__(self, example: Example) -> Schema:
        if example.db_path not in self._schemas:
            self._schemas[example.db_path] = Schema.from_sqlite(
                example.db_path, example.db_id, n_samples=self.sample_values
            )
        return self._schemas[example.db_path]


def gold_columns(example: Example, schema: Schema) -> frozenset[str]:
    """The gold SQL's canonical columns: the dataset's own list when it has one, else extracted.

    Raises SqlParseError when the gold SQL cannot be resolved on `schema`.
    """
    if example.gold_columns:
        return frozenset(example.gold_columns)
    return extract_columns(example.sql, schema)
