"""The CUDA caching allocator's settings as it reads them (`torch._C._accelerator_getAllocatorSettings`: what
PYTORCH_CUDA_ALLOC_CONF set, parsed at the first allocation), which a job records beside its versions. torch has no
public reader; where a torch has moved it the job records none (and `tests/test_adapters.py` fails)."""

from __future__ import annotations

try:
    from torch._C import _accelerator_getAllocatorSettings
except ImportError:
    _accelerator_getAllocatorSettings = None

DEFAULT = "default"  # no setting given: PyTorch's own


def settings() -> str | None:
    """The allocator's settings (DEFAULT where none was given); None where this torch has no reader."""
    if _accelerator_getAllocatorSettings is None:
        return None
    return _accelerator_getAllocatorSettings() or DEFAULT
