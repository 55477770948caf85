"""The finalists of a study, re-measured side by side in its confirmation round (`search.confirm` holds the paired
statistics): once per study, by whichever worker gets there first, stored on the study for every worker's answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from pipeline.jobs import task
from pipeline.records import RunKind, Status
from pipeline.search import trials, workers
from pipeline.search.confirm import Round
from pipeline.tracking import runs

if TYPE_CHECKING:
    from pipeline.search.study import StudyDriver


def choose_finalists(driver: StudyDriver) -> list[trials.TrialRecord]:
    """The best eligible trial and the eligible trials whose intervals overlap its (at most confirm_k)."""
    best = trials.best(driver.study, driver.o.max_loss_dev)
    if best is None or driver.o.confirm == "never":
        return []
    others = sorted(
        (r for r in trials.eligible(driver.study, driver.o.max_loss_dev) if r.number != best.number),
        key=lambda r: r.median,
    )
    if driver.o.confirm == "auto":
        others = [r for r in others if r.ci and best.ci and r.ci.overlaps(best.ci)]
    chosen = [best, *others][: driver.o.confirm_k]
    return chosen if len(chosen) > 1 else []


def confirm(driver: StudyDriver, parent: str) -> None:
    """The confirmation round, once per study (by whichever worker gets there first), stored on the study."""
    finalists = choose_finalists(driver)
    if not finalists or "confirmation" in driver.study.user_attrs:
        return
    with workers.claim(driver.study, driver.storage, "confirmation") as mine:
        if not mine:
            return
        by_label = {r.label: r for r in finalists}
        labels = [r.label for r in finalists]
        print(f"[study] confirmation round: {', '.join(labels)}", flush=True)
        state = Round(labels, driver.cfg.measure.confidence, driver.o.tie_tolerance)

        def measure(label: str, number: int) -> tuple[float | None, float]:
            config = OmegaConf.create(OmegaConf.to_container(driver.by_id[by_label[label].config_id].config))
            config.train.steps = config.measure.warmup_steps + driver.o.confirm_steps
            spec = task.job_spec(config, name=label)
            outcome = task.run(
                config,
                spec=spec,
                kind=RunKind.CONFIRM,
                parent_id=parent,
                run_name=f"confirm {number}: {label}",
                tags={runs.STUDY: driver.name, "round": number},
            )
            ok = outcome.status is Status.OK
            return (outcome.summary.median if ok else None), outcome.summary.seconds.get("wall", 0.0)

        state.run(measure, driver.o.confirm_rounds, driver.o.confirm_budget_s)
        driver.gpu_seconds += state.seconds
        driver.study.set_user_attr("confirmation", record(state, labels))


def record(state: Round, labels: list[str]) -> dict:
    """The round as the study keeps it (a JSON user attribute), for the answer of whichever worker reads it."""
    return {
        "finalists": labels,
        "medians": state.medians,
        "seconds": state.seconds,
        "winner": state.winner(),
        "comparisons": [c.record() for c in state.comparisons()],
    }
