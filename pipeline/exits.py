"""Exit codes of the entry points, and how a run's outcome becomes one (README, "Exit status").

- 0: every job finished and fitted (train); an answer was found (optimize)
- 1: a job failed, ran out of memory or went over the cap (train); trials failed and there is no answer (optimize)
- 2: bad input, refused before anything ran
- 3: nothing fits under the cap (optimize)
- 130: interrupted
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pipeline.records import Status, Verdict

OK = 0
FAILED = 1
BAD_INPUT = 2
NOTHING_FITS = 3
INTERRUPTED = 130


def jobs_exit_code(outcomes: Iterable[tuple[Status, Verdict]]) -> tuple[int, str]:
    """The exit code of a set of jobs and a last line that says how many went wrong, and how."""
    outcomes = list(outcomes)
    bad = Counter(
        str(status) if status is not Status.OK else str(verdict)
        for status, verdict in outcomes
        if status is not Status.OK or verdict in (Verdict.OVER_CAP, Verdict.OOM)
    )
    if not bad:
        return OK, f"{len(outcomes)} of {len(outcomes)} jobs finished"
    detail = ", ".join(f"{n} {what}" for what, n in sorted(bad.items()))
    return FAILED, f"{sum(bad.values())} of {len(outcomes)} jobs did not finish under their cap ({detail})"


class Outcome:
    """The exit code the entry point ends with, set by whoever learns how the run went."""

    code: int = OK
    line: str | None = None

    @classmethod
    def set(cls, code: int, line: str | None = None) -> None:
        cls.code, cls.line = code, line

    @classmethod
    def reset(cls) -> None:
        cls.code, cls.line = OK, None
