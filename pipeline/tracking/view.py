"""The runs table the UI's link opens: the comparison's columns, visible without a click, one group per sweep or
study.

MLflow 3.17's UI keeps a runs table's layout per browser (local storage), but it also reads a "saved view" from an
experiment tag `mlflow.sharedViewState.<key>` when the address carries `viewStateShareKey=<key>`, and lists it under
"Views". Of such a view it honours the chosen columns, their order and widths, the grouping, and the charts' settings;
it ignores which rows are expanded, pinned or hidden. So the view here groups the runs by the tag `group` (the name
of their sweep's or study's parent run) instead of nesting them: a group is open from the start, where a parent's
nested runs would wait for a click. A group's own row shows the minimum of each column over its runs, so runs that
are not contenders have groups of their own beside it (a study's probes and confirmation runs, and whatever went
over the cap: `runs.group_of`), and the parent's own row shows the winner's figures, rank and margin.
"""

from __future__ import annotations

import json
import time

from pipeline.tracking import figures, runs

VIEW_KEY = "batch-split"
VIEW_NAME = "batch-split: step time, tokens/s, peak memory, rank, time vs fastest"
TAG_PREFIX = "mlflow.sharedViewState."
NAME_COLUMN = "attributes.`Run Name`"
METRICS = figures.LEADING_METRICS  # step time, tokens/s, peak memory (rounded as the console prints them)
TAGS = (runs.RANK, runs.TIME_VS, runs.STATUS, runs.NOTE)
WIDTHS = {  # pixels: the sweep's or study's name whole, the figures as logged, a rank's and a ratio's words whole;
    # all in view on a screen 1920 px wide
    NAME_COLUMN: 325,
    "metrics.`step_time_median_s`": 150,
    "metrics.`tokens_per_s`": 105,
    "metrics.`peak_gib`": 95,
    "tags.`rank`": 300,
    "tags.`time_vs_fastest`": 230,
    "tags.`status`": 75,
    "tags.`note`": 170,
}


def _column(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"


def view_state() -> dict:
    """The table's state as the UI stores it: columns, order, widths, grouping."""
    selected = [_column("metrics", m) for m in METRICS] + [_column("tags", t) for t in TAGS]
    return {
        "selectedColumns": selected,
        "columnOrder": [NAME_COLUMN, *selected, "runDateAndNestInfo", "duration"],
        "columnWidths": WIDTHS,
        "groupBy": {"aggregateFunction": "min", "groupByKeys": [{"mode": "tag", "groupByData": runs.GROUP}]},
        "groupsExpanded": {},
        "hideEmptyCharts": True,
    }


def saved_view(now_ms: int | None = None) -> str:
    """The experiment tag's value: the UI's saved-view envelope around the state."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return json.dumps({"name": VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(view_state())})


def save(uri: str, experiment_id: str) -> None:
    """Write (or refresh) the view on the experiment, and give runs recorded before runs had a `group` tag theirs
    (else they would wait, folded, in the UI's "Additional runs")."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    client.set_experiment_tag(experiment_id, TAG_PREFIX + VIEW_KEY, saved_view())
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        for run in page:
            if runs.GROUP not in run.data.tags:
                client.set_tag(run.info.run_id, runs.GROUP, runs.group_of(run.data.tags))
        token = page.token
        if not token:
            return


def runs_address(experiment_id: str) -> str:
    """The UI's address (after `#`) of the experiment's runs in the view, in the "Model training" view of the UI."""
    return f"/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
