"""Running the tool's entry points as a user does: a real child interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.env import child_env

REPO = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str, cwd: Path, timeout: float = 300, env: dict | None = None, module: str = "pipeline.train"
) -> subprocess.CompletedProcess:
    """Run `python -m MODULE ARGS` (pipeline.train by default) in a real child interpreter."""
    full_env = child_env(**(env or {}))
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
