"""Find the fastest configuration that fits under a memory cap, with an Optuna study of isolated training jobs.

python -m pipeline.optimize mem_cap=14GiB                          # splits of the effective batch
python -m pipeline.optimize mem_cap=14GiB optimize=knobs           # splits x checkpointing x dtype x padding-free
python -m pipeline.optimize mem_cap=14GiB launcher.kind=torchrun '++optimize.space={world_size:[1,2]}'  # x GPUs
make optimize MEM_CAP=14GiB TRIALS=20 ARGS="model=qwen3-1.7b batch.effective=16 optimize=knobs"
"""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pipeline import exits
from pipeline.commands.cli import run_entry
from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError
from pipeline.config.job import JobConfig
from pipeline.config.plan import checked_job
from pipeline.config.store_checks import check_store

CONFIG = "optimize"  # conf/optimize.yaml: the training config, with a base split every effective batch has


def check_study(cfg: DictConfig, job: JobConfig) -> None:
    """What a study needs beyond a valid job (`job`: `cfg` as its check parsed it): a cap, a space it can search,
    and a study name that is this config's."""
    cap = job.cap_bytes
    if cap is None:
        profile = ", or a gpu profile such as gpu=t4" if cuda_device_count() else ""  # a profile needs a CUDA device
        raise ConfigError("mem_cap", f"required by optimize; accepted: a size like 14GiB{profile}")
    check_store("optimize.storage", cfg.optimize.storage, cfg.paths.root)
    from pipeline.search import check_binding, check_values  # a bad job config is refused before this import

    check_values(cfg)
    check_binding(cfg, cap)


def optimize(cfg: DictConfig) -> float | None:
    from pipeline.answer.conclusion import answered  # after the precheck: bad input never pays for this import
    from pipeline.search import StudyDriver

    cap = checked_job(cfg).cap_bytes  # as the precheck parsed it
    answer = answered(StudyDriver(cfg, list(HydraConfig.get().overrides.task), cap))
    exits.ExitCode.set(answer.exit_code)
    return answer.best.median if answer.best else None


def main() -> None:
    run_entry(
        "pipeline.optimize",
        CONFIG,
        optimize,
        __doc__,
        extra_check=check_study,
        sweeps=False,
    )
