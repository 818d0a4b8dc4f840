"""Artifact locations that survive a moved checkout: `acesql-store:` URIs.

MLflow fixes an experiment's artifact root when it creates the experiment, and on a local
store it writes that root (and every run's artifact URI, and every registered version's
source) as an absolute path: a copied or moved project folder, or a container mounting it
elsewhere, would keep reading and writing the old folder. So an experiment this project
creates in a local sqlite store gets the root `acesql-store:mlruns/<experiment>`, a path
relative to the folder holding the store's database file, and runs land in
`mlruns/<experiment>/<run id>/artifacts` beside `mlflow.db` wherever the folder now is.

MLflow finds `StoreRelativeArtifactRepository` for the scheme through its documented plugin
hook, the `mlflow.artifact_repository` entry point of pyproject.toml, so the client, the
model registry (`models:/acesql/3`) and `mlflow ui` all read these URIs once the project is
installed. Stores on a tracking server keep the server's own artifact root.

Experiments created before this scheme existed keep their absolute locations
(`experiment_id` says so in a warning when the folder it names is gone).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

SCHEME = "acesql-store"
log = logging.getLogger(__name__)


class StoreRelativeArtifactRepository(LocalArtifactRepository):
    """`acesql-store:<relative path>`: a local folder under the tracking store's folder."""

    def __init__(self, artifact_uri: str, tracking_uri=None, registry_uri=None):
        super().__init__(str(local_path(artifact_uri, tracking_uri)), tracking_uri, registry_uri)


def local_path(artifact_uri: str, tracking_uri: str | None = None) -> Path:
    """The folder an `acesql-store:` URI names, for a store at `tracking_uri`.

    The base is the folder of the sqlite file `tracking_uri` (or, when None, MLflow's
    current tracking URI) names; the working directory for any other store.

    >>> local_path("acesql-store:mlruns/acesql/ab/artifacts", "sqlite:////srv/proj/mlflow.db")
    PosixPath('/srv/proj/mlruns/acesql/ab/artifacts')
    """
    scheme, _, relative = artifact_uri.partition(":")
    if scheme != SCHEME or not relative or relative.startswith("/"):
        raise ValueError(f"{artifact_uri!r} is not an {SCHEME}:<relative path> URI")
    return store_folder(tracking_uri) / relative


def store_folder(tracking_uri: str | None) -> Path:
    """The folder holding a sqlite store's database file; the working directory otherwise."""
    if tracking_uri is None:
        import mlflow

        tracking_uri = mlflow.get_tracking_uri()
    database = sqlite_file(tracking_uri)
    return (database.parent if database else Path()).absolute()


def sqlite_file(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///FILE` URI (relative or absolute), else None.

    >>> sqlite_file("sqlite:///mlflow.db"), sqlite_file("http://127.0.0.1:5000")
    (PosixPath('mlflow.db'), None)
    """
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    return Path(tracking_uri.removeprefix(prefix).split("?", 1)[0])


def artifact_root(tracking_uri: str, experiment: str) -> str | None:
    """The artifact root a new experiment gets: relative on a sqlite store, else the store's.

    >>> artifact_root("sqlite:///mlflow.db", "acesql runs/v2")
    'acesql-store:mlruns/acesql-runs-v2'
    >>> artifact_root("http://mlflow:5000", "acesql") is None
    True
    """
    if sqlite_file(tracking_uri) is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", experiment).strip("-.") or "experiment"
    return f"{SCHEME}:mlruns/{slug}"


def experiment_id(client, tracking_uri: str, name: str) -> str:
    """The id of experiment `name` in `client`'s store, created (with `artifact_root`) if new."""
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, artifact_location=artifact_root(tracking_uri, name))
    location = found.artifact_location.removeprefix("file://")
    if location.startswith("/") and not Path(location).exists():
        log.warning(
            "MLflow experiment %r keeps its artifacts at %s, which does not exist: the store "
            "was made before artifact locations moved with the project (or in another folder). "
            "Artifacts now go there; a new store (move mlflow.db and mlruns/ aside) uses "
            "portable locations.",
            name,
            location,
        )
    return found.experiment_id
