"""The DVC remote on S3 where a team shares the data stages' outputs and models.

`setup_remote(repo, url, endpoint)` makes an S3 bucket the project's default DVC remote, after
which `dvc push` uploads what `dvc repro` produced and `dvc pull` fetches it in another clone:

    base = load_section("params.yaml", "base")
    setup_remote(".", remote_url(base.dvc_remote), resolve_endpoint(base.s3_endpoint_url))

It goes through `dvc remote add --local`, so the setting lands in `.dvc/config.local`, which
git ignores: each clone, CI job or worker points at its own bucket or endpoint without a commit.
The URL is `base.dvc_remote`, else the environment variable `ACESQL_DVC_REMOTE`; the endpoint
(MinIO and other S3-compatible servers) `base.s3_endpoint_url`, else `AWS_ENDPOINT_URL`.
No credentials are written: DVC reads them from the environment or ~/.aws, as boto3 does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from acesql.errors import ConfigError, StorageError

REMOTE_ENV = "ACESQL_DVC_REMOTE"
DEFAULT_REMOTE = "storage"


def remote_url(configured: str | None) -> str:
    """The remote's `s3://bucket/prefix`: `configured` (params.yaml), else $ACESQL_DVC_REMOTE."""
    url = configured or os.environ.get(REMOTE_ENV)
    if not url:
        raise ConfigError(
            f"no DVC remote configured: set base.dvc_remote in params.yaml or {REMOTE_ENV} "
            "to s3://bucket/prefix"
        )
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"DVC remote {url!r} is not an S3 URL: use s3://bucket/prefix")
    return url


def setup_remote(
    repo: str | Path, url: str, endpoint_url: str | None = None, name: str = DEFAULT_REMOTE
) -> dict[str, str | None]:
    """Make `url` the default DVC remote of the project at `repo` (in `.dvc/config.local`).

    Replaces a remote of the same name; returns the settings written.
    """
    root = Path(repo)
    if not (root / ".dvc").is_dir():
        raise ConfigError(f"{root} is not a DVC project (no .dvc folder): run `dvc init` there")
    _dvc(root, "remote", "add", "--local", "--default", "--force", name, url)
    if endpoint_url:
        _dvc(root, "remote", "modify", "--local", name, "endpointurl", endpoint_url)
    return {"name": name, "url": url, "endpointurl": endpoint_url}


def _dvc(root: Path, *args: str) -> None:
    # the same interpreter, so the dvc of this environment (with its S3 plugin) runs
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise StorageError(f"`dvc {' '.join(args)}` failed in {root}: {proc.stderr.strip()}")
