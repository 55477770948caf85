"""The commands users type, apart from the library they drive: `python -m pipeline.<name>` runs
`pipeline.commands.<name>.main` (the top-level `pipeline/<name>.py` is only that line).

train (a job or a Hydra multirun), optimize (the study), report, card, export (the answer as a plain TRL script),
ui (MLflow's UI; mlflow_app is its server app), dashboard (optuna-dashboard); cli is what every one of them does
around Hydra: --help, the precheck of the whole command line, exit codes; arguments: the flags of those
that take flags, refused in one line; sweep_callback: the Hydra callback that makes a multirun one sweep (its parent
run, its table, its exit status).
"""

import os
import signal
import sys

from pipeline import exits

BEFORE_ANYTHING = "interrupted before anything ran"  # said by a command stopped before it ran anything


def _before_anything(signum, frame) -> None:
    """A Ctrl-C while `python -m pipeline.<name>` imports its command (seconds: torch, MLflow, Optuna): one line and
    exit 130, where Python printed the import's traceback and died of the signal (status -2). Once the entry module
    holds `main`, the command is running and handles its own."""
    if "main" in vars(sys.modules["__main__"]):
        signal.default_int_handler(signum, frame)
    os.write(2, f"{BEFORE_ANYTHING}\n".encode())
    os._exit(exits.INTERRUPTED)


_ENTRY = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", "")
if _ENTRY.startswith("pipeline.") and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _before_anything)
