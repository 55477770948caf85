"""optuna-dashboard's app with one answer changed: a study's best trial is the fastest trial that fits.

A study keeps an over-the-cap config as a COMPLETE trial with a positive constraint, so that optuna-dashboard marks it
infeasible and plots it. optuna-dashboard 0.21 calls the storage's lowest COMPLETE value best, constraints ignored
(optuna_dashboard/_app.py, `get_study_detail`), and would crown an over-the-cap config that ran faster. This WSGI
wrapper recomputes the `best_trials` of every study-detail answer from the storage: the trial the study answered with,
else the feasible COMPLETE trial with the lowest value (as Optuna's own `study.best_trial` decides), or none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState
from optuna_dashboard._serializer import serialize_frozen_trial

from pipeline.search.trials import ANSWER

STUDY_DETAIL = re.compile(r"/api/studies/(\d+)")


def constraints(trial: FrozenTrial) -> list[float]:
    """A trial's constraint values in either form: Optuna 5's `constraints:<name>`, or the older list."""
    named = [v for k, v in trial.system_attrs.items() if k.startswith("constraints:")]
    return named or list(trial.system_attrs.get("constraints", []))


def feasible_best(storage: BaseStorage, study_id: int) -> list[FrozenTrial]:
    """The trial the study answered with (its confirmation round may overturn the search's fastest), else the
    fastest trial that fits; none when nothing fits."""
    complete = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,))
    answer = storage.get_study_user_attrs(study_id).get(ANSWER)
    if answer is not None:
        return [t for t in complete if t.number == answer]
    fits = [t for t in complete if t.value is not None and all(c <= 0 for c in constraints(t))]
    return [min(fits, key=lambda t: t.value)] if fits else []


class FeasibleBest:
    """WSGI middleware around optuna-dashboard's app (`create_app(storage)`)."""

    def __init__(self, app: Callable, storage: BaseStorage) -> None:
        self.app, self.storage = app, storage

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        match = STUDY_DETAIL.fullmatch(environ.get("PATH_INFO", ""))
        if match is None or environ.get("REQUEST_METHOD") != "GET":
            return self.app(environ, start_response)
        answer: dict = {}

        def keep(status: str, headers: list, exc_info=None) -> Callable:
            answer.update(status=status, headers=headers)
            return lambda data: None

        body = b"".join(self.app(environ, keep))
        headers = answer["headers"]
        if answer["status"].startswith("200") and not any(k.lower() == "content-encoding" for k, _ in headers):
            body = self._rewrite(int(match.group(1)), body)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [("Content-Length", str(len(body)))]
        start_response(answer["status"], headers)
        return [body]

    def _rewrite(self, study_id: int, body: bytes) -> bytes:
        detail = json.loads(body)
        attrs = self.storage.get_study_system_attrs(study_id)
        detail["best_trials"] = [
            serialize_frozen_trial(study_id, t, attrs) for t in feasible_best(self.storage, study_id)
        ]
        return json.dumps(detail).encode()
