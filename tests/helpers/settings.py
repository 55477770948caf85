"""Settings several tests share: the README's CPU study, shortened, and a study's confirmation settings as
`optimize`'s defaults give them, for tests of the round's logic."""

from __future__ import annotations

from pipeline.search import _confirmation as confirmation

# The README's CPU study (a 2048-token vocabulary, 256-token sequences, batch 8, four trials), with short jobs and
# probes, under a cap that rules out the largest micro-batch (8x1, 0.62 GiB, by prediction or measured) and leaves
# room over 1x8's peak (0.46 GiB; 4x2's, 0.54, is near the cap): a study where something fits.
CPU_STUDY = [
    "mem_cap=0.56GiB",
    "batch.effective=8",
    "model.vocab_size=2048",
    "train.max_length=256",
    "optimize.trials=4",
    "train.steps=8",
    "measure.warmup_steps=2",
    "optimize.probe_steps=3",
    "optimize.confirm_floor_s=0",  # the round as its share buys it: what a round holds, not how long a small one runs
]

# A study whose confirmation round always runs between two finalists: two small trials, both measured in full however
# busy the machine is (prune_factor=100).
ROUND_STUDY = [
    "mem_cap=4GiB",
    "optimize.trials=2",
    "batch.effective=4",
    "model.vocab_size=2048",
    "train.max_length=256",
    "train.steps=10",
    "measure.warmup_steps=2",
    "train.progress_bar=false",
    "optimize.confirm=always",
    "optimize.prune_factor=100",
    "optimize.confirm_floor_s=0",
]

DEFAULTS = dict(
    mode="auto",
    k=3,
    within=0.3,
    share=0.25,
    budget_s=None,
    max_steps=30,
    max_rounds=20,
    tolerance=0.05,
    confidence=0.95,
)


def confirm_settings(**changes) -> confirmation.RoundSettings:
    return confirmation.RoundSettings(**{**DEFAULTS, **changes})
