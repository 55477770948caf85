"""Every option of every group composes; good sweeps expand in Hydra's order; repeats interleave."""

from __future__ import annotations

import pytest

from pipeline.commands.cli import _with_repeats
from pipeline.config.compose import CONF_DIR
from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError
from pipeline.config.job import parse_size, parse_split
from pipeline.config.plan import plan_sweep
from pipeline.config.validate import validate

GROUP_OPTIONS = [
    (group, path.stem)
    for group in ("model", "lora", "gpu", "batch", "data", "train", "optimize", "experiment")
    for path in sorted((CONF_DIR / group).glob("*.yaml"))
]
CARDS = {"t4", "l4", "a10", "a100-40gb", "a100-80gb", "h100", "h200"}


def test_every_group_has_options():
    groups = {g for g, _ in GROUP_OPTIONS}
    assert groups == {"model", "lora", "gpu", "batch", "data", "train", "optimize", "experiment"}
    assert {o for g, o in GROUP_OPTIONS if g == "model"} >= {"tiny", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"}
    assert {o for g, o in GROUP_OPTIONS if g == "gpu"} == {
        "auto",
        "cpu",
        "t4",
        "l4",
        "a10",
        "a100-40gb",
        "a100-80gb",
        "h100",
        "h200",
    }


@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_option_composes_and_validates(group, option, tmp_path, compose):
    overrides = [f"{group}={option}"]
    if (group, option) == ("data", "jsonl"):
        (tmp_path / "d.jsonl").write_text('{"text": "hello"}\n' * 4)
        overrides.append(f"data.path={tmp_path / 'd.jsonl'}")
    if (group, option) == ("model", "pretrained"):
        overrides.append("model.name_or_path=Qwen/Qwen3-0.6B")  # a hub id: validated by form, not downloaded
    cfg = compose(*overrides)
    needs_cuda = (group == "gpu" and option in CARDS) or (group == "experiment" and option.startswith("seed-t4"))
    if needs_cuda and cuda_device_count() == 0:
        # a card profile emulates that card's memory on a CUDA device: refused where there is none
        with pytest.raises(ConfigError, match=r"^gpu: gpu=\S+ emulates .* this machine has none"):
            validate(cfg)
        return
    resolved = validate(cfg)
    assert resolved.split.micro * resolved.split.accumulation == cfg.batch.effective
    if group == "gpu" and option in CARDS:
        assert resolved.cap_source == f"gpu={option}" and resolved.cap_bytes == int(cfg.gpu.memory_gib * 2**30)


def test_published_shapes(compose):
    shapes = {
        "qwen3-0.6b": (1024, 3072, 28, 16, True),
        "qwen3-1.7b": (2048, 6144, 28, 16, True),
        "qwen3-4b": (2560, 9728, 36, 32, True),
        "qwen3-8b": (4096, 12288, 36, 32, False),
    }
    for name, (hidden, inter, layers, heads, tied) in shapes.items():
        m = compose(f"model={name}").model
        assert (m.hidden_size, m.intermediate_size, m.num_hidden_layers, m.num_attention_heads) == (
            hidden,
            inter,
            layers,
            heads,
        )
        assert (m.num_key_value_heads, m.head_dim, m.vocab_size, m.tie_word_embeddings) == (8, 128, 151936, tied)


def test_seed_t4_experiment_holds_the_published_settings(compose):
    cfg = compose("experiment=seed-t4")
    assert cfg.model.name == "qwen3-1.7b" and cfg.gpu.name == "t4"
    t = cfg.train
    assert (t.steps, t.max_length, t.dtype, t.gradient_checkpointing, t.padding) == (
        100,
        512,
        "fp16",
        True,
        "max_length",
    )
    assert (t.optimizer, t.learning_rate, t.warmup_steps) == ("adamw_torch", 2e-4, 5)
    assert (cfg.lora.r, cfg.lora.alpha, list(cfg.lora.target_modules)) == (16, 32, ["all-linear"])
    assert cfg.batch.effective == 4 and cfg.data.length == 512


def test_lora_default_matches_the_seed(cfg):
    lora = cfg.lora
    assert (lora.r, lora.alpha, lora.dropout, list(lora.target_modules)) == (16, 32, 0.0, ["all-linear"])


def test_multirun_expands_in_sweep_order():
    plan = plan_sweep("config", ["batch.split=1x4,2x2,4x1"], multirun=True)
    assert [plan.configs[i].batch.split for i, _ in plan.jobs] == ["1x4", "2x2", "4x1"]


def test_a_glob_of_a_group_is_its_options_for_the_precheck_and_hydra_alike():
    """Hydra expands `group=glob(...)` with its config loader, which the precheck has not (it failed as
    `ConfigLoader is not set`): the command line's globs become the options they pick, the group's own files."""
    from pipeline.config.globs import expand_globs

    assert expand_globs(["lora=glob(*)", "train.steps=2"]) == ["lora=attention,default", "train.steps=2"]
    assert expand_globs(["model=glob(qwen*,exclude=*8b)"]) == ["model=qwen3-0.6b,qwen3-1.7b,qwen3-4b"]
    assert expand_globs(["+experiment=glob(seed-t4)"]) == ["+experiment=seed-t4"]
    assert expand_globs(["batch.split=1x4,4x1"]) == ["batch.split=1x4,4x1"]


def test_repeats_interleave_configs():
    overrides, multirun = _with_repeats(["batch.split=1x4,4x1", "repeats=2"], multirun=False)
    assert multirun
    plan = plan_sweep("config", overrides, multirun)
    assert [(r, plan.configs[i].batch.split) for i, r in plan.jobs] == [(0, "1x4"), (0, "4x1"), (1, "1x4"), (1, "4x1")]


def test_tracking_uri_follows_the_environment(monkeypatch, compose):
    assert compose().tracking.uri == "sqlite:///mlruns/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert compose().tracking.uri == "http://127.0.0.1:5000"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("14GiB", 14 * 2**30), ("14.5GB", int(14.5e9)), ("15000MiB", 15000 * 2**20), ("1TiB", 2**40)],
)
def test_sizes(text, expected):
    assert parse_size(text) == expected


def test_split_parsing():
    s = parse_split("2x8")
    assert (s.micro, s.accumulation, str(s)) == (2, 8, "2x8")


def test_a_long_cpu_job_is_announced_with_its_estimate(cfg, compose):
    from pipeline.measure.estimate import cpu_job_flops, long_cpu_job_warning

    if cuda_device_count():
        pytest.skip("the estimate is for jobs on the CPU")
    big = compose("model=qwen3-1.7b")
    assert long_cpu_job_warning(cfg) is None
    # 30 steps x 4 samples x 128 tokens through 1.4 G matmul weights: about 6 x 1.4e9 FLOPs per token
    assert 6 * 1.4e9 * 15360 * 0.8 < cpu_job_flops(big) < 6 * 1.4e9 * 15360 * 1.3
    warning = long_cpu_job_warning(compose("model=qwen3-1.7b", "train.steps=1000"))
    assert warning.startswith("warning: qwen3-1.7b on the CPU: at least ") and "GFLOP/s this CPU reaches" in warning


def test_identity_ignores_bookkeeping_and_sees_every_real_change(cfg, compose):
    from pipeline.config.identity import config_id

    base = config_id(cfg)
    same = [
        "repeat=2",
        "repeats=3",
        "paths.root=elsewhere",
        "tracking.experiment=other",
        "launcher.kind=subprocess",
        "train.progress_bar=true",
        "optimize.trials=99",
        "train.torch_compile=false",  # the old spelling of off
    ]
    for override in same:
        assert config_id(compose(override)) == base, override
    changed = [
        "lora.r=8",
        "train.gradient_checkpointing=true",
        "train.learning_rate=1e-4",
        "batch.split=2x2",
        "data.length=64",
        "measure.warmup_steps=2",
        "mem_cap=1GiB",
        "train.torch_compile=regional",
        "train.torch_compile=whole",
    ]
    ids = {config_id(compose(override)) for override in changed}
    assert len(ids) == len(changed) and base not in ids


def test_names_say_what_varies_across_a_sweep():
    from pipeline.config.identity import display_name, parse_override, varying_keys
    from pipeline.config.plan import expand_jobs

    jobs = expand_jobs(
        [
            "repeat=0,1",
            "batch.split=4x1",
            "train.gradient_checkpointing=true,false",
            "train.torch_compile=false,true",
            "lora.r=16",
        ],
        multirun=True,
    )
    keys = varying_keys(jobs)
    assert keys == ["train.gradient_checkpointing", "train.torch_compile"]  # not the repeat, split or fixed keys
    names = {
        display_name("qwen3-1.7b", "4x1", [parse_override(o) for o in job if parse_override(o)[0] in keys])
        for job in jobs
    }
    # `true` is regional compilation: the name says which (`false` is off)
    assert names == {f"qwen3-1.7b 4x1 ckpt={c} compile={p}" for c in ("on", "off") for p in ("regional", "off")}


def test_the_plan_checks_each_config_once_and_hands_each_job_that_check(monkeypatch):
    """A world-size sweep with repeats: each config is checked once, whatever its repeats; a Hydra job's overrides
    find its config as that check parsed it (its repeat set), a left-out combination finds none."""
    from pipeline.config import plan as planning

    checked = []
    real = planning.validate
    monkeypatch.setattr(planning, "validate", lambda cfg: checked.append(cfg.batch.split) or real(cfg))
    overrides = ["repeat=0,1", "launcher.kind=torchrun", "gpu=cpu", "world_size=1,2", "batch.split=4x1,2x1"]
    plan = plan_sweep("config", [*overrides, "hydra.job.chdir=false"], multirun=True)
    assert checked == ["4x1", "2x1", "4x1", "2x1"]  # four configs, each once (two repeats each)
    job = plan.job(["repeat=1", "launcher.kind=torchrun", "gpu=cpu", "world_size=2", "batch.split=2x1"])
    assert (job.split.micro, job.split.accumulation, job.config.world_size, job.config.repeat) == (2, 1, 2, 1)
    assert job is not plan.job(["repeat=0", "launcher.kind=torchrun", "gpu=cpu", "world_size=2", "batch.split=2x1"])
    assert plan.job(["repeat=0", "launcher.kind=torchrun", "gpu=cpu", "world_size=2", "batch.split=4x1"]) is None
    with pytest.raises(KeyError):
        plan.job(["batch.split=1x4"])


@pytest.mark.slow
def test_each_config_of_a_sweep_is_checked_once_and_its_jobs_get_that_check(tmp_path, monkeypatch):
    """Two configs, two repeats each: the precheck checks each config once, and every job's task receives the config
    as that check parsed it (nothing after the precheck checks, composes or parses a config again)."""
    import pipeline
    from pipeline.config import plan as planning

    checked = []  # the precheck's checks and a job's, were its task to check its config again (`checked_job`)
    real = planning.validate
    monkeypatch.setattr(planning, "validate", lambda cfg: checked.append(cfg.batch.split) or real(cfg))
    fast = ["train.steps=2", "measure.warmup_steps=1", "train.progress_bar=false"]
    result = pipeline.sweep(["batch.split=1x4,4x1", "repeats=2", *fast])
    assert checked == ["1x4", "4x1"]
    assert result.exit_code == 0 and len(result.table) == 2, result.line
