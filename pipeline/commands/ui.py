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
  `mlflow.experimentKind` does not decide it. The server runs as `--app-name batch-split` (`pipeline.commands.mlflow_app`):
  MLflow's app with one page, the address printed here, that picks "Model training" in the browser as the toggle
  would and opens the experiment's runs.
- Its runs table shows no metric until columns are picked by hand, per browser; an experiment tag can hold a saved
  view that an address names (`tracking.view`): the printed address opens the runs in it, with step time, tokens/s,
  peak memory and rank in view, one open group per sweep or study.

The command is built here once, for `make ui` and for the test that drives the UI in a browser.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from pipeline.commands.arguments import Parser

DEFAULT_STORE = "mlruns"
DEFAULT_EXPERIMENT = "batch-split"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
UI_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
# MLflow's server imports Starlette's WSGI middleware, which the Starlette installed deprecates: two lines on every
# start that nobody running the UI can act on. Ignored by its message alone; other warnings stay as the user has them.
UI_IGNORED_WARNING = "ignore:starlette.middleware.wsgi is deprecated:UserWarning"
APP_NAME = "batch-split"  # the `mlflow.app` entry point: pipeline.commands.mlflow_app
RUNS_PAGE = "/batch-split/runs"  # served by pipeline.commands.mlflow_app


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
    """The environment to start the server in: `base` (default: ours) with job execution off unless `base` says, and
    MLflow's own deprecation warning of Starlette's middleware ignored after the user's `PYTHONWARNINGS`."""
    env = dict(os.environ if base is None else base)
    for key, value in UI_ENV.items():
        env.setdefault(key, value)
    env["PYTHONWARNINGS"] = ",".join(w for w in (env.pop("PYTHONWARNINGS", ""), UI_IGNORED_WARNING) if w)
    return env


def experiment_url(host: str, port: int, experiment_id: str) -> str:
    """The address that opens an experiment's runs in the project's view, in the UI's "Model training" view, and
    keeps the browser there (pipeline.commands.mlflow_app)."""
    return f"http://{host}:{port}{RUNS_PAGE}?experiment={experiment_id}"


def cannot_listen(host: str, port: int) -> str | None:
    """Why a server could not listen on host:port (one line naming the argument, what is wrong, what is accepted),
    or None. Tried the way uvicorn binds (SO_REUSEADDR: a port whose last connections are closing is free to it).
    MLflow's server, given a port that is taken, prints the address anyway and exits 0 half a minute later."""
    if not 1 <= port <= 65535:  # 0 would be a port the kernel picks, which the printed link could not name
        return f"--port: got {port}; accepted: a port number from 1 to 65535"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, OverflowError) as err:
        return f"--host: '{host}' is no address here ({err}); accepted: {HOST_FORM}"
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EPERM):
                return _denied(host, port)
            if err.errno != errno.EADDRINUSE:
                return f"--host: cannot listen on {host} ({os.strerror(err.errno)}); accepted: {HOST_FORM}"
        else:
            return None
    return f"--port: {host}:{port} is in use{_holder(port)}; accepted: a free port{_instead(host, port + 1)}"


def _instead(host: str, start: int) -> str:
    """`, e.g. --port N (make ui PORT=N)` for the first free port from `start` (within 50), or nothing."""
    free = next((p for p in range(start, min(start + 50, 65536)) if _free(host, p)), None)
    return f", e.g. --port {free} (make ui PORT={free})" if free else ""


def _denied(host: str, port: int) -> str:
    """A port this user may not listen on: one below the system's first unprivileged port, for a user without the
    right to bind those (root's CAP_NET_BIND_SERVICE), or one a security policy keeps from it. The address is fine."""
    start = _first_unprivileged_port()
    why = f"; below port {start} only root, or a process with CAP_NET_BIND_SERVICE, may listen" if port < start else ""
    return (
        f"--port: this user may not listen on port {port} (permission denied{why}); accepted: a port from {start} up "
        f"that is free{_instead(host, max(start, DEFAULT_PORT))}"
    )


def _first_unprivileged_port() -> int:
    """Linux's `net.ipv4.ip_unprivileged_port_start` (1024 by default; 1024 where the system does not say)."""
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding="ascii") as setting:
            return int(setting.read())
    except (OSError, ValueError):
        return 1024


HOST_FORM = "an address of this machine, such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _holder(port: int) -> str:
    """` by pid N (its command)` for the process listening on `port`, where this user may see it; else nothing."""
    import psutil

    try:
        pids = {c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN" and c.pid}
        process = psutil.Process(min(pids)) if pids else None
        command = " ".join(" ".join(process.cmdline()).split()) if process else ""
    except (psutil.Error, OSError):
        return ""
    if process is None:
        return ""
    return f" by pid {process.pid} ({command[:80] + '...' if len(command) > 80 else command or process.name()})"


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m pipeline.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=DEFAULT_STORE, help="folder holding mlflow.db and artifacts/")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="the experiment whose runs to link to")
    args = parser.parse_args(argv)
    problem = cannot_listen(args.host, args.port)
    if problem:  # before anything is printed or saved: the link would lead to whatever holds the port
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)

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
