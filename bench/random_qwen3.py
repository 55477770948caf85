"""The seed's model for the plain scripts (`plain_trl.py`, `unsloth_recipe.py`): Qwen3-1.7B's shape with random
weights, a word-level tokenizer over its vocabulary, the same synthetic rows, and a clock on the trainer's log. One
definition, so that the scripts train the same model on the same tokens and their losses compare.

Imported after `unsloth` where that runs (it patches transformers and TRL as it is imported).
"""

from __future__ import annotations

import json
import time

import numpy as np
from datasets import Dataset
from tokenizers import Tokenizer, models
from transformers import AutoConfig, PreTrainedTokenizerFast, TrainerCallback

SHAPE = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
}


def shape_of(override: str) -> dict:
    """The 1.7B shape with the fields of `override` (JSON, as `--shape` gives it) in place of its own."""
    return {**SHAPE, **json.loads(override)}


def tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Token `t<i>` is id i; t0 pads, t1 ends."""
    vocab = {f"t{i}": i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0")), pad_token="t0", eos_token="t1"
    )


def config(shape: dict):
    """Qwen3's config of `shape`, with the 1.7B model's other settings."""
    return AutoConfig.for_model(
        "qwen3",
        **shape,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
    )


def rows(count: int, length: int, vocab_size: int) -> Dataset:
    """`count` rows of `length` random tokens (seed 0), none of the special ids."""
    ids = np.random.default_rng(0).integers(4, vocab_size, size=(count, length)).tolist()
    return Dataset.from_dict({"input_ids": ids})


class LogClock(TrainerCallback):
    """The time and loss of each logged step (log every step: a step's time is the gap to the one before)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.losses: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.times.append(time.perf_counter())
            self.losses.append(float(logs["loss"]))
