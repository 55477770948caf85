"""The records that cross a boundary: a job's spec (parent -> child), its steps and result (child -> parent), and the
statuses every reader shares.

They are frozen dataclasses and enums, serialised only at the edges: JSON at the process boundary (`to_json` /
`from_json`), MLflow params, metrics and tags in `pipeline.tracking`, Optuna user attributes in `pipeline.search`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

GIB = 2**30
PHASES = ("forward", "backward", "optimizer", "data", "other")
SECONDS = ("runtime", "wall", "spawn", "setup", "compile")  # a job's fixed costs and totals, in `JobSummary.seconds`


class RunState(StrEnum):
    """An MLflow run's status, as this tool writes and reads it."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


class Status(StrEnum):
    """How a job (or a trial decided without one, or a sweep or study as a whole) ended."""

    RUNNING = "running"
    OK = "ok"  # trained every step
    OOM = "oom"  # ran out of device memory (under the cap, where one is set)
    OVER_CAP = "over-cap"  # stopped by the study once a step's peak passed the cap
    PRUNED = "pruned"  # stopped by the study as too slow
    SKIPPED = "skipped"  # not launched: predicted over the cap
    FAILED = "failed"  # crashed, killed, timed out, or could not start
    KILLED = "killed"  # interrupted by the user, or its owner died

    @property
    def decided(self) -> bool:
        """The job answered its question: it ran to the end or to a deliberate stop."""
        return self in (Status.OK, Status.OOM, Status.OVER_CAP, Status.PRUNED, Status.SKIPPED)

    @property
    def run_state(self) -> RunState:
        """MLflow's run status for a job that ended so."""
        if self is Status.KILLED:
            return RunState.KILLED
        return RunState.FINISHED if self.decided else RunState.FAILED


class Fit(StrEnum):
    """A job's peak memory against its cap."""

    FITS = "fits"
    OVER_CAP = "over-cap"
    OOM = "oom"
    NO_CAP = "no-cap"
    PREDICTED_OVER_CAP = "predicted-over-cap"
    FAILED = "failed"

    @property
    def feasible(self) -> bool:
        return self in (Fit.FITS, Fit.NO_CAP)


def fit_of(status: Status, peak_bytes: int | None, cap_bytes: int | None) -> Fit:
    """A finished (or pruned) job fits when its peak is under the cap; without a cap it is `no-cap`."""
    if status is Status.OOM:
        return Fit.OOM
    if status is Status.OVER_CAP:
        return Fit.OVER_CAP
    if status is Status.SKIPPED:
        return Fit.PREDICTED_OVER_CAP
    if status not in (Status.OK, Status.PRUNED):
        return Fit.FAILED
    if cap_bytes is None:
        return Fit.NO_CAP
    return Fit.FITS if peak_bytes is not None and peak_bytes <= cap_bytes else Fit.OVER_CAP


def _from_dict(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class StopRule:
    """When the study ends a job early: over `cap_bytes`, or slower than `prune_threshold_s` over the `prune_after`
    steps after step `prune_from`: the first step (its one-off costs), or for a job that compiles its warm-up (where
    its graphs are compiled and its CUDA graphs recorded)."""

    cap_bytes: int | None = None
    prune_after: int | None = None
    prune_threshold_s: float | None = None
    prune_from: int = 1


@dataclass(frozen=True)
class MicroBatch:
    """A micro-batch of a run, as the Trainer draws it (`builders.order`): the records in each of its rows (one a row;
    with packing, those packed into it), indices into the run's data (`of_records` records: a jsonl file's or a hub
    dataset's first, or the synthetic rows), and what its layout makes of them."""

    rows: tuple[tuple[int, ...], ...]
    tokens: int  # what the layout computes: padding included (padding=longest, max_length), none without
    real: int  # the records' own tokens
    squares: int  # the sum of the squared lengths of the rows the attention sees (a padding-free batch is one row)
    step: int  # the optimizer step of the run it comes in (1: the first)
    of_records: int

    @property
    def masked(self) -> bool:
        """Whether its attention takes a mask: padding (more tokens computed than its records'), or records sharing
        the one row the attention sees (padding-free, packing: each attends to its own). transformers' SDPA path
        passes no mask for a micro-batch of whole rows, and then keeps the key and value heads as they are."""
        one_row = self.squares == self.tokens**2
        return self.tokens > self.real or (one_row and sum(len(row) for row in self.rows) > 1)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MicroBatch:
        return cls(**{**data, "rows": tuple(tuple(int(i) for i in row) for row in data["rows"])})


@dataclass(frozen=True)
class JobSpec:
    """Everything the job process needs, resolved and parsed once by the parent."""

    config: Any  # the resolved config as the schema's dataclasses (`pipeline.config.schema.typed`)
    config_id: str
    name: str  # display name, e.g. "tiny 4x1 ckpt=off"
    micro: int
    accumulation: int
    cap_bytes: int | None  # what the job's peak is judged against (and enforced inside it); None: no cap
    cap_source: str | None  # "mem_cap" or the gpu profile ("gpu=t4") the cap came from
    gpu_profiles: dict[str, dict[str, float]]
    stop: StopRule = field(default_factory=StopRule)
    owner_pid: int | None = None  # the job kills itself once this process is gone
    env: dict[str, str] = field(default_factory=dict)  # set in the job before anything is imported or built
    enforce_cap: bool = True  # False: the cap is not applied to the device, only judged after (a study's baseline)
    # trained at step one beside the job's own micro-batches, its gradient dropped: the run's longest (`builders.order`)
    first_batch: MicroBatch | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], load_config: Any = None) -> JobSpec:
        """`load_config` turns the config's plain data back into its dataclasses (`schema.typed`)."""
        config = load_config(data["config"]) if load_config else data["config"]
        first = MicroBatch.from_json(data["first_batch"]) if data.get("first_batch") else None
        return cls(**{**data, "config": config, "stop": StopRule(**data.get("stop") or {}), "first_batch": first})


@dataclass(frozen=True)
class Step:
    """One optimizer step as the meter saw it."""

    step: int
    step_time_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    data_s: float
    other_s: float
    micro_batches: int
    tokens: int
    padded_tokens: int
    samples: int
    peak_bytes: int  # device: reserved + CUDA context; CPU: peak resident memory
    peak_allocated_bytes: int | None = None
    compile_s: float = 0.0  # torch.compile's (re)compilation inside this step: such a step is no steady step
    profiled: bool = False  # under the profiler (measure.profile): no steady step either
    allreduce_s: float = 0.0  # DDP's gradient all-reduce, first bucket to last (overlaps backward; 0 on one rank)
    rank_peak_bytes: tuple[int, ...] = ()  # each rank's peak (a torchrun job; `peak_bytes` is the largest)
    first_batch_tokens: int = 0  # the run's longest micro-batch, trained in this step beside its own: no steady step
    released_bytes: int = 0  # cached segments returned to the device before that micro-batch (`memory.release_cached`)
    loss: float | None = None
    grad_norm: float | None = None
    learning_rate: float | None = None

    @property
    def steady_candidate(self) -> bool:
        return self.compile_s == 0.0 and not self.profiled and not self.first_batch_tokens

    def phase(self, name: str) -> float:
        return getattr(self, f"{name}_s")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        return _from_dict(cls, {**data, "rank_peak_bytes": tuple(data.get("rank_peak_bytes") or ())})


@dataclass(frozen=True)
class Placement:
    device: str  # "cuda" or "cpu"
    device_name: str  # what the hardware says, e.g. "NVIDIA H200" or the CPU model
    device_memory_gib: float | None  # real total memory of the device (None on CPU)
    emulated: str | None  # gpu profile whose memory is emulated on a bigger device, e.g. "t4"
    dtype: str  # fp32 | fp16 | bf16
    peak_tflops: float | None  # for MFU: the real device's figure
    bf16_supported: bool


@dataclass(frozen=True)
class JobMemory:
    """Peak memory during training (counters reset after the model is built) and what surrounds it."""

    peak_bytes: int | None  # what the cap is judged on: reserved + context on CUDA, resident memory on CPU
    cap_bytes: int | None
    model_load_bytes: int | None = None
    context_bytes: int = 0
    peak_reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_rss_bytes: int | None = None
    nvml_process_bytes: int | None = None
    rank_peak_bytes: tuple[int, ...] = ()  # each rank's, judged against the cap on its own device (a torchrun job)


@dataclass(frozen=True)
class JobResult:
    """What a job process returns: how it ended, every step it measured, and what it was built from."""

    status: Status
    steps: tuple[Step, ...] = ()
    error: str | None = None
    traceback: str | None = None
    stopped: str | None = None  # why the study stopped it early, e.g. "over-cap at step 3"
    placement: Placement | None = None
    memory: JobMemory | None = None
    lora_params: int | None = None
    base_matmul_params: int | None = None
    model_flops_per_token: float | None = None
    sft_kwargs: dict[str, Any] | None = None  # the SFTConfig arguments the job trained with
    versions: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # setup phases, train runtime, spawn and wall time
    pid: int | None = None
    exitcode: int | None = None
    world_size: int = 1
    gpu_busy: float | None = None  # NVML's utilisation over the steady steps (CUDA only)
    profile: dict[str, Any] | None = None  # the torch.profiler summary, with measure.profile=true
    compile_note: str | None = None  # what compilation did: regions, graphs, and where it fell back (CUDA graphs)
    host: dict[str, Any] | None = None  # where the training thread ran: CPUs, their nodes, the load (measure.host)
    stalled_steps: tuple[int, ...] = ()  # steady steps longer than the stall limit: no steady steps (`jobs.stall`)
    stall_limit_s: float | None = None  # that limit, where any step was over it
    library_warnings: int = 0  # Python warnings and log records at WARNING or above the job's libraries gave

    @property
    def compile_s(self) -> float:
        """Seconds the job spent in torch.compile, its CUDA graphs' recording included (0: nothing compiled)."""
        return self.timings.get("compile_s", 0.0)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobResult:
        placement = data.get("placement")
        memory = data.get("memory")
        return _from_dict(
            cls,
            {
                **data,
                "status": Status(data["status"]),
                "steps": tuple(Step.from_json(s) for s in data.get("steps") or ()),
                "stalled_steps": tuple(data.get("stalled_steps") or ()),
                "placement": _from_dict(Placement, placement) if placement else None,
                "memory": _from_dict(
                    JobMemory, {**memory, "rank_peak_bytes": tuple(memory.get("rank_peak_bytes") or ())}
                )
                if memory
                else None,
            },
        )


class RunKind(StrEnum):
    """What a recorded MLflow run is."""

    JOB = "job"  # one job of `pipeline.train`
    SWEEP = "sweep"  # the parent of a multirun
    STUDY = "study"  # the parent of an optimize study
    PROBE = "probe"  # a study's calibration job: shorter, not a contender
    TRIAL = "trial"  # a study's trial, measured or decided without a job
    CONFIRM = "confirm"  # a short job of a study's confirmation round
