"""A study's trial as a typed record: what the study writes into Optuna's user attributes, and reads back.

Optuna's storage is the record every worker shares, so a trial carries what any worker needs to continue the study:
the config it claims (identity and overrides), how it was decided, its measured figures and its prediction.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from pipeline.measure.stats import max_relative_deviation, median_ci
from pipeline.records import Status
from pipeline.summaries import Interval

# user attribute names
LABEL, CONFIG_ID, OVERRIDES, VALUES = "label", "config_id", "overrides", "values"
STATUS, NOTE, PREDICTED, PEAK, FEASIBLE = "status", "reason", "predicted_gib", "peak_gib", "feasible"
MEDIAN, CI, TOKENS, STEP_TIMES = "step_time_median_s", "ci", "tokens_per_s", "step_times"
GPU_SECONDS, RUN_ID, SFT, KNOBS, ROLE, OWNER = "gpu_seconds", "run_id", "sft_kwargs", "knobs", "role", "owner"
LOSSES, WARMUP_TIMES = "losses", "warmup_times"
COMPILE_S = "compile_s"  # the job's seconds in torch.compile: what a later process of the config finds in the cache
WARMUP_LEFT_OUT = "warmup_left_out"  # the warm-up's step numbers not in warmup_times (they compiled, or were profiled)
WORLD_SIZE = "world_size"  # the ranks (devices) of the trial's job
BUSY, PROFILE = "gpu_busy", "profile"  # NVML's busy share of its steady steps; its profile's figures per step
LONGEST = "longest_batch"  # the run's micro-batch its fit is judged on: tokens, real tokens, step, trained first
ANSWER = "answer_trial"  # the study's user attribute: the trial it answered with
REPEAT_OF = "repeat_of"  # a proposal of a decided config: that trial's number
VALUE_NOTE = "value_note"  # what a COMPLETE trial's value is, where it is not a measured fit
OUTSIDE = "outside_space"  # the baseline's trial when the command line's config is not a point of the space
DONE = (TrialState.COMPLETE, TrialState.PRUNED)  # decided: measured, or ruled out
PEAK_MEASURED = (Status.OK, Status.PRUNED, Status.OVER_CAP)  # a full step's peak: what the predictor is judged on


def is_decided(trial: FrozenTrial) -> bool:
    """Measured, ruled out, or failed as a job (a config the installed stack refuses fails the same way again): a
    FAIL of a worker that stopped or died mid-trial, or of a claim another worker took first, is not decided."""
    return trial.state in DONE or (trial.state == TrialState.FAIL and trial.user_attrs.get(STATUS) == Status.FAILED)


@dataclass(frozen=True)
class Longest:
    """What a trial's fit is judged on (LONGEST, written by `search._telling`): the run's longest micro-batch's
    tokens and step, its real tokens (missing: None), and whether its job trained it at step one (`first`; missing:
    it did not, every micro-batch of the run being alike)."""

    tokens: int
    step: int
    real: int | None = None
    first: bool = False

    @classmethod
    def from_attr(cls, attr: dict[str, Any] | None) -> Longest | None:
        """None where the trial kept none (a study without the run's batches)."""
        if not attr:
            return None
        return cls(int(attr["tokens"]), int(attr["step"]), attr.get("real"), bool(attr.get("first")))


@dataclass(frozen=True)
class Profile:
    """A profiled trial's figures per step (PROFILE, `measure.profile`); a figure missing: not measured (None)."""

    host_ms: float | None = None
    device_ms: float | None = None
    launches_per_step: float | None = None

    @classmethod
    def from_attr(cls, attr: dict[str, Any] | None) -> Profile:
        attr = attr or {}
        return cls(attr.get("host_ms"), attr.get("device_ms"), attr.get("launches_per_step"))

    @property
    def measured(self) -> bool:
        return any(v is not None for v in (self.host_ms, self.device_ms, self.launches_per_step))


class Role(StrEnum):
    TRIAL = "trial"
    BASELINE = "baseline"  # the config the answer is compared with: measured in full, never pruned


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: TrialState
    label: str | None = None
    config_id: str | None = None
    overrides: tuple[str, ...] = ()
    status: Status | None = None
    note: str = ""
    predicted_gib: float | None = None
    peak_gib: float | None = None
    feasible: bool | None = None
    median: float | None = None
    ci: Interval | None = None
    tokens_per_s: float | None = None
    step_times: tuple[float, ...] = ()  # the steady steps: the trial's step noise
    warmup_times: tuple[float, ...] = ()  # the steps before them (compiling steps left out): its transient
    warmup_left_out: tuple[int, ...] = ()  # the step numbers left out of warmup_times
    losses: tuple[float, ...] = ()  # per step, for the deviation from the baseline
    gpu_seconds: float = 0.0
    compile_s: float = 0.0  # of gpu_seconds, the compilation's (an empty cache for this config, or a warm one)
    run_id: str | None = None
    sft_kwargs: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)
    role: Role = Role.TRIAL
    outside: bool = False  # the baseline, measured beside the space (the command line's config is not in it)
    owner: str | None = None  # host:pid:start of the worker that claimed it
    world_size: int = 1  # the ranks of its job, a device each
    longest: Longest | None = None  # what its fit is judged on (`search._telling`)
    gpu_busy: float | None = None
    profile: Profile = Profile()  # host_ms, device_ms, launches_per_step (measure.profile)

    @property
    def predictor_error(self) -> float | None:
        """(predicted - measured) / measured peak, for trials that measured the peak of a full step (not one that
        failed, ran out of memory mid-step, or was skipped)."""
        if self.predicted_gib is None or not self.peak_gib or self.status not in PEAK_MEASURED:
            return None
        return (self.predicted_gib - self.peak_gib) / self.peak_gib

    @property
    def decided(self) -> bool:
        failed = self.state == TrialState.FAIL and self.status is Status.FAILED
        return (self.state in DONE or failed) and self.label is not None

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        a = trial.user_attrs
        ci = a.get(CI)
        return cls(
            number=trial.number,
            state=trial.state,
            label=a.get(LABEL),
            config_id=a.get(CONFIG_ID),
            overrides=tuple(a.get(OVERRIDES, ())),
            status=Status(a[STATUS]) if STATUS in a else None,
            note=a.get(NOTE, ""),
            predicted_gib=a.get(PREDICTED),
            peak_gib=a.get(PEAK),
            feasible=a.get(FEASIBLE),
            median=a.get(MEDIAN),
            ci=Interval(*ci) if ci else None,
            tokens_per_s=a.get(TOKENS),
            step_times=tuple(a.get(STEP_TIMES, ())),
            warmup_times=tuple(a.get(WARMUP_TIMES, ())),
            warmup_left_out=tuple(a.get(WARMUP_LEFT_OUT, ())),
            losses=tuple(a.get(LOSSES, ())),
            gpu_seconds=a.get(GPU_SECONDS, 0.0),
            compile_s=a.get(COMPILE_S, 0.0),
            run_id=a.get(RUN_ID),
            sft_kwargs=a.get(SFT, {}),
            knobs=a.get(KNOBS, {}),
            role=Role(a.get(ROLE, Role.TRIAL)),
            outside=bool(a.get(OUTSIDE, False)),
            owner=a.get(OWNER),
            world_size=int(a.get(WORLD_SIZE, 1)),
            longest=Longest.from_attr(a.get(LONGEST)),
            gpu_busy=a.get(BUSY),
            profile=Profile.from_attr(a.get(PROFILE)),
        )


def measured_seconds(record: TrialRecord) -> float | None:
    """A trial's step time as its own job measured it: its steady median, else the median of the steps it ran before
    it was stopped (the first left out: it carries one-off costs); None where no job measured one (skipped by
    prediction, failed, or a repeat of a decided config, whose own trial holds the figure)."""
    if record.median is not None:
        return record.median
    ran = record.warmup_times[1:]
    return statistics.median(ran) if ran else None


SPREAD_CONFIDENCE = 0.9  # of the interval the screening tells two trials apart by (two apart: about a 0.5% test)


def measured_spread(record: TrialRecord) -> Interval | None:
    """The 90% interval of a trial's median steady step, from its own steps (the same in a study and its replay,
    which stores no interval); None where it ran no steady step (pruned, skipped, failed). Not 95%: at 8 steady steps
    that interval is the whole range, so one stalled step tied anything with it (on the chats, the baseline's 1.92 s
    among 0.26-0.34 s tied bucketed padding, 1.5x faster, and compiled layers were screened beside the baseline's
    padding). The 90% one leaves out each end at 8 steps (93% coverage); two equal configs' intervals come out apart
    in 0.5% of pairs one way (0.0075% at 95%)."""
    return median_ci(sorted(record.step_times), SPREAD_CONFIDENCE) if record.step_times else None


def records(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[TrialRecord]:
    return [TrialRecord.of(t) for t in study.get_trials(deepcopy=False, states=states)]


def skip_margin(study: optuna.Study, configured: float) -> float:
    """How far over the cap a config must be predicted to be skipped unmeasured: the memory predictor's largest error
    over the trials measured so far in this study (relative to the measured peak), never below the configured margin
    (`optimize.skip_margin`). A measured peak is the authority: a config predicted within the predictor's own error
    of the cap is measured, not skipped."""
    errors = [abs(r.predictor_error) for r in records(study) if r.predictor_error is not None]
    return max([configured, *errors])


def skipped(predicted: float, cap: float, margin: float, slack: float = 0.0) -> bool:
    """Whether a config predicted at `predicted` bytes is over the cap by more than `margin` (a share of the cap) once
    `slack` is taken off: what a process of it may keep reserved and unused where processes of it were seen to keep
    none under a cap (`StudyContext.slack_bytes`: under CUDA graphs), so a peak recorded with it says little of the
    fit. Such a config is measured: its run under the cap is the authority (on grid-small, the compiled loss under
    CUDA graphs, predicted 23.4 GiB from peaks with the slack, ran at 19.0 GiB under a 20 GiB cap in every process)."""
    return predicted - slack > cap * (1 + margin)


def write(trial: optuna.Trial, values: dict[str, Any]) -> None:
    """Set user attributes (None values left out); an Interval is stored as [low, high, level]."""
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, Interval):
            value = [value.low, value.high, value.level]
        trial.set_user_attr(key, value)


def baseline_trials(study: optuna.Study) -> list[TrialRecord]:
    """Every trial of the baseline that ended, the one that measured it first."""
    found = [r for r in records(study) if r.role is Role.BASELINE and r.state != TrialState.RUNNING]
    return sorted(found, key=lambda r: (r.status is not Status.OK, r.number))


def baseline(study: optuna.Study) -> TrialRecord | None:
    """The trial that measured the base config in full (under the cap or over it), if the study has one."""
    found = [r for r in baseline_trials(study) if r.state in DONE and r.status is Status.OK]
    return found[0] if found else None


def trial_loss_deviation(record: TrialRecord, reference: TrialRecord | None) -> float | None:
    """Largest relative deviation of one trial's per-step losses from the reference trial's, over the steps both
    ran: what the study's eligibility and its trials' table read. The deviation itself is
    `measure.stats.max_relative_deviation`; a config's over all its runs (the tables' `loss dev`) is
    `render.rows.loss_deviation`."""
    if reference is None or not record.losses or not reference.losses:
        return None
    return max_relative_deviation(list(record.losses), list(reference.losses))


def eligible(study: optuna.Study, max_loss_dev: float) -> list[TrialRecord]:
    """Trials that finished every step under the cap, with losses within `max_loss_dev` of the baseline's."""
    reference = baseline(study)
    found = []
    for r in records(study, (TrialState.COMPLETE,)):
        if not (r.feasible and r.status is Status.OK and r.median is not None):
            continue
        deviation = trial_loss_deviation(r, reference)
        if deviation is None or deviation <= max_loss_dev:
            found.append(r)
    return found


def best(study: optuna.Study, max_loss_dev: float = float("inf")) -> TrialRecord | None:
    """The fastest eligible trial."""
    found = eligible(study, max_loss_dev)
    return min(found, key=lambda r: r.median) if found else None
