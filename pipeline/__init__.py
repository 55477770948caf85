"""Which micro-batch x gradient-accumulation split trains a LoRA fastest, and does it fit under a memory cap.

From Python: `pipeline.sweep([...])` and `pipeline.study([...])` take the command line's overrides and return a
`Result` (`pipeline.api`); `pipeline.card(result)` writes its result card (`pipeline.answer.card`). They are
imported on first use, so that a job's process, which imports this package, does not pay for them
(`__init__.pyi` gives their types).
"""

from __future__ import annotations

import importlib
import sys
import types

_EXPORTS = {
    "sweep": ("pipeline.api", "sweep"),
    "study": ("pipeline.api", "study"),
    "BadInput": ("pipeline.api", "BadInput"),
    "PipelineError": ("pipeline.api", "PipelineError"),
    "Result": ("pipeline.answer.results", "Result"),
    "Answer": ("pipeline.answer.results", "Answer"),
    "card": ("pipeline.answer.card", "write_card"),
}
__all__ = ["Answer", "BadInput", "PipelineError", "Result", "card", "study", "sweep"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline' has no attribute '{name}'")
    module, attribute = _EXPORTS[name]
    return getattr(importlib.import_module(module), attribute)


class _Package(types.ModuleType):
    """`import pipeline.card` (the entry point of `python -m pipeline.card`) binds the submodule on the package; an
    API name keeps the API's meaning instead."""

    def __setattr__(self, name: str, value) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
