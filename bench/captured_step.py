"""The seed's model trained with the whole step captured, by hand: the forward and backward of every micro-batch,
the gradients' clipping and AdamW's step, recorded once as one CUDA graph and replayed each step. The host then
launches one graph a step and reads one value (the step's loss, as a per-step log does); nothing inside the step
waits on it, so the host's speed leaves the step. What a training loop written around the step can reach beyond
the knobs TRL's Trainer allows (its step is host code between the parts), measured beside them.

Plain PyTorch and PEFT, no Trainer: the seed's model (`random_qwen3`: Qwen3-1.7B's shape, random weights, the same
rows), LoRA r16 alpha 32 on the seven projections, bf16 under autocast with the adapters in fp32 (PEFT's default, as
the TRL scripts train them), AdamW (fused, capturable: its learning rate a device tensor the schedule fills each step), learning rate 2e-4 with TRL's linear warm-up of 5 steps and decay, gradients clipped to
norm 1. Layers compiled (`--compile regional`) run Inductor's kernels in default mode, inside the one graph.
`--capture false` runs the same loop op by op: the control that the graph trains the same losses, and what the
capture alone gains (beside TRL's scripts the loop also leaves out TRL's metrics, collation and shuffled order).

    python bench/captured_step.py --split 4x1 --steps 30 --out captured.json
    python bench/captured_step.py --split 4x1 --steps 30 --capture false --out eager.json
    python bench/captured_step.py --device cpu --capture false --compile off --length 64 \\
        --shape '{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
                  "num_key_value_heads":2,"head_dim":16,"vocab_size":512}' --steps 8 --out cpu.json

Writes the record `bench/side_by_side.py` reads (`step_times_s`, `losses`, `peak_reserved_bytes`), with the GPU's
busy share over the steady steps (NVML), the host's time to launch a step, and the model FLOPs a token for MFU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

import random_qwen3
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

WARMUP_LR_STEPS = 5  # TRL's recipe in plain_trl.py: linear warm-up of 5 steps, then linear decay to 0
NO_MASKS = {"full_attention": None}  # the masks by layer type, as generation passes them made: none to make
EAGER_STEPS = 3  # real training steps run op by op before the capture: the compilation, the optimizer's state


def learning_rate(step: int, steps: int, peak: float = 2e-4) -> float:
    """transformers' linear schedule with warm-up at `step` (0-based), never 0: a capturable AdamW step at learning
    rate 0 turns a weight whose gradient is 0 into NaN (pytorch/pytorch#126514), so 0 runs as 1e-30."""
    if step < WARMUP_LR_STEPS:
        value = peak * step / WARMUP_LR_STEPS
    else:
        value = peak * max(0.0, (steps - step) / max(1, steps - WARMUP_LR_STEPS))
    return max(value, 1e-30)


def build(args, device: str, dtype: torch.dtype):
    """The PEFT model, its trainable parameters and the per-micro-batch loss, as plain_trl.py builds the same model
    (seed 0 before the weights, LoRA's initialisation right after them)."""
    shape = random_qwen3.shape_of(args.shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(random_qwen3.config(shape), dtype=dtype, attn_implementation="sdpa")
    model = get_peft_model(
        model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    params = [p for p in model.parameters() if p.requires_grad]
    if args.adapter_dtype == "compute":
        for p in params:
            p.data = p.data.to(dtype)
    base = model.get_base_model()
    if args.compile == "regional":
        for layer in base.model.layers:
            layer.compile()
    if args.loss == "compiled":
        base.loss_function = torch.compile(base.loss_function)
    autocast = device == "cuda" and args.adapter_dtype == "fp32"  # as the Trainer's bf16 runs fp32 adapters

    def loss_of(ids: torch.Tensor) -> torch.Tensor:
        # every row is full length: the causal masks given as made (none: SDPA's own causal kernel), since making
        # them reads the device (a 2-D mask's check; without one, the check of the positions for packed rows)
        with torch.autocast(device, dtype=dtype, enabled=autocast, cache_enabled=False):
            return model(input_ids=ids, attention_mask=NO_MASKS, labels=ids, use_cache=False).loss

    return model, params, loss_of, shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", required=True, help="MxA: micro-batch M, A micro-batches a step")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shape", default="{}", help="JSON of Qwen3 config fields replacing the 1.7B shape")
    parser.add_argument("--compile", choices=["off", "regional"], default="regional")
    parser.add_argument("--loss", choices=["model", "compiled"], default="compiled")
    parser.add_argument(
        "--adapter-dtype", choices=["fp32", "compute"], default="fp32", help="fp32: PEFT's default, as TRL's runs"
    )
    parser.add_argument("--capture", choices=["true", "false"], default="true")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    capture = args.capture == "true" and cuda
    dtype = torch.bfloat16 if cuda else torch.float32  # no fp16: it would need a loss scaler inside the graph
    micro, accumulation = (int(x) for x in args.split.split("x"))
    start = time.perf_counter()

    model, params, loss_of, shape = build(args, args.device, dtype)
    rows = random_qwen3.rows(args.steps * micro * accumulation, args.length, shape["vocab_size"])["input_ids"]
    batches = torch.tensor(rows, device=args.device).view(args.steps, accumulation, micro, args.length)
    lr = torch.tensor(learning_rate(0, args.steps), device=args.device)
    optimizer = torch.optim.AdamW(params, lr=lr if cuda else float(lr), weight_decay=0.0, fused=cuda, capturable=cuda)
    assert not cuda or optimizer.param_groups[0]["lr"] is lr  # the tensor the graph reads is the one filled
    static = torch.empty_like(batches[0])

    def step() -> torch.Tensor:
        """One optimizer step over the micro-batches in `static`: the loss each micro-batch adds, as the Trainer
        sums it (each the mean over its tokens over the count of micro-batches: rows of one length)."""
        total = torch.zeros((), device=args.device)
        for a in range(accumulation):
            loss = loss_of(static[a]) / accumulation
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=cuda)
        optimizer.step()
        return total

    def set_lr(k: int) -> None:
        if cuda:
            lr.fill_(learning_rate(k, args.steps))  # a kernel, no read: the captured step reads the tensor
        else:
            optimizer.param_groups[0]["lr"] = learning_rate(k, args.steps)

    setup = time.perf_counter() - start  # as plain_trl.py's: the model, rows and optimizer, before step 0
    times, losses, launch = [], [], []
    graph, busy = None, None
    side = torch.cuda.Stream() if capture else None  # the steps before the capture run on a side stream (as
    for k in range(args.steps):  # PyTorch's recipe for a whole-network capture warms up), after this step's copies
        started = time.perf_counter()
        set_lr(k)
        static.copy_(batches[k])
        if graph is None and (not capture or k < EAGER_STEPS):
            optimizer.zero_grad(set_to_none=True)
            if side is not None:
                side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                total = step()
            if side is not None:
                torch.cuda.current_stream().wait_stream(side)
        else:
            if graph is None:  # the gradients are made inside the graph's pool, then replayed in place
                torch.cuda.synchronize()
                optimizer.zero_grad(set_to_none=True)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_total = step()
            graph.replay()  # the capture ran nothing: step k is its first replay
            total = static_total
        launch.append(time.perf_counter() - started)
        losses.append(float(total))  # the per-step log's read: the one wait of a step
        times.append(time.perf_counter())
        if k == EAGER_STEPS and cuda:
            busy = _busy_sampler()
    busy_share = busy.stop() if busy is not None else None
    steps = [b - a for a, b in zip(times, times[1:], strict=False)]
    record = {
        "split": args.split,
        "knobs": {
            "dtype": str(dtype),
            **{k: getattr(args, k) for k in ("compile", "loss", "adapter_dtype", "capture")},
        },
        "setup_s": setup,
        "step_times_s": steps,  # step k+1's time for k = 0..: the first step has no predecessor
        "losses": losses,
        "launch_s": launch,  # the host's time from the step's start to its last launch
        "captured_from_step": EAGER_STEPS if capture else None,
        "gpu_busy": busy_share,
        "tokens_per_step": micro * accumulation * args.length,
        "model_flops_per_token": _flops_per_token(model, shape, args.length),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    tail = steps[EAGER_STEPS + 2 :] or steps
    print(
        f"median step {statistics.median(tail):.4f} s, launch {statistics.median(launch[-5:]) * 1e3:.2f} ms, "
        f"losses {losses[0]:.4f} .. {losses[-1]:.4f}, busy {busy_share}"
    )


def _busy_sampler():
    """NVML's busy share over the steady steps (pipeline.measure.busy's sampler); None without NVML."""
    try:
        import pynvml

        from pipeline.measure.busy import NvmlBusySampler

        pynvml.nvmlInit()
        sampler = NvmlBusySampler(pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device()))
    except Exception:  # noqa: BLE001 - a figure the record can go without
        return None
    sampler.start()
    return sampler


def _flops_per_token(model, shape: dict, length: int) -> float | None:
    """Model FLOPs a trained token (pipeline.measure.flops: frozen weights, trained adapters, attention)."""
    try:
        from pipeline.measure.flops import count_params, flops_per_token
    except ImportError:
        return None
    base, lora = count_params(model)
    fpt = flops_per_token(
        base, lora, shape["num_hidden_layers"], length, shape["num_attention_heads"], shape["head_dim"], False
    )
    return fpt.model


if __name__ == "__main__":
    main()
