"""`acesql serve log`: the trained pipeline logged as an MLflow model that `mlflow models serve`
loads (`acesql/serving.py`)."""

from __future__ import annotations

import click

from acesql.cli.options import echo_json, model_folder, regular_file


@click.group("serve")
def serve():
    """The trained pipeline as an MLflow model (serve it with `mlflow models serve`)."""


@serve.command("log")
@click.option(
    "--model", required=True, callback=model_folder, help="Model folder (e.g. models/grpo)."
)
@click.option(
    "--params",
    "params_path",
    default="params.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    callback=regular_file,
    help="Where the settings come from: base (the tracking store), base_model.reasoning, "
    "prompt, evaluate (match mode, decoding, SQL deadline) and selection.",
)
@click.option("--register", default=None, help="Registered model name; a new version of it.")
def log_command(model, params_path, register):
    """Log MODEL's pipeline with the settings of PARAMS in a new run of the store's experiment,
    weights copied in; with --register, as a new version of that registered model. Prints the
    model's URI and the command that serves it."""
    from acesql.config import load_section
    from acesql.errors import ConfigError
    from acesql.serving import log_pipeline, serve_settings
    from acesql.tracking import tracking_uri

    base = load_section(params_path, "base")
    uri = tracking_uri(base)
    if uri is None:
        raise ConfigError(
            f"{params_path}: base.tracking_uri is null (tracking off): set it to a store to log to"
        )
    logged = log_pipeline(model, serve_settings(params_path), uri, base.experiment, register)
    served = f"models:/{logged.registered}" if logged.registered else logged.model_uri
    echo_json(
        {
            "model_uri": logged.model_uri,
            "run_id": logged.run_id,
            "registered": logged.registered,
            "serve": f"MLFLOW_TRACKING_URI={uri} mlflow models serve -m {served} "
            "--env-manager local -p 5001 -t 600",
        }
    )
