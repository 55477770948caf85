"""A study on records of varying length, end to end on the tiny model: every config's fit is judged on the run's
longest micro-batch, trained at step one of its job, and the memory predictor works per token.

Resident memory is what a CPU job's peak is. glibc keeps freed blocks in its heap by a threshold it raises as
blocks are freed, so identical runs of one config were seen 768 to 894 MiB apart; the tests fix the threshold
(`MALLOC_MMAP_THRESHOLD_`, read by every process they start), so that resident memory follows what torch holds and
what is judged is the predictor, not the allocator. Tokens per micro-batch stay within 4,096 (max_length 512, 8
records), where the tiny model's peak grows in proportion to them on this CPU.

A run started by `pipeline.train` reads 7-14 MiB (up to 2.8%) more than the same config's trial in a study (six
pairs, e.g. 500 against 509 MiB): no config may sit that close under the cap. Placed 70 MiB above 8x1's first steps,
the cap leaves the configs that fit 35 MiB or more under it in the study (8x1 padding-free, 540 MiB) and those over it
17 MiB or more over (4x2 padded to the longest, 592); at 45 MiB above, 8x1 padding-free sat 9 MiB under and its run
went over.
"""

from __future__ import annotations

import re
import shlex

import pytest

from bench.chats import write_chats
from pipeline.builders.order import RunOrder
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.validate import validate
from pipeline.records import Fit, Status
from pipeline.search._trials import TrialRecord
from tests.helpers.cli import run_cli
from tests.helpers.configs import composed
from tests.helpers.runs import mlflow_runs, the_study

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "262144", "MALLOC_TRIM_THRESHOLD_": "262144"}
RECORDS, LONG_AT, LONG = 160, 150, 512  # one long record, late: a study's 4 steps of 8 never read it
SETUP = [
    "data=jsonl",
    "model.vocab_size=2048",
    "train.max_length=512",
    "batch.effective=8",
    "train.steps=4",
    "measure.warmup_steps=1",
    "train.progress_bar=false",
]


def _peak_mib(folder) -> float:
    (run,) = [r for r in mlflow_runs(folder) if r.data.tags.get("kind") == "job"]
    return run.data.metrics["peak_gib"] * 1024


@pytest.mark.slow
def test_the_answer_fits_every_step_of_the_run_and_the_predictor_works_per_token(tmp_path):
    data = tmp_path / "chats.jsonl"
    write_chats(data, records=RECORDS, shortest=30, longest=120, seed=0, long_at=LONG_AT, long_tokens=LONG)
    setup = [*SETUP, f"data.path={data}"]

    # 1. 8x1 on the study's own steps alone: the cap goes 70 MiB above its peak, so a fit judged on the first steps
    # would take it; its micro-batch with the long record (8 x 512 tokens, padded) is some 240 MiB above
    first = tmp_path / "first"
    first.mkdir()
    proc = run_cli(*setup, "batch.split=8x1", cwd=first, env=MALLOC, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cap_mib = int(_peak_mib(first) + 70)

    # 2. the study: every split x longest, padding-free; the run the answer must fit is a pass over the whole file
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    space = "++optimize.space={train.padding:[longest,padding_free]}"
    options = ["optimize.fit_over=epoch", "optimize.trials=8", "optimize.confirm=never", space]
    proc = run_cli(*setup, f"mem_cap={cap_mib}MiB", *options, cwd=study_dir, env=MALLOC, module="pipeline.optimize")
    out = proc.stdout
    print(out)  # the study's table, shown by pytest when an assertion below fails
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    study = the_study(f"sqlite:///{study_dir / 'mlruns' / 'optuna.db'}")
    records = {r.label: r for r in map(TrialRecord.of, study.trials) if r.label and r.decided}
    assert len(records) == 8, sorted(records)
    # 8x1 padded to the long record: over the cap, by its prediction on that micro-batch or measured on it
    eight = records["tiny 8x1 padding=longest"]
    assert eight.longest.tokens == 8 * LONG and eight.longest.first, eight.longest
    need = eight.peak_gib if eight.status is Status.OVER_CAP else eight.predicted_gib
    assert eight.status in (Status.OVER_CAP, Status.SKIPPED) and need * 1024 > cap_mib and not eight.feasible
    # a config measured over the cap stops at step one, where its job trains the run's longest micro-batch
    over = [r for r in records.values() if r.status is Status.OVER_CAP]
    assert over and all(r.note == "over-cap at step 1" for r in over), [(r.label, r.note) for r in over]

    # the answer: judged on its run's longest micro-batch, the one holding the long record, as the Trainer draws it
    best = re.search(r"best feasible: (tiny \S+ padding=\S+)", out).group(1)
    answer = records[best]
    line = re.search(
        r"fits: peak ([\d.]+) GiB of [\d.]+ GiB on the run's longest micro-batch \(([\d,]+) tokens; step", out
    )
    assert line, out[-3000:]
    (command,) = [x.strip() for x in out.splitlines() if x.strip().startswith("python -m pipeline.train ")]
    overrides = shlex.split(command)[3:]
    job = validate(composed(*overrides))
    split = job.split
    sft = sft_kwargs(split.micro, split.accumulation, job.config.train, "fp32", "cpu")
    longest = RunOrder(job.config, epoch=True).longest(sft, 1)
    assert (LONG_AT,) in longest.rows, longest
    assert int(line.group(2).replace(",", "")) == longest.tokens == answer.longest.tokens

    # the memory predictor, per token: every config, every padding, within 6% of its measured peak
    errors = {label: r.predictor_error for label, r in records.items() if r.predictor_error is not None}
    assert len(errors) >= 6 and max(abs(e) for e in errors.values()) <= 0.06, errors

    # 3. the answer's whole run, one pass over the file (20 steps of 8), under the cap: no step passes it
    full = tmp_path / "full"
    full.mkdir()
    proc = run_cli(*overrides, f"train.steps={RECORDS // 8}", cwd=full, env=MALLOC, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = [r for r in mlflow_runs(full) if r.data.tags.get("kind") == "job"]
    assert run.data.tags["fit"] == Fit.FITS and run.data.metrics["peak_gib"] * 1024 <= cap_mib, run.data.metrics
