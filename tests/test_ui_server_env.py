"""The environment `make ui` starts MLflow's server in: MLflow's deprecation warning of Starlette's middleware is not
printed, and the warnings the user asked for still are. Real child interpreters importing MLflow's server app."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.commands.ui import server_env
from tests.helpers.env import child_env

STARLETTE_WARNING = "starlette.middleware.wsgi is deprecated"
# MLflow's server app, then a warning Python hides unless asked: what a user's PYTHONWARNINGS shows must still show
CHILD = "import warnings, mlflow.server.fastapi_app; warnings.warn('the users own', PendingDeprecationWarning)"


def _stderr(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120).stderr


@pytest.mark.slow
def test_the_ui_server_starts_without_starlettes_warning_and_keeps_the_users_warnings():
    users = child_env(PYTHONWARNINGS="default::PendingDeprecationWarning")
    plain = _stderr(users)
    if STARLETTE_WARNING not in plain:
        pytest.skip("this MLflow and Starlette print no deprecation warning on import")
    ours = _stderr(server_env(users))
    assert STARLETTE_WARNING not in ours, ours
    assert "the users own" in ours, ours
