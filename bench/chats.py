"""A made-up chat jsonl whose records vary in length as real chats do: most short, a heavy tail of long ones.

    python -m bench.chats OUT.jsonl [--records 2000] [--shortest 30] [--longest 1000] [--seed 0]
        [--long-at INDEX --long-tokens N]

Lengths are in tokens of the byte-level tokenizer that a model built from its config uses (one token a byte, the
chat template's own tokens included): log-normal around 150 tokens, clipped to [shortest, longest]. `--long-at` puts
one record of `--long-tokens` at that index (a long record late in the file, which the first steps never see).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

# the byte-level chat template's tokens around a user turn and an assistant turn (`builders.tokenizer.CHATML`)
TEMPLATE_TOKENS = 21  # <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n ... <|im_end|>\n
WORDS = ("data", "model", "batch", "token", "length", "memory", "step", "train", "chat", "record", "split", "cap")


def _text(rng: np.random.Generator, chars: int) -> str:
    """Words to exactly `chars` characters."""
    out = ""
    while len(out) < chars:
        out += WORDS[int(rng.integers(len(WORDS)))] + " "
    return out[:chars]


def record(rng: np.random.Generator, tokens: int) -> dict:
    """A user turn and an assistant turn of `tokens` tokens in all (at least the template's own)."""
    content = max(2, tokens - TEMPLATE_TOKENS)
    user = max(1, content // 3)
    return {
        "messages": [
            {"role": "user", "content": _text(rng, user)},
            {"role": "assistant", "content": _text(rng, content - user)},
        ]
    }


def lengths(records: int, shortest: int, longest: int, seed: int) -> list[int]:
    """Log-normal token counts around 150, clipped to [shortest, longest]: most short, a heavy tail."""
    rng = np.random.default_rng(seed)
    drawn = rng.lognormal(mean=math.log(150), sigma=0.9, size=records)
    return [int(min(longest, max(shortest, round(x)))) for x in drawn]


def write_chats(
    path: Path,
    records: int = 2000,
    shortest: int = 30,
    longest: int = 1000,
    seed: int = 0,
    long_at: int | None = None,
    long_tokens: int | None = None,
) -> list[int]:
    """Write the file; return each record's intended token count."""
    rng = np.random.default_rng(seed + 1)
    counts = lengths(records, shortest, longest, seed)
    if long_at is not None:
        counts[long_at] = long_tokens or longest
    with open(path, "w", encoding="utf-8") as handle:
        for n in counts:
            handle.write(json.dumps(record(rng, n)) + "\n")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--shortest", type=int, default=30)
    parser.add_argument("--longest", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long-at", type=int, default=None)
    parser.add_argument("--long-tokens", type=int, default=None)
    a = parser.parse_args()
    counts = write_chats(a.out, a.records, a.shortest, a.longest, a.seed, a.long_at, a.long_tokens)
    print(
        f"{a.out}: {len(counts)} records, {min(counts)} to {max(counts)} tokens, median "
        f"{int(np.median(counts))}, mean {np.mean(counts):.0f}, {sum(c >= 500 for c in counts)} of 500 or more"
    )


if __name__ == "__main__":
    main()
