"""Shared fixtures: the built-in sample dataset (two generated databases) and its schemas."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from acesql.data.sample import build_sample_dataset  # noqa: E402
from acesql.sql.schema import Schema  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
SPIDER = Path(__file__).resolve().parents[2] / "shared" / "data" / "spider"


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    return build_sample_dataset(tmp_path_factory.mktemp("sample"))


@pytest.fixture(scope="session")
def school_db(sample_dir) -> Path:
    return sample_dir / "database" / "school" / "school.sqlite"


@pytest.fixture(scope="session")
def shop_db(sample_dir) -> Path:
    return sample_dir / "database" / "shop" / "shop.sqlite"


@pytest.fixture(scope="session")
def schemas(school_db, shop_db) -> dict[str, Schema]:
    return {
        "school": Schema.from_sqlite(school_db, n_samples=0),
        "shop": Schema.from_sqlite(shop_db, n_samples=0),
    }


@pytest.fixture
def spider_dir() -> Path:
    if not (SPIDER / "tables.json").is_file():
        pytest.skip("../shared/data/spider is absent")
    return SPIDER
