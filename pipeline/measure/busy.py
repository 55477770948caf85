"""How busy the GPU is over a job's steady steps, from NVML's utilisation (the share of each sample period in which
a kernel ran), read by a thread: no CUDA call, no synchronisation, nothing added to the measured steps. A job whose
GPU idles much of the step is bound by the host (Python, kernel launches, casts), not by the GPU."""

from __future__ import annotations

import threading
import time

import pynvml
from transformers import TrainerCallback


class NvmlBusySampler:
    """GPU utilisation sampled by a thread from NVML (no CUDA call, no synchronisation): NVML's figure is the share
    of its last sample period (1/6 s to 1 s by product) in which at least one kernel ran, so it says 'busy' for one
    small kernel as much as for a full GPU. `start`/`stop` around the steady steps; `mean` is the average. Read
    every 0.2 s, about NVML's shortest period: faster reads repeat its figure, and each wakes a thread that takes
    the interpreter's lock from the training loop (twice a read)."""

    def __init__(self, handle, interval_s: float = 0.2) -> None:
        self.handle = handle
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            rates = pynvml.nvmlDeviceGetUtilizationRates(self.handle)
            self.samples.append((time.perf_counter(), int(rates.gpu)))
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self.samples.clear()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-busy", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stop.is_set()

    def stop(self) -> float | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.mean

    @property
    def mean(self) -> float | None:
        return sum(value for _, value in self.samples) / (100.0 * len(self.samples)) if self.samples else None


class BusyWindow(TrainerCallback):
    """Samples the GPU's utilisation from the end of step `after` (the warm-up) to the end of training."""

    def __init__(self, handle, after: int) -> None:
        self.sampler = NvmlBusySampler(handle)
        self.after = after
        self.busy: float | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.after:
            self.sampler.start()

    def on_train_end(self, args, state, control, **kwargs):
        if self.sampler.running:
            self.busy = self.sampler.stop()
