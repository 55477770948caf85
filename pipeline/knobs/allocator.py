"""train.allocator: how PyTorch's CUDA caching allocator holds the job's memory. `cached` (PyTorch's default): each
request no cached block fits gets a segment of its own from the device, and a block stays in the segment it was cut
from, so micro-batches of varying shapes leave segments behind that a later, larger block cannot use: the reserved
peak then depends on the order of the shapes (on the chats grid, padded to the longest or to buckets, 1.3-5.8 GiB
over one shape of as many tokens). `expandable`: `expandable_segments:True`, one segment per stream that grows by
mapping pages, which a larger block extends rather than leaving the smaller ones behind. `unsplit`: the cached
allocator with `max_split_size_mb:512`, so a block over 512 MiB is never cut from a larger one and, freed, goes back
whole: the fp32 logits a loss builds leave no segment half-used, which under a cap is what a process ran out of.

The job sets both settings either way (the config, not the environment, says which ran: `expandable_segments`, and
`max_split_size_mb` for unsplit only), in PYTORCH_CUDA_ALLOC_CONF before its first allocation, the environment's other
allocator settings kept (PYTORCH_CUDA_ALLOC_CONF's, else
PYTORCH_ALLOC_CONF's: torch reads the first where both are set)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import VARYING, Knob, Setting, Slack
from pipeline.knobs.compile_mode import graphs_of_compiled_layers
from pipeline.knobs.loss import KNOB as LOSS
from pipeline.knobs.loss import LOGIT_BYTES, Loss

ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # the first wins where both are set
# Beside a loss that builds the full logits, `cached` kept 0.5-1.5 fp32 copies of a micro-batch's logits reserved and
# unused in most runs of grid-small and none in others (bench/results/record-h100-1206); under a 20 GiB cap the same
# config fit in 1 of 3 processes, and with `expandable` in 3 of 3 at 1.32-1.39x the step (cap-h100-1206).
SLACK_BYTES = 4.0  # one fp32 copy, a token and vocabulary entry
# `unsplit` at that config: 3 of 3 processes fit in each compile mode, 0.08-0.53 GiB reserved over allocated, at
# 0.1006-0.1069 s a step (bench/results/cap-h100-1206-split).
UNSPLIT_MB = 512
OWN = ("expandable_segments", "max_split_size_mb")  # the settings the knob sets; the environment's others are kept
# Where the run's micro-batches differ in shape (`VARYING`), a study's trial trains the longest first, on segments
# returned to the device (`measure.first_batch`), where a run meets it after shorter ones. The chats answer (bucketed,
# eager, 19.07 GiB of a 20 GiB cap in its trial, 18.48 reserved) ran out of memory at step 10 of four 16-step runs,
# cached and unsplit alike, asking for 64 MiB beside 1.80 GiB reserved and unused (9.4% of that peak; the reserve it
# needed was 0.97 GiB or more over the trial's), and fit one pass over the records at the cap's edge; expandable fit
# every run, 18.42-18.44 GiB reserved (bench/results/fragment-h100-1206).
FRAGMENT_SHARE = 0.1  # of the trial's peak


class Allocator(StrEnum):
    CACHED = "cached"
    EXPANDABLE = "expandable"
    UNSPLIT = "unsplit"


def allocator_settings(environ: Mapping[str, str], expandable: bool, max_split_mb: int | None = None) -> str:
    """The allocator's settings `environ` gives, with the two this knob sets in their place: expandable segments on
    or off, and the size over which a block is never split (given), else none (the environment's is dropped: the
    config, not the environment, says which ran); its other settings kept."""
    given = next((environ[name] for name in ALLOC_CONF if environ.get(name)), "")
    parts = (part.strip() for part in given.split(","))
    kept = [part for part in parts if part and part.partition(":")[0].strip() not in OWN]
    split = [f"max_split_size_mb:{max_split_mb}"] if max_split_mb is not None else []
    return ",".join([*kept, *split, f"expandable_segments:{expandable}"])


def _split(allocator: str) -> int | None:
    return UNSPLIT_MB if allocator == Allocator.UNSPLIT else None


class AllocatorKnob(Knob):
    key = "train.allocator"
    default = Allocator.CACHED
    help = (
        "the CUDA allocator: cached (a segment per size), expandable (one segment that grows: expandable_segments), "
        "unsplit (cached, blocks over 512 MiB never split: max_split_size_mb)"
    )
    short = "alloc"

    def refuses(self, s: Setting) -> str | None:
        if s.train.allocator != Allocator.CACHED and not s.cuda:
            return f"{s.train.allocator} sets up the CUDA allocator, which the CPU does not have; accepted on the CPU: cached"
        return None

    def unmodelled(self, value: str, setting: Mapping[str, Any]) -> str | None:
        """Expandable segments and unsplit blocks change what the allocator keeps of the micro-batches before the
        longest."""
        return str(value) if value != Allocator.CACHED else None

    def slack_in(self, value: str, setting: Mapping[str, Any]) -> Slack | None:
        """`cached` beside a loss that builds the logits: one fp32 copy of them, there or not by the order of its
        blocks. Under a 20 GiB cap, processes under CUDA graphs kept none (3 of 3 fit, grid-small's compiled loss);
        without them 2 of 3 ran out of memory asking for it, and so did the chats study's Liger kernels beside the
        compiled loss at step 1 (BENCHMARKS.md): only the first counts as fitting (`capped_fit`). `cached` and
        `unsplit` where the run's micro-batches vary in shape (`VARYING`): a share of the trial's peak besides."""
        loss = Loss(LOSS.canonical(setting.get(LOSS.key, LOSS.default)))
        logits = value == Allocator.CACHED and LOGIT_BYTES[loss] > 0
        varying = value != Allocator.EXPANDABLE and bool(setting.get(VARYING))
        if not (logits or varying):
            return None
        share = f"{FRAGMENT_SHARE:.0%} of its trial's peak"
        late = "where a run meets its longest micro-batch after shorter ones"
        copy = "one fp32 copy of its micro-batch's logits"
        if logits and varying:
            why = f"{copy} beside {LOSS.key}={loss.value} and {share} {late}, which {self.key}={value} can keep unused"
        elif logits:
            why = f"{copy}, which the cached allocator can keep unused beside {LOSS.key}={loss.value}"
        else:
            why = f"what {self.key}={value} can keep unused {late}, {share}"
        instead = (
            f"{self.key}=expandable keeps none (no slower on one unpaired pass of the chats' eager answer; a compiled "
            "loss at one shape ran 1.3x slower: BENCHMARKS.md)"
            if varying
            else f"{self.key}=unsplit keeps none (no slower than cached under CUDA graphs on an H100: BENCHMARKS.md)"
        )
        return Slack(
            SLACK_BYTES if logits else 0.0,
            why,
            instead,
            capped_fit=logits and graphs_of_compiled_layers(setting),
            peak_share=FRAGMENT_SHARE if varying else 0.0,
        )

    def process(self, train: Any, environ: dict) -> None:
        """Before the job touches the device: the allocator reads its settings once, at its first allocation."""
        expandable = train.allocator == Allocator.EXPANDABLE
        environ[ALLOC_CONF[0]] = allocator_settings(environ, expandable, _split(train.allocator))

    def helpers(self, train: Any) -> list[str]:
        return [self.source("ALLOC_CONF", "OWN", "allocator_settings")] if train.allocator != Allocator.CACHED else []

    def process_lines(self, train: Any) -> list[str]:
        """The default's script leaves the allocator to the environment; the others set it first thing."""
        if train.allocator == Allocator.EXPANDABLE:
            return [
                "    # the CUDA allocator's expandable segments, before anything touches the device",
                "    os.environ[ALLOC_CONF[0]] = allocator_settings(os.environ, expandable=True)",
            ]
        if train.allocator == Allocator.UNSPLIT:
            return [
                f"    # the CUDA allocator: blocks over {UNSPLIT_MB} MiB never split, before anything touches the device",
                f"    os.environ[ALLOC_CONF[0]] = allocator_settings(os.environ, expandable=False, max_split_mb={UNSPLIT_MB})",
            ]
        return []


KNOB = AllocatorKnob()
