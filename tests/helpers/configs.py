"""The job configs tests start from: conf/config.yaml composed with overrides, as a command line composes it.

Test functions take the `cfg` (no overrides) and `compose` fixtures of tests/conftest.py; module-level helpers and
parametrize lists, which cannot take a fixture, call `composed`. Either way one function composes.
"""

from __future__ import annotations

from omegaconf import DictConfig

from pipeline.config.compose import compose_job


def composed(*overrides: str) -> DictConfig:
    """The job config of the command line `python -m pipeline.train OVERRIDES` (not validated: that is the caller's
    choice, as each entry point makes it)."""
    return compose_job("config", list(overrides))
