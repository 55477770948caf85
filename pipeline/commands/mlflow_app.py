"""MLflow's own server app with one page more: `/batch-split/runs?experiment=<id>`, the address `make ui` prints.

MLflow 3.17's UI shows an experiment's runs, compare and run pages in its "Model training" view only when the browser
has picked it with the toggle at the top left, which the UI keeps in the browser's local storage
(`mlflow.workflowType_v1`); an address can say `?workflowType=machine_learning` for one page, but the run and compare
pages reached from there drop it and fall back to the GenAI view. This page makes the same choice the toggle makes,
in the browser, on the server's own origin, then opens the experiment's runs in the project's saved view
(`tracking.view`). The choice stays with the browser like the toggle's, and the toggle changes it back. On a
browser's first visit it also tells the UI that its assistant has opened once already: otherwise it opens by
itself over a third of the runs table.

`mlflow server --app-name batch-split` serves it (the `mlflow.app` entry point in pyproject.toml, `create_app`);
`pipeline.ui` starts it so.
"""

from __future__ import annotations

import html
import json

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from pipeline.commands.ui import RUNS_PAGE
from pipeline.tracking.view import runs_address

# the UI's local-storage keys (its hook stores `${key}_v${version}`, as JSON)
WORKFLOW_KEY = "mlflow.workflowType_v1"
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"  # set: the assistant does not open by itself
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>batch-split runs</title></head>
<body><p>Opening the runs of experiment {experiment} in MLflow's "Model training" view: <a href="{target}">{target}</a></p>
<script>
try {{
  window.localStorage.setItem({key}, {value});
  if (window.localStorage.getItem({assistant}) === null) window.localStorage.setItem({assistant}, "true");
}} catch (e) {{}}
window.location.replace({target_js});
</script></body></html>
"""


def runs_page(request: Request) -> Response:
    experiment = request.query_params.get("experiment", "")
    if not experiment.isdigit():
        return PlainTextResponse("experiment: an MLflow experiment id (digits)", status_code=400)
    target = f"/#{runs_address(experiment)}"
    page = PAGE.format(
        experiment=experiment,
        target=html.escape(target),
        key=json.dumps(WORKFLOW_KEY),
        assistant=json.dumps(ASSISTANT_OPENED_KEY),
        value=json.dumps(json.dumps("machine_learning")),
        target_js=json.dumps(target),
    )
    return HTMLResponse(page)


def create_app():
    """MLflow's app with the page. A factory, imported by uvicorn's worker only: `mlflow server` imports this module
    too (to see whether the app is a factory), and must not build a second app in its own process."""
    from mlflow.server.fastapi_app import app

    # before MLflow's own routes: its Flask app is mounted at "/" and would answer every path
    app.router.routes.insert(0, Route(RUNS_PAGE, runs_page, methods=["GET"]))
    return app
