"""The runs table the UI's link opens: the answer first, the comparison's columns visible without a click, one group
per sweep or study.

MLflow 3.17's UI keeps a runs table's layout per browser (local storage), but it also reads a "saved view" from an
experiment tag `mlflow.sharedViewState.<key>` when the address carries `viewStateShareKey=<key>`, and lists it under
"Views". Of such a view it honours the chosen columns, their order and widths, the grouping, the sort, and the charts'
settings; it ignores which rows are expanded, pinned or hidden. So the view here groups the runs by the tag `group`
(the name of their sweep's or study's parent run) instead of nesting them: a group is open from the start, where a
parent's nested runs would wait for a click. It sorts by the tag `order` (`runs.order_of`): the newest sweep or study
first, and in its group its own run first, the one that holds the answer (the winner, or the fastest and whom it ties
with, and by how much). A group's own row shows the minimum of each column over its runs, so runs that are not
contenders have groups of their own beside it (a study's probes and confirmation runs, and whatever went over the cap:
`runs.group_of`; a confirmation run's figures are logged under other names, so its group shows none).

At 1280 px (the UI's side bar takes 220 of them) the name column holds a group's name whole (`Group: over cap ·
<study>` of the README's studies), then the answer's columns (rank, time vs fastest, status, the note's start); step
time, tokens/s and peak memory follow, all in view from 1920 px.
"""

from __future__ import annotations

import json
import time

from pipeline.records import Fit
from pipeline.tracking import figures, runs

VIEW_KEY = "batch-split"
VIEW_NAME = "batch-split: the answer first; rank, time vs fastest, status, note, step time, real tokens/s, peak memory"
TAG_PREFIX = "mlflow.sharedViewState."
NAME_COLUMN = "attributes.`Run Name`"
CREATED = "runDateAndNestInfo"  # the UI's own column beside the name: kept, as narrow as it goes
# step time, real tokens/s (`tokens_per_s`: padding left out), peak memory (rounded as the console prints them)
METRICS = figures.LEADING_METRICS
TAGS = (runs.RANK, runs.TIME_VS, runs.STATUS, runs.NOTE)
WIDTHS = {  # pixels: a group's name whole, a rank's and a ratio's words whole (the parent's are the longest)
    NAME_COLUMN: 380,
    CREATED: 36,
    "tags.`rank`": 225,
    "tags.`time_vs_fastest`": 178,
    "tags.`status`": 70,
    "tags.`note`": 240,
    "metrics.`step_time_median_s`": 150,
    "metrics.`tokens_per_s`": 105,
    "metrics.`peak_gib`": 95,
}
OVER_CAP = (Fit.OVER_CAP, Fit.OOM, Fit.PREDICTED_OVER_CAP)


def _column(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"


def view_state() -> dict:
    """The table's state as the UI stores it: columns, order, widths, grouping."""
    selected = [_column("tags", t) for t in TAGS] + [_column("metrics", m) for m in METRICS]
    return {
        "selectedColumns": selected,
        "columnOrder": [NAME_COLUMN, *selected, CREATED, "duration"],
        "columnWidths": WIDTHS,
        "groupBy": {"aggregateFunction": "min", "groupByKeys": [{"mode": "tag", "groupByData": runs.GROUP}]},
        "groupsExpanded": {},
        "hideEmptyCharts": True,
        "orderByKey": _column("tags", runs.ORDER),
        "orderByAsc": True,
    }


def saved_view(now_ms: int | None = None) -> str:
    """The experiment tag's value: the UI's saved-view envelope around the state."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return json.dumps({"name": VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(view_state())})


def save(uri: str, experiment_id: str) -> None:
    """Write (or refresh) the view on the experiment, and give runs recorded before runs had a `group` or `order`
    tag theirs (else they would wait, folded, in the UI's "Additional runs", or sort last)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    client.set_experiment_tag(experiment_id, TAG_PREFIX + VIEW_KEY, saved_view())
    found, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            break
    started = {run.info.run_id: run.info.start_time for run in found}
    for run in found:
        tags = run.data.tags
        over_cap = tags.get(runs.FIT) in OVER_CAP
        if runs.GROUP not in tags:
            client.set_tag(run.info.run_id, runs.GROUP, runs.group_of(tags, over_cap))
        if runs.ORDER not in tags:
            since = started.get(tags.get(runs.PARENT, ""), run.info.start_time)
            client.set_tag(run.info.run_id, runs.ORDER, runs.order_of(since, tags, over_cap))


def runs_address(experiment_id: str) -> str:
    """The UI's address (after `#`) of the experiment's runs in the view, in the "Model training" view of the UI."""
    return f"/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
