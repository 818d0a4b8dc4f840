"""The DVC remote on S3: configured from params or the environment, then `dvc push` / `pull`
against a moto server on loopback, with dvc run as a user runs it."""

import json
import shutil
import subprocess
import sys

import pytest

from acesql.errors import ConfigError
from acesql.remote import remote_url, setup_remote


def run(cwd, *args):
    proc = subprocess.run([*args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def dvc(cwd, *args):
    return run(cwd, sys.executable, "-m", "dvc", *args)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A git + DVC project in a temporary folder; DVC's machine-wide state stays inside it."""
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))
    monkeypatch.setenv("DVC_GLOBAL_CONFIG_DIR", str(tmp_path / "dvc-global"))
    monkeypatch.setenv("DVC_SYSTEM_CONFIG_DIR", str(tmp_path / "dvc-system"))
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    root = tmp_path / "project"
    root.mkdir()
    run(root, "git", "init", "-q")
    dvc(root, "init", "-q")
    return root


def test_push_and_pull_through_the_s3_remote(project, s3_bucket, s3_server):
    import boto3

    settings = setup_remote(project, f"s3://{s3_bucket}/dvc", s3_server)
    assert settings == {"name": "storage", "url": f"s3://{s3_bucket}/dvc", "endpointurl": s3_server}
    local_config = (project / ".dvc" / "config.local").read_text()
    assert f"url = s3://{s3_bucket}/dvc" in local_config
    assert f"endpointurl = {s3_server}" in local_config
    assert "remote = storage" in local_config
    assert "s3://" not in (project / ".dvc" / "config").read_text()

    data = project / "data.txt"
    data.write_text("question,sql\n1,SELECT 1\n")
    dvc(project, "add", "-q", "data.txt")
    dvc(project, "push", "-q")
    stored = boto3.client("s3", endpoint_url=s3_server).list_objects_v2(
        Bucket=s3_bucket, Prefix="dvc/"
    )
    assert stored["KeyCount"] == 1

    data.unlink()
    shutil.rmtree(project / ".dvc" / "cache")
    dvc(project, "pull", "-q")
    assert data.read_text() == "question,sql\n1,SELECT 1\n"


def test_setup_replaces_a_remote_and_drops_a_stale_endpoint(project):
    setup_remote(project, "s3://first/dvc", "http://127.0.0.1:9000")
    setup_remote(project, "s3://second/dvc")
    remotes = dvc(project, "remote", "list", "--local")
    assert remotes.split() == ["storage", "s3://second/dvc", "(default)"]
    assert "endpointurl" not in (project / ".dvc" / "config.local").read_text()


def test_cli_reads_the_remote_from_params(project, monkeypatch):
    monkeypatch.delenv("ACESQL_DVC_REMOTE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    params = project / "params.yaml"
    params.write_text(
        "base:\n  dvc_remote: s3://team/dvc\n  s3_endpoint_url: http://127.0.0.1:9000\n"
    )
    out = run(project, sys.executable, "-m", "acesql.cli", "remote", "setup", "--name", "team")
    assert json.loads(out) == {
        "name": "team",
        "url": "s3://team/dvc",
        "endpointurl": "http://127.0.0.1:9000",
    }
    assert "remote = team" in (project / ".dvc" / "config.local").read_text()


def test_cli_without_a_remote_exits_2(tmp_path, monkeypatch):
    monkeypatch.delenv("ACESQL_DVC_REMOTE", raising=False)
    (tmp_path / "params.yaml").write_text("base: {}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "acesql.cli", "remote", "setup"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "error: no DVC remote configured: set base.dvc_remote" in proc.stderr


def test_remote_url_prefers_params_then_the_environment(monkeypatch):
    monkeypatch.setenv("ACESQL_DVC_REMOTE", "s3://from-env/dvc")
    assert remote_url("s3://from-params/dvc") == "s3://from-params/dvc"
    assert remote_url(None) == "s3://from-env/dvc"
    monkeypatch.delenv("ACESQL_DVC_REMOTE")
    with pytest.raises(ConfigError, match="set base.dvc_remote in params.yaml or ACESQL_DVC"):
        remote_url(None)
    with pytest.raises(ConfigError, match="is not an S3 URL"):
        remote_url("/mnt/shared/dvc")


def test_setup_needs_a_dvc_project(tmp_path):
    with pytest.raises(ConfigError, match="is not a DVC project"):
        setup_remote(tmp_path, "s3://team/dvc")
