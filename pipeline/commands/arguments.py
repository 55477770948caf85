"""argparse for the commands that take flags (report, card, ui, dashboard): a refused argument is one line that
names it and says where the accepted forms are, exit code 2, as every bad input of the tool is; not argparse's
usage block."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from pipeline import exits


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """`argument --port: invalid int value: 'abc'` becomes `error: --port: invalid int value: 'abc'; accepted:
        see python -m pipeline.ui --help`."""
        said = message.removeprefix("argument ")
        accepted = "" if "accepted:" in said else f"; accepted: see {self.prog} --help"
        print(f"error: {said}{accepted}", file=sys.stderr)
        sys.exit(exits.BAD_INPUT)


def level(text: str) -> float:
    """A confidence level: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"got '{text}'; accepted: a level between 0 and 1, e.g. 0.95")
    return value
