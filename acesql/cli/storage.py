"""`acesql artifacts` (the artifact store) and `acesql remote` (the DVC remote on S3)."""

from __future__ import annotations

from pathlib import Path

import click

from acesql.cli.options import echo_json


def _store_options(f):
    f = click.option(
        "--params",
        "params_path",
        default="params.yaml",
        show_default=True,
        help="Params file read for the store when --store is not given.",
    )(f)
    f = click.option(
        "--endpoint-url",
        help="S3-compatible endpoint [base.s3_endpoint_url, then $AWS_ENDPOINT_URL].",
    )(f)
    return click.option(
        "--store", help="A folder or s3://bucket/prefix [base.artifact_store of --params]."
    )(f)


def _open_store(store, endpoint_url, params_path):
    from acesql.config import load_section
    from acesql.storage import open_store

    if store is None:
        base = load_section(params_path, "base")
        store, endpoint_url = base.artifact_store, endpoint_url or base.s3_endpoint_url
    return open_store(store, endpoint_url)


@click.group()
def artifacts():
    """Copy pool snapshots, checkpoints and reports to and from the artifact store."""


@artifacts.command("put")
@_store_options
@click.argument("local", type=click.Path(exists=True))
@click.argument("key")
def artifacts_put(store, endpoint_url, params_path, local, key):
    """Upload LOCAL as KEY (a folder: every file under it, as KEY/...); print what was stored."""
    from dataclasses import asdict

    target = _open_store(store, endpoint_url, params_path)
    if Path(local).is_dir():
        objects = target.upload_dir(local, key)
    else:
        objects = [target.upload(local, key)]
    echo_json({"store": target.url, "objects": [asdict(o) for o in objects]})


@artifacts.command("get")
@_store_options
@click.argument("key")
@click.argument("local", type=click.Path())
def artifacts_get(store, endpoint_url, params_path, key, local):
    """Download KEY to LOCAL, checksum-verified (a folder KEY: everything under it)."""
    from dataclasses import asdict

    source = _open_store(store, endpoint_url, params_path)
    if source.exists(key):
        objects = [source.download(key, local)]
    else:
        objects = source.download_dir(key, local)
    echo_json({"store": source.url, "objects": [asdict(o) for o in objects]})


@artifacts.command("ls")
@_store_options
@click.argument("prefix", default="")
def artifacts_ls(store, endpoint_url, params_path, prefix):
    """Print the keys that start with PREFIX (all keys without it)."""
    source = _open_store(store, endpoint_url, params_path)
    echo_json({"store": source.url, "keys": source.list(prefix)})


@click.group()
def remote():
    """The DVC remote on S3 that `dvc push` and `dvc pull` use."""


@remote.command("setup")
@click.option("--url", help="s3://bucket/prefix [base.dvc_remote, then $ACESQL_DVC_REMOTE].")
@click.option(
    "--endpoint-url",
    help="S3-compatible endpoint [base.s3_endpoint_url, then $AWS_ENDPOINT_URL].",
)
@click.option("--name", default="storage", show_default=True, help="The remote's name.")
@click.option("--repo", default=".", show_default=True, help="The DVC project's folder.")
@click.option(
    "--params",
    "params_path",
    default="params.yaml",
    show_default=True,
    help="Params file read for the remote when --url is not given.",
)
def remote_setup(url, endpoint_url, name, repo, params_path):
    """Make the S3 remote the project's default, in .dvc/config.local (ignored by git)."""
    from acesql.config import load_section
    from acesql.remote import remote_url, setup_remote
    from acesql.storage import resolve_endpoint

    if url is None:
        base = load_section(params_path, "base")
        url, endpoint_url = base.dvc_remote, endpoint_url or base.s3_endpoint_url
    echo_json(setup_remote(repo, remote_url(url), resolve_endpoint(endpoint_url), name))
