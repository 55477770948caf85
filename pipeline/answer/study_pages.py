"""optuna-dashboard's app, its study pages changed where they would mislead: the best trial, the over-the-cap trials,
the repeated proposals, and long attributes.

A study keeps an over-the-cap config as a COMPLETE trial with a positive constraint (Optuna's own sense of
infeasible); optuna-dashboard 0.21 ignores constraints and would show it as the best, and plot it among the step
times. This WSGI wrapper changes each study-detail answer (`/api/studies/<id>`): `best_trials` is the trial the study
answered with (else Optuna's feasible best); an infeasible trial keeps its row but not its value; a proposal of an
already decided config (`repeat_of`) is left out, with the page's `after` counter counted without them. Its style
sheet wraps long attributes and shows them whole, and its script labels an infeasible trial's badge `Infeasible`
(`STATE_BADGE`; a script without it is served as it is)."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterable

from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from pipeline.adapters.dashboard import serialize_trial as serialize_frozen_trial
from pipeline.adapters.optuna_storage import constraints
from pipeline.search import ANSWER, REPEAT_OF

STUDY_DETAIL = re.compile(r"/api/studies/(\d+)")
PAGE = re.compile(r"/dashboard(/.*)?")
SCRIPT = "/static/bundle.js"
# a trial's state badge in optuna-dashboard 0.21's bundle: `Sd({color: $G(t.state), label: t.state, ...})`
STATE_BADGE = re.compile(rb"color:\$G\((\w)\.state\),label:\1\.state")


def infeasible_badge(script: bytes) -> bytes:
    """The bundle with its state badges reading `Infeasible` for a complete trial with a positive constraint."""
    said = rb'("Complete"===\1.state&&(\1.constraints||[]).some(c=>c>0)?"Infeasible":\1.state)'
    return STATE_BADGE.sub(rb"color:$G(" + said + rb"),label:" + said, script)


WRAPPING = (  # a trial's attribute lines: `white-space: nowrap` in optuna-dashboard's bundle, in a box 150 px high
    # that scrolls, its `reason` last but a few, out of sight
    "<style>main p.MuiTypography-root{white-space:normal!important;overflow-wrap:anywhere}"
    "main p.MuiTypography-root+div.MuiBox-root{max-height:none!important}"
    # a card's table (the study's user attributes): the card's width, a long value wrapped, not cut off at its edge
    ".MuiCardContent-root .MuiTableContainer-root table{table-layout:fixed;width:100%;min-width:0!important}"
    ".MuiCardContent-root .MuiTableContainer-root th:first-child{width:30%}"
    ".MuiCardContent-root .MuiTableContainer-root td{overflow-wrap:anywhere}</style>"
)


def feasible_best(storage: BaseStorage, study_id: int) -> list[FrozenTrial]:
    """The trial the study answered with (its confirmation round may overturn the search's fastest), else the
    fastest trial that fits; none when nothing fits."""
    complete = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,))
    answer = storage.get_study_user_attrs(study_id).get(ANSWER)
    if answer is not None:
        return [t for t in complete if t.number == answer]
    fits = [t for t in complete if t.value is not None and all(c <= 0 for c in constraints(t))]
    return [min(fits, key=lambda t: t.value)] if fits else []


def shown_trials(trials: list[dict]) -> list[dict]:
    """The serialised trials as the pages get them: repeated proposals left out, infeasible ones without a value."""
    out = []
    for trial in trials:
        if any(a["key"] == REPEAT_OF for a in trial.get("user_attrs", ())):
            continue
        if trial.get("state") == "Complete" and any(c > 0 for c in trial.get("constraints", ())):
            trial = {k: v for k, v in trial.items() if k != "values"}
        out.append(trial)
    return out


class FeasibleBest:
    """WSGI middleware around optuna-dashboard's app (`create_app(storage)`)."""

    def __init__(self, app: Callable, storage: BaseStorage) -> None:
        self.app, self.storage = app, storage

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET":
            return self.app(environ, start_response)
        if match := STUDY_DETAIL.fullmatch(path):
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            after = query.get("after", ["0"])[0]
            if not after.isdigit():  # the app's own answer (400)
                return self.app(environ, start_response)
            inner = {**environ, "QUERY_STRING": urllib.parse.urlencode({**query, "after": "0"}, doseq=True)}
            return self._changed(inner, start_response, lambda body: self._detail(int(match[1]), int(after), body))
        if PAGE.fullmatch(path):
            return self._changed(environ, start_response, lambda body: body.replace(b"</head>", WRAPPING.encode(), 1))
        if path == SCRIPT:  # asked for plain (not its gzip copy), so that it can be changed
            return self._changed({**environ, "HTTP_ACCEPT_ENCODING": "identity"}, start_response, infeasible_badge)
        return self.app(environ, start_response)

    def _changed(self, environ: dict, start_response: Callable, change: Callable[[bytes], bytes]) -> list[bytes]:
        """The app's answer, its body changed where it is a whole 200 answer."""
        answer: dict = {}

        def keep(status: str, headers: list, exc_info=None) -> Callable:
            answer.update(status=status, headers=headers)
            return lambda data: None

        body = b"".join(self.app(environ, keep))
        headers = answer["headers"]
        if answer["status"].startswith("200") and not any(k.lower() == "content-encoding" for k, _ in headers):
            body = change(body)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [("Content-Length", str(len(body)))]
        start_response(answer["status"], headers)
        return [body]

    def _detail(self, study_id: int, after: int, body: bytes) -> bytes:
        detail = json.loads(body)
        attrs = self.storage.get_study_system_attrs(study_id)
        detail["best_trials"] = [
            serialize_frozen_trial(study_id, t, attrs) for t in feasible_best(self.storage, study_id)
        ]
        detail["trials"] = shown_trials(detail["trials"])[after:]
        return json.dumps(detail).encode()
