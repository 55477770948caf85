"""A library that warns, for the tests of a job's log: `noisylib`, written into a test's folder, wraps TRL's
`SFTTrainer.train` so that every job's training first issues NOISY_WARNINGS Python warnings (one kind),
NOISY_RECORDS log records at WARNING (one kind, through Python's last-resort handler), and one line written straight
to file descriptor 2 (as torch's C++ side writes its warnings); NOISY_FAIL=raise then fails the job with an exception,
NOISY_FAIL=abort aborts its process. `run_noisy.py` is `python -m pipeline.train` with the fork server importing
noisylib beside the job module, so it runs in the jobs and nowhere else."""

from __future__ import annotations

from pathlib import Path

NOISYLIB = '''\
"""A third-party library that warns as a job trains."""
import logging
import os
import warnings

import trl

_train = trl.SFTTrainer.train
log = logging.getLogger("noisylib")


def train(self, *args, **kwargs):
    for _ in range(int(os.environ.get("NOISY_WARNINGS", "0"))):
        warnings.warn("the knob is noisy", UserWarning)
    for _ in range(int(os.environ.get("NOISY_RECORDS", "0"))):
        log.warning("a noisy record")
    os.write(2, b"noisylib: written at the file descriptor\\n")
    if os.environ.get("NOISY_FAIL") == "raise":
        raise RuntimeError("noisylib gave up")
    if os.environ.get("NOISY_FAIL") == "abort":
        os.abort()
    return _train(self, *args, **kwargs)


trl.SFTTrainer.train = train
'''

RUN_NOISY = """\
from pipeline.jobs import runner

runner.PRELOAD.append("noisylib")  # imported by the fork server, after the job module

from pipeline.commands.train import main

main()
"""


def noisy_folder(folder: Path) -> Path:
    """`folder` with noisylib.py and run_noisy.py in it (`python run_noisy.py ARGS` there)."""
    (folder / "noisylib.py").write_text(NOISYLIB, encoding="utf-8")
    (folder / "run_noisy.py").write_text(RUN_NOISY, encoding="utf-8")
    return folder
