"""What compilation did in a job: how many graphs Dynamo compiled (regional compilation should compile one layer's
graph and reuse it for every layer), and where Inductor fell back from CUDA graphs to plain kernel launches. Inductor
says the latter only in a log line ("skipping cudagraphs due to ...") and a counter; the job keeps both, as its
`compile_note`, so a CUDA-graph config that quietly ran without graphs is told apart from one that ran with them."""

from __future__ import annotations

import logging

from pipeline.adapters import dynamo

CUDAGRAPH_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"  # Inductor's "cudagraphs" log artifact
KEPT_REASONS = 3


class CompileWatch(logging.Handler):
    """Counts, while entered, Dynamo's compiled graphs and Inductor's CUDA-graph skips, with their first reasons."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []
        self._start: tuple[int, int] = (0, 0)
        self._end: tuple[int, int] | None = None  # the counts when the watch ended (None: still watching)

    @staticmethod
    def _counts() -> tuple[int, int]:
        return dynamo.count("stats", "unique_graphs"), dynamo.count("inductor", "cudagraph_skips")

    def __enter__(self) -> CompileWatch:
        self._start, self._end = self._counts(), None
        logging.getLogger(CUDAGRAPH_LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(CUDAGRAPH_LOGGER).removeHandler(self)
        self._end = self._counts()

    def emit(self, record: logging.LogRecord) -> None:
        reason = record.getMessage().strip().splitlines()[0] if record.getMessage().strip() else "no reason given"
        if reason not in self.reasons and len(self.reasons) < KEPT_REASONS:
            self.reasons.append(reason)

    @property
    def graphs(self) -> int:
        return (self._end or self._counts())[0] - self._start[0]

    @property
    def cudagraph_skips(self) -> int:
        return (self._end or self._counts())[1] - self._start[1]

    def note(self, what: str) -> str:
        """E.g. `regional (28 layers): 2 graphs compiled; CUDA graphs skipped 1 time: skipping cudagraphs due to ...`"""
        text = f"{what}: {self.graphs} graph{'s' if self.graphs != 1 else ''} compiled"
        skips = self.cudagraph_skips
        if skips:
            text += f"; CUDA graphs skipped {skips} time{'s' if skips != 1 else ''}: " + "; ".join(self.reasons)
        return text
