"""Progress bars where someone watches them: a terminal, or a notebook, where `tqdm.auto` draws a widget; none in a
log or a pipe, which get the lines without the bar's redraws."""

from __future__ import annotations

import contextlib
import io
import sys

from tqdm.auto import tqdm


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (a notebook's output is no terminal, yet someone watches it)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def bar(**kwargs) -> tqdm:
    """A tqdm bar (keyword arguments as tqdm's), shown on a terminal or in a notebook."""
    return tqdm(dynamic_ncols=True, disable=False if in_notebook() else None, **kwargs)


def lines_above(bar: tqdm) -> contextlib.AbstractContextManager:
    """stdout written above `bar` while it is shown (a job's lines and the bar then never share a line)."""
    return contextlib.nullcontext() if bar.disable else contextlib.redirect_stdout(_AboveBar(sys.stdout))


class _AboveBar(io.TextIOBase):
    """stdout while the trials' bar is on a terminal: each whole line is written above the bar (tqdm.write), so
    the job lines and the bar do not share a line."""

    def __init__(self, out) -> None:
        self.out, self.pending = out, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            tqdm.write(line, file=self.out)
        return len(text)

    def flush(self) -> None:
        self.out.flush()
