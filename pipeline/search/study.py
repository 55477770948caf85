"""The Optuna study: the fastest configuration whose peak memory fits under the cap.

Cheap decisions first. Two short probe jobs (smallest and largest micro-batch, once per step, uncapped) calibrate
the memory predictor, and the candidate their step times say is fastest is the first trial, so the others are judged
against a measured best; measured peaks refine the predictor as trials finish. A candidate predicted over the cap
(by more than `skip_margin`) is recorded infeasible without launching; a launched job stops at the first step whose
peak is over the cap, and a slow one when the median of its `prune_steps` steps after the first exceeds the best so
far times `prune_factor` (mid-step, once a step has run twice that); only contenders run all their steps.
Objective: steady step time (median); constraint: peak memory minus cap, in GiB, given with `trial.set_constraint`,
so infeasible trials still teach the sampler.

The study lives in `optimize.storage` (sqlite under mlruns/ by default) under a name derived from the config, so
re-running the same command resumes it: decided configs are never run again, and trials left RUNNING by a killed
worker are marked FAIL. Every trial is an isolated job run by the same code as `pipeline.train`, nested in one MLflow
parent run for the study.
"""

from __future__ import annotations

import json
import random
import time

import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState
from tqdm import tqdm

from pipeline.config.identity import digest, identity_tree
from pipeline.config.validate import validate
from pipeline.jobs import runner, task
from pipeline.measure.flops import Shape
from pipeline.records import GIB, RunKind, Status, StopRule
from pipeline.search import trials, workers
from pipeline.search.answer import Answer, decide, log_answer
from pipeline.search.predictor import Knobs, Predictor
from pipeline.search.space import SPLIT_KEY, Candidate, candidates, knob_space, suggest
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker, absolute_uri, flatten, store_lock

NOT_MEASURED = 1e6  # objective value of a trial decided without a measurement (skipped by prediction)
FORMULA_KNOBS = (SPLIT_KEY, "train.dtype", "train.gradient_checkpointing")  # what the predictor's formula sees


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


def knobs_of(cfg: DictConfig, space_keys: list[str], placement_dtype: str | None = None) -> Knobs:
    """The memory knobs of a config: the formula's own, and the other searched keys as the line's fixed setting."""
    micro = int(cfg.batch.split.split("x")[0])
    dtype = cfg.train.dtype if cfg.train.dtype != "auto" else (placement_dtype or "fp32")
    other = tuple((k, str(OmegaConf.select(cfg, k))) for k in space_keys if k not in FORMULA_KNOBS)
    return Knobs(micro, cfg.train.max_length, dtype, bool(cfg.train.gradient_checkpointing), other)


def probe_points(calibration: dict) -> list[tuple[Knobs, float]]:
    """The calibration probes stored on a study, as (knobs, peak bytes)."""
    return [
        (Knobs(p["micro"], p["max_length"], p["dtype"], p["checkpointing"], tuple(map(tuple, p["other"]))), p["peak"])
        for p in calibration.get("probes", [])
    ]


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
        with store_lock(storage):
            self.study = optuna.create_study(
                study_name=self.name,
                storage=storage,
                sampler=make_sampler(self.o.sampler, self.o.seed),
                direction="minimize",
                load_if_exists=True,
            )
        self.predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))
        self.gpu_seconds = 0.0
        self.placement_dtype: str | None = None
        self.device: str | None = None

    # ---- bookkeeping ----------------------------------------------------------------------------------------------
    def _parent_run(self) -> str:
        found = self.tracker.search(
            f"tags.{runs.KIND} = 'study' and tags.{runs.STUDY} = {runs.quoted(self.name)}", limit=1
        )
        if found:
            return self.tracker.reopen(found[0].info.run_id, runs.ABANDONED)
        run_id = self.tracker.start(
            f"study {self.name}",
            tags={
                runs.KIND: RunKind.STUDY,
                runs.STUDY: self.name,
                runs.STATUS: Status.RUNNING,
                "overrides": " ".join(self.command),
            },
            abandon_tags=runs.ABANDONED,
        )
        base = flatten(OmegaConf.to_container(self.cfg, resolve=True))
        self.tracker.params(
            run_id,
            {
                "study": self.name,
                "cap_gib": self.cap / GIB,
                "space": json.dumps(self.space),
                "trials": self.o.trials,
                "sampler": self.o.sampler,
                **{f"base.{k}": v for k, v in base.items() if not k.startswith("optimize.")},
            },
        )
        return run_id

    def _space_keys(self) -> list[str]:
        return list(self.space)

    # ---- calibration ------------------------------------------------------------------------------------------------
    def calibrate(self, parent: str) -> None:
        """Once per study, by whichever worker gets there first; the others wait for it and use its result."""
        with workers.calibration_claim(self.study, self.storage) as mine:
            if mine:
                self._run_probes(parent)
        saved = self.study.user_attrs["calibration"] if not mine else None
        if saved:
            self.predictor.scale, self.predictor.offset = saved["scale"], saved["offset"]
            self.placement_dtype, self.device = saved["dtype"], saved["device"]

    def _run_probes(self, parent: str) -> None:
        split_values = self.space[SPLIT_KEY]
        probes, first = [], None
        probe_seconds = 0.0
        for split in dict.fromkeys([split_values[0], split_values[-1]]):
            # Memory depends on the micro-batch, not on accumulation: a probe runs its micro-batch once per step.
            micro, accumulation = (int(x) for x in split.split("x"))
            cfg = OmegaConf.create(OmegaConf.to_container(self.cfg, resolve=False))
            cfg.batch.split = f"{micro}x1"
            cfg.batch.effective = micro * cfg.world_size
            cfg.train.steps = self.o.probe_steps
            cfg.measure.warmup_steps = 1
            spec = task.job_spec(cfg, name=f"probe {micro}x1", uncapped=True)
            outcome = task.run(
                cfg,
                spec=spec,
                kind=RunKind.PROBE,
                parent_id=parent,
                tags={runs.STUDY: self.name},
            )
            summary = outcome.summary
            probe_seconds += summary.seconds.get("wall", 0.0)
            if outcome.status is not Status.OK or not summary.peak_gib:
                continue
            placement = outcome.result.placement
            self.placement_dtype, self.device = placement.dtype, placement.device
            probe_cfg = OmegaConf.create(OmegaConf.to_container(self.cfg, resolve=False))
            probe_cfg.batch.split = f"{micro}x{accumulation}"
            probes.append((knobs_of(probe_cfg, self._space_keys(), placement.dtype), summary.peak_gib * GIB))
            if summary.median and summary.peak_gib * GIB <= self.cap and self._base_in_space():
                # The base config at this split (a candidate) takes about `accumulation` probe steps.
                estimate = summary.median * accumulation
                if first is None or estimate < first[1]:
                    first = (split, estimate)
        self.gpu_seconds += probe_seconds
        self.predictor.calibrate(probes)
        if first:
            # The probes' fastest candidate is measured first: every later trial is pruned against a real best.
            params = {key: (first[0] if key == SPLIT_KEY else OmegaConf.select(self.cfg, key)) for key in self.space}
            self.study.enqueue_trial(params, skip_if_exists=True)
        self.study.set_user_attr(
            "calibration",
            {
                "scale": self.predictor.scale,
                "offset": self.predictor.offset,
                "probes": [
                    {
                        "micro": k.micro,
                        "max_length": k.max_length,
                        "dtype": k.dtype,
                        "checkpointing": k.checkpointing,
                        "other": k.other,
                        "peak": peak,
                    }
                    for k, peak in probes
                ],
                "first": list(first) if first else None,
                "gpu_seconds": probe_seconds,
                "dtype": self.placement_dtype,
                "device": self.device,
            },
        )

    def _base_in_space(self) -> bool:
        return all(OmegaConf.select(self.cfg, key) in values for key, values in self.space.items() if key != SPLIT_KEY)

    # ---- one trial ----------------------------------------------------------------------------------------------------
    def evaluate(self, trial: optuna.Trial, candidate: Candidate, parent: str) -> None:
        knobs = knobs_of(candidate.config, self._space_keys(), self.placement_dtype)
        self.predictor.measured = self._measurements()
        predicted = self.predictor.predict(knobs)
        trials.write(
            trial,
            {
                trials.OVERRIDES: candidate.overrides,
                trials.PREDICTED: predicted / GIB,
                trials.KNOBS: {"micro": knobs.micro, "dtype": knobs.dtype, "checkpointing": knobs.checkpointing},
            },
        )
        run_name = f"trial {trial.number}: {candidate.label}"
        tags = {runs.STUDY: self.name, "trial": trial.number, runs.PREDICTED: f"{predicted / GIB:.3f}"}
        if predicted > self.cap * (1 + self.o.skip_margin):
            reason = f"predicted {predicted / GIB:.2f} GiB > cap {self.cap / GIB:.2f} GiB"
            spec = task.job_spec(candidate.config, name=candidate.label)
            run_id = runs.log_skip(self.tracker, parent, run_name, spec, reason, predicted, tags)
            trials.write(
                trial,
                {trials.STATUS: Status.SKIPPED, trials.NOTE: reason, trials.RUN_ID: run_id, trials.FEASIBLE: False},
            )
            trial.set_constraint("memory_gib", (predicted - self.cap) / GIB)
            self.study.tell(trial, NOT_MEASURED)
            return
        best = trials.best(self.study)
        stop = StopRule(cap_bytes=self.cap)
        if best is not None:
            stop = StopRule(self.cap, self.o.prune_steps, best.median * self.o.prune_factor)
        spec = task.job_spec(candidate.config, name=candidate.label, stop=stop)
        outcome = task.run(
            candidate.config, spec=spec, kind=RunKind.TRIAL, parent_id=parent, tags=tags, run_name=run_name
        )
        summary, result = outcome.summary, outcome.result
        self.gpu_seconds += summary.seconds.get("wall", 0.0)
        peak = summary.peak_gib
        steady = [s.step_time_s for s in result.steps if s.step > candidate.config.measure.warmup_steps]
        trials.write(
            trial,
            {
                trials.STATUS: result.status,
                trials.GPU_SECONDS: summary.seconds.get("wall", 0.0),
                trials.PEAK: peak,
                trials.MEDIAN: summary.median,
                trials.CI: summary.step_time.ci if summary.step_time else None,
                trials.TOKENS: summary.per_second(summary.tokens_per_step),
                trials.STEP_TIMES: steady,
                trials.RUN_ID: outcome.run_id,
                trials.NOTE: result.stopped or result.error or "",
                trials.SFT: result.sft_kwargs,
            },
        )
        if result.status is Status.PRUNED:
            self.study.tell(trial, state=TrialState.PRUNED)
        elif result.status in (Status.OK, Status.OVER_CAP, Status.OOM):
            over = (peak * GIB - self.cap) / GIB if peak else 0.0
            if result.status is not Status.OK:
                over = max(over, 1e-3)
            trials.write(trial, {trials.FEASIBLE: over <= 0})
            trial.set_constraint("memory_gib", over)
            ok = result.status is Status.OK and summary.median is not None
            self.study.tell(trial, summary.median if ok else NOT_MEASURED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)

    def _measurements(self) -> list[tuple[Knobs, float]]:
        """Peaks measured so far, by any worker: the probes and every trial that ran at least a step."""
        found = probe_points(self.study.user_attrs.get("calibration") or {})
        for record in trials.records(self.study):
            if record.status in (Status.OK, Status.PRUNED) and record.peak_gib and record.config_id in self.by_id:
                config = self.by_id[record.config_id].config
                found.append((knobs_of(config, self._space_keys(), self.placement_dtype), record.peak_gib * GIB))
        return found

    # ---- the loop -----------------------------------------------------------------------------------------------------
    def run(self) -> Answer:
        dead = workers.fail_stale(self.study)
        task.clean_up(self.tracker, dead)
        with store_lock(self.storage):  # workers that start together find or open one parent run
            parent = self._parent_run()
        status = "KILLED"
        try:
            print(
                f"[study] {self.name}: {len(self.valid)} valid configs, budget {self.o.trials} trials, cap "
                f"{self.cap / GIB:.2f} GiB; storage {self.o.storage}"
                + (f"; {len(dead)} stale trial(s) marked FAIL" if dead else ""),
                flush=True,
            )
            runner.warm_up(self.cfg.launcher.kind)
            self.calibrate(parent)
            self._loop(parent)
            status = "FINISHED"
        finally:
            workers.release_own(self.study)  # interrupted mid-trial: not decided, may run again
            answer = decide(self)
            print(answer.text, flush=True)
            log_answer(self.tracker, parent, answer, status)
        return answer

    def _loop(self, parent: str) -> None:
        budget = min(self.o.trials, len(self.valid))
        decided = workers.decided(self.study)
        bar = tqdm(total=budget, initial=min(len(decided), budget), desc="trials", unit="trial", dynamic_ncols=True)
        try:
            while len(workers.decided(self.study)) < budget:
                self._fail_stale()
                trial = self.study.ask()
                workers.own(trial)
                values = suggest(trial, self.space)
                candidate = next((c for c in self.valid if c.values == values), None)
                taken = workers.taken(self.study, trial.number)
                if candidate is None or candidate.config_id in taken:
                    # already decided (or not a valid combination): close it, and steer the next ask to a new config
                    trial.set_user_attr("duplicate_of", " ".join(f"{k}={v}" for k, v in values))
                    self.study.tell(trial, state=TrialState.FAIL)
                    remaining = [c for c in self.valid if c.config_id not in taken]
                    if not remaining:
                        break  # everything is decided or being measured by another worker
                    # the sampler keeps proposing what is known once the space is nearly decided: hand it an
                    # undecided config (drawn, so no order of the space is favoured)
                    pick = random.Random(self.o.seed * 100_003 + trial.number).choice(remaining)
                    self.study.enqueue_trial(pick.params, skip_if_exists=False)
                    continue
                # the claim: workers sharing the study see the config taken from here on
                trials.write(trial, {trials.LABEL: candidate.label, trials.CONFIG_ID: candidate.config_id})
                if workers.claimed_earlier(self.study, trial.number, candidate.config_id):
                    self.study.tell(trial, state=TrialState.FAIL)  # another worker asked for it first
                    continue
                started = time.time()
                with workers.trial_heartbeat(self.study, trial):
                    self.evaluate(trial, candidate, parent)
                bar.set_postfix_str(f"{candidate.label}: {time.time() - started:.0f} s")
                bar.update(1)
        finally:
            bar.close()
        self._fail_stale()  # a dead worker's config may have been measured here just now: its trial ends too

    def _fail_stale(self) -> None:
        """Between trials: mark FAIL the trials of workers sharing the study that died since (their heartbeat lapsed),
        and end their MLflow runs."""
        dead = workers.fail_stale(self.study)
        if dead:
            print(f"[study] {len(dead)} trial(s) of a dead worker marked FAIL", flush=True)
            task.clean_up(self.tracker, dead)
