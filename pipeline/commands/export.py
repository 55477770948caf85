"""Write a config as a plain TRL script, which trains what `python -m pipeline.train` of the same overrides trains.

python -m pipeline.export experiment=seed-t4-graphs gpu=auto     # prints the script's path: mlruns/scripts/...
python -m pipeline.export batch.split=2x2 train.steps=20 --stdout > train.py

The script is `<paths.root>/scripts/train_<config_id>.py` (`pipeline.answer.script`). A sweep's winner and a
study's answer are written the same way, and their path is printed beside the reproduce line. Bad input is refused
as by `pipeline.train`: one line, exit code 2.
"""

from __future__ import annotations

import sys

from pipeline import exits
from pipeline.answer.code import export
from pipeline.config.errors import ConfigError


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return
    unknown = [a for a in args if a.startswith("-") and a != "--stdout"]
    if unknown:
        print(
            f"error: {unknown[0]}: not an option of python -m pipeline.export; accepted: --stdout, --help and "
            "key=value overrides",
            file=sys.stderr,
        )
        sys.exit(exits.BAD_INPUT)
    to_stdout = "--stdout" in args
    try:
        exported = export([a for a in args if a != "--stdout"])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except OSError as err:
        print(
            f"error: paths.root: cannot write the script ({err.strerror or err}); accepted: a writable folder",
            file=sys.stderr,
        )
        sys.exit(exits.FAILED)
    if to_stdout:
        sys.stdout.write(exported.text)
    else:
        print(f"{exported.path}  (plain TRL; trains as: {exported.command})")
