"""Hydra's own command-line parser (`hydra._internal.utils.get_args_parser`): the flags `hydra.main` takes (--help,
-m, --cfg, --info, ...) and the overrides, read before Hydra runs so that `--help` is the tool's own and every job
is checked first. Hydra has no public handle on it."""

from __future__ import annotations

import argparse

from hydra._internal.utils import get_args_parser


def args_parser() -> argparse.ArgumentParser:
    """A parser of the command line exactly as `hydra.main` reads it."""
    return get_args_parser()
