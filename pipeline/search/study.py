"""The Optuna study: the fastest configuration whose peak memory fits under the cap, as a loop over its parts.

1. Calibrate (once per study, by whichever worker gets there first): short probe jobs fit the memory predictor and
   time a micro-batch (`search._calibration`); then the baseline (`search._baseline`: the command line's config as it
   runs, in the space or beside it) and the prior's first candidates (`search._prior`) are queued as the first
   trials, so the others are judged against measured configs and a budget smaller than the space decides the
   likeliest first.
2. Decide trials until `optimize.trials` configs of the space are decided (`search._telling`: skipped when predicted
   over the cap, measured otherwise, stopped early when over the cap or slow; a failed job is decided once), the
   sampler proposing what the queue does not. Workers sharing the study claim configs (`search._workers`).
3. The confirmation round (`search._confirmation`): the finalists in paired rounds of fresh processes, the answer's claim
   against the baseline always bought.
4. Then the command's answer (`answer.conclusion`): printed and logged, with its speed-up over the baseline or why
   there is none.

The study lives in `optimize.storage` (sqlite under mlruns/ by default) under a name derived from the config
(`search._opening`), so re-running the same command resumes it: decided configs are never run again, and trials left
RUNNING by a killed worker are marked FAIL. Every job is an isolated job run by the same code as `pipeline.train`,
nested in one MLflow parent run for the study.
"""

from __future__ import annotations

import random
import time

import optuna
from omegaconf import DictConfig
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState
from tqdm import tqdm

from pipeline import progress
from pipeline.jobs import runner, task
from pipeline.liveness import HEARTBEAT_S
from pipeline.records import GIB
from pipeline.search import _baseline as baseline
from pipeline.search import _prior as prior
from pipeline.search import _trials as trials
from pipeline.search import _workers as workers
from pipeline.search._calibration import ATTR as CALIBRATION
from pipeline.search._calibration import Calibration, Prober
from pipeline.search._confirmation import ATTR as CONFIRMATION
from pipeline.search._confirmation.jobs import FinalRound
from pipeline.search._knob_view import StudyView
from pipeline.search._opening import StudyContext
from pipeline.search._sampler import KnobModelSampler, ViewSampler
from pipeline.search._space import Candidate, left_out_lines, suggest
from pipeline.search._telling import TrialTeller


class StudyDriver:
    def __init__(self, cfg: DictConfig, command: list[str], cap_bytes: int) -> None:
        """`command`: the overrides the study was started with, the start of every reproduce line it prints;
        `cap_bytes`: its memory cap, as the check parsed it."""
        self.ctx = StudyContext.open(cfg, command, cap_bytes)
        self.teller = TrialTeller(self.ctx)
        self.final = FinalRound(self.ctx)
        self.base: Candidate | None = None
        self._dead: list[str] = []  # the owners of the trials `start` failed
        if isinstance(self.study.sampler, ViewSampler):
            self.study.sampler.bind(StudyView(self.ctx))

    @property
    def name(self) -> str:
        return self.ctx.name

    @property
    def study(self) -> optuna.Study:
        return self.ctx.study

    @property
    def storage(self) -> str:
        return self.ctx.storage

    @property
    def tracker(self):
        return self.ctx.tracker

    @property
    def valid(self) -> list[Candidate]:
        return self.ctx.valid

    # ---- calibration and the first trials --------------------------------------------------------------------
    def calibrate(self) -> None:
        """Once per study, by whichever worker gets there first (the others wait and use its result): the probes,
        then the baseline and the prior's first candidates queued as the first trials."""
        ctx = self.ctx
        with workers.claim(ctx.study, CALIBRATION) as mine:
            if mine:
                steps = ctx.cfg.optimize.probe_steps
                prober = Prober(ctx.cfg, ctx.space_keys, ctx.name, ctx.parent, steps, ctx.batches)
                found = prober.run(ctx.space, kept_on=ctx.study)  # what a stopped calibration measured is kept
                ctx.predictor.calibrate(found.base_probes)
                found.scale, found.offset = ctx.predictor.scale, ctx.predictor.offset
                ctx.placement_dtype = found.dtype
                self._queue_first_trials(found)
                ctx.study.set_user_attr(CALIBRATION, found.to_attr())
        saved = ctx.calibration
        ctx.predictor.scale, ctx.predictor.offset = saved.scale, saved.offset
        ctx.placement_dtype, ctx.device = saved.dtype, saved.device
        self.base = baseline.candidate(ctx)

    def _queue_first_trials(self, found: Calibration) -> None:
        base = baseline.candidate(self.ctx)
        baseline.queue(self.ctx, base)  # the baseline first: never pruned, every other trial judged against it
        if isinstance(self.study.sampler, KnobModelSampler):
            return  # its screening design comes first, from the same prior
        for c in prior.first_trials(self.ctx, found, {base.config_id} if base else set()):
            self.ctx.study.enqueue_trial(c.params, skip_if_exists=True)

    # ---- the loop ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """The trials dead workers left RUNNING failed and their runs ended, then the study's parent run opened."""
        self._dead = workers.fail_stale(self.ctx.study)
        task.clean_up(self.ctx.tracker, self._dead)
        self.ctx.open_parent()

    def run(self) -> None:
        """The study's loop to its end, once started: calibration, the trials, the confirmation round. Its answer is
        the command's (`answer.conclusion`), said also where the loop stopped."""
        ctx = self.ctx
        try:
            self._say_what_runs(self._dead)
            runner.warm_up(ctx.cfg.launcher.kind)
            self.calibrate()
            baseline.requeue(ctx, self.base)
            self._loop()
            self.final.confirm()
        finally:
            workers.release_own(ctx.study)  # interrupted mid-trial: not decided, may run again

    def _say_what_runs(self, dead: list[str]) -> None:
        ctx, o = self.ctx, self.ctx.cfg.optimize
        decided = not self._open_ids()  # a rerun of a study that decided its budget: its round stored, or none due
        confirmed = ", its round run: its answer again, no job runs" if CONFIRMATION in ctx.study.user_attrs else ""
        print(
            f"[study] {ctx.name}: {len(ctx.valid)} valid configs, budget {o.trials} trials, cap "
            f"{ctx.cap / GIB:.2f} GiB; storage {o.storage}"
            + (f"; {len(dead)} stale trial(s) marked FAIL" if dead else "")
            + (f"; every config of its budget decided already{confirmed}" if decided else ""),
            flush=True,
        )
        if ctx.left_out:
            print("[study] " + "\n".join(left_out_lines(ctx.left_out)), flush=True)

    def _budget(self) -> int:
        return min(self.ctx.cfg.optimize.trials, len(self.ctx.valid))

    def _open_ids(self) -> set[str]:
        """The configs still to decide: those of the space while the budget lasts, and a baseline beside the space
        until it is decided. Once the configs decided and those claimed by live workers fill the budget, only the
        claimed ones are open: this worker waits on them (one whose worker dies opens the budget again)."""
        decided = set(workers.decided_configs(self.ctx.study))
        space = set(self.ctx.by_id)
        claimed = (workers.claimed(self.ctx.study) & space) - decided
        found = space - decided if len(decided & space) + len(claimed) < self._budget() else claimed
        if self.base is not None and not baseline.in_space(self.ctx, self.base):
            found |= {self.base.config_id} - decided
        return found

    def _loop(self) -> None:
        budget = self._budget()
        done = len(set(workers.decided_configs(self.ctx.study)) & set(self.ctx.by_id))
        # on a terminal or in a notebook only: a log or a pipe gets the lines without the bar's redraws
        bar = progress.bar(total=budget, initial=min(done, budget), desc="trials", unit="trial")
        with progress.lines_above(bar), bar:
            while self._next_trial(bar):
                pass
        self._fail_stale()  # a dead worker's config may have been measured here just now: its trial ends too

    def _next_trial(self, bar: tqdm) -> bool:
        """Ask the sampler for a config and decide it; False once every open config is decided. While the only
        configs left are being measured by other workers, wait for them: a worker that dies leaves its config to be
        measured again once its heartbeat lapses, and no worker may stop before that."""
        self._fail_stale()
        open_ids = self._open_ids()
        if not open_ids:
            return False
        if open_ids <= workers.taken(self.ctx.study, current=-1):
            time.sleep(HEARTBEAT_S)  # every open config is another live worker's: its result, or its death, comes
            return True
        trial = workers.ask_owned(self.ctx.study)
        try:
            self._decide(trial, bar)
        except (UpdateFinishedTrialError, ValueError):  # ValueError: Optuna's "Cannot tell a FAIL trial"
            if not workers.closed_elsewhere(self.ctx.study, trial):
                raise
            print(
                f"[study] trial {trial.number} was closed by another worker, which took this one for gone; skipped, "
                "its config stays open",
                flush=True,
            )
        return True

    def _proposal(self, trial: optuna.Trial) -> tuple[Candidate | None, tuple]:
        """The config an asked trial stands for: the baseline beside the space, or the sampler's proposal."""
        if baseline.is_outside(trial) and self.base is not None:
            return self.base, self.base.values
        values = suggest(trial, self.ctx.space)
        return next((c for c in self.ctx.valid if c.values == values), None), values

    def _decide(self, trial: optuna.Trial, bar: tqdm) -> None:
        """Claim the proposal and measure it, or tell it as the repeat of a decided config."""
        ctx = self.ctx
        candidate, values = self._proposal(trial)
        taken = workers.taken(ctx.study, trial.number)
        if candidate is None or candidate.config_id in taken:
            # already decided (or not a valid combination): close it, and steer the next ask to a new config
            self.teller.repeat_of(trial, candidate, values)
            still = self._open_ids() - taken
            remaining = [c for c in ctx.valid if c.config_id in still]
            if remaining:
                # the sampler keeps proposing what is known once the space is nearly decided: hand it an
                # undecided config (drawn, so no order of the space is favoured)
                pick = random.Random(ctx.cfg.optimize.seed * 100_003 + trial.number).choice(remaining)
                ctx.study.enqueue_trial(pick.params, skip_if_exists=False)
            return
        # the claim: workers sharing the study see the config taken from here on
        trials.write(trial, {trials.LABEL: candidate.label, trials.CONFIG_ID: candidate.config_id})
        if workers.claimed_earlier(ctx.study, trial.number, candidate.config_id) or not workers.within_budget(
            ctx.study, trial.number, candidate.config_id, set(ctx.by_id), self._budget()
        ):
            ctx.study.tell(trial, state=TrialState.FAIL)  # another worker asked for it, or for the budget's last, first
            return
        started = time.time()
        with workers.trial_heartbeat(ctx.study, trial):
            self.teller.evaluate(trial, candidate)
        bar.set_postfix_str(f"{candidate.label}: {time.time() - started:.0f} s")
        if candidate.config_id in ctx.by_id:
            bar.update(1)

    def _fail_stale(self) -> None:
        """Mark FAIL the trials of workers that died since (heartbeat lapsed), end their runs, queue a lost baseline."""
        dead = workers.fail_stale(self.ctx.study)
        if dead:
            print(f"[study] {len(dead)} trial(s) of a dead worker marked FAIL", flush=True)
            task.clean_up(self.ctx.tracker, dead)
            baseline.requeue(self.ctx, self.base)
