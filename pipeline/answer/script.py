"""The answer as code: one config written as a self-contained plain TRL script, which trains what the job of the
same config trains (the same model, data, adapters, `SFTConfig` and knobs, so the same losses), with nothing of this
package imported.

The script's `main` spells out what a user would change: the model's architecture or checkpoint, the `LoraConfig`,
the `SFTConfig` arguments the job trained with, and the few lines each speed knob adds (`pipeline.knobs`: regional
compilation and its mode, the LM head and loss, the optimizer step). The helpers it calls are this package's own
builders and knobs' functions, copied from their source as they are (read as text: the parent process never imports torch), so a script cannot drift from
what the job runs. `--log` writes each step's loss and end time as JSON lines; `--save` saves the adapter at the end.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from pipeline import knobs
from pipeline.config.choices import DataKind, Distribution, ModelSource
from pipeline.config.schema import ARCH_KEYS, Config
from pipeline.knobs import base

BUILDERS = Path(__file__).resolve().parent.parent / "builders"  # the helpers are the builders' own source
DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
IMPORTS = (  # (import line, the name the code uses): a script imports what its code uses
    ("import argparse", "argparse"),
    ("import inspect", "inspect"),
    ("import json", "json"),
    ("import os", "os"),
    ("import time", "time"),
    ("import types", "types"),
    ("from enum import StrEnum", "StrEnum"),
    ("", ""),
    ("import numpy as np", "np"),
    ("import torch", "torch"),
    ("from datasets import Dataset", "Dataset"),
    ("from datasets import load_dataset", "load_dataset"),
    ("from peft import LoraConfig", "LoraConfig"),
    ("from peft import get_peft_model", "get_peft_model"),
    ("from tokenizers import Tokenizer, decoders, models, pre_tokenizers", "Tokenizer"),
    ("from tokenizers.pre_tokenizers import ByteLevel", "ByteLevel"),
    ("from transformers import AutoConfig, AutoModelForCausalLM", "AutoModelForCausalLM"),
    ("from transformers import AutoTokenizer", "AutoTokenizer"),
    ("from transformers import PreTrainedTokenizerFast", "PreTrainedTokenizerFast"),
    ("from transformers import PrinterCallback, TrainerCallback", "TrainerCallback"),
    ("from transformers.modeling_layers import GradientCheckpointingLayer", "GradientCheckpointingLayer"),
    ("from trl import SFTConfig, SFTTrainer", "SFTTrainer"),
)
STEP_LOG = '''
class StepLog(TrainerCallback):
    """Each optimizer step's loss and the time its log was written (the loss is read there, which waits for the
    step), as JSON lines; the gap between two lines is a step's time."""

    def __init__(self, path):
        self.handle = open(path, "w", encoding="utf-8") if path else None
        self.times, self.losses = [], []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.times.append(time.perf_counter())
            self.losses.append(float(logs["loss"]))
            if self.handle:
                record = {"step": state.global_step, "loss": self.losses[-1], "time": self.times[-1]}
                self.handle.write(json.dumps(record) + "\\n")
                self.handle.flush()
'''


def source(module: str, *names: str) -> str:
    """The source of top-level functions, classes and constants of `pipeline.builders.<module>`, in the order
    named."""
    return base.source(BUILDERS / f"{module}.py", *names)


def literal(value: object, indent: int = 0) -> str:
    """A Python literal of plain data; a dict too long for one line has one item a line, indented by `indent`."""
    text = repr(value)
    if not isinstance(value, dict) or len(text) + indent < 100:
        return text
    items = [f"{' ' * (indent + 4)}{key!r}: {literal(item, indent + 4)}," for key, item in value.items()]
    return "{\n" + "\n".join(items) + f"\n{' ' * indent}}}"


def imports(code: str) -> list[str]:
    """The import lines of the names `code` uses, in IMPORTS' order (a blank line between the groups)."""
    lines = [line for line, name in IMPORTS if not name or re.search(rf"\b{re.escape(name)}\b", code)]
    return lines


def helpers(config: Config) -> list[str]:
    """The builders' and the speed knobs' code the script needs for this config."""
    m, d = config.model, config.data
    parts = []
    if m.source == ModelSource.CONFIG:
        parts.append(source("tokenizer", "SPECIALS", "CHATML", "byte_level_tokenizer"))
    packs = knobs.packs(config.train)
    if d.kind != DataKind.SYNTHETIC or packs:
        parts.append(source("batches", "whole_batches", *(["whole_sequences"] if packs else [])))
    if d.kind == DataKind.SYNTHETIC:
        parts.append(source("dataset", "FIRST_ORDINARY_ID", "_lengths", "synthetic_dataset"))
    else:
        reader = "jsonl_dataset" if d.kind == DataKind.JSONL else "hub_dataset"
        calls = ["calls_as_text"] if d.kind == DataKind.JSONL else []
        parts.append(source("dataset", "FIELDS", "take_records", "_field", *calls, reader))
    return parts + [part for knob in knobs.registry() for part in knob.helpers(config.train)]


def placement(sft: dict) -> tuple[str, str]:
    """The device and dtype a job with these SFTConfig arguments trained on."""
    device = "cpu" if sft.get("use_cpu") else "cuda"
    return device, "bf16" if sft.get("bf16") else "fp16" if sft.get("fp16") else "fp32"


def model_lines(config: Config, sft: dict) -> list[str]:
    """Tokenizer and base model, in the job's order and with its seed (the adapters' initial weights depend on it)."""
    m, seed = config.model, config.train.seed
    device, dtype = placement(sft)
    chosen = "".join(f", {key}={value!r}" for key, value in knobs.model_kwargs(m).items())  # the speed knobs' own
    if m.source == ModelSource.PRETRAINED:
        return [
            f"    tokenizer = AutoTokenizer.from_pretrained({m.name_or_path!r})",
            "    if tokenizer.pad_token is None:",
            "        tokenizer.pad_token = tokenizer.eos_token",
            "    model = AutoModelForCausalLM.from_pretrained(",
            f"        {m.name_or_path!r}, dtype={DTYPES[dtype]}, device_map={device!r}{chosen}",
            "    )",
        ]
    architecture = {k: getattr(m, k) for k in ARCH_KEYS if k != "model_type"}
    return [
        "    tokenizer = byte_level_tokenizer()",
        f"    architecture = {literal(architecture, 4)}",
        f"    config = AutoConfig.for_model({m.model_type!r}, **architecture, pad_token_id=tokenizer.pad_token_id,",
        "                                  eos_token_id=tokenizer.eos_token_id, bos_token_id=None)",
        f"    torch.manual_seed({seed})  # the random weights, and after them the adapters' initial ones",
        f"    with torch.device({device!r}):",
        f"        model = AutoModelForCausalLM.from_config(config, dtype={DTYPES[dtype]}{chosen})",
    ]


def data_lines(config: Config) -> list[str]:
    """The samples the steps consume (steps x effective batch), read as the job reads them."""
    d, t, effective = config.data, config.train, config.batch.effective
    needed = t.steps * effective
    if d.kind == DataKind.SYNTHETIC:
        uniform = d.distribution == Distribution.UNIFORM
        return [
            f"    dataset = synthetic_dataset({d.num_samples or needed}, {d.length}, {d.min_length}, {uniform}, "
            f"model.config.vocab_size, {t.seed})"
        ]
    source_args = f"{d.path!r}" if d.kind == DataKind.JSONL else f"{d.name!r}, {d.subset!r}, {d.split!r}"
    reader = "jsonl_dataset" if d.kind == DataKind.JSONL else "hub_dataset"
    if not knobs.packs(t):  # fewer records than the steps read: whole batches of them (`take_records`)
        return [f"    dataset = {reader}({source_args}, {needed}, effective={effective})"]
    return [
        "",
        "    def count_tokens(record):  # a record's tokens as TRL's packing sees them",
        "        if 'messages' in record:",
        "            ids = tokenizer.apply_chat_template(record['messages'], tokenize=True)['input_ids']",
        "        else:",
        "            ids = tokenizer(record['text'])['input_ids']",
        f"        return min(len(ids), {t.max_length})",
        "",
        f"    dataset = {reader}({source_args}, {needed}, count_tokens, {needed * t.max_length})",
    ]


def lora_lines(config: Config, sft: dict) -> list[str]:
    """The PEFT config, then each speed knob's lines (adapters in the compute dtype: the PeftModel is built here, as
    the job builds it)."""
    lora = config.lora
    targets = "all-linear" if list(lora.target_modules) == ["all-linear"] else list(lora.target_modules)
    lines = [
        f"    lora = LoraConfig(r={lora.r}, lora_alpha={lora.alpha}, lora_dropout={lora.dropout}, "
        f"target_modules={targets!r}, bias={lora.bias!r},",
        "                      task_type='CAUSAL_LM')",
    ]
    dtype = placement(sft)[1]
    return lines + [line for knob in knobs.registry() for line in knob.adapter_lines(config.train, dtype)]


def trainer_lines(config: Config, sft: dict) -> list[str]:
    """SFTConfig with the job's arguments, the trainer, and each speed knob's lines, in the job's order."""
    lines = ["    log = StepLog(args.log)", "    sft_config = SFTConfig("]
    lines += ["        output_dir=args.output_dir,"]
    lines += [f"        {key}={literal(value, 8)}," for key, value in sft.items() if key != "output_dir"]
    lines += [
        "    )",
        "    trainer = SFTTrainer(",
        "        model=model, args=sft_config, train_dataset=dataset, processing_class=tokenizer, peft_config=lora,",
        "        callbacks=[log],",
        "    )",
    ]
    if sft.get("disable_tqdm"):
        lines.append("    trainer.remove_callback(PrinterCallback)  # quiet: no log line per step")
    if knobs.packs(config.train):
        lines.append("    whole_sequences(trainer)  # packed sequences fewer than the steps read: whole batches")
    return lines + [line for knob in knobs.registry() for line in knob.trainer_lines(config.train)]


MAIN_START = """

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="trainer_output")
    parser.add_argument("--log", help="write each step's loss and end time here, as JSON lines")
    parser.add_argument("--save", action="store_true", help="save the trained adapter to --output-dir")
    args = parser.parse_args()
"""
MAIN_DEVICE = """    if torch.cuda.is_available() and "LOCAL_RANK" in os.environ:  # torchrun: this rank's device
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))"""
MAIN_END = """    trainer.train()
    steps = sorted(b - a for a, b in zip(log.times, log.times[1:]))
    peak = torch.cuda.max_memory_reserved() if torch.cuda.is_available() else None
    if steps:
        shown = f", peak reserved {peak / 2**30:.2f} GiB" if peak else ""
        print(f"{len(steps) + 1} steps, last loss {log.losses[-1]:.4f}, median step {steps[len(steps) // 2]:.4f} s{shown}")
    if log.handle:
        log.handle.write(json.dumps({"peak_reserved_bytes": peak}) + "\\n")
        log.handle.close()
    if args.save:
        trainer.save_model(args.output_dir)


if __name__ == "__main__":
    main()
"""


def header(name: str, config_id: str, command: str, config: Config) -> str:
    extra = dict.fromkeys(package for knob in knobs.registry() for package in knob.needs(config.train))
    needs = ", ".join(["torch, transformers, trl, peft, datasets, numpy, tokenizers", *extra])
    ranks = config.world_size
    launch = f"torchrun --nproc-per-node {ranks} SCRIPT" if ranks > 1 else "python SCRIPT"
    note = textwrap.fill(
        f"Run it with `{launch} [--output-dir DIR] [--log steps.jsonl] [--save]`; it needs {needs}. The helpers "
        "above main() are batch-split's own builders, copied as they are; what the tool adds around a job (its "
        "memory cap, its step meter, its MLflow records) is left out.",
        width=116,
    )
    return f'"""Plain TRL: {name} (batch-split config {config_id}), trained as this command trains it:\n\n    {command}\n\n{note}\n"""\n'


def script_text(config: Config, sft: dict, name: str, config_id: str, command: str) -> str:
    """The script of `config` (resolved, plain data) trained with the SFTConfig arguments `sft`; `command` is the
    reproduce line its docstring shows."""
    body = [
        *(line for knob in knobs.registry() for line in knob.process_lines(config.train)),
        MAIN_DEVICE,
        *model_lines(config, sft),
        *data_lines(config),
        *lora_lines(config, sft),
        *trainer_lines(config, sft),
    ]
    code = "\n".join(["\n\n\n".join(helpers(config)), "\n" + STEP_LOG.rstrip(), MAIN_START.rstrip(), *body, MAIN_END])
    return "\n".join(
        [header(name, config_id, command, config), "from __future__ import annotations\n", *imports(code), "", code]
    )
