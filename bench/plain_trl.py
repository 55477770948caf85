"""Plain TRL reference for the measurement benchmark: the seed's setup written the way a user would, no pipeline code.

Qwen3-1.7B architecture with random weights in fp16 on the GPU, LoRA r16/a32 on all linear layers, fp16 mixed
precision with gradient checkpointing, synthetic 512-token sequences padded to 512, adamw, lr 2e-4, warm-up 5.
Step time comes from the timestamps of the per-step log (logging_steps=1 reads the loss, which synchronises).
The speed knobs of the pipeline's answer can be set the way a person would: the dtype, checkpointing off, and
compilation, regional (each decoder layer compiled with `layer.compile()` once the trainer is built, PyTorch's
regional compilation recipe) or whole (SFTConfig's torch_compile), with a compile mode (reduce-overhead: CUDA graphs).

    python bench/plain_trl.py --split 4x1 --steps 20 --out plain-4x1.json
    python bench/plain_trl.py --split 4x1 --steps 20 --dtype bf16 --checkpointing false --compile regional \
        --compile-mode reduce-overhead --out twin.json
    python bench/plain_trl.py --split 4x1 --steps 20 --device cpu --shape '{"hidden_size": 256, ...}' --length 128 ...
"""

from __future__ import annotations

import argparse
import json
import time

import random_qwen3
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", required=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: fp32, for overhead ratios")
    parser.add_argument("--shape", default="{}", help="JSON of Qwen3 config fields replacing the 1.7B shape")
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="on CUDA (the CPU trains in fp32)")
    parser.add_argument("--checkpointing", choices=["true", "false"], default="true")
    parser.add_argument("--compile", choices=["off", "regional", "whole"], default="off")
    parser.add_argument("--compile-mode", default="default", help="torch.compile's mode, e.g. reduce-overhead")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype] if cuda else torch.float32
    checkpointing = args.checkpointing == "true"
    mode = None if args.compile_mode == "default" else args.compile_mode
    micro, accumulation = (int(x) for x in args.split.split("x"))
    start = time.perf_counter()

    shape = random_qwen3.shape_of(args.shape)
    tokenizer = random_qwen3.tokenizer(shape["vocab_size"])
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(random_qwen3.config(shape), dtype=dtype, attn_implementation="sdpa")
    dataset = random_qwen3.rows(args.steps * micro * accumulation, args.length, shape["vocab_size"])
    clock = random_qwen3.LogClock()
    trainer = SFTTrainer(
        model=model,
        args=SFTConfig(
            output_dir="/tmp/plain-trl",
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=accumulation,
            max_steps=args.steps,
            max_length=args.length,
            pad_to_multiple_of=args.length,
            learning_rate=2e-4,
            warmup_steps=5,
            optim="adamw_torch",
            fp16=cuda and args.dtype == "fp16",
            bf16=cuda and args.dtype == "bf16",
            use_cpu=not cuda,
            gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
            torch_compile=args.compile == "whole",
            torch_compile_mode=mode if args.compile == "whole" else None,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=42,
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
        callbacks=[clock],
    )
    if args.compile == "regional":
        for layer in trainer.model.get_base_model().model.layers:
            layer.compile(mode=mode)
    setup = time.perf_counter() - start
    trainer.train()
    steps = [b - a for a, b in zip(clock.times, clock.times[1:], strict=False)]
    record = {
        "split": args.split,
        "knobs": {k: getattr(args, k) for k in ("dtype", "checkpointing", "compile", "compile_mode")},
        "setup_s": setup,
        "step_times_s": steps,  # step k+1's time for k = 1..: the first step has no predecessor
        "losses": clock.losses,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    main()
