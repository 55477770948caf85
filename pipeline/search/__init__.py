"""The Optuna study of a config's space, and its one front door: code outside `pipeline.search` imports only the names
below from `pipeline.search` (the study and its opening, the checks of a study's command line, the trial records
and what the study holds), never one of its modules. Each is imported on first use, so that the precheck of a
command line, which reads the checks, does not pay for the study's loop.

As in Optuna's own packages, the modules behind the door are private by name (`_trials`, `_workers`, ...), all but
`study`, the loop the commands run."""

from __future__ import annotations

import importlib

_EXPORTS = {
    # the study: its loop, its context, and the checks of its command line
    "StudyDriver": ("pipeline.search.study", "StudyDriver"),
    "StudyContext": ("pipeline.search._opening", "StudyContext"),
    "check_binding": ("pipeline.search._opening", "check_binding"),
    "check_values": ("pipeline.search._left_out", "check_values"),
    "LeftOut": ("pipeline.search._space", "LeftOut"),
    "left_out_lines": ("pipeline.search._space", "left_out_lines"),
    # what the study holds, read back by any worker
    "Decided": ("pipeline.search._decided", "Decided"),
    "decided_configs": ("pipeline.search._workers", "decided_configs"),
    "CALIBRATION": ("pipeline.search._calibration", "ATTR"),
    "Coverage": ("pipeline.search._prior", "Coverage"),
    "coverage": ("pipeline.search._prior", "coverage"),
    "ConfirmationRecord": ("pipeline.search._confirmation", "ConfirmationRecord"),
    # the trial records
    "TrialRecord": ("pipeline.search._trials", "TrialRecord"),
    "Role": ("pipeline.search._trials", "Role"),
    "ANSWER": ("pipeline.search._trials", "ANSWER"),
    "REPEAT_OF": ("pipeline.search._trials", "REPEAT_OF"),
    "measured_seconds": ("pipeline.search._trials", "measured_seconds"),
    "trial_loss_deviation": ("pipeline.search._trials", "trial_loss_deviation"),
    # the knob model, fitted to the measured trials
    "Factor": ("pipeline.search._knob_model", "Factor"),
    "searched_values": ("pipeline.search._knob_estimates", "searched_values"),
    "measured_points": ("pipeline.search._knob_estimates", "measured_points"),
    "fit_points": ("pipeline.search._knob_estimates", "fit_points"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """A front-door name, imported from its module; any other name is not the package's (a submodule imported by
    `from pipeline.search import _trials` inside the package is found by the import system after this refuses)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline.search' has no attribute '{name}'")
    module, attribute = _EXPORTS[name]
    return getattr(importlib.import_module(module), attribute)
