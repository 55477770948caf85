"""What a store under a test's folder holds, read with MLflow's own client."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient


def mlflow_runs(folder: Path, experiment: str = "batch-split", root: str = "mlruns") -> list:
    """Every run of `experiment` in the sqlite store under `folder/root`."""
    client = MlflowClient(f"sqlite:///{folder / root / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []
