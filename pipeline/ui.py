"""The MLflow UI over the project's store, started with only the processes the UI needs (`make ui`).

python -m pipeline.ui                          # mlruns/ on http://127.0.0.1:5000
python -m pipeline.ui --port 8080 --store mlruns

Three things about `mlflow server` 3.17 shape this:

- With a database store it also starts a job runner and one huey consumer per kind of server-side job (GenAI
  scorers, trace rollups and the like), eight processes next to the web server's two that this project never uses.
  `MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false` leaves them out (set it yourself to `true` to keep them).
- Its UI opens every experiment in the GenAI view (traces, evaluations) unless the browser has picked "Model
  training" with the toggle at the top left (remembered per browser) or the address carries
  `?workflowType=machine_learning`, which the run and compare pages reached from there drop; the experiment tag
  `mlflow.experimentKind` does not decide it. The server runs as `--app-name batch-split` (`pipeline.ui_server`):
  MLflow's app with one page, the address printed here, that picks "Model training" in the browser as the toggle
  would and opens the experiment's runs.
- Its runs table shows no metric until columns are picked by hand, per browser; an experiment tag can hold a saved
  view that an address names (`tracking.view`): the printed address opens the runs in it, with step time, tokens/s,
  peak memory and rank in view, one open group per sweep or study.

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
APP_NAME = "batch-split"  # the `mlflow.app` entry point: pipeline.ui_server
RUNS_PAGE = "/batch-split/runs"  # served by pipeline.ui_server


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
        "--app-name",
        APP_NAME,
    ]


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to start the server in: `base` (default: ours) with job execution off unless `base` says."""
    env = dict(os.environ if base is None else base)
    for key, value in UI_ENV.items():
        env.setdefault(key, value)
    return env


def experiment_url(host: str, port: int, experiment_id: str) -> str:
    """The address that opens an experiment's runs in the project's view, in the UI's "Model training" view, and
    keeps the browser there (pipeline.ui_server)."""
    return f"http://{host}:{port}{RUNS_PAGE}?experiment={experiment_id}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=DEFAULT_STORE, help="folder holding mlflow.db and artifacts/")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="the experiment whose runs to link to")
    args = parser.parse_args(argv)

    from pipeline.tracking import view
    from pipeline.tracking.store import find_experiment

    uri = f"sqlite:///{args.store}/mlflow.db"
    experiment_id = find_experiment(uri, args.experiment)
    if experiment_id is None:
        print(f"ui: nothing recorded in {args.store}/ yet; runs appear at http://{args.host}:{args.port}", flush=True)
    else:
        view.save(uri, experiment_id)
        print(f"ui: runs of {args.experiment}: {experiment_url(args.host, args.port, experiment_id)}", flush=True)
    command = server_command(args.store, args.host, args.port)
    os.execve(command[0], command, server_env())  # the server replaces this process: Ctrl-C and signals reach it


if __name__ == "__main__":
    main()
