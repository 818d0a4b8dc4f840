"""Shared fixtures: the built-in sample dataset (two generated databases) and its schemas,
a small dataset from the synthetic generator, and Prefect's test harness.

Prefect's home and DVC's site cache go to a temporary folder for the whole session (set
before either library is imported), so tests never touch the project's or the machine's.
"""

import atexit
import contextlib
import linecache
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_SCRATCH = tempfile.mkdtemp(prefix="acesql-tests-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
os.environ["PREFECT_HOME"] = os.path.join(_SCRATCH, "prefect")
os.environ["DVC_SITE_CACHE_DIR"] = os.path.join(_SCRATCH, "dvc-site-cache")
import flows  # noqa: E402, F401  (telemetry.env's settings, before Prefect or MLflow is imported)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker a core: one thread each, so the workers do not oversubscribe
    # the cores with torch's and BLAS's own threads (set before either is imported)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


def _checkcache_tolerating_races(filename=None, _checkcache=linecache.checkcache):
    """Python 3.11's `linecache.checkcache` raises KeyError when another thread drops an entry
    while it loops (SQLAlchemy's generated code of a collected MLflow class does); every
    doctest calls it, so one such drop failed an unrelated doctest."""
    for name in list(linecache.cache) if filename is None else [filename]:
        with contextlib.suppress(KeyError):
            _checkcache(name)


linecache.checkcache = _checkcache_tolerating_races

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


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> Path:
    """The generator's layout: 6 tiny databases (4 train, 1 dev, 1 test_ood), 4 questions each."""
    from acesql.data.synth.generate import SynthConfig, generate_dataset

    out = tmp_path_factory.mktemp("synth")
    config = SynthConfig(n_databases=6, questions_per_db=4, profile="tiny", seed=1)
    generate_dataset(out, config)
    return out


@pytest.fixture(scope="session")
def prefect_harness():
    """Flows run against a temporary Prefect API and database (slow to start: shared)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama chat model with a real tokenizer (built offline in seconds)."""
    from acesql.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def s3_server() -> str:
    """A moto S3 server over real HTTP on a free loopback port; its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch, tmp_path) -> str:
    """A fresh bucket on `s3_server`, with fake credentials (and no others) in the environment."""
    import uuid

    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"acesql-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
    return bucket
