"""Running the tool's entry points as a user does: a real child interpreter, in the environment of `child_env`.

`run_cli` runs a command to its end; `start_cli` starts one that the test reads, interrupts or kills as it runs.
`run_python` and `start_python` do the same for any `python ARGS` (a script, `-c` code, another package's module).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.env import child_env

REPO = Path(__file__).resolve().parents[2]


def run_python(
    *args: str, cwd: Path, timeout: float = 300, env: dict | None = None, input: str | None = None
) -> subprocess.CompletedProcess:
    """`python ARGS` run to its end in a real child interpreter, its output captured as text; `env` adds to (or,
    with None, removes from) the child's environment, `input` is its standard input."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(**(env or {})),
    )


def run_cli(
    *args: str, cwd: Path, timeout: float = 300, env: dict | None = None, module: str = "pipeline.train"
) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` (pipeline.train by default) run to its end in a real child interpreter."""
    return run_python("-m", module, *args, cwd=cwd, timeout=timeout, env=env)


def start_python(*args: str, cwd: Path, env: dict | None = None, **popen) -> subprocess.Popen:
    """`python ARGS` started in a real child interpreter, for a test that reads it, signals it or kills it while it
    runs. Its stdout and stderr come together, as text, on `proc.stdout` unless `popen` says otherwise (`stdout=`,
    `stderr=`, `stdin=`, `start_new_session=`: any keyword of subprocess.Popen)."""
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen}
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=child_env(**(env or {})), **options)


def start_cli(
    *args: str, cwd: Path, env: dict | None = None, module: str = "pipeline.train", **popen
) -> subprocess.Popen:
    """`python -m MODULE ARGS` (pipeline.train by default) started as `start_python` starts it."""
    return start_python("-m", module, *args, cwd=cwd, env=env, **popen)
