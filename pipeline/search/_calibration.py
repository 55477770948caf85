"""A study's calibration: short probe jobs (the smallest and the largest micro-batch, each once per step, uncapped)
that fit the memory predictor's two free numbers and time a micro-batch (the prior of `search._prior`). When the
space searches gradient checkpointing, the other setting is probed too: the formula's activations without
checkpointing were seen 20% off when calibrated on probes with it, and two points of each setting give each its own
line. Stored on the study (user attribute `calibration`), so every worker and every resumed run uses the same."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf

from pipeline import knobs as speed_knobs
from pipeline.config.job import parse, parse_split
from pipeline.config.schema import typed
from pipeline.jobs import task
from pipeline.knobs import KnobRole, registry
from pipeline.records import GIB, MicroBatch, RunKind, Status
from pipeline.search._formula import FORMULA_ROLES, Knobs
from pipeline.search._longest import RunBatches
from pipeline.search._space import SPLIT_KEY
from pipeline.tracking import runs


def formula_keys() -> tuple[str, ...]:
    """The keys the predictor's formula sees itself: the split and the knobs of its roles (`formula.FORMULA_ROLES`)."""
    return ("batch.split", *(speed_knobs.role(r).key for r in FORMULA_ROLES))


def value_at(cfg: Any, key: str) -> Any:
    """A dotted key's value in a config, composed (DictConfig) or typed (the schema's dataclasses)."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def knobs_of(
    cfg: Any, space_keys: list[str], placement_dtype: str | None = None, batch: MicroBatch | None = None
) -> Knobs:
    """The memory knobs of a config (composed or typed): the formula's own (the compile choice and the attention
    among them, searched or not), the other searched keys as the line's fixed setting, and every other knob's value as
    the config holds it (its term counts: a loss the command line sets keeps its logits); `batch`: the micro-batch its
    peak is measured or predicted on (the run's longest), else one of max_length sequences."""
    micro = parse_split(cfg.batch.split).micro
    own = formula_keys()
    precision, checkpointing, compiled, attention = (speed_knobs.role(r) for r in FORMULA_ROLES)
    dtype = precision.of(cfg)
    dtype = (placement_dtype or "fp32") if precision.is_auto(dtype) else dtype
    other = tuple((k, str(value_at(cfg, k))) for k in space_keys if k not in own)
    unsearched = [k.key for k in registry() if k.key not in space_keys and k.key not in own]
    held = tuple((key, str(value_at(cfg, key))) for key in unsearched)
    tokens, squares = (batch.tokens, batch.squares) if batch is not None else (None, None)
    return Knobs(
        micro,
        cfg.train.max_length,
        dtype,
        bool(checkpointing.canonical(checkpointing.of(cfg))),
        other,
        compiled.canonical(compiled.of(cfg)),
        str(attention.of(cfg)),
        tokens,
        squares,
        held,
        batch is not None and batch.masked,
    )


ATTR = "calibration"  # the study's user attribute that holds it
PROBES = "calibration_probes"  # the study's user attribute that holds each probe's finding as it comes (`_Kept`)


@dataclass
class Calibration:
    """The probes' findings, and the predictor's two numbers fitted to them; stored on the study (`to_attr`, read
    back by `of`)."""

    probes: list[tuple[Knobs, float]] = field(default_factory=list)  # (knobs, measured peak bytes), every setting
    base_probes: list[tuple[Knobs, float]] = field(default_factory=list)  # those of the base config's setting
    gpu_seconds: float = 0.0
    dtype: str | None = None  # what the probes' placement resolved (a dtype of auto)
    device: str | None = None
    scale: float = 1.0  # the predictor's fit
    offset: float = 0.0
    times: list[tuple[int, bool, float]] = field(default_factory=list)  # (micro, checkpointing, s per micro-batch)

    def step_estimate(self, micro: int, accumulation: int, checkpointing: bool) -> float | None:
        """A config's step time as the probes suggest it (the base config's other knobs): `accumulation` micro-batches
        of `micro`, each timed by the line through the probes of its checkpointing setting (or of any)."""
        points = sorted((m, t) for m, c, t in self.times if c == checkpointing) or sorted(
            (m, t) for m, _, t in self.times
        )
        if not points:
            return None
        if len(points) == 1 or points[0][0] == points[-1][0]:
            return accumulation * points[0][1] * micro / points[0][0]
        (m0, t0), (m1, t1) = points[0], points[-1]
        return accumulation * max(t0, t0 + (t1 - t0) * (micro - m0) / (m1 - m0))

    def to_attr(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "offset": self.offset,
            "probes": [{**dataclasses.asdict(k), "peak": peak} for k, peak in self.probes],
            "gpu_seconds": self.gpu_seconds,
            "dtype": self.dtype,
            "device": self.device,
            "times": [list(t) for t in self.times],
        }

    @classmethod
    def of(cls, attr: dict[str, Any]) -> Calibration:
        """A probe stored without a compile choice (a study from before it was a knob of the formula) is taken as
        not compiled; one without the config's held knob values, as holding none (each knob then at its default); one
        without its mask, as taking none."""
        probes = [
            (
                Knobs(
                    p["micro"],
                    p["max_length"],
                    p["dtype"],
                    p["checkpointing"],
                    tuple(map(tuple, p["other"])),
                    p.get("compile", Knobs.compile),
                    p.get("attention", Knobs.attention),
                    p.get("tokens"),
                    p.get("squares"),
                    tuple(map(tuple, p.get("held", ()))),
                    p.get("masked", False),
                ),
                p["peak"],
            )
            for p in attr["probes"]
        ]
        times = [(int(m), bool(c), float(t)) for m, c, t in attr.get("times", [])]
        return cls(probes, [], attr["gpu_seconds"], attr["dtype"], attr["device"], attr["scale"], attr["offset"], times)


class _Kept:
    """Each probe's finding, stored on the study (PROBES) as soon as it is measured, and the seconds of probes
    interrupted: what a stopped calibration had, so that the same command measures no probe twice."""

    def __init__(self, study: optuna.Study | None) -> None:
        self.study = study
        self.measured, self.killed_s = _from_attrs(study.user_attrs if study is not None else {})

    def save(self) -> None:
        if self.study is not None:
            self.study.set_user_attr(PROBES, {"measured": self.measured, "killed_s": self.killed_s})


def seconds_so_far(attrs: dict[str, Any]) -> float:
    """The device seconds of a calibration not stored whole (a study stopped during it): its probes, measured or
    interrupted."""
    measured, killed_s = _from_attrs(attrs)
    return sum(p["seconds"] for p in measured.values()) + killed_s


def _from_attrs(attrs: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], float]:
    """What a study kept of its calibration (PROBES): each measured probe's finding by its key, and the seconds of
    probes interrupted; none of either where it kept nothing."""
    kept = attrs.get(PROBES, {})
    return dict(kept.get("measured", {})), float(kept.get("killed_s", 0.0))


def _finding(outcome: task.JobOutcome) -> dict[str, Any]:
    """What a probe found, as the study keeps it."""
    summary, placement = outcome.summary, outcome.result.placement
    ok = outcome.status is Status.OK and bool(summary.peak_gib)
    return {
        "seconds": summary.wall_s,
        "ok": ok,
        "peak_gib": summary.peak_gib if ok else None,
        "median": summary.median if ok else None,
        "dtype": placement.dtype if ok else None,
        "device": placement.device if ok else None,
    }


@dataclass(frozen=True)
class Probe:
    """Where one probe measures: the base config at a split, a checkpointing setting and a layout (the knobs of
    those roles: `KnobRole.CHECKPOINTING`, `KnobRole.LAYOUT`)."""

    split: str
    checkpointing: bool
    layout: str
    is_base: bool  # the base config's checkpointing and layout: what calibrates the formula

    def name(self, base: DictConfig) -> str:
        micro = parse_split(self.split).micro
        checkpointing, layout = speed_knobs.role(KnobRole.CHECKPOINTING), speed_knobs.role(KnobRole.LAYOUT)
        said = (
            []
            if self.checkpointing == bool(checkpointing.of(base))
            else [f"ckpt={'on' if self.checkpointing else 'off'}"]
        )
        said += [] if self.layout == layout.of(base) else [f"{layout.name}={self.layout}"]
        return " ".join([f"probe {micro}x1", *said])

    def config(self, base: DictConfig) -> DictConfig:
        """The base config at this probe's split, checkpointing and layout: the run it measures the longest
        micro-batch of."""
        at = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
        at.batch.split = self.split
        speed_knobs.role(KnobRole.CHECKPOINTING).set_in(at, self.checkpointing)
        speed_knobs.role(KnobRole.LAYOUT).set_in(at, self.layout)
        return at


@dataclass(frozen=True)
class Prober:
    """Runs the probes of one study: the base config, at a micro-batch, a checkpointing setting and a layout, each
    on the run's longest micro-batch at that split (`batches`; where the records vary in length)."""

    base: DictConfig
    space_keys: list[str]
    study: str
    parent: str
    steps: int
    batches: RunBatches | None = None

    def plan(self, space: dict[str, list]) -> list[Probe]:
        """The smallest and largest micro-batch of the space's splits on the base config, and on its other
        checkpointing setting when the space searches it, and at each other layout the space searches (a layout
        lays the same tokens out in other rows, and what attention keeps grows with their squared lengths: each
        layout gets its own line)."""
        checkpointing, layout = speed_knobs.role(KnobRole.CHECKPOINTING), speed_knobs.role(KnobRole.LAYOUT)
        splits, base_ckpt = space[SPLIT_KEY], bool(checkpointing.of(self.base))
        base_layout = str(layout.of(self.base))
        settings = [base_ckpt, *(bool(v) for v in space.get(checkpointing.key, []))]
        found = [
            Probe(split, ckpt, base_layout, ckpt == base_ckpt)
            for ckpt in dict.fromkeys(settings)
            for split in dict.fromkeys([splits[0], splits[-1]])
        ]
        layouts = [str(v) for v in space.get(layout.key, []) if str(v) != base_layout]
        ends = dict.fromkeys([splits[0], splits[-1]])
        return found + [Probe(split, base_ckpt, other, False) for other in dict.fromkeys(layouts) for split in ends]

    def run(self, space: dict[str, list], kept_on: optuna.Study | None = None) -> Calibration:
        """Every probe of the plan. Each probe's finding is kept on the study `kept_on` as it is measured; a probe
        it holds already is not run again."""
        kept = _Kept(kept_on)
        found = Calibration(gpu_seconds=kept.killed_s)
        for probe in self.plan(space):
            self.probe(found, kept, probe)
        return found

    def probe(self, found: Calibration, kept: _Kept, probe: Probe) -> None:
        # Memory depends on the micro-batch, not on accumulation: a probe runs its micro-batch once per step.
        name = probe.name(self.base)
        at_split = probe.config(self.base)
        batch = self.batches.longest(typed(at_split)) if self.batches else None
        if name in kept.measured:
            print(f"[study] {name}: measured before the study stopped; not run again", flush=True)
        else:
            first = self.batches.first(typed(at_split)) if self.batches else None
            self._measure(kept, name, probe, first)
        finding = kept.measured[name]
        found.gpu_seconds += finding["seconds"]
        if not finding["ok"]:
            return
        found.dtype, found.device = finding["dtype"], finding["device"]
        point = (knobs_of(at_split, self.space_keys, finding["dtype"], batch), finding["peak_gib"] * GIB)
        found.probes.append(point)
        if finding["median"] and probe.layout == speed_knobs.role(KnobRole.LAYOUT).of(self.base):
            found.times.append((parse_split(probe.split).micro, probe.checkpointing, finding["median"]))
        if probe.is_base:
            found.base_probes.append(point)

    def _measure(self, kept: _Kept, name: str, probe: Probe, first: MicroBatch | None) -> None:
        """Run one probe, its micro-batch once per step, uncapped, the run's longest at step one (`first`); its
        finding kept before its line is printed."""
        cfg = probe.config(self.base)
        micro = parse_split(probe.split).micro
        cfg.batch.split = f"{micro}x1"
        cfg.batch.effective = micro * cfg.world_size
        cfg.train.steps = self.steps
        cfg.measure.warmup_steps = 1
        job = parse(cfg)  # the base config, checked, at another micro-batch
        spec = dataclasses.replace(task.job_spec(job, name=name, uncapped=True), first_batch=first)

        def keep(outcome: task.JobOutcome) -> None:
            kept.measured[name] = _finding(outcome)
            kept.save()

        try:
            task.run(
                job, spec=spec, kind=RunKind.PROBE, parent_id=self.parent, tags={runs.STUDY: self.study}, keep=keep
            )
        except task.JobInterrupted as stop:
            kept.killed_s += stop.seconds  # device time the study spent, though it measured nothing
            kept.save()
            raise
