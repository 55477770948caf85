"""Unsloth's own LoRA recipe on the seed's setting, as its notebooks write it, no project code: the model through
`FastLanguageModel.from_pretrained` and `get_peft_model` (LoRA r16 alpha 32 on the seven projections, dropout 0,
Unsloth's gradient checkpointing), TRL's SFTTrainer as Unsloth patches it, AdamW in 8 bits. The model is Qwen3-1.7B's
shape with random weights, saved to a folder first (nothing is downloaded); the data are the same synthetic
512-token rows as `bench/plain_trl.py`, so the losses compare.

    python bench/unsloth_recipe.py --split 4x1 --steps 30 --out unsloth.json [--checkpointing unsloth|false]
        [--optim adamw_8bit|adamw_torch] [--shape JSON] [--length 512]

Unsloth 2026.10 needs trl <= 1.15 and datasets < 5, so it runs in an environment of its own (bench/unsloth_h200.sh).
Step time comes from the per-step log's timestamps, as in `bench/plain_trl.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")

import torch  # noqa: E402
import unsloth  # noqa: E402, F401  (first: it patches transformers and TRL)
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402
from unsloth import FastLanguageModel  # noqa: E402

# isort: split
import random_qwen3  # noqa: E402  (bench/'s own, after unsloth: it imports transformers)

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def saved_model(folder: str, shape: dict) -> PreTrainedTokenizerFast:
    """Qwen3 of `shape` with random weights (seed 0) and a word-level tokenizer, saved to `folder` in bf16."""
    tokenizer = random_qwen3.tokenizer(shape["vocab_size"])
    config = random_qwen3.config(shape)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", default="{}", help="JSON of Qwen3 config fields replacing the 1.7B shape")
    parser.add_argument("--checkpointing", choices=["unsloth", "false"], default="unsloth")
    parser.add_argument("--optim", default="adamw_8bit")
    args = parser.parse_args()
    micro, accumulation = (int(x) for x in args.split.split("x"))
    shape = random_qwen3.shape_of(args.shape)
    start = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="unsloth-model-")
    tokenizer = saved_model(folder, shape)
    model, _ = FastLanguageModel.from_pretrained(
        model_name=folder, max_seq_length=args.length, dtype=torch.bfloat16, load_in_4bit=False
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=16,
        lora_alpha=32,
        lora_dropout=0,
        target_modules=PROJECTIONS,
        bias="none",
        use_gradient_checkpointing="unsloth" if args.checkpointing == "unsloth" else False,
        random_state=3407,
    )
    dataset = random_qwen3.rows(args.steps * micro * accumulation, args.length, shape["vocab_size"])
    clock = random_qwen3.LogClock()
    trainer = SFTTrainer(
        model=model,
        processing_class=tokenizer,
        train_dataset=dataset,
        args=SFTConfig(
            output_dir=tempfile.mkdtemp(prefix="unsloth-out-"),
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=accumulation,
            max_steps=args.steps,
            max_length=args.length,
            learning_rate=2e-4,
            warmup_steps=5,
            optim=args.optim,
            bf16=True,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=42,
        ),
        callbacks=[clock],
    )
    setup = time.perf_counter() - start
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    record = {
        "split": args.split,
        "recipe": {"checkpointing": args.checkpointing, "optim": args.optim},
        "versions": {"unsloth": unsloth.__version__, "torch": torch.__version__},
        "setup_s": setup,
        "step_times_s": [b - a for a, b in zip(clock.times, clock.times[1:], strict=False)],
        "losses": clock.losses,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    main()
