"""What a decoder layer keeps for its backward, per token, counted on the CPU: the tensors its autograd graph holds
after the forward (every node's saved tensors, compiled graphs' included), each storage once, the weights left out.
Two models of 2 and 4 layers give one layer's bytes as their difference, so what is kept once (the embedding, the
final norm, the rotary tables) cancels; two rows of 128 and 256 tokens give its bytes a token as their difference, so
what a layer keeps whatever the tokens (autocast's bf16 copies of fp32 adapters' weights) cancels too. It runs under bf16 autocast with the weights in bf16, as a bf16 job trains.

    python -m bench.saved_bytes                       # the shapes of SHAPES, eager and regionally compiled layers
    python -m bench.saved_bytes --shapes qwen3-0.6b --compile off

The memory predictor's activation terms (`pipeline.search._formula`, the compile and adapter knobs) are fitted to
these counts; the device's peaks check them (`bench.memory_check`). Attention's own work space, the allocator's
rounding and what the backward allocates beyond the saved tensors are not counted.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import torch

TOKENS = (128, 256)
VOCAB = 1024  # the LM head is not run: the vocabulary only sizes the embedding


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int = 128


SHAPES = {
    "qwen3-0.6b": LayerShape(1024, 3072, 16, 8),
    "qwen3-1.7b": LayerShape(2048, 6144, 16, 8),
    "qwen3-4b": LayerShape(2560, 9728, 32, 8),
    "wide-mlp": LayerShape(1024, 5120, 16, 8),
    "few-heads": LayerShape(1024, 3072, 8, 4),
    "full-kv": LayerShape(1024, 3072, 16, 16),
}


def saved_storage_bytes(root, weights: set[int]) -> int:
    """The bytes of every storage the autograd graph under `root` keeps for its backward, each once."""
    found: dict[int, int] = {}
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        tensors = []
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    value = getattr(node, name)
                except RuntimeError:  # a saved tensor freed already, or none
                    continue
                values = value if isinstance(value, tuple | list) else (value,)
                tensors += [v for v in values if isinstance(v, torch.Tensor)]
        try:
            tensors += [t for t in node.saved_tensors if isinstance(t, torch.Tensor)]  # a custom Function's
        except (AttributeError, RuntimeError):
            pass
        for t in tensors:
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:
                found[storage.data_ptr()] = storage.nbytes()
        stack += [n for n, _ in node.next_functions]
    return sum(found.values())


def kept_bytes(shape: LayerShape, layers: int, adapters: str, compiled: bool, tokens: int) -> int:
    """What a model of `layers` decoder layers keeps for its backward over one row of `tokens` tokens."""
    from peft import get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from pipeline.builders.lora import build_lora_config
    from pipeline.config.compose import compose_job

    torch.manual_seed(0)
    torch._dynamo.reset()  # each model's layers compiled afresh, never past Dynamo's recompile limit into eager
    config = Qwen3Config(
        vocab_size=VOCAB,
        num_hidden_layers=layers,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        attn_implementation="sdpa",
    )
    lora = build_lora_config(compose_job("config", []).lora)  # the default group's: r 16, alpha 32, all-linear
    model = get_peft_model(Qwen3ForCausalLM(config).to(torch.bfloat16), lora, autocast_adapter_dtype=adapters == "fp32")
    model.train()
    decoder = model.get_base_model().model
    if compiled:
        for layer in decoder.layers:
            layer.compile()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, VOCAB, (1, tokens))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
    return saved_storage_bytes(hidden.grad_fn, weights)


def layer_token_bytes(shape: LayerShape, adapters: str, compiled: bool) -> float:
    """One decoder layer's kept bytes per token."""
    short, long = (
        kept_bytes(shape, 4, adapters, compiled, t) - kept_bytes(shape, 2, adapters, compiled, t) for t in TOKENS
    )
    return (long - short) / 2 / (TOKENS[1] - TOKENS[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--compile", nargs="+", default=["off", "regional"], choices=["off", "regional"])
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print("| shape | h | i | heads | kv | layers | adapters fp32 | adapters compute | compute / fp32 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes:
        s = SHAPES[name]
        for mode in args.compile:
            start = time.perf_counter()
            fp32, compute = (layer_token_bytes(s, a, mode == "regional") for a in ("fp32", "compute"))
            print(
                f"| {name} | {s.hidden} | {s.intermediate} | {s.heads} | {s.kv_heads} | {mode} | {fp32:,.0f} | "
                f"{compute:,.0f} | {compute / fp32:.3f} |",
                flush=True,
            )
            print(f"  ({time.perf_counter() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
