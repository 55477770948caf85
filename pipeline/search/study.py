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

import hashlib
import json
import os
import random
import time

import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState
from tqdm import tqdm

from pipeline.config.validate import parse_size
from pipeline.jobs import runner, task
from pipeline.search import workers
from pipeline.search.answer import best_trial
from pipeline.search.predictor import GIB, Knobs, Predictor, Shape
from pipeline.search.space import SPLIT_KEY, Candidate, apply, candidates, knob_space, suggest
from pipeline.tracking.store import STATUS_TAG, Tracker, absolute_uri, flatten, store_lock

NOT_MEASURED = 1e6  # objective value of a trial decided without a measurement (skipped by prediction)


def study_name(cfg: DictConfig, cap_bytes: int) -> str:
    """Same command, same name: everything that shapes the answer, hashed (trials and sampler do not)."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in ("tracking", "paths", "repeat", "repeats", "sweep_id", "launcher"):
        container.pop(key, None)
    for key in ("trials", "sampler", "seed", "storage", "study_name"):
        container["optimize"].pop(key, None)
    container["train"].pop("progress_bar", None)
    digest = hashlib.sha1(json.dumps(container, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{cfg.model.name}-e{cfg.batch.effective}-cap{cap_bytes / GIB:g}GiB-{digest}"


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "bruteforce":
        return optuna.samplers.BruteForceSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)


def knobs_of(cfg: DictConfig, split: str, placement_dtype: str | None = None) -> Knobs:
    micro = int(split.split("x")[0])
    dtype = cfg.train.dtype if cfg.train.dtype != "auto" else (placement_dtype or "fp32")
    return Knobs(micro, cfg.train.max_length, dtype, bool(cfg.train.gradient_checkpointing))


def probe_points(calibration: dict, length: int) -> list[tuple[Knobs, float]]:
    """The calibration probes stored on a study, as (knobs, peak bytes); entries of the older [micro, peak] form,
    which do not say their knobs, are left out."""
    return [(Knobs(p[0], length, p[2], bool(p[3])), p[1] * GIB) for p in calibration.get("probes", []) if len(p) == 4]


class StudyDriver:
    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.o = cfg.optimize
        self.cap = parse_size(cfg.mem_cap) if cfg.mem_cap else int(cfg.gpu.memory_gib * GIB)
        self.name = self.o.study_name or study_name(cfg, self.cap)
        self.space = knob_space(cfg)
        self.valid, self.invalid = candidates(cfg)
        self.tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.artifact_root)
        storage = absolute_uri(self.o.storage)
        with store_lock(storage):
            self.study = optuna.create_study(
                study_name=self.name,
                storage=storage,
                sampler=make_sampler(self.o.sampler, self.o.seed),
                direction="minimize",
                load_if_exists=True,
            )
        self.predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))

    # ---- bookkeeping ----------------------------------------------------------------------------------------------
    def _parent_run(self) -> str:
        found = self.tracker.search(f"tags.kind = 'study' and tags.study = '{self.name}'", limit=1)
        if found:
            return self.tracker.reopen(found[0].info.run_id)
        run_id = self.tracker.start(
            f"study {self.name}",
            tags={"kind": "study", "study": self.name, STATUS_TAG: "running", "worker_pid": os.getpid()},
        )
        self.tracker.params(
            run_id,
            {
                "study": self.name,
                "cap_gib": self.cap / GIB,
                "space": json.dumps(self.space),
                "trials": self.o.trials,
                "sampler": self.o.sampler,
                **{
                    f"base.{k}": v
                    for k, v in flatten(OmegaConf.to_container(self.cfg, resolve=True)).items()
                    if not k.startswith("optimize.")
                },
            },
        )
        return run_id

    # ---- calibration ------------------------------------------------------------------------------------------------
    def calibrate(self, parent: str) -> None:
        saved = self.study.user_attrs.get("calibration")
        if saved:
            self.predictor.scale, self.predictor.offset = saved["scale"], saved["offset"]
            self.placement_dtype, self.device = saved.get("dtype"), saved.get("device")
            return
        split_values = self.space[SPLIT_KEY]
        probes = []
        for split in dict.fromkeys([split_values[0], split_values[-1]]):
            # Memory depends on the micro-batch, not on accumulation: a probe runs its micro-batch once per step.
            micro, accumulation = (int(x) for x in split.split("x"))
            cfg = apply(self.cfg, Candidate(((SPLIT_KEY, f"{micro}x1"),)))
            cfg.batch.effective = micro * cfg.world_size
            cfg.train.steps = self.o.probe_steps
            cfg.measure.warmup_steps = 1
            result = task.run(
                cfg,
                parent_id=parent,
                tags={"kind": "probe", "study": self.name, "worker_pid": os.getpid()},
                name=f"probe {micro}x1",
                uncapped=True,  # a probe measures what a micro-batch needs; under the cap it could die before telling
            )
            summary = result["summary"]
            self._gpu_seconds += summary.get("wall_s") or 0.0
            peak = summary.get("peak_gib")
            if result["status"] == "ok" and peak:
                placement = result.get("placement") or {}
                probes.append((knobs_of(cfg, split, placement.get("dtype")), peak * GIB))
                self.placement_dtype, self.device = placement.get("dtype"), placement.get("device")
                step = summary.get("step_time_median_s")
                if step and peak * GIB <= self.cap and self._base_in_space():
                    # The base config at this split (a candidate) takes about `accumulation` probe steps.
                    estimate = step * accumulation
                    if self._first is None or estimate < self._first[1]:
                        self._first = (split, estimate)
        self.predictor.calibrate(probes)
        if self._first:
            # The probes' fastest candidate is measured first: every later trial is pruned against a real best.
            params = {
                key: (self._first[0] if key == SPLIT_KEY else OmegaConf.select(self.cfg, key)) for key in self.space
            }
            self.study.enqueue_trial(params, skip_if_exists=True)
        self.study.set_user_attr(
            "calibration",
            {
                "scale": self.predictor.scale,
                "offset": self.predictor.offset,
                "probes": [[k.micro, p / GIB, k.dtype, k.checkpointing] for k, p in probes],
                "first": list(self._first) if self._first else None,
                "gpu_seconds": self._gpu_seconds,
                "dtype": self.placement_dtype,
                "device": self.device,
            },
        )

    def _base_in_space(self) -> bool:
        return all(OmegaConf.select(self.cfg, key) in values for key, values in self.space.items() if key != SPLIT_KEY)

    # ---- one trial ----------------------------------------------------------------------------------------------------
    def evaluate(self, trial: optuna.Trial, candidate: Candidate, parent: str) -> None:
        cfg = apply(self.cfg, candidate)
        knobs = knobs_of(cfg, candidate.params[SPLIT_KEY], self.placement_dtype)
        self.predictor.measured = self._measurements()
        predicted = self.predictor.predict(knobs)
        for key, value in {
            "label": candidate.label,
            "knobs": [knobs.micro, knobs.dtype, knobs.checkpointing],
            "predicted_gib": predicted / GIB,
            "worker_pid": os.getpid(),
            "overrides": candidate.overrides,
        }.items():
            trial.set_user_attr(key, value)
        if predicted > self.cap * (1 + self.o.skip_margin):
            reason = f"predicted {predicted / GIB:.2f} GiB > cap {self.cap / GIB:.2f} GiB"
            trial.set_user_attr("status", "skipped")
            trial.set_user_attr("reason", reason)
            trial.set_user_attr("gpu_seconds", 0.0)
            trial.set_constraint("memory_gib", (predicted - self.cap) / GIB)
            self._record_skip(parent, trial.number, candidate, reason, predicted)
            self.study.tell(trial, NOT_MEASURED)
            return
        best = best_trial(self.study)
        stop = {"cap_bytes": self.cap}
        if best is not None:
            threshold = best.user_attrs["step_time_median_s"] * self.o.prune_factor
            stop.update(prune_after=self.o.prune_steps, prune_threshold_s=threshold)
        result = task.run(
            cfg,
            stop=stop,
            parent_id=parent,
            name=f"trial {trial.number}: {candidate.label}",
            tags={
                "study": self.name,
                "trial": trial.number,
                "predicted_gib": f"{predicted / GIB:.3f}",
                "worker_pid": os.getpid(),
            },
        )
        summary = result["summary"]
        self._gpu_seconds += summary.get("wall_s") or 0.0
        peak = summary.get("peak_gib")
        attrs = {
            "status": result["status"],
            "gpu_seconds": summary.get("wall_s") or 0.0,
            "peak_gib": peak,
            "step_time_median_s": summary.get("step_time_median_s"),
            "ci": [summary.get("step_time_ci_low_s"), summary.get("step_time_ci_high_s")],
            "tokens_per_s": summary.get("tokens_per_s"),
            "run_id": result["run_id"],
            "reason": result.get("stopped") or result.get("error") or "",
        }
        if peak:
            attrs["predictor_error"] = (predicted / GIB - peak) / peak
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if result["status"] == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
        elif result["status"] in ("ok", "over-cap", "oom"):
            over = (peak * GIB - self.cap) / GIB if peak else 0.0
            if result["status"] != "ok":
                over = max(over, 1e-3)
            trial.set_user_attr("feasible", over <= 0)
            trial.set_constraint("memory_gib", over)
            value = summary.get("step_time_median_s")
            self.study.tell(trial, value if value is not None and result["status"] == "ok" else NOT_MEASURED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)

    def _measurements(self) -> list[tuple[Knobs, float]]:
        """Peaks measured so far, by any worker: the probes and every trial that ran at least a step."""
        length = self.cfg.train.max_length
        found = probe_points(self.study.user_attrs.get("calibration") or {}, length)
        for t in self.study.get_trials(deepcopy=False):
            a = t.user_attrs
            if a.get("status") in ("ok", "pruned") and a.get("peak_gib") and a.get("knobs"):
                micro, dtype, ckpt = a["knobs"]
                found.append((Knobs(micro, length, dtype, bool(ckpt)), a["peak_gib"] * GIB))
        return found

    def _record_skip(self, parent: str, number: int, candidate: Candidate, reason: str, predicted: float) -> None:
        run_id = self.tracker.start(
            f"trial {number}: {candidate.label}",
            parent_id=parent,
            tags={
                "study": self.name,
                "trial": number,
                STATUS_TAG: "skipped",
                "verdict": "predicted-over-cap",
                "reason": reason,
                "worker_pid": os.getpid(),
            },
        )
        self.tracker.params(run_id, candidate.params)
        self.tracker.metrics(run_id, {"predicted_gib": predicted / GIB, "cap_gib": self.cap / GIB})
        self.tracker.end(run_id, "FINISHED")

    # ---- the loop -----------------------------------------------------------------------------------------------------
    def run(self) -> dict:
        self._gpu_seconds = 0.0
        self.placement_dtype = self.device = self._first = None
        stale = workers.fail_stale(self.study, self.tracker, self.name)
        parent = self._parent_run()
        status = "KILLED"
        try:
            print(
                f"[study] {self.name}: {len(self.valid)} valid configs, budget {self.o.trials} trials, cap "
                f"{self.cap / GIB:.2f} GiB; storage {self.o.storage}"
                + (f"; {stale} stale trial(s) marked FAIL" if stale else ""),
                flush=True,
            )
            runner.warm_up(self.cfg.launcher.kind)
            self.calibrate(parent)
            self._loop(parent)
            status = "FINISHED"
        finally:
            from pipeline.search.answer import finish

            self.answer = finish(self, parent, status)
        return self.answer

    def _loop(self, parent: str) -> None:
        valid_labels = {c.label: c for c in self.valid}
        budget = min(self.o.trials, len(self.valid))
        decided = workers.decided(self.study)
        bar = tqdm(total=budget, initial=min(len(decided), budget), desc="trials", unit="trial", dynamic_ncols=True)
        try:
            while len(workers.decided(self.study)) < budget:
                trial = self.study.ask()
                trial.set_user_attr("worker_pid", os.getpid())
                candidate = suggest(trial, self.space)
                done = workers.taken(self.study, trial.number)
                if candidate.label in done or candidate.label not in valid_labels:
                    # already decided (or not a valid combination): close it, and steer the next ask to a new config
                    trial.set_user_attr("duplicate_of", candidate.label)
                    self.study.tell(trial, state=TrialState.FAIL)
                    remaining = [c for c in self.valid if c.label not in done]
                    if not remaining:
                        break  # everything is decided or being measured by another worker
                    # the sampler keeps proposing what is known once the space is nearly decided: hand it an
                    # undecided config (drawn, so no order of the space is favoured)
                    pick = random.Random(self.o.seed * 100_003 + trial.number).choice(remaining)
                    self.study.enqueue_trial(pick.params, skip_if_exists=False)
                    continue
                trial.set_user_attr("label", candidate.label)  # claims the config for workers sharing the study
                if workers.claimed_earlier(self.study, trial.number, candidate.label):
                    self.study.tell(trial, state=TrialState.FAIL)  # another worker asked for it first
                    continue
                started = time.time()
                self.evaluate(trial, candidate, parent)
                bar.set_postfix_str(f"{candidate.label}: {time.time() - started:.0f} s")
                bar.update(1)
        finally:
            bar.close()
