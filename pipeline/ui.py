"""The MLflow UI over the project's store, started with only the processes the UI needs (`make ui`).

python -m pipeline.ui                          # mlruns/ on http://127.0.0.1:5000
python -m pipeline.ui --port 8080 --store mlruns

Two things about `mlflow server` 3.17 shape this:

- With a database store it also starts a job runner and one huey consumer per kind of server-side job (GenAI
  scorers, trace rollups and the like), eight processes next to the web server's two that this project never uses.
  `MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false` leaves them out (set it yourself to `true` to keep them).
- Its UI opens every experiment in the GenAI view (traces, evaluations) unless the browser has picked "Model
  training" with the toggle at the top left (remembered per browser) or the address carries
  `?workflowType=machine_learning`; the experiment tag `mlflow.experimentKind` does not decide it. The address
  printed here opens the project's experiment on its runs.

The command is built here once, for `make ui` and for the test that drives the UI in a browser.
"""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_STORE = "mlruns"
DEFAULT_EXPERIMENT = "batch-split"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
UI_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def server_command(store: str = DEFAULT_STORE, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> list[str]:
    """`mlflow server` over `<store>/mlflow.db` and `<store>/artifacts` (relative to the working folder), one worker."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{store}/mlflow.db",
        "--default-artifact-root",
        f"{store}/artifacts",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to start the server in: `base` (default: ours) with job execution off unless `base` says."""
    env = dict(os.environ if base is None else base)
    for key, value in UI_ENV.items():
        env.setdefault(key, value)
    return env


def experiment_url(host: str, port: int, experiment_id: str) -> str:
    """The address that opens an experiment on its runs table, in the UI's "Model training" view."""
    return f"http://{host}:{port}/#/experiments/{experiment_id}?workflowType=machine_learning"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=DEFAULT_STORE, help="folder holding mlflow.db and artifacts/")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="the experiment whose runs to link to")
    args = parser.parse_args(argv)

    from pipeline.tracking.store import find_experiment

    experiment_id = find_experiment(f"sqlite:///{args.store}/mlflow.db", args.experiment)
    if experiment_id is None:
        print(f"ui: nothing recorded in {args.store}/ yet; runs appear at http://{args.host}:{args.port}", flush=True)
    else:
        print(f"ui: runs of {args.experiment}: {experiment_url(args.host, args.port, experiment_id)}", flush=True)
    command = server_command(args.store, args.host, args.port)
    os.execve(command[0], command, server_env())  # the server replaces this process: Ctrl-C and signals reach it


if __name__ == "__main__":
    main()
