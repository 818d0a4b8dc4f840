"""Dataset loaders for the Spider, BIRD, synthetic and SynSQL layouts, into one `Example` record.

Spider:  DIR/{dev.json | train_spider.json + train_others.json}, DIR/tables.json,
         DIR/database/<db_id>/<db_id>.sqlite
BIRD:    DIR/{dev.json, dev_tables.json, dev_databases/} (split "dev")
         DIR/{train.json, train_tables.json, train_databases/} (split "train")
synth:   DIR/{train,dev,test_ood}.json, DIR/tables.json, DIR/databases/<db_id>/<db_id>.sqlite
         (the built-in generator, `acesql.data.synth`)
SynSQL:  DIR/data.json, DIR/tables.json, DIR/databases/<db_id>/<db_id>.sqlite
         (SynSQL-2.5M; one split, "train")

An example whose database file is missing stays in the dataset (its index is its position in
the questions file) but is marked unusable with the reason, so that counts stay honest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from acesql.errors import ConfigError, DataError
from acesql.sql.schema import Schema, load_tables_json


@dataclass
class Example:
    index: int  # position in the questions file(s)
    db_id: str
    question: str
    sql: str  # gold SQL
    db_path: str
    evidence: str = ""  # BIRD's external-knowledge hint
    complexity: str = ""  # BIRD difficulty / synthetic complexity level
    unusable: str | None = None  # why the example cannot be scored, e.g. "database missing"
    gold_columns: list[str] = field(default_factory=list)  # canonical ids, when the source has them
    domain: str = ""  # subject area of a synthetic database

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Dataset:
    name: str
    examples: list[Example]
    tables: dict[str, dict]  # db_id -> tables.json entry
    _schemas: dict = field(default_factory=dict, repr=False)

    def schema(self, db_id: str, n_samples: int = 3) -> Schema:
        """The schema of `db_id`, from its tables entry, with sample values from the file."""
        key = (db_id, n_samples)
        if key not in self._schemas:
            entry = self.tables.get(db_id)
            path = next((e.db_path for e in self.examples if e.db_id == db_id), None)
            if entry is None:
                if path is None:
                    raise DataError(f"unknown database {db_id!r}")
                self._schemas[key] = Schema.from_sqlite(path, db_id, n_samples)
            else:
                self._schemas[key] = Schema.from_tables_json(entry, path, n_samples)
        return self._schemas[key]

    @property
    def usable(self) -> list[Example]:
        return [e for e in self.examples if e.unusable is None]


# format -> the splits its loader reads
SPLITS: dict[str, tuple[str, ...]] = {
    "spider": ("train", "dev"),
    "bird": ("train", "dev"),
    "synth": ("train", "dev", "test_ood"),
    "synsql": ("train",),
}
# complexity labels each source gives its examples (Spider gives none)
COMPLEXITIES: dict[str, tuple[str, ...]] = {
    "spider": (),
    "bird": ("simple", "moderate", "challenging"),
    "synth": ("simple", "moderate", "complex", "highly complex"),
    "synsql": ("simple", "moderate", "complex", "highly complex"),
}


def load_spider(root: str | Path, split: str = "dev") -> Dataset:
    root = _check_root(root)
    _check_split("spider", split)
    files = {"dev": ["dev.json"], "train": ["train_spider.json", "train_others.json"]}
    files_read = []
    for name in files[split]:
        path = root / name
        if name == "train_others.json" and not path.exists():
            continue
        files_read.append((path, _read_json_list(path)))
    tables = load_tables_json(root / "tables.json")
    records = [r for path, read in files_read for r in _with_fields(path, read, "query")]
    examples = [_example(i, r, root / "database", sql_key="query") for i, r in enumerate(records)]
    return Dataset(f"spider-{split}", examples, tables)


def load_bird(root: str | Path, split: str = "dev") -> Dataset:
    root = _check_root(root)
    _check_split("bird", split)
    records = _read_json_list(root / f"{split}.json")
    tables = load_tables_json(root / f"{split}_tables.json")
    _with_fields(root / f"{split}.json", records, "SQL")
    db_dir = root / f"{split}_databases"
    examples = [
        _example(
            i,
            r,
            db_dir,
            sql_key="SQL",
            evidence=r.get("evidence") or "",
            complexity=r.get("difficulty") or "",
        )
        for i, r in enumerate(records)
    ]
    return Dataset(f"bird-{split}", examples, tables)


def load_synth(root: str | Path, split: str = "train") -> Dataset:
    """A dataset written by the built-in generator (`acesql.data.synth.generate`)."""
    root = _check_root(root)
    _check_split("synth", split)
    path = root / f"{split}.json"
    records = _read_json_list(path)
    tables = load_tables_json(root / "tables.json")
    _with_fields(path, records, "sql")
    examples = [
        _example(
            i,
            r,
            root / "databases",
            sql_key="sql",
            evidence=r.get("evidence") or "",
            complexity=r.get("complexity") or "",
            gold_columns=_gold_columns(path, i, r),
            domain=r.get("domain") or "",
        )
        for i, r in enumerate(records)
    ]
    return Dataset(f"synth-{split}", examples, tables)


def load_synsql(root: str | Path, split: str = "train") -> Dataset:
    """SynSQL-2.5M. Its complexity labels ("Highly Complex") are lower-cased to the generator's."""
    root = _check_root(root)
    _check_split("synsql", split)
    records = _read_json_list(root / "data.json")
    tables = load_tables_json(root / "tables.json")
    _with_fields(root / "data.json", records, "sql")
    examples = [
        _example(
            i,
            r,
            root / "databases",
            sql_key="sql",
            evidence=r.get("external_knowledge") or "",
            complexity=(r.get("sql_complexity") or "").lower(),
        )
        for i, r in enumerate(records)
    ]
    return Dataset(f"synsql-{split}", examples, tables)


LOADERS: dict[str, Callable[..., Dataset]] = {
    "spider": load_spider,
    "bird": load_bird,
    "synth": load_synth,
    "synsql": load_synsql,
}


def load_dataset(root: str | Path, fmt: str, split: str = "dev") -> Dataset:
    """Load a dataset folder in format `fmt` (a key of `LOADERS`)."""
    loader = LOADERS.get(fmt)
    if loader is None:
        raise ConfigError(f"unknown dataset format {fmt!r}; choose one of {sorted(LOADERS)}")
    return loader(root, split)


def _check_split(fmt: str, split: str) -> None:
    if split not in SPLITS[fmt]:
        raise ConfigError(f"{fmt} has no split {split!r}; choose one of {list(SPLITS[fmt])}")


def _check_root(root) -> Path:
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"dataset folder not found: {root}")
    return root


def _read_json_list(path: Path) -> list[dict]:
    """The questions of a JSON file: a list of objects, or DataError naming the file and the
    first record that is not one."""
    data = read_json(path, "questions file")
    if not isinstance(data, list):
        raise DataError(f"{path} must hold a JSON list of questions")
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataError(
                f"{path}: question #{i} is not a JSON object (got {type(record).__name__})"
            )
    return data


def _with_fields(path: Path, records: list[dict], sql_key: str) -> list[dict]:
    """`records`, each checked to hold a string `db_id`, `question` and `sql_key`, or
    DataError naming the file and the first that does not."""
    for i, record in enumerate(records):
        for key in ("db_id", "question", sql_key):
            if key not in record:
                raise DataError(f"{path}: question #{i} lacks the field {key!r}")
            if not isinstance(record[key], str):
                raise DataError(
                    f"{path}: question #{i}: {key} must be a string, got {short_repr(record[key])}"
                )
    return records


def read_json(path: Path, what: str):
    """The JSON value in `path`; DataError, one line, when it is missing, not UTF-8 or not
    JSON. `what` names the file in the message when it is missing."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DataError(f"{what} not found: {path}") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {exc.start}: {exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON: {exc}") from exc
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _example(i, record, db_dir: Path, sql_key: str, **fields) -> Example:
    db_id, question, sql = record["db_id"], record["question"], record[sql_key]
    db_path = db_dir / db_id / f"{db_id}.sqlite"
    unusable = None if db_path.is_file() else "database missing"
    return Example(i, db_id, question, sql, str(db_path), unusable=unusable, **fields)


def short_repr(value, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters for an error message.

    >>> short_repr(5), short_repr("x" * 100, 10)
    ('5', "'xxxxxxxx...")
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "..."


def _gold_columns(path: Path, i: int, record: dict) -> list[str]:
    columns = record.get("gold_columns") or []
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise DataError(f"{path}: question #{i}: gold_columns must be a list of 'table.column'")
    return columns


def parse_jsonl(lines: Iterable[str], source: str | Path) -> list[dict]:
    """One JSON object per non-blank line; a bad line is a DataError naming `source:line`, and
    text that is not UTF-8 one naming the last line read before it."""
    records = []
    for lineno, line in enumerate(_decoded(lines, source), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{source}:{lineno}: not JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise DataError(f"{source}:{lineno}: not a JSON object")
        records.append(record)
    return records


def _decoded(lines: Iterable[str], source) -> Iterable[str]:
    """`lines`, with a decoding error of a text file turned into a DataError."""
    read = 0
    iterator = iter(lines)
    while True:
        try:
            line = next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise DataError(f"{source} is not UTF-8 (after line {read}: {exc.reason})") from exc
        read += 1
        yield line


def read_prepared(path: str | Path) -> list[Example]:
    """The examples of a prepared split (`data/prepared/<split>.jsonl`, the data stage's)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"prepared split not found: {path} (run the data stage: dvc repro data)")
    examples = []
    with path.open() as fh:
        for number, record in enumerate(parse_jsonl(fh, path), 1):
            try:
                examples.append(Example(**record))
            except TypeError as exc:
                raise DataError(f"{path}: record {number} is not an example ({exc})") from exc
    return examples
