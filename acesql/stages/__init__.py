"""Pipeline stage entry points: one module per DVC stage in `dvc.yaml`.

Each reads its `params.yaml` section(s), calls the library, writes its outs and metrics, and
logs to MLflow. Run one as `python -m acesql.stages.<stage>`; `dvc repro` and the Prefect
flows in `flows/` do exactly that.
"""
