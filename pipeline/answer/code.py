"""The answer as code: a config's plain TRL script (`answer_script`), written under `<paths.root>/scripts/`, for
`python -m pipeline.export`, a study's answer and a sweep's winner: composed and checked like a job of the same
overrides, with the SFTConfig arguments its job trained with (or would train with here)."""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.answer.script import script_text
from pipeline.builders.sft_args import sft_kwargs
from pipeline.compare.paired import Judgement
from pipeline.config.compose import compose_job
from pipeline.config.errors import ConfigError
from pipeline.config.identity import display_name, parse_override
from pipeline.config.job import JobConfig
from pipeline.config.validate import validate
from pipeline.jobs.task import job_spec
from pipeline.render.rows import Row
from pipeline.tracking.runs import OVERRIDES
from pipeline.tracking.store import Tracker

SCRIPTS = "scripts"
BOOKKEEPING = ("repeat", "repeats", "sweep_id", "wide")  # not what is trained: left out of the reproduce line


@dataclass(frozen=True)
class Exported:
    command: str  # the reproduce line: `python -m pipeline.train ...`
    path: Path
    text: str


def placement_of(job: JobConfig) -> tuple[str, str]:
    """The device and dtype a job of `job` would train on here (auto on an unknown card: what the device says)."""
    dtype = job.dtype
    if dtype is None:  # gpu=auto on a CUDA device: bf16 where it has it
        import torch

        dtype = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return job.device, dtype


def sft_of(job: JobConfig, placement: tuple[str, str] | None) -> dict:
    device, dtype = placement or placement_of(job)
    config = job.config
    return sft_kwargs(
        *vars(job.split).values(), config.train, dtype, device, config.world_size, config.launcher.timeout_s
    )


def export(overrides: list[str], sft: dict | None = None, placement: tuple[str, str] | None = None) -> Exported:
    """Compose and check the config of `overrides`, and write its script; `sft`: the SFTConfig arguments a job of it
    trained with (else those it would train with here, on `placement`: device and dtype). Raises ConfigError."""
    kept = [o for o in overrides if parse_override(o)[0] not in BOOKKEEPING]
    cfg = compose_job("config", kept)
    job = validate(cfg)  # the command's one check
    spec = job_spec(job, name=display_name(cfg.model.name, cfg.batch.split, []))
    command = "python -m pipeline.train " + shlex.join(kept)
    sft = sft or sft_of(job, placement)
    text = script_text(spec.config, sft, spec.name, spec.config_id, command)
    path = Path(cfg.paths.root) / SCRIPTS / f"train_{spec.config_id}.py"
    write_text(path, text)
    return Exported(command, path, text)


def export_answer(
    overrides: list[str], sft: dict | None, placement: tuple[str, str] | None = None
) -> tuple[Exported | None, str]:
    """An answer's script, written, and what names it beside the reproduce line: its path, or why it was not
    written (the answer stands without it)."""
    try:
        exported = export(overrides, sft=sft or None, placement=placement)
    except (ConfigError, OSError) as err:
        return None, f"not written ({err})"
    return exported, f"{exported.path}  (the same in plain TRL: python {exported.path})"


def export_winner(tracker: Tracker, rows: list[Row]) -> tuple[list[str], Exported | None]:
    """A sweep's winner (ranked from its paired rounds) with its reproduce line and script; nothing without one."""
    winner = next((row for row in rows if row.judgement is Judgement.WINNER and row.ok_runs), None)
    run = tracker.run(winner.ok_runs[0].run_id) if winner else None
    if run is None or OVERRIDES not in run.data.tags:
        return [], None
    params = run.data.params
    placement = (params["device"], params["dtype_resolved"]) if "dtype_resolved" in params else None
    overrides = shlex.split(run.data.tags[OVERRIDES])
    exported, shown = export_answer(overrides, None, placement)
    command = exported.command if exported else "python -m pipeline.train " + shlex.join(overrides)
    return [f"winner: {winner.name}", f"  {command}", f"  script: {shown}"], exported


def write_text(path: Path, text: str) -> None:
    """Atomically: a reader never sees half a script."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)
