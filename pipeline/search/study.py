"""The Optuna study: the fastest configuration whose peak memory fits under the cap.

Cheap decisions first. Two short probe jobs (smallest and largest micro-batch, once per step, uncapped) calibrate
the memory predictor, and the candidate their step times say is fastest is the first trial, so the others are judged
against a measured best; measured peaks refine the predictor as trials finish. A candidate predicted over the cap
(by more than `skip_margin`) is recorded infeasible without launching; a launched job stops at the first step whose
peak is over the cap, and a slow one when the median of its `prune_steps` steps after the first exceeds the best so
far times `prune_factor` (mid-step, once a step has run twice that); only contenders run all their steps.
Objective: steady step time (median); constraint: peak memory minus cap, in GiB, given with `trial.set_constraint`,
so infeasible trials still teach the sampler.

How a trial is stored (read right by optuna-dashboard and `optuna best-trial`, README "Finding the fastest config"):
measured under the cap: COMPLETE with its step time; over the cap (measured or predicted), out of memory, or pruned
as slow: PRUNED, no value; a crash, or a config another worker took: FAIL. The constraint is written both as Optuna
5 writes it (`constraints:memory_gib`) and in the list form optuna-dashboard reads (`constraints`).

The base config as the command line gives it is the baseline (`optimize.baseline`): measured in full, never pruned,
so the answer is a measured ratio against it, and a config whose losses deviate from the baseline's by more than
`optimize.max_loss_dev` is not eligible. After the search, the finalists whose intervals overlap the best's are
re-measured side by side in paired rounds (`search.confirmation`) before the answer is given, the baseline among
them, so that the answer's speed-up over it comes from pairs of neighbouring processes.

The study lives in `optimize.storage` (sqlite under mlruns/ by default) under a name derived from the config, so
re-running the same command resumes it: decided configs are never run again, and trials left RUNNING by a killed
worker are marked FAIL. Every trial is an isolated job run by the same code as `pipeline.train`, nested in one MLflow
parent run for the study.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import random
import statistics
import sys
import time
import warnings

import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState
from tqdm import tqdm

from pipeline.config.identity import digest, identity_tree
from pipeline.config.validate import parse_split, validate
from pipeline.jobs import runner, task
from pipeline.liveness import HEARTBEAT_S
from pipeline.measure.flops import Shape
from pipeline.measure.summary import steady_steps
from pipeline.records import GIB, RunKind, Status, StopRule
from pipeline.reporting import runs_table
from pipeline.reporting.table import Criteria
from pipeline.search import confirmation, trials, workers
from pipeline.search.answer import Answer, Decided, decide, log_answer
from pipeline.search.calibration import ATTR as CALIBRATION
from pipeline.search.calibration import Calibration, Prober, knobs_of
from pipeline.search.predictor import Knobs, Predictor
from pipeline.search.space import SPLIT_KEY, Candidate, candidates, knob_space, suggest
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker, absolute_uri, flatten, store_lock

OBJECTIVE = "step s"


def study_name(cfg: DictConfig, cap_bytes: int) -> str:
    """Same command, same name: the config's identity and the search settings that shape the answer (trials,
    sampler, seed and storage do not)."""
    search = OmegaConf.to_container(cfg.optimize, resolve=True)
    for key in ("trials", "sampler", "seed", "storage", "study_name"):
        search.pop(key, None)
    tree = {**identity_tree(cfg), "optimize": search}
    tree["batch"].pop("split", None)  # always searched
    return f"{cfg.model.name}-e{cfg.batch.effective}-cap{cap_bytes / GIB:g}GiB-{digest(tree, 8)}"


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "bruteforce":
        return optuna.samplers.BruteForceSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)


class StudyDriver:
    def __init__(self, cfg: DictConfig, command: list[str]) -> None:
        """`command`: the overrides the study was started with, the start of every reproduce line it prints."""
        self.cfg = cfg
        self.o = cfg.optimize
        self.cap = validate(cfg).cap_bytes
        self.name = self.o.study_name or study_name(cfg, self.cap)
        self.space = knob_space(cfg)
        self.valid, self.invalid = candidates(cfg)
        self.by_id = {c.config_id: c for c in self.valid}
        searched = set(self.space)
        self.command = [o for o in command if o.partition("=")[0].lstrip("+~") not in searched]
        self.tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.artifact_root)
        self.storage = storage = absolute_uri(self.o.storage)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the study's own lines say what it opened
        with store_lock(storage):
            self.study = optuna.create_study(
                study_name=self.name,
                storage=storage,
                sampler=make_sampler(self.o.sampler, self.o.seed),
                direction="minimize",
                load_if_exists=True,
            )
            if self.study.metric_names is None:
                with warnings.catch_warnings():  # "experimental" since Optuna 3.2, and what the dashboard reads
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    self.study.set_metric_names([OBJECTIVE])
        self.predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))
        self.placement_dtype: str | None = None
        self.device: str | None = None

    # ---- bookkeeping ----------------------------------------------------------------------------------------------
    def _parent_run(self) -> str:
        base = flatten(OmegaConf.to_container(self.cfg, resolve=True))
        params = {
            "study": self.name,
            "cap_gib": self.cap / GIB,
            "space": json.dumps(self.space),
            "trials": self.o.trials,
            "sampler": self.o.sampler,
            **{f"base.{k}": v for k, v in base.items() if not k.startswith("optimize.")},
        }
        return runs.open_study(self.tracker, self.name, " ".join(self.command), params)

    def _space_keys(self) -> list[str]:
        return list(self.space)

    # ---- calibration and baseline -------------------------------------------------------------------------------
    def calibrate(self, parent: str) -> None:
        """Once per study, by whichever worker gets there first (the others wait and use its result): the probes,
        then the baseline and the probes' fastest candidate queued as the first trials."""
        with workers.claim(self.study, self.storage, CALIBRATION) as mine:
            if mine:
                prober = Prober(
                    self.cfg, self._space_keys(), self.cap, self.name, parent, self.o.probe_steps, self._base_in_space()
                )
                found = prober.run(self.space)
                self.predictor.calibrate(found.base_probes)
                found.scale, found.offset = self.predictor.scale, self.predictor.offset
                self._queue_first_trials(found)
                self.study.set_user_attr(CALIBRATION, found.to_attr())
        saved = Calibration.of(self.study.user_attrs[CALIBRATION])
        self.predictor.scale, self.predictor.offset = saved.scale, saved.offset
        self.placement_dtype, self.device = saved.dtype, saved.device

    def base_values(self, split: str | None = None) -> dict[str, object]:
        """The base config's value of every searched key (its own split unless `split` is given)."""
        return {key: (split if key == SPLIT_KEY and split else OmegaConf.select(self.cfg, key)) for key in self.space}

    def _queue_first_trials(self, found: Calibration) -> None:
        if self.o.baseline and self._base_in_space():
            # the baseline first: never pruned, and every other trial is judged against a measured config
            self.study.enqueue_trial(
                self.base_values(), user_attrs={trials.ROLE: trials.Role.BASELINE}, skip_if_exists=True
            )
        if found.first:
            # the probes' fastest candidate next: the best so far early, so slow configs are pruned soon
            self.study.enqueue_trial(self.base_values(found.first[0]), skip_if_exists=True)

    def _requeue_baseline(self) -> None:
        """A baseline trial the study was stopped during (failed, not decided) is queued again with its role, so the
        resumed study still measures its baseline in full (Optuna's `skip_if_exists` would see the failed one)."""
        if not (self.o.baseline and self._base_in_space()):
            return
        marked = [
            t for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get(trials.ROLE) == trials.Role.BASELINE
        ]
        if marked and all(t.state == TrialState.FAIL for t in marked):
            self.study.enqueue_trial(self.base_values(), user_attrs={trials.ROLE: trials.Role.BASELINE})

    def _base_in_space(self) -> bool:
        """Whether the base config is one of the candidates (its values are in the space, and it is valid)."""
        values = tuple(self.base_values().items())
        return any(c.values == values for c in self.valid)

    # ---- one trial ----------------------------------------------------------------------------------------------------
    def evaluate(self, trial: optuna.Trial, candidate: Candidate, parent: str) -> None:
        """Decide one candidate: skipped when predicted over the cap, else measured (stopped early when over the
        cap or slow), and told to Optuna with its constraint."""
        knobs = knobs_of(candidate.config, self._space_keys(), self.placement_dtype)
        self.predictor.measured = self._measurements()
        predicted = self.predictor.predict(knobs)
        trials.write(
            trial,
            {
                trials.OVERRIDES: candidate.overrides,
                trials.WORLD_SIZE: int(candidate.config.world_size),
                trials.PREDICTED: predicted / GIB,
                trials.KNOBS: {"micro": knobs.micro, "dtype": knobs.dtype, "checkpointing": knobs.checkpointing},
            },
        )
        run_name = f"trial {trial.number}: {candidate.label}"
        tags = {runs.STUDY: self.name, "trial": trial.number, runs.PREDICTED: f"{predicted / GIB:.3f}"}
        if predicted > self.cap * (1 + self.o.skip_margin):
            self._skip(trial, candidate, parent, run_name, tags, predicted)
        else:
            self._measure(trial, candidate, parent, run_name, tags)

    def _skip(self, trial, candidate: Candidate, parent: str, run_name: str, tags: dict, predicted: float) -> None:
        """Decided without a job: an infeasible trial, its value the step time the probes predict."""
        reason = f"predicted {predicted / GIB:.2f} GiB > cap {self.cap / GIB:.2f} GiB"
        spec = task.job_spec(candidate.config, name=candidate.label)
        run_id = runs.log_skip(self.tracker, parent, run_name, spec, reason, predicted, tags)
        trials.write(trial, {trials.STATUS: Status.SKIPPED, trials.NOTE: reason, trials.RUN_ID: run_id})
        trials.write(trial, {trials.FEASIBLE: False})
        self._constrain(trial, (predicted - self.cap) / GIB)
        self._tell_infeasible(trial, self._predicted_step(candidate))

    def _predicted_step(self, candidate: Candidate) -> float | None:
        split = parse_split(candidate.config.batch.split)
        calibration = Calibration.of(self.study.user_attrs[CALIBRATION])
        checkpointing = bool(candidate.config.train.gradient_checkpointing)
        return calibration.step_estimate(split.micro, split.accumulation, checkpointing)

    def _tell_infeasible(self, trial: optuna.Trial, value: float | None) -> None:
        """Over the cap, measured or predicted: COMPLETE with its step time and a positive constraint, so that
        optuna-dashboard shows it as infeasible and plots it; without any step time, PRUNED."""
        if value is None:
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            trials.write(trial, {trials.VALUE_NOTE: "infeasible: over the cap"})
            self.study.tell(trial, value)

    def _stop_rule(self, trial: optuna.Trial) -> StopRule:
        """Over the cap always stops a trial; slowness, against the best so far, stops any but the baseline."""
        best = trials.best(self.study, self.o.max_loss_dev)
        if best is None or trial.user_attrs.get(trials.ROLE) == trials.Role.BASELINE:
            return StopRule(cap_bytes=self.cap)
        return StopRule(self.cap, self.o.prune_steps, best.median * self.o.prune_factor)

    def _measure(self, trial: optuna.Trial, candidate: Candidate, parent: str, run_name: str, tags: dict) -> None:
        spec = task.job_spec(candidate.config, name=candidate.label, stop=self._stop_rule(trial))
        outcome = task.run(
            candidate.config, spec=spec, kind=RunKind.TRIAL, parent_id=parent, tags=tags, run_name=run_name
        )
        summary, result = outcome.summary, outcome.result
        warmup = candidate.config.measure.warmup_steps
        steady = [s.step_time_s for s in steady_steps(result, warmup)]
        early = [s.step_time_s for s in result.steps if s.step <= warmup and s.steady_candidate]
        trials.write(
            trial,
            {
                trials.STATUS: result.status,
                trials.GPU_SECONDS: summary.wall_s,
                trials.PEAK: summary.peak_gib,
                trials.MEDIAN: summary.median,
                trials.CI: summary.step_time.ci if summary.step_time else None,
                trials.TOKENS: summary.per_second(summary.tokens_per_step),
                trials.STEP_TIMES: steady,
                trials.WARMUP_TIMES: early,
                trials.LOSSES: [step.loss for step in result.steps],
                trials.RUN_ID: outcome.run_id,
                trials.NOTE: result.stopped or result.error or "",
                trials.SFT: result.sft_kwargs,
            },
        )
        ran = [s.step_time_s - s.compile_s for s in result.steps if s.step > 1]
        value = summary.median if summary.median is not None else (statistics.median(ran) if ran else None)
        self._tell(trial, result.status, summary.peak_gib, value if ran else self._predicted_step(candidate))

    def _tell(self, trial: optuna.Trial, status: Status, peak: float | None, value: float | None) -> None:
        """COMPLETE with its step time when it ran under the cap, or over it (infeasible: a positive constraint);
        PRUNED when slow; FAIL when it crashed. The constraint (peak minus cap) wherever a peak was measured.
        `value`: its steady median, or the median of the steps it ran before it was stopped (after the first), or
        the probes' estimate when it stopped in its first step."""
        if status not in (Status.OK, Status.OVER_CAP, Status.OOM, Status.PRUNED):
            self.study.tell(trial, state=TrialState.FAIL)
            return
        over = (peak * GIB - self.cap) / GIB if peak else 0.0
        if status in (Status.OVER_CAP, Status.OOM):
            over = max(over, 1e-3)
        if status is not Status.PRUNED or peak:
            self._constrain(trial, over)
        trials.write(trial, {trials.FEASIBLE: over <= 0} if peak or over > 0 else {})  # no peak: not known
        if over > 0:
            self._tell_infeasible(trial, value)
        elif status is Status.OK and value is not None:
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=TrialState.PRUNED)

    def _constrain(self, trial: optuna.Trial, over_gib: float) -> None:
        """Peak minus cap, as Optuna 5 stores a constraint and as optuna-dashboard reads one."""
        trial.set_constraint("memory_gib", over_gib)
        self.study._storage.set_trial_system_attr(trial._trial_id, "constraints", [over_gib])

    def _measurements(self) -> list[tuple[Knobs, float]]:
        """Peaks measured so far, by any worker: the probes and every trial that ran at least a step."""
        found = list(Calibration.of(self.study.user_attrs[CALIBRATION]).probes)
        for record in trials.records(self.study):
            if record.status in (Status.OK, Status.PRUNED) and record.peak_gib and record.config_id in self.by_id:
                config = self.by_id[record.config_id].config
                found.append((knobs_of(config, self._space_keys(), self.placement_dtype), record.peak_gib * GIB))
        return found

    # ---- the confirmation round -----------------------------------------------------------------------------------
    def confirm(self, parent: str) -> None:
        """Once per study, by whichever worker gets there first: the finalists in paired rounds."""
        settings = confirmation.Settings.of(self.cfg)
        decided = Decided.of(self.study, self.o.max_loss_dev)
        chosen = confirmation.choose(decided.eligible, decided.baseline, settings)
        if not chosen or confirmation.ATTR in self.study.user_attrs:
            return
        with workers.claim(self.study, self.storage, confirmation.ATTR) as mine:
            if not mine:
                return
            baseline = decided.baseline.label if decided.baseline else None
            if decided.confirmation is not None:  # the record of a round this study stopped during
                print(
                    f"[study] confirmation round: the last one stopped after {decided.confirmation.rounds} "
                    "round(s); it runs again",
                    flush=True,
                )
            record = confirmation.run_round(
                chosen,
                baseline,
                settings,
                decided.gpu_seconds,
                lambda r, n, warmup, steps: self._confirm_run(r, n, warmup, steps, parent),
                save=lambda partial: self.study.set_user_attr(confirmation.PARTIAL, partial.to_attr()),
            )
            self.study.set_user_attr(confirmation.ATTR, record.to_attr())

    def _confirm_run(
        self, record: trials.TrialRecord, number: int, warmup: int, steps: int, parent: str
    ) -> tuple[float | None, float]:
        """One confirmation run of a finalist: `steps` steady steps after `warmup`, in a fresh process; uncapped
        for a baseline that did not fit (it is measured for its speed, not judged against the cap). Its figure is
        the trimmed mean of its steady steps (`compare.sequential` says why)."""
        config = OmegaConf.create(OmegaConf.to_container(self.by_id[record.config_id].config))
        config.measure.warmup_steps = warmup
        config.train.steps = warmup + steps
        # the finalist's own identity: the same config, trained for fewer steps, so its runs pool with its trial
        spec = dataclasses.replace(
            task.job_spec(config, name=record.label, uncapped=not record.feasible), config_id=record.config_id
        )
        outcome = task.run(
            config,
            spec=spec,
            kind=RunKind.CONFIRM,
            parent_id=parent,
            run_name=f"confirm {number}: {record.label}",
            tags={runs.STUDY: self.name, runs.ROUND: number},
        )
        figure = (
            outcome.summary.step_time.trimmed if outcome.status is Status.OK and outcome.summary.step_time else None
        )
        return figure, outcome.summary.wall_s

    # ---- the loop -----------------------------------------------------------------------------------------------------
    def run(self) -> Answer:
        dead = workers.fail_stale(self.study)
        task.clean_up(self.tracker, dead)
        with store_lock(self.storage):  # workers that start together find or open one parent run
            parent = self._parent_run()
        finished = False
        try:
            print(
                f"[study] {self.name}: {len(self.valid)} valid configs, budget {self.o.trials} trials, cap "
                f"{self.cap / GIB:.2f} GiB; storage {self.o.storage}"
                + (f"; {len(dead)} stale trial(s) marked FAIL" if dead else ""),
                flush=True,
            )
            runner.warm_up(self.cfg.launcher.kind)
            self.calibrate(parent)
            self._requeue_baseline()
            self._loop(parent)
            self.confirm(parent)
            finished = True
        finally:
            workers.release_own(self.study)  # interrupted mid-trial: not decided, may run again
            decided = Decided.of(self.study, self.o.max_loss_dev)
            answer = decide(
                decided,
                self.name,
                self.command,
                self.cap,
                self.cfg.measure.confidence,
                confirm_off=self.o.confirm == "never",
                stopped=not finished,
            )
            if finished and answer.best is not None:
                self.study.set_user_attr(trials.ANSWER, answer.best.number)  # what optuna-dashboard shows as best
            print(answer.text, flush=True)
            if finished:  # the runs table's rank and time ratio of every run, against the answer
                runs_table.tag_study(
                    self.tracker, parent, Criteria.of(self.cfg.measure), answer.best and answer.best.config_id
                )
            log_answer(self.tracker, parent, answer, finished)
        return answer

    def _loop(self, parent: str) -> None:
        budget = min(self.o.trials, len(self.valid))
        decided = workers.decided(self.study)
        # on a terminal only (disable=None): a log or a pipe gets the lines without the bar's redraws
        bar = tqdm(
            total=budget,
            initial=min(len(decided), budget),
            desc="trials",
            unit="trial",
            dynamic_ncols=True,
            disable=None,
        )
        above = contextlib.nullcontext() if bar.disable else contextlib.redirect_stdout(_AboveBar(sys.stdout))
        with above, bar:
            while len(workers.decided(self.study)) < budget and self._next_trial(parent, bar):
                pass
        self._fail_stale()  # a dead worker's config may have been measured here just now: its trial ends too

    def _next_trial(self, parent: str, bar: tqdm) -> bool:
        """Ask the sampler for a config and decide it; False once every config is decided. While the only configs
        left are being measured by other workers, wait for them: a worker that dies leaves its config to be
        measured again once its heartbeat lapses, and no worker may stop before that."""
        self._fail_stale()
        open_ids = {c.config_id for c in self.valid} - set(workers.decided(self.study))
        if not open_ids:
            return False
        if open_ids <= workers.taken(self.study, current=-1):
            time.sleep(HEARTBEAT_S)  # every open config is another live worker's: its result, or its death, comes
            return True
        trial = self.study.ask()
        workers.own(trial)
        values = suggest(trial, self.space)
        candidate = next((c for c in self.valid if c.values == values), None)
        taken = workers.taken(self.study, trial.number)
        if candidate is None or candidate.config_id in taken:
            # already decided (or not a valid combination): close it, and steer the next ask to a new config
            self._repeat_of(trial, candidate, values)
            remaining = [c for c in self.valid if c.config_id not in taken]
            if not remaining:
                return True  # everything is decided or being measured by another worker: the next call sees which
            # the sampler keeps proposing what is known once the space is nearly decided: hand it an
            # undecided config (drawn, so no order of the space is favoured)
            pick = random.Random(self.o.seed * 100_003 + trial.number).choice(remaining)
            self.study.enqueue_trial(pick.params, skip_if_exists=False)
            return True
        # the claim: workers sharing the study see the config taken from here on
        trials.write(trial, {trials.LABEL: candidate.label, trials.CONFIG_ID: candidate.config_id})
        if workers.claimed_earlier(self.study, trial.number, candidate.config_id):
            self.study.tell(trial, state=TrialState.FAIL)  # another worker asked for it first
            return True
        started = time.time()
        with workers.trial_heartbeat(self.study, trial):
            self.evaluate(trial, candidate, parent)
        bar.set_postfix_str(f"{candidate.label}: {time.time() - started:.0f} s")
        bar.update(1)
        return True

    def _repeat_of(self, trial: optuna.Trial, candidate: Candidate | None, values) -> None:
        """A proposal of a config already decided: told as its decision was (state, value, constraint), labelled
        `repeat_of` with that trial's number, and never measured again; one another worker is measuring (or an
        invalid combination) is FAIL, labelled the same way."""
        decided = workers.decided(self.study).get(candidate.config_id) if candidate else None
        trial.set_user_attr(trials.REPEAT_OF, decided.number if decided else " ".join(f"{k}={v}" for k, v in values))
        if decided is None:
            self.study.tell(trial, state=TrialState.FAIL)
            return
        for name, value in decided.system_attrs.items():
            if name.startswith("constraints"):
                self.study._storage.set_trial_system_attr(trial._trial_id, name, value)
        if decided.state is TrialState.COMPLETE:
            self.study.tell(trial, decided.value)
        else:
            self.study.tell(trial, state=decided.state)

    def _fail_stale(self) -> None:
        """Between trials: mark FAIL the trials of workers sharing the study that died since (their heartbeat lapsed),
        and end their MLflow runs."""
        dead = workers.fail_stale(self.study)
        if dead:
            print(f"[study] {len(dead)} trial(s) of a dead worker marked FAIL", flush=True)
            task.clean_up(self.tracker, dead)


class _AboveBar(io.TextIOBase):
    """stdout while the trials' bar is on a terminal: each whole line is written above the bar (tqdm.write), so
    the job lines and the bar do not share a line."""

    def __init__(self, out) -> None:
        self.out, self.pending = out, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            tqdm.write(line, file=self.out)
        return len(text)

    def flush(self) -> None:
        self.out.flush()
