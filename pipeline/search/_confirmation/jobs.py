"""The study's confirmation round as jobs: its finalists chosen from what the study decided, run in paired rounds of
fresh processes (`confirmation.plan` plans them, the package records them), once per study by whichever worker gets there
first, and stored on the study after every round."""

from __future__ import annotations

from pipeline.jobs import task
from pipeline.liveness import Owner, host
from pipeline.records import RunKind, Status
from pipeline.search import _confirmation as confirmation
from pipeline.search import _knob_estimates as knob_estimates
from pipeline.search import _workers as workers
from pipeline.search._decided import Decided
from pipeline.search._opening import StudyContext
from pipeline.search._trials import Role, TrialRecord
from pipeline.tracking import figures, runs


class FinalRound:
    def __init__(self, ctx: StudyContext) -> None:
        self.ctx = ctx

    def confirm(self) -> None:
        """The finalists in paired rounds, unless the round is off, there is nothing to compare, or another worker
        ran it already."""
        ctx = self.ctx
        settings = confirmation.RoundSettings.of(ctx.cfg)
        decided = Decided.of(ctx.study, ctx.cfg.optimize.max_loss_dev)
        model = knob_estimates.estimates(decided.records, decided.baseline)
        chosen = confirmation.choose(decided.eligible, decided.baseline, settings, model)
        if not chosen or confirmation.ATTR in ctx.study.user_attrs:
            return
        with workers.claim(ctx.study, confirmation.ATTR) as mine:
            if not mine:
                return
            baseline = decided.baseline.label if decided.baseline else None
            stopped = decided.confirmation  # the record of a round this study stopped during, or None
            record = confirmation.run_round(
                chosen,
                baseline,
                settings,
                decided.gpu_seconds - (stopped.state.seconds if stopped else 0.0),  # the search's, as at its start
                self._run,
                save=lambda partial: ctx.study.set_user_attr(confirmation.PARTIAL, partial.to_attr()),
                stopped=stopped,
                warm=lambda record: warm_cache(record, ctx.cfg.paths.root),
            )
            ctx.study.set_user_attr(confirmation.ATTR, record.to_attr())

    def _run(self, record: TrialRecord, number: int, warmup: int, steps: int) -> tuple[float | None, float]:
        """One confirmation run of a finalist: `steps` steady steps after `warmup`, in a fresh process, under the
        cap where `capped` says. Its figure is the trimmed mean of its steady steps (`confirmation.plan` says why)."""
        ctx = self.ctx
        job = ctx.candidate(record.config_id).job.with_length(warmup, steps)  # its identity, so its runs pool
        spec = task.job_spec(job, name=record.label, uncapped=not capped(record))
        outcome = task.run(
            job,
            spec=spec,
            kind=RunKind.CONFIRM,
            parent_id=ctx.parent,
            run_name=f"confirm {number}: {record.label}",
            tags={runs.STUDY: ctx.name, runs.ROUND: number},
        )
        summary = outcome.summary
        ok = outcome.status is Status.OK and summary.step_time
        figure = figures.ranked(summary.step_time.trimmed) if ok else None  # as its run logs it
        return figure, summary.wall_s


def capped(record: TrialRecord) -> bool:
    """Whether a finalist's round run holds the cap on the device: a candidate that fit, yes; the baseline never,
    as in its trial (it is measured for its speed, not judged against the cap: on the chats, a baseline that fit in
    its trial ran out of memory capped in the round, and the study could claim nothing)."""
    return bool(record.feasible) and record.role is not Role.BASELINE


def warm_cache(record: TrialRecord, root: str) -> bool:
    """Whether a finalist's compilation is in the cache this worker's runs use: its trial ran on this host, and the
    cache under `root` (`paths.root`) is there; a worker on another machine, or a study resumed after the cache went,
    compiles anew."""
    owner = Owner.parse(record.owner or "")
    return owner is not None and owner.host == host() and task.compile_cache_folder(root).is_dir()
