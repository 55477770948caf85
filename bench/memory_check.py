"""The memory predictor against every recorded study: each measured trial predicted (a) as its study would have, in
study order, knowing the probes and the trials measured before it, and (b) leave-one-out, knowing the probes and every
other config its study measured; per study, the mean and max error and the worst configs. A recorded grid (JSON,
`bench.grid_export`) has no probes nor order: (b) alone, calibrated on its base config at the ends of its splits.

    python -m bench.memory_check                      # every store of STORES and grid of GRIDS
    python -m bench.memory_check STORE [OVERRIDE ...] # one Optuna store, its setting as its command line gave it
    python -m bench.memory_check GRID.json [OVERRIDE ...] --allocated 0.7
                                                      # a grid's peaks read as its runs' allocated high-water marks
                                                      # plus 0.7 GiB (what expandable segments read over them)

The predictor is today's, its calibration fitted again to the study's base probes with today's formula, as the study
fits it. A trial's peak counts where it measured a full step (`trials.PEAK_MEASURED`); one that ran out of memory
measured a lower bound only, and is left out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import optuna
from omegaconf import DictConfig, OmegaConf

from pipeline import knobs as speed_knobs
from pipeline.config.compose import compose_job
from pipeline.knobs.base import Compile, KnobRole
from pipeline.knobs.dtype import Dtype
from pipeline.measure.flops import Shape
from pipeline.records import GIB
from pipeline.search._calibration import Calibration, formula_keys, knobs_of
from pipeline.search._formula import Knobs
from pipeline.search._predictor import Predictor
from pipeline.search._trials import PEAK_MEASURED, Longest, TrialRecord

RESULTS = Path(__file__).resolve().parent / "results"
COMPILE_KEY = speed_knobs.role(KnobRole.COMPILE).key  # the compile choice, as the stores name it
PADDING_KEY = speed_knobs.role(KnobRole.LAYOUT).key  # the layout, as the stores name it
WORST = 4  # the worst configs printed per study and way
SEED = ("experiment=seed-t4", "batch.split=4x1")
SMALL_MODEL = (  # as bench/record_h200.sh records grid-chats and grid-small
    "model=qwen3-0.6b",
    "train.max_length=1024",
    "batch.effective=8",
    "batch.split=8x1",
    "train.dtype=bf16",
    "train.adapter_dtype=compute",
)
CHATS = (*SMALL_MODEL, "data=jsonl")  # made-up chats of varying length
SMALL = (*SMALL_MODEL, "data.length=1024")  # fixed-length rows
# the chats acceptance studies' command line (bench/accept_h200.sh), its data's path aside
CHATS_STUDY = (
    "model=qwen3-0.6b",
    "train.max_length=1024",
    "batch.effective=8",
    "batch.split=8x1",
    "gpu=auto",
    "mem_cap=20GiB",
    "data=jsonl",
    "optimize.fit_over=epoch",
)


@dataclass(frozen=True)
class Store:
    """A recorded Optuna store (or grid, `.json`) and the setting its command line gave (BENCHMARKS.md names each);
    `true_is`: what the compile knob's `true` compiled when it was written (the whole model until 2026-12-01)."""

    path: Path
    overrides: tuple[str, ...]
    true_is: str = Compile.REGIONAL.value
    allocated_over: float | None = None  # GiB: a grid's peaks read as allocated + this (`allocated_peaks`)


STORES = (
    Store(RESULTS / "record-h200" / "grid-chats-optuna.db", CHATS),
    Store(RESULTS / "record-h100-1205" / "grid-chats-optuna.db", CHATS),  # 18 of the same configs, on an H100
    Store(RESULTS / "record-h100-1205b" / "grid-chats-optuna.db", CHATS),  # all 38, the longest after a release
    Store(RESULTS / "fastest-h200-fixed" / "optuna.db", SEED),
    Store(RESULTS / "fastest-h200-adaptive" / "optuna.db", SEED),
    Store(RESULTS / "record-h200-1205" / "optuna.db", SEED),
    Store(RESULTS / "fastest-h200-1205b" / "optuna.db", SEED),
    Store(RESULTS / "fastest-h100-1206" / "optuna.db", SEED),  # seeds 1 and 2 on an H100
    Store(RESULTS / "h200-2026-11-30" / "knobs-optuna.db", ("model=qwen3-1.7b", "train.max_length=512"), "whole"),
    Store(RESULTS / "grid-h200-seed.json", SEED),
    Store(RESULTS / "record-h100-1206" / "grid-small.json", SMALL),  # all 40 configs, on an H100
    *(Store(RESULTS / f"accept-h100-1206{n}" / "chats" / "optuna.db", CHATS_STUDY) for n in "bcd"),  # on an H100
    Store(RESULTS / "accept-h100-1207" / "chats" / "optuna.db", CHATS_STUDY),  # on an H100, flex attention the answer
)


@dataclass(frozen=True)
class Point:
    """One measured config: its label, memory knobs and peak (bytes), and when it ran (start, end; a grid's: none)."""

    label: str
    knobs: Knobs
    peak: float
    start: float = 0.0
    end: float = 0.0


@dataclass(frozen=True)
class Error:
    label: str
    measured_gib: float
    predicted_gib: float

    @property
    def relative(self) -> float:
        return (self.predicted_gib - self.measured_gib) / self.measured_gib


@dataclass(frozen=True)
class StudyCheck:
    """One study's errors, in study order (none for a grid) and leave-one-out."""

    name: str
    in_order: list[Error]
    left_out: list[Error]


def _tidy(knobs: Knobs, held: tuple = ()) -> Knobs:
    """The knobs with the formula's own keys out of `other`, the rest in one order (a store from before a key joined
    the formula kept it there; the order of the space's keys is no part of a setting), and `held` where it has none
    (a store from before the held values were kept)."""
    other = tuple(sorted((k, v) for k, v in knobs.other if k not in formula_keys()))
    return dataclasses.replace(knobs, other=other, held=knobs.held or held)


def _probes(calibration: dict, true_is: str, held: tuple, varying: bool) -> list[tuple[Knobs, float]]:
    """The study's probes (the base config: what it holds unsearched is every trial's); a store from before the
    compile choice joined the formula kept it among `other`, one from before the mask joined it kept none
    (`_masked`)."""
    stored = [p.get("masked") for p in calibration["probes"]]
    found = []
    for (knobs, peak), masked in zip(Calibration.of(calibration).probes, stored, strict=True):
        kept = dict(knobs.other).get(COMPILE_KEY)
        if kept is not None:
            compiled = true_is if str(kept).lower() == "true" else Compile.of(kept).value
            knobs = dataclasses.replace(knobs, compile=compiled)
        knobs = dataclasses.replace(knobs, masked=_masked(knobs, varying) if masked is None else masked)
        found.append((_tidy(knobs, held), peak))
    return found


def _masked(knobs: Knobs, varying: bool, real: int | None = None) -> bool:
    """Whether a recorded micro-batch's attention took a mask (`records.MicroBatch.masked`), from what its store kept:
    padding-free, more than one record; else more tokens than its records' (`real`, where kept); else, on records of
    varying length, more than one row, or padding to max_length or to buckets (a row then padded whatever its
    length)."""
    padding = dict(knobs.other + knobs.held).get(PADDING_KEY, "longest")
    if padding == "padding_free":
        return knobs.micro > 1  # its records share one row, of one length or not
    if not varying:
        return False
    if real is not None and knobs.tokens is not None:
        return knobs.tokens > real
    return knobs.micro > 1 or padding in ("max_length", "buckets")


def knobs(base: DictConfig, params: dict, true_is: str, longest: Longest | None = None) -> Knobs:
    """A config's memory knobs as its study finds them: the base config with the searched values set; `longest`: the
    micro-batch its trial kept (its mask inferred: `_masked`)."""
    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
    for key, value in params.items():
        value = true_is if key == COMPILE_KEY and str(value).lower() == "true" else value
        OmegaConf.update(cfg, key, value, merge=False)
    batch = _Batch(longest.tokens) if longest else None
    found = _tidy(knobs_of(cfg, list(params), cfg.train.dtype, batch))
    return dataclasses.replace(found, masked=_masked(found, varies(base), longest.real if longest else None))


def varies(base: DictConfig) -> bool:
    """Whether a store's records vary in length: a JSON-lines file's (the chats) do, the synthetic rows do not."""
    return base.data.kind == "jsonl"


@dataclass(frozen=True)
class _Batch:
    tokens: int
    squares: int | None = None
    masked: bool = False  # set after, from what the store kept (`_masked`)


def points(study: optuna.Study, base: DictConfig, true_is: str) -> list[Point]:
    """Every trial of the study that measured a full step's peak, in the order they started."""
    found = []
    for trial in sorted(study.trials, key=lambda t: (t.datetime_start is None, t.datetime_start, t.number)):
        record = TrialRecord.of(trial)
        if record.status not in PEAK_MEASURED or not record.peak_gib or trial.datetime_start is None:
            continue
        k = knobs(base, trial.params, true_is, record.longest)
        end = (trial.datetime_complete or trial.datetime_start).timestamp()
        found.append(Point(record.label, k, record.peak_gib * GIB, trial.datetime_start.timestamp(), end))
    return found


def predictor(base: DictConfig, probes: list[tuple[Knobs, float]]) -> Predictor:
    """Today's predictor, calibrated as the study calibrates it: on the base config's probes (the first two)."""
    made = Predictor(Shape.from_model(base.model), base.lora.r, list(base.lora.target_modules))
    made.calibrate(probes[:2])
    return made


def errors(made: Predictor, known: list[tuple[Knobs, float]], found: list[Point], in_order: bool) -> list[Error]:
    """Each point predicted from `known` and, in order, the points that ended before it started, else every other."""
    out = []
    for point in found:
        others = [p for p in found if (p.end <= point.start if in_order else p is not point)]
        made.measured = known + [(p.knobs, p.peak) for p in others]
        out.append(Error(point.label, point.peak / GIB, made.predict(point.knobs) / GIB))
    return out


def check_study(study: optuna.Study, base: DictConfig, true_is: str) -> StudyCheck | None:
    calibration = study.user_attrs.get("calibration")
    if calibration and base.train.dtype == Dtype.AUTO:  # resolved on the study's device: its probes say to what
        base.train.dtype = Calibration.of(calibration).probes[0][0].dtype
    found = points(study, base, true_is) if calibration else []
    if not found:
        return None
    probes = _probes(calibration, true_is, found[0].knobs.held, varies(base))
    made = predictor(base, probes)
    return StudyCheck(study.study_name, errors(made, probes, found, True), errors(made, probes, found, False))


def _params_key(params: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


def allocated_peaks(grid: Path, keys: list[str], over_gib: float) -> dict[tuple, float]:
    """Each trial run's allocated high-water mark plus `over_gib`, in GiB, by its values of `keys`, from the grid's
    MLflow store beside its JSON (`NAME-mlflow.db`, as `bench/record_h200.sh` brings it back): the peak the caching
    allocator's slack leaves out (expandable segments read 0.64-0.74 GiB over it in every config of grid-alloc)."""
    store = grid.with_name(f"{grid.stem}-mlflow.db")
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        runs = db.execute(
            "SELECT m.run_uuid, m.value FROM metrics m JOIN tags t ON t.run_uuid = m.run_uuid "
            "WHERE m.key = 'peak_allocated_gib' AND t.key = 'trial'"
        ).fetchall()
        found = {}
        for run, allocated in runs:
            params = dict(db.execute("SELECT key, value FROM params WHERE run_uuid = ?", (run,)).fetchall())
            found[_params_key({k: params[k] for k in keys})] = allocated + over_gib
    return found


def check_grid(store: Store, base: DictConfig) -> StudyCheck:
    """A recorded grid, leave-one-out: calibrated on its baseline's config at its smallest and largest split."""
    grid = json.loads(store.path.read_text(encoding="utf-8"))
    keys = list(grid["space"])
    allocated = allocated_peaks(store.path, keys, store.allocated_over) if store.allocated_over is not None else None
    found = []
    for config in grid["configs"]:
        if config["status"] == "ok":
            label = " ".join(f"{k.rpartition('.')[2]}={v}" for k, v in config["params"].items())
            peak = allocated[_params_key(config["params"])] if allocated is not None else config["peak_gib"]
            found.append(Point(label, knobs(base, config["params"], store.true_is), peak * GIB))
    splits = grid["space"]["batch.split"]
    ends = [{**grid["baseline"], "batch.split": split} for split in (splits[0], splits[-1])]
    probes = [(p.knobs, p.peak) for end in ends for p in found if p.knobs == knobs(base, end, store.true_is)]
    return StudyCheck(store.path.stem, [], errors(predictor(base, probes), [], found, False))


def check_store(store: Store) -> list[StudyCheck]:
    """Every study of the store with a calibration and a measured trial (a grid: itself)."""
    base = compose_job("config", list(store.overrides))
    if store.path.suffix == ".json":
        return [check_grid(store, base)]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{store.path}"
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    found = (check_study(optuna.load_study(study_name=name, storage=storage), base, store.true_is) for name in names)
    return [check for check in found if check is not None]


def figures(found: list[Error]) -> tuple[float, float]:
    """Mean and max absolute relative error, in percent."""
    values = [abs(e.relative) for e in found]
    return 100 * statistics.fmean(values), 100 * max(values)


def lines(store: Store, checks: list[StudyCheck]) -> list[str]:
    repo = RESULTS.parent.parent
    out = [f"== {store.path.relative_to(repo) if store.path.is_relative_to(repo) else store.path}"]
    for check in checks:
        for what, found in (("in study order", check.in_order), ("leave-one-out", check.left_out)):
            if not found:
                continue
            mean, worst = figures(found)
            out.append(f"  {check.name}: {what}: {len(found)} trials, mean {mean:.1f}%, max {worst:.1f}%")
            for e in sorted(found, key=lambda e: -abs(e.relative))[:WORST]:
                shown = f"measured {e.measured_gib:.2f}, predicted {e.predicted_gib:.2f} ({100 * e.relative:+.1f}%)"
                out.append(f"    {e.label}: {shown}")
    return out


def main(argv: list[str]) -> None:
    allocated = None
    if "--allocated" in argv:
        at = argv.index("--allocated")
        allocated, argv = float(argv[at + 1]), argv[:at] + argv[at + 2 :]
    stores = [Store(Path(argv[0]).resolve(), tuple(argv[1:]), allocated_over=allocated)] if argv else list(STORES)
    for store in stores:
        print("\n".join(lines(store, check_store(store))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
