"""The training dataset: synthetic token ids, a local jsonl file, or a hub dataset (id or local folder).

Synthetic data is pre-tokenized (`input_ids`), which TRL's SFTTrainer takes as is; text and chat records go through
TRL's own tokenization with the job's tokenizer.
"""

from __future__ import annotations

import numpy as np
from datasets import Dataset, load_dataset

FIRST_ORDINARY_ID = 4  # ids below are the byte-level tokenizer's specials


def synthetic_dataset(
    num_samples: int, length: int, min_length: int | None, distribution: str, vocab_size: int, seed: int
) -> Dataset:
    rng = np.random.default_rng(seed)
    if distribution == "uniform":
        lengths = rng.integers(min_length, length + 1, size=num_samples)
    else:
        lengths = np.full(num_samples, length)
    high = max(vocab_size, FIRST_ORDINARY_ID + 1)
    rows = [rng.integers(FIRST_ORDINARY_ID, high, size=int(n)).tolist() for n in lengths]
    return Dataset.from_dict({"input_ids": rows})


def build_dataset(data: dict, vocab_size: int, seed: int, needed: int) -> Dataset:
    """`data` is the resolved data group; `needed` is how many samples the steps consume (steps x effective)."""
    if data["kind"] == "synthetic":
        return synthetic_dataset(
            data["num_samples"] or needed,
            data["length"],
            data["min_length"],
            data["distribution"],
            vocab_size,
            seed,
        )
    if data["kind"] == "jsonl":
        dataset = load_dataset("json", data_files=data["path"], split="train")
    else:
        dataset = load_dataset(data["name"], data["subset"], split=data["split"])
    keep = "messages" if "messages" in dataset.column_names else "text"
    return dataset.select_columns([keep])
