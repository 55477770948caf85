"""A study's confirmation settings as `optimize`'s defaults give them, for tests of the round's logic."""

from __future__ import annotations

from pipeline.search import confirmation

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


def confirm_settings(**changes) -> confirmation.Settings:
    return confirmation.Settings(**{**DEFAULTS, **changes})
