"""Progress bars where someone watches them: a terminal, or a notebook, where `tqdm.auto` draws a widget; none in a
log or a pipe, which get the lines without the bar's redraws."""

from __future__ import annotations

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
