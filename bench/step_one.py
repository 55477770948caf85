"""What the chats grid's peaks hold beside the run's longest micro-batch (record-h200/grid-chats-optuna.db): the
study trains the run's longest micro-batch at the end of step one, after the step's own, so the allocator holds blocks
of both. For each layout and split of the eager TRL-loss configs: the longest, the job's own micro-batches at step
one and the largest after it (a trial's run: 12 steps of 8 records; a probe's: 4 steps of its micro-batch), and what
its peak holds over the line through the max_length probes (every micro-batch alike, nothing trained beside).

    python -m bench.step_one

The records' lengths are `bench.chats`'s (the grid's file: 2,000 records, 30 to 1,000 tokens, seed 0; the byte-level
tokenizer counts them as drawn), their order `builders.order`'s (data seed 42).
"""

from __future__ import annotations

import math

from bench.chats import lengths
from pipeline.builders.order import Batching, micro_batches

MAX_LENGTH, BUCKET, SEED = 1024, 256, 42
JOB = (12, 8)  # a trial's run: train.steps, batch.effective
PROBE_STEPS = 4  # optimize.probe_steps
# (probe or trial, padding, micro, accumulation, peak GiB) of the eager TRL-loss configs
PEAKS = (
    ("probe", "longest", 4, 1, 10.346),
    ("probe", "longest", 8, 1, 21.219),
    ("trial", "longest", 4, 2, 11.414),
    ("trial", "longest", 8, 1, 21.936),
    ("probe", "buckets", 4, 1, 10.340),
    ("probe", "buckets", 8, 1, 21.240),
    ("trial", "buckets", 4, 2, 9.570),
    ("probe", "padding_free", 4, 1, 6.686),
    ("probe", "padding_free", 8, 1, 10.043),
    ("trial", "padding_free", 4, 2, 6.885),
    ("probe", "max_length", 4, 1, 9.484),
    ("probe", "max_length", 8, 1, 17.129),
    ("trial", "max_length", 4, 2, 9.709),
)


def tokens(counts: list[int], padding: str, micro: int) -> int:
    """A micro-batch's tokens as its layout computes them."""
    if padding == "padding_free":
        return sum(counts)
    longest = MAX_LENGTH if padding == "max_length" else max(counts)
    return micro * (math.ceil(longest / BUCKET) * BUCKET if padding == "buckets" else longest)


def run(counts: list[int], padding: str, micro: int, accumulation: int, records: int | None, steps: int | None):
    """Each step's micro-batches' tokens over the first `records` records (None: every one)."""
    batching = Batching(micro, accumulation, 1, SEED, False, padding == "padding_free", None)
    found: dict[int, list[int]] = {}
    for step, indices in micro_batches(records or len(counts), batching, steps):
        found.setdefault(step, []).append(tokens([counts[i] for i in indices], padding, micro))
    return found


def rows() -> list[dict]:
    counts = lengths(2000, 30, 1000, 0)
    slope = (PEAKS[11][4] - PEAKS[10][4]) / (2 * MAX_LENGTH * 4 - MAX_LENGTH * 4)
    found = []
    for what, padding, micro, accumulation, peak in PEAKS:
        epoch = run(counts, padding, micro, accumulation, None, None)
        longest = max(max(v) for v in epoch.values())
        steps, records = (JOB[0], JOB[0] * JOB[1]) if what == "trial" else (PROBE_STEPS, PROBE_STEPS * micro)
        own = run(counts, padding, micro, accumulation, records, steps)
        extra = peak - (PEAKS[10][4] + slope * (longest - MAX_LENGTH * 4))
        after = max(max(v) for step, v in own.items() if step > 1)
        found.append(
            dict(
                what=what,
                padding=padding,
                split=f"{micro}x{accumulation}",
                longest=longest,
                one=own[1],
                after=after,
                peak=peak,
                extra=extra,
                share=extra / (slope * max(own[1])),
            )
        )
    return found


def main() -> None:
    print("| | padding | split | longest | own, step one | own, after | peak GiB | over the line | / own's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows():
        one = ", ".join(map(str, r["one"]))
        print(
            f"| {r['what']} | {r['padding']} | {r['split']} | {r['longest']} | {one} | {r['after']} | "
            f"{r['peak']:.2f} | {r['extra']:+.2f} | {r['share']:.2f} |"
        )


if __name__ == "__main__":
    main()
