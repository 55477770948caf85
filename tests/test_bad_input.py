"""Bad input never gives a traceback: exit code 2, one line naming the field and the accepted form, nothing written.

Each case runs the real entry point in a fresh interpreter, in an empty folder that must stay empty (no mlruns/,
no Hydra output folder, no MLflow database).
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError
from tests.helpers.cli import run_cli
from tests.helpers.disks import can_mount, run_on_small_disk
from tests.helpers.processes import run_with_closed_output

HUB = ["data=capybara", "data.subset=null", "data.split=train"]  # data.name: a local folder in the cases below

CASES = [
    # (command-line arguments, exact start of the message, a fragment of the accepted form)
    (["batch.split=3x"], "batch.split: got '3x'", "'MxA' with whole numbers"),
    (["batch.split=0x4"], "batch.split: got '0x4'", "M, A >= 1"),
    (["batch.split=abc"], "batch.split: got 'abc'", "e.g. 2x2"),
    (
        ["batch.split=2x3"],
        "batch.split: '2x3' x world_size 1 gives 6, not batch.effective 4",
        "accepted: 1x4, 2x2, 4x1",
    ),
    (["-m", "batch.split=1x4,2x3"], "batch.split: '2x3' x world_size 1 gives 6", "accepted: 1x4, 2x2, 4x1"),
    (["batch.effective=0"], "batch.effective: got 0", "a whole number >= 1"),
    (["--bogus"], "--bogus: not an option of python -m pipeline.train", "accepted: key=value overrides and the flags"),
    (["-m", "batch.split=1x4,4x1", "--cfg", "job"], "--cfg: shows one job's config, not a sweep's", "without -m"),
    (["repeats=2", "--cfg", "job"], "--cfg: shows one job's config, not a sweep's", "without -m and repeats"),
    (["optimize.confirm_share=0.95"], "optimize.confirm_share: got 0.95", "a number in [0, 0.9)"),
    (["optimize.confirm_within=-1"], "optimize.confirm_within: got -1", "a number >= 0"),
    (["optimize.confirm_floor_s=-5"], "optimize.confirm_floor_s: got -5", "a number of seconds >= 0"),
    (["batch.effective=abc"], "batch.effective: got 'abc'", "an integer"),
    (["mem_cap=14 GB?"], "mem_cap: got '14 GB?'", "a size like 14GiB, 14.5GB or 15000MiB"),
    (["mem_cap=14"], "mem_cap: got '14'", "a size like 14GiB"),
    (["mem_cap=-3GiB"], "mem_cap: got '-3GiB'", "a size like 14GiB"),
    (["train.steps=0"], "train.steps: got 0", "a whole number >= 1"),
    (["train.steps=-5"], "train.steps: got -5", "a whole number >= 1"),
    (["train.steps=abc"], "train.steps: got 'abc'", "an integer"),
    (["train.steps=1.5"], "train.steps: got '1.5'", "an integer"),
    (["train.learning_rate=fast"], "train.learning_rate: got 'fast'", "a number"),
    (["train.learning_rate=0"], "train.learning_rate: got 0", "a number > 0"),
    (["train.dtype=fp8"], "train.dtype: got 'fp8'", "accepted: auto, fp32, fp16, bf16"),
    (["gpu=cpu", "train.dtype=fp16"], "train.dtype: fp16 needs a CUDA device", "accepted with gpu=cpu"),
    (["gpu=t4", "train.dtype=bf16"], "train.dtype: bf16 is not supported by gpu=t4", "accepted: auto, fp16, fp32"),
    (["train.padding=sometimes"], "train.padding: got 'sometimes'", "longest, max_length, padding_free, packing"),
    (["train.padding=[longest]"], "train.padding: got a list ['longest']", "longest, max_length, padding_free"),
    (["data.path={a:1}"], "data.path: got a dict {'a': 1}", "one value (to sweep several: a,b with -m)"),
    (["train.allocator=fast"], "train.allocator: got 'fast'", "accepted: cached, expandable"),
    (["train.allocator=true"], "train.allocator: got 'true'", "accepted: cached, expandable"),  # as typed, not True
    (["train.optimizer=lion"], "train.optimizer: got 'lion'", "adamw_torch"),
    (["train.loss=fused"], "train.loss: got 'fused'", "accepted: trl, model, compiled, liger"),
    (["gpu=cpu", "train.optimizer_step=graph"], "train.optimizer_step: graph records a CUDA graph", "eager, compiled"),
    (["train.gradient_checkpointing=maybe"], "train.gradient_checkpointing: got 'maybe'", "true or false"),
    (["train.torch_compile=layers"], "train.torch_compile: got 'layers'", "accepted: off, regional, whole"),
    (["train.compile_mode=fast"], "train.compile_mode: got 'fast'", "accepted: default, reduce-overhead"),
    (
        ["train.compile_mode=reduce-overhead"],
        "train.compile_mode: reduce-overhead applies to compiled code and train.torch_compile is off",
        "accepted with it: default (or train.torch_compile=regional or whole)",
    ),
    (["train.steps=[1"], "train.steps: '[1' cannot be read by Hydra's override grammar", "key='a value'"),
    (["model=gpt9"], "model: unknown option 'gpt9'", "qwen3-1.7b"),
    (["gpu=v100"], "gpu: unknown option 'v100'", "a100-40gb"),
    (["data=imagenet"], "data: unknown option 'imagenet'", "synthetic"),
    (["experiment=nope"], "experiment: unknown option 'nope'", "seed-t4"),
    (["lora.r=0"], "lora.r: got 0", "a whole number >= 1"),
    (["lora.dropout=1.5"], "lora.dropout: got 1.5", "[0, 1)"),
    (["lora.target_modules=[]"], "lora.target_modules: empty", "all-linear"),
    (["data=jsonl"], "data.path: missing", "JSON-lines file"),
    (
        ["data=jsonl", "data.path=/nonexistent/x.jsonl"],
        "data.path: '/nonexistent/x.jsonl' does not exist",
        "JSON-lines",
    ),
    (["data=jsonl", "data.path=unreadable.jsonl"], "data.path: 'unreadable.jsonl' line 1 is not JSON", "JSON-lines"),
    (
        ["data=jsonl", "data.path=wrong.jsonl"],
        "data.path: 'wrong.jsonl' line 1 has neither",
        "'text' (a non-empty string) or 'messages'",
    ),
    (["data.length=4096"], "data.length: 4096 exceeds train.max_length 128", "accepted: 2 to 128"),
    (["data.distribution=uniform"], "data.min_length: got None", "accepted with distribution=uniform"),
    (["model=pretrained"], "model.name_or_path: required with model.source=pretrained", "a hub id or a directory"),
    (
        ["model=pretrained", "model.name_or_path=./missing-dir"],
        "model.name_or_path: './missing-dir' does not exist; accepted: a hub model id such as Qwen/Qwen3-0.6B, or a "
        "folder with a saved model (its config.json and weights)",
        "",
    ),
    (  # was `'/nonexistent/dir' is not a directory with a config.json`: no accepted form
        ["model=pretrained", "model.name_or_path=/nonexistent/dir"],
        "model.name_or_path: '/nonexistent/dir' does not exist; accepted: a hub model id",
        "a folder with a saved model",
    ),
    (["model=pretrained", "model.name_or_path=/etc"], "model.name_or_path: '/etc' has no config.json", "hub model"),
    (["model=pretrained", "model.name_or_path=few.jsonl"], "model.name_or_path: 'few.jsonl' is not a folder", "hub"),
    (["model.hidden_size=abc"], "model.hidden_size: got 'abc'", "an integer"),
    (["train.foo=1"], "train.foo: unknown key", "learning_rate, liger_kernel"),
    (["+train.foo=1"], "train.foo: unknown key", "steps"),
    (["+colour=red"], "colour: unknown key", "batch, data"),
    (["~model"], "model: required but not set", "accepted: model=pretrained or model=qwen3-0.6b"),
    (
        ["measure.warmup_steps=30"],
        "measure.warmup_steps: 30 leaves no steady step",
        "accepted: 0 to 29, or train.steps=31 or more",
    ),
    (["repeats=0"], "repeats: got 0", "a whole number >= 1"),
    # sweeps too large to run (repeats=1000000000 grew to 22 GB before the kernel killed it)
    (["-m", "batch.split=1x4,4x1", "repeats=1000000000"], "repeats: got 1000000000", "a whole number from 1 to 1,000"),
    (["repeats=1001"], "repeats: got 1001", "a whole number from 1 to 1,000"),
    (
        ["-m", "batch.split=1x4,4x1", "repeats=600"],
        "-m: the sweep has 1,200 jobs (600 repeats x 2 batch.split)",
        "accepted: at most 1,000 jobs in one sweep",
    ),
    (
        ["-m", "train.steps=range(10,1000000000)", "batch.split=1x4,4x1"],
        "-m: the sweep has over 1,000 jobs (over 1,000 train.steps x 2 batch.split)",
        "accepted: at most 1,000 jobs in one sweep",
    ),
    (  # 1,000 jobs of two configs: each config is checked once (one check per job took minutes), then the store
        ["-m", "batch.split=1x4,4x1", "repeats=500", "tracking.uri=bogus://x"],
        "tracking.uri: got 'bogus://x'",
        "sqlite:///",
    ),
    (["launcher.kind=ssh"], "launcher.kind: got 'ssh'", "forkserver, subprocess"),
    (["launcher.stall_s=0"], "launcher.stall_s: got 0", "accepted: seconds > 0 or null"),
    (
        ["world_size=3"],
        "batch.split: '4x1' x world_size 3 gives 12",
        "accepted: no split at world_size 3, which does not divide batch.effective 4; a world_size that does (1, 2, "
        "4), or batch.effective=12 with this split",
    ),
    # data that would fail inside the job, or measure the wrong thing
    (["data=jsonl", "data.path=line3.jsonl"], "data.path: 'line3.jsonl' line 3 is not JSON", "JSON-lines"),
    (["data=jsonl", "data.path=number.jsonl"], "data.path: 'number.jsonl' line 1 'text' is 5, not a string", "'text'"),
    (["data=jsonl", "data.path=notalist.jsonl"], "data.path: 'notalist.jsonl' line 1 'messages' is not a", "role"),
    (["data=jsonl", "data.path=later.jsonl"], "data.path: 'later.jsonl' line 2 has neither", "'messages'"),
    (["data=jsonl", "data.path=blank.jsonl"], "data.path: 'blank.jsonl' line 2 'text' is empty", "a non-empty string"),
    (["data=jsonl", "data.path=spaces.jsonl"], "data.path: 'spaces.jsonl' line 1 'text' is empty or only", "'text'"),
    (["data=jsonl", "data.path=both.jsonl"], "data.path: 'both.jsonl' line 1 has both 'messages' and 'text'", "or"),
    (
        ["data=jsonl", "data.path=nullcontent.jsonl"],
        "data.path: 'nullcontent.jsonl' line 1 'messages' holds a 'content' of null, not a string",
        "{role, content}",
    ),
    (["data=jsonl", "data.path=latin1.jsonl"], "data.path: 'latin1.jsonl' line 2 is not UTF-8 text", "JSON-lines"),
    (
        ["data=jsonl", "data.path=role.jsonl"],
        "data.path: 'role.jsonl' line 1 'messages' holds the role \"narrator\"",
        "role one of system, user, assistant, tool",
    ),
    (
        ["data=jsonl", "data.path=usercall.jsonl"],
        "data.path: 'usercall.jsonl' line 1 'messages' holds 'tool_calls' in a \"user\" turn (only an assistant's",
        "beside an assistant's tool_calls, null",
    ),
    (
        ["data=jsonl", "data.path=badcall.jsonl"],
        "data.path: 'badcall.jsonl' line 1 'messages' holds a tool call [1], not {function: {name, arguments}}",
        "'messages'",
    ),
    # a local folder as data.name, read as the hub's data files are
    (HUB + ["data.name=./nowhere"], "data.name: './nowhere' does not exist", "a folder of data files"),
    (HUB + ["data.name=few.jsonl"], "data.name: 'few.jsonl' is a file", "data=jsonl data.path=few.jsonl"),
    (HUB + ["data.name=hub3"], "data.name: 'hub3' split train has 3 records, fewer than batch.effective 4", "smaller"),
    (HUB + ["data.name=hubprompt"], "data.name: 'hubprompt' split train has neither a 'messages' nor a", "'text'"),
    (HUB + ["data.name=hubblank"], "data.name: 'hubblank' split train record 2 'text' is empty", "non-empty string"),
    (HUB + ["data.name=hub3", "data.split=validation"], "data.split: got 'validation'", "a split that 'hub3' has"),
    (HUB + ["data.name=hubbad"], "data.name: 'hubbad' cannot be read (JSON parse error", "a folder of data files"),
    (
        ["data=jsonl", "data.path=few.jsonl"],
        "data.path: 'few.jsonl' has 2 records, fewer than batch.effective 4",
        "accepted: a file of 4 records or more, or a smaller batch.effective",
    ),
    (["data.num_samples=1"], "data.num_samples: 1 cannot fill every step of batch.effective 4", "a multiple of 4"),
    (["train.max_length=100000"], "train.max_length: 100000 exceeds the model's max_position_embeddings 4096", ""),
    (["train.steps=99999999999999999999"], "train.steps: got 99999999999999999999", "up to 100,000,000"),
    # where the records go
    (["paths.root="], "paths.root: empty", "a folder to write in"),
    (["paths.root=/proc/x"], "paths.root: '/proc/x' cannot be written", "a folder to write in"),
    (["tracking.uri=http://127.0.0.1:1"], "tracking.uri: http://127.0.0.1:1 cannot be reached", "a running server"),
    (["tracking.uri=bogus://x"], "tracking.uri: got 'bogus://x'", "sqlite:///"),
    (["tracking.uri=sqlite:///corrupt.db"], "tracking.uri: 'corrupt.db' is not a usable SQLite database", "sqlite:///"),
    (
        ["tracking.uri=sqlite:///elsewhere/mlflow.db"],
        "tracking.uri: 'sqlite:///elsewhere/mlflow.db': its folder ",
        "accepted: a database file in an existing folder, or under paths.root 'mlruns' (the command makes it)",
    ),
    # names the stores keep (issue 21: MLflow's own refusals came after mlruns/ was written)
    (["tracking.experiment="], "tracking.experiment: empty", "a name of 1 to 500 characters (MLflow's limit)"),
    (["tracking.experiment=" + "x" * 600], "tracking.experiment: 600 characters long", "a name of 1 to 500"),
    # files that are no JSON-lines file
    (["data=jsonl", "data.path=/etc"], "data.path: '/etc' is a folder", "a readable JSON-lines file"),
    (
        ["data=jsonl", "data.path=/dev/zero"],
        "data.path: '/dev/zero' is not a regular file (a character device)",
        "a readable JSON-lines file",
    ),
    (  # was `does not exist`
        ["data=jsonl", "data.path=loop.jsonl"],
        "data.path: 'loop.jsonl' is a loop of symbolic links (following them never reaches a file)",
        "accepted: a readable JSON-lines file",
    ),
    (
        ["data=jsonl", "data.path=dangling.jsonl"],
        "data.path: 'dangling.jsonl' is a symbolic link to 'gone.jsonl', which does not exist",
        "accepted: a readable JSON-lines file",
    ),
    (
        ["data=jsonl", "data.path=looped/x.jsonl"],
        "data.path: 'looped/x.jsonl' is a loop of symbolic links",
        "accepted: a readable JSON-lines file",
    ),
    # were a 34-line traceback (FileExistsError), `error: override: ConfigLoader is not set`, and `accepted: none`
    (["hydra.run.dir=/dev/null"], "hydra.run.dir: '/dev/null': /dev/null is not a folder", "a folder to write in"),
    (["-m", "hydra.sweep.dir=/dev/null/x"], "hydra.sweep.dir: '/dev/null/x': /dev/null is not a folder", "a folder"),
    (
        ["-m", "batch.split=glob(*)"],
        "batch.split: glob(*) picks among a config group's options, and batch.split is no group",
        "accepted: its values listed (batch.split=a,b,c), or a glob of a group (batch, data, experiment, gpu",
    ),
    (["-m", "model=glob(gpt*)"], "model: glob(gpt*) picks none of its options", "accepted: pretrained, qwen3-0.6b"),
    (
        ["batch.effective=4", "batch.split=2x2", "world_size=3"],
        "batch.split: '2x2' x world_size 3 gives 12, not batch.effective 4",
        "a world_size that does (1, 2, 4), or batch.effective=12 with this split",
    ),
    (["~train.steps"], "train.steps: '~train.steps' deletes a key the config always has", "train.steps=<value>"),
]
OPTIMIZE_CASES = [
    ([], "mem_cap: required by optimize", "a size like 14GiB"),
    (["--bogus"], "--bogus: not an option of python -m pipeline.optimize", "key=value overrides"),  # mem_cap missing
    (
        ["mem_cap=1GiB", "optimize.storage=sqlite:////proc/x/x.db"],
        "optimize.storage: 'sqlite:////proc/x/x.db': its folder /proc/x does not exist",
        "accepted: a database file in an existing folder",
    ),
    (  # issue 21: the folder and the database were made, and the study ran
        ["mem_cap=1GiB", "optimize.storage=sqlite:////nonexistent/dir/x.db"],
        "optimize.storage: 'sqlite:////nonexistent/dir/x.db': its folder /nonexistent/dir does not exist",
        "accepted: a database file in an existing folder, or under paths.root 'mlruns' (the command makes it)",
    ),
    (  # issue 21: a 21-line traceback from MLflow's filter, after mlruns/ was written
        ["mem_cap=1GiB", 'optimize.study_name="a\'b"'],
        'optimize.study_name: got "a\'b", which holds "\'"',
        "a name of 1 to 200 characters without quotes, backslashes or control characters, or null",
    ),
    (  # issue 21: blamed the split derived from it, batch.split '1x0'
        ["mem_cap=1GiB", "batch.effective=0"],
        "batch.effective: got 0",
        "a whole number >= 1",
    ),
    (["mem_cap=1GiB", "++optimize.space={train.steps: [0, -1]}"], "optimize.space: no config in it can run", "steps"),
    (
        ["mem_cap=1GiB", "++optimize.space={train.dtype: [fp32, fp8]}"],
        "optimize.space.train.dtype: value 'fp8'",
        "fp32",
    ),
    (  # a split of another effective batch
        ["mem_cap=1GiB", "++optimize.space={batch.split:[2x2,3x1]}"],
        "optimize.space.batch.split: got 3x1",
        "accepted: a list of splits of effective batch 4: 1x4, 2x2, 4x1",
    ),
    (["mem_cap=1GiB", "measure.cpu_threads=0"], "measure.cpu_threads: got 0", "accepted: a whole number >= 1"),
    (["mem_cap=1GiB", "optimize.sampler=grid"], "optimize.sampler: got 'grid'", "model, tpe, random, bruteforce, gp"),
    (  # was dropped without a word, and the study ran
        ["mem_cap=1GiB", "++optimize.space={train.dtype:[]}"],
        "optimize.space.train.dtype: an empty list searches nothing",
        "accepted: the values to search, e.g. [fp16, bf16], or the key left out of the space",
    ),
    (["mem_cap=1GiB", "++optimize.space=abc"], "optimize.space: got a str", "'++optimize.space={train.dtype:"),
    (  # was `override: LexerNoViableAltException: ...`
        ["mem_cap=1GiB", 'optimize.study_name=a"b'],
        "optimize.study_name: 'a\"b' cannot be read by Hydra's override grammar",
        "key='a value'",
    ),
    (["-m", "mem_cap=1GiB"], "-m: pipeline.optimize runs one study", "without -m"),
    (["mem_cap=1GiB", "repeats=3"], "-m: pipeline.optimize runs one study", "without repeats"),
    (
        ["mem_cap=1GiB", "optimize.space={train.dtype: [fp32]}"],
        "optimize.space: Hydra adds no key",
        "'++optimize.space=",
    ),
    (["mem_cap=1GiB", "tracking.uri=bogus://x"], "tracking.uri: got 'bogus://x'", "sqlite:///"),
    (  # an MLflow server's address is no Optuna storage: it got through, then failed at run time with exit 1
        ["mem_cap=1GiB", "optimize.storage=http://127.0.0.1:9"],
        "optimize.storage: got 'http://127.0.0.1:9'",
        "accepted: sqlite:///path/to/optuna.db or a database URL such as postgresql://user@host/db",
    ),
    (["mem_cap=1GiB", "optimize.storage=nope"], "optimize.storage: got 'nope'", "sqlite:///path/to/optuna.db"),
    (  # a database that does not answer says what is accepted too
        ["mem_cap=1GiB", "optimize.storage=postgresql://u@127.0.0.1:9/x"],
        "optimize.storage: 'postgresql://u@127.0.0.1:9/x' cannot be opened",
        "accepted: a database that answers",
    ),
    (  # a database driver that is not installed (the cluster extra brings psycopg, not pg8000)
        ["mem_cap=1GiB", "optimize.storage=postgresql+pg8000://u@127.0.0.1/x"],
        "optimize.storage: 'postgresql+pg8000://u@127.0.0.1/x' needs the Python driver 'pg8000'",
        "pip install '.[cluster]'",
    ),
    (["mem_cap=1GiB", "optimize.fit_over=bogus"], "optimize.fit_over: got 'bogus'", "accepted: steps, epoch"),
    (["mem_cap=1GiB", "optimize.fit_over=null"], "optimize.fit_over: got null", "accepted: steps, epoch"),
]


if cuda_device_count() == 0:  # a card profile needs a CUDA device to emulate its memory on
    CASES += [
        (["gpu=t4"], "gpu: gpu=t4 emulates a T4's memory on a CUDA device", "accepted here: gpu=auto or gpu=cpu"),
        (["experiment=seed-t4"], "gpu: gpu=t4 emulates", "accepted here: gpu=auto or gpu=cpu"),
        (["-m", "gpu=cpu,a100-80gb"], "gpu: gpu=a100-80gb emulates", "gpu=auto or gpu=cpu"),
        (["train.dtype=fp16"], "train.dtype: fp16 needs a CUDA device", "accepted with gpu=auto here"),
        (
            ["train.torch_compile=true", "train.compile_mode=reduce-overhead"],
            "train.compile_mode: reduce-overhead records CUDA graphs",
            "accepted on the CPU: default, max-autotune-no-cudagraphs",
        ),
    ]
else:  # the CUDA-graph rules that only a CUDA device reaches (on the CPU, the CPU refuses the mode first)
    CASES += [
        (
            ["experiment=seed-t4", "gpu=auto", "train.torch_compile=regional", "train.compile_mode=reduce-overhead"],
            "train.compile_mode: reduce-overhead graphs of checkpointed layers fail when the layer is recomputed",
            "accepted with train.gradient_checkpointing=true and regional: default, max-autotune-no-cudagraphs",
        ),
        (
            ["train.torch_compile=regional", "train.compile_mode=reduce-overhead", "batch.split=2x2"],
            "train.compile_mode: reduce-overhead with gradient accumulation replays over the accumulated gradients",
            "accepted: a split Mx1",
        ),
    ]


FILES = {
    "unreadable.jsonl": b"\x00\x01 not json\n",
    "wrong.jsonl": b'{"prompt": "x"}\n',
    "line3.jsonl": b'{"text": "a"}\n{"text": "b"}\n{"text": \n',
    "number.jsonl": b'{"text": 5}\n',
    "notalist.jsonl": b'{"messages": "not a list"}\n',
    "later.jsonl": b'{"text": "a"}\n{"prompt": "b"}\n',
    "blank.jsonl": b'{"text": "a"}\n{"text": ""}\n',
    "spaces.jsonl": b'{"text": " \\t "}\n',
    "both.jsonl": b'{"text": "a", "messages": [{"role": "user", "content": "a"}]}\n',
    "nullcontent.jsonl": b'{"messages": [{"role": "user", "content": null}]}\n',
    "latin1.jsonl": b'{"text": "a"}\n{"text": "caf\xe9"}\n',
    "role.jsonl": b'{"messages": [{"role": "narrator", "content": "once"}]}\n',
    "usercall.jsonl": b'{"messages": [{"role": "user", "content": null, "tool_calls": [{"name": "f"}]}]}\n',
    "badcall.jsonl": b'{"messages": [{"role": "assistant", "content": null, "tool_calls": [[1]]}]}\n',
    "hub3/train.jsonl": b'{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n',
    "hubprompt/train.jsonl": b'{"prompt": "a"}\n' * 4,
    "hubblank/train.jsonl": b'{"text": "a"}\n{"text": ""}\n{"text": "c"}\n{"text": "d"}\n',
    "hubbad/train.jsonl": b'{"text": "a"}\n{"text": \n',
    "few.jsonl": b'{"text": "a"}\n{"text": "b"}\n',
    "corrupt.db": b"this is not a database",
}


SYMLINKS = {"loop.jsonl": "loop.jsonl", "dangling.jsonl": "gone.jsonl", "looped": "looped"}


def _prepare(folder):
    for name, content in FILES.items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_bytes(content)
    for name, target in SYMLINKS.items():
        (folder / name).symlink_to(target)


def _datasets_cache(folder) -> dict:
    """A case's own cache of read data folders, beside its folder (what a refused command writes is looked for in
    the folder)."""
    return {"HF_DATASETS_CACHE": str(folder.parent / f"{folder.name}-datasets")}


def _sample(cases: list, slow: bool) -> list:
    """Every tenth case for the default tier, the others for the slow one: all of them run in CI."""
    return [case for i, case in enumerate(cases) if (i % 10 != 0) == slow]


@pytest.mark.parametrize(
    ("module", "cases"),
    [
        pytest.param("pipeline.train", _sample(CASES, False), id="train"),
        pytest.param("pipeline.optimize", _sample(OPTIMIZE_CASES, False), id="optimize"),
        pytest.param("pipeline.train", _sample(CASES, True), id="train-rest", marks=pytest.mark.slow),
        pytest.param("pipeline.optimize", _sample(OPTIMIZE_CASES, True), id="optimize-rest", marks=pytest.mark.slow),
    ],
)
def test_every_bad_input_gives_one_line_and_exit_2(tmp_path, module, cases):
    outside_existed = Path("/nonexistent").exists()
    folders = []
    for i in range(len(cases)):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        _prepare(folder)
        folders.append(folder)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(
            pool.map(
                lambda pair: run_cli(
                    *pair[0][0], cwd=pair[1], timeout=120, module=module, env=_datasets_cache(pair[1])
                ),
                zip(cases, folders, strict=True),
            )
        )
    failures = []
    for (args, start, accepted), folder, proc in zip(cases, folders, results, strict=True):
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        written = sorted(p.name for p in folder.iterdir()) != sorted(
            {name.split("/")[0] for name in [*FILES, *SYMLINKS]}
        )
        ok = (
            proc.returncode == 2
            and len(lines) == 1
            and lines[0].startswith("error: " + start)
            and accepted in lines[0]
            and "Traceback" not in proc.stdout + proc.stderr
            and not proc.stdout.strip()
            and not written
        )
        if not ok:
            failures.append(
                f"{args}: rc={proc.returncode} written={written} stderr={proc.stderr!r} stdout={proc.stdout[-300:]!r}"
            )
    assert not failures, "\n".join(failures)
    assert outside_existed or not Path("/nonexistent").exists()  # a refused storage's folder is not made either


UNKNOWN_KEYS = {  # a key no section has, added (+, ++) or set: refused with that section's keys, nothing run
    (
        "pipeline.train",
        "+launcher.foo=1",
    ): "launcher.foo: unknown key; accepted keys here: kind, stall_s, timeout_s, verbose",
    (
        "pipeline.train",
        "++launcher.foo=1",
    ): "launcher.foo: unknown key; accepted keys here: kind, stall_s, timeout_s, verbose",
    (
        "pipeline.train",
        "+launcher.world_size=3",
    ): "launcher.world_size: unknown key; accepted keys here: kind, stall_s, timeout_s, verbose",
    (
        "pipeline.train",
        "launcher.foo=1",
    ): "launcher.foo: unknown key; accepted keys here: kind, stall_s, timeout_s, verbose",
    ("pipeline.train", "+measure.foo=1"): (
        "measure.foo: unknown key; accepted keys here: busy_threshold, confidence, cpu_threads, max_cv, max_drift, "
        "pin_cpu, profile, profile_steps, warmup_steps"
    ),
    (
        "pipeline.train",
        "+tracking.foo=1",
    ): "tracking.foo: unknown key; accepted keys here: artifact_root, experiment, uri",
    ("pipeline.train", "+paths.foo=1"): "paths.foo: unknown key; accepted keys here: root",
    (
        "pipeline.optimize",
        "+launcher.foo=1",
    ): "launcher.foo: unknown key; accepted keys here: kind, stall_s, timeout_s, verbose",
}


def test_an_unknown_key_of_any_section_is_one_line_with_the_sections_keys(tmp_path):
    """Not only the groups of conf/: launcher, measure, tracking and paths refuse a key they lack before any job
    runs, in one line that lists what they accept, and nothing is written."""

    def run(case):
        module, override = case
        folder = tmp_path / f"{module}{override}"
        folder.mkdir()
        proc = run_cli(override, "mem_cap=4GiB", cwd=folder, module=module, timeout=120)
        return proc.returncode, proc.stderr, proc.stdout, sorted(p.name for p in folder.iterdir())

    with ThreadPoolExecutor(max_workers=3) as pool:
        said = dict(zip(UNKNOWN_KEYS, pool.map(run, UNKNOWN_KEYS), strict=True))
    assert said == {case: (2, f"error: {line}\n", "", []) for case, line in UNKNOWN_KEYS.items()}


def test_bad_report_arguments_give_one_line_naming_the_argument_and_write_nothing(tmp_path, capsys):
    """`pipeline.report` over a real store holding one sweep: an unknown experiment, sweep or study, or a store that
    is not there, is one line naming the argument and what is accepted (what the store has), exit code 2, and the
    store's file is left as it was."""
    from pipeline.commands import report
    from pipeline.records import RunKind, RunState
    from pipeline.tracking import runs
    from pipeline.tracking.store import Tracker

    tracker = Tracker("sqlite:///mlruns/mlflow.db", "batch-split", "mlruns/artifacts")
    for sweep in ("20260101-000000-aaaaaa", "20260102-000000-bbbbbb"):
        tracker.end(
            tracker.start(f"sweep {sweep}", tags={runs.KIND: RunKind.SWEEP, runs.SWEEP: sweep}), RunState.FINISHED
        )
    db = tmp_path / "mlruns" / "mlflow.db"
    before = db.read_bytes()
    uri = f"sqlite:///{db}"
    cases = {
        ("--experiment", "nope"): f"--experiment: no experiment 'nope' in {uri}; accepted: an experiment recorded "
        "there: batch-split",
        ("--sweep", "nope"): f"--sweep: no record of sweep 'nope' in {uri}; accepted: one recorded there (newest "
        "first): 20260102-000000-bbbbbb, 20260101-000000-aaaaaa",
        ("--study", "nope"): f"--study: no record of study 'nope' in {uri}; run one first: python -m pipeline.optimize"
        " ...",
        ("--tracking-uri", "sqlite:///other.db"): "--tracking-uri: no MLflow store at other.db; record a sweep or "
        "study first; accepted: the store a sweep or study recorded into (sqlite:///mlruns/mlflow.db, relative to the "
        "folder it ran in)",
    }
    said = {}
    for args in cases:  # the command's own main, in this process (a process each spent 5 s importing the same)
        with pytest.raises(SystemExit) as ended:
            report.main(list(args))
        out = capsys.readouterr()
        said[args] = (ended.value.code, out.err, out.out)
    assert said == {args: (2, f"error: {line}\n", "") for args, line in cases.items()}
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlruns"] and not (tmp_path / "mlruns" / "reports").exists()


@pytest.mark.parametrize("command", ["pipeline.report", "pipeline.card"])
def test_a_store_in_no_folder_is_refused_before_mlflow_is_imported(tmp_path, command):
    """The reading commands check their store before importing MLflow, the plots and the results (seconds): the
    refusal is the store's one line, and the process never loaded MLflow."""
    code = (
        "import runpy, sys\n"
        "try:\n"
        f"    runpy.run_module({command!r}, run_name='__main__')\n"
        "except SystemExit as ended:\n"
        "    print(ended.code, 'mlflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--tracking-uri", "sqlite:///gone/mlflow.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.stdout, done.stderr) == (
        "2 False\n",
        f"error: --tracking-uri: 'sqlite:///gone/mlflow.db': its folder {tmp_path}/gone does not exist; accepted: a "
        "database file in an existing folder\n",
    )
    assert list(tmp_path.iterdir()) == []


FLAG_CASES = {  # the commands that take flags: a refused flag is one line, as any bad input
    ("pipeline.report", "--study"): "--study: expected one argument; accepted: see python -m pipeline.report --help",
    ("pipeline.report", "--confidence", "2"): "--confidence: got '2'; accepted: a level between 0 and 1, e.g. 0.95",
    ("pipeline.report", "--confidence", "1"): "--confidence: got '1'; accepted: a level between 0 and 1, e.g. 0.95",
    ("pipeline.report", "--bogus"): "unrecognized arguments: --bogus; accepted: see python -m pipeline.report --help",
    ("pipeline.card", "--study"): "--study: expected one argument; accepted: see python -m pipeline.card --help",
    ("pipeline.ui", "--port", "abc"): "--port: invalid int value: 'abc'; accepted: see python -m pipeline.ui --help",
    ("pipeline.dashboard", "--port"): "--port: expected one argument; accepted: see python -m pipeline.dashboard "
    "--help",
    ("pipeline.export", "--bogus"): "--bogus: not an option of python -m pipeline.export; accepted: --stdout, "
    "--help and key=value overrides",
}


def test_a_refused_flag_of_any_command_is_one_line_and_exit_2(tmp_path):
    """Not argparse's usage block nor Hydra's lexer error: the flag, why, and where the accepted forms are."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = list(pool.map(lambda c: run_cli(*c[1:], cwd=tmp_path, module=c[0], timeout=120), FLAG_CASES))
    said = {case: (proc.returncode, proc.stderr, proc.stdout) for case, proc in zip(FLAG_CASES, procs, strict=True)}
    assert said == {case: (2, f"error: {line}\n", "") for case, line in FLAG_CASES.items()}
    assert list(tmp_path.iterdir()) == []


def test_the_ui_on_a_taken_port_or_a_foreign_address_is_one_line_and_exit_2(tmp_path):
    """`make ui PORT=N` where something listens on N: one line naming --port, who holds it and a free port to use,
    exit code 2 at once, no link printed and nothing saved in the store (its saved view). Was: the link (to the other
    server), and exit code 0 half a minute later."""
    import os
    import re
    import socket

    from pipeline.tracking.store import Tracker

    Tracker("sqlite:///mlruns/mlflow.db", "batch-split", "mlruns/artifacts")
    db = tmp_path / "mlruns" / "mlflow.db"
    before = db.read_bytes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli("--store", "mlruns", "--port", str(port), cwd=tmp_path, module="pipeline.ui", timeout=60)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    (line,) = proc.stderr.splitlines()
    pattern = (
        rf"error: --port: 127\.0\.0\.1:{port} is in use by pid {os.getpid()} \(.*python.*\); accepted: a free port, "
        r"e\.g\. --port (\d+) \(make ui PORT=\1\)"
    )
    assert re.fullmatch(pattern, line), line
    cases = {
        ("--host", "192.0.2.1"): "--host: cannot listen on 192.0.2.1 (Cannot assign requested address); accepted: an"
        " address of this machine, such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
        ("--port", "99999"): "--port: got 99999; accepted: a port number from 1 to 65535",
    }
    for args, expected in cases.items():
        proc = run_cli("--store", "mlruns", *args, cwd=tmp_path, module="pipeline.ui", timeout=60)
        assert (proc.returncode, proc.stderr, proc.stdout) == (2, f"error: {expected}\n", ""), args
    assert db.read_bytes() == before


def test_the_ui_on_a_port_this_user_may_not_bind_says_so_naming_the_port(tmp_path):
    """`python -m pipeline.ui --port 1` as a user who may not listen below the system's first unprivileged port: one
    line naming --port, why (permission) and a port to use instead, not --host (the address is fine). As root the
    bind would succeed: the command runs without the right to bind those ports (CAP_NET_BIND_SERVICE dropped from
    its bounding set, as an ordinary user has it), so the kernel refuses the bind for real."""
    import os
    import re
    import shutil
    import subprocess
    import sys

    from tests.helpers.env import child_env

    with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding="ascii") as setting:
        start = int(setting.read())
    if start <= 1:
        pytest.skip("every user may listen on port 1 on this system (net.ipv4.ip_unprivileged_port_start)")
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root, and no setpriv to drop CAP_NET_BIND_SERVICE with")
        prefix = ["setpriv", "--bounding-set", "-net_bind_service"]
    command = [*prefix, sys.executable, "-m", "pipeline.ui", "--store", "mlruns", "--port", "1"]
    proc = subprocess.run(command, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    (line,) = proc.stderr.splitlines()
    pattern = (
        rf"error: --port: this user may not listen on port 1 \(permission denied; below port {start} only root, or a "
        rf"process with CAP_NET_BIND_SERVICE, may listen\); accepted: a port from {start} up that is free, e\.g\. "
        r"--port (\d+) \(make ui PORT=\1\)"
    )
    assert re.fullmatch(pattern, line) and "--host" not in line, line
    assert list(tmp_path.iterdir()) == []


def test_help_says_what_the_tool_does_and_lists_real_options(tmp_path):
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Train one LoRA job per config")
    assert "usage: python -m pipeline.train" in out and "_schema" not in out
    assert "  gpu         a10, a100-40gb, a100-80gb, auto, cpu, h100, h200, l4, t4;" in out
    assert "python -m pipeline.train -m batch.split=1x4,2x2,4x1" in out and "Exit status: 0" in out
    assert "  measure     keys: warmup_steps, confidence," in out  # the sections' keys too
    assert "sweep_id" not in out and "repeat," not in out  # bookkeeping the tool sets itself
    assert list(tmp_path.iterdir()) == []
    study = run_cli("--help", cwd=tmp_path, module="pipeline.optimize").stdout
    assert "usage: python -m pipeline.optimize [-v] [group=option ...]" in study and "-m runs a sweep" not in study
    assert "-v (--verbose, launcher.verbose=true) shows every line a job prints" in study


def test_cfg_job_prints_the_composed_config(tmp_path):
    proc = run_cli("--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "batch:\n  effective: 4\n  split: 4x1" in proc.stdout


@pytest.mark.parametrize(
    "module",
    ["pipeline.train", pytest.param("pipeline.optimize", marks=pytest.mark.slow)],  # the study: 7 s, the slow tier
)
def test_a_closed_output_ends_quietly(tmp_path, module):
    """`--help | head -1` once head has gone, and the same for Hydra's own output: no BrokenPipeError traceback,
    nothing on stderr, exit code 141 (128 + SIGPIPE, as for any Unix tool), nothing written."""
    for args in (["--help"], ["--cfg", "job"]):
        proc = run_with_closed_output(module, *args, cwd=tmp_path)
        assert (proc.returncode, proc.stderr) == (141, ""), (args, proc.stderr[-2000:])
    assert list(tmp_path.iterdir()) == []


needs_mount = pytest.mark.skipif(not can_mount(), reason="no tmpfs in a user namespace here (unshare)")


@needs_mount
@pytest.mark.parametrize(
    ("module", "args"), [("pipeline.train", []), ("pipeline.optimize", ["mem_cap=1GiB", "optimize.trials=1"])]
)
def test_a_full_disk_before_the_start_is_one_line_and_exit_1(tmp_path, module, args):
    """A disk without room (issue 21: Hydra's traceback from saving its config): found before anything runs, one
    line naming paths.root, exit code 1 as for a store that fails at run time (README, exit status), and nothing
    left on the disk but what filled it."""
    disk = tmp_path / "disk"
    run = run_on_small_disk(tmp_path, module, f"paths.root={disk}/mlruns", *args)
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.stderr.splitlines() == [
        f"error: paths.root: the disk of {disk} is full (No space left on device: not even 1 MiB could be written); "
        "accepted: a folder on a disk with room"
    ]
    assert run.stdout == "" and run.left == ["fill"]


@needs_mount
def test_a_disk_that_runs_out_after_the_checks_is_one_line_and_exit_1(tmp_path):
    """Room for the checks, no inode left once Hydra makes its output folders: Hydra's own write fails, and that
    too is one line and exit code 1 (what Hydra made before it stays)."""
    disk = tmp_path / "disk"
    run = run_on_small_disk(tmp_path, "pipeline.train", f"paths.root={disk}/mlruns", size="4m", inodes=5, fill=False)
    assert run.returncode == 1, run.stderr[-2000:]
    (line,) = run.stderr.splitlines()
    assert line.startswith("error: Hydra's output folder failed: the disk is full or read-only (No space left on ")
    assert "Traceback" not in run.stdout
    # what Hydra made before the disk ran out, and nothing of the run: no MLflow store
    assert [path for path in run.left if not path.startswith("mlruns/hydra/")] == ["mlruns", "mlruns/hydra"], run.left


@pytest.mark.parametrize(("devices", "said"), [(0, ""), (1, ", or a gpu profile such as gpu=t4")])
def test_a_missing_cap_names_a_gpu_profile_only_where_a_cuda_device_could_take_one(monkeypatch, devices, said):
    """On a machine without CUDA the line offered gpu=t4, which the same machine refuses (`check_device`)."""
    from types import SimpleNamespace

    from pipeline.commands import optimize as command

    monkeypatch.setattr(command, "cuda_device_count", lambda: devices)
    with pytest.raises(ConfigError) as refused:
        command.check_study(None, SimpleNamespace(cap_bytes=None))
    assert str(refused.value) == f"mem_cap: required by optimize; accepted: a size like 14GiB{said}"
