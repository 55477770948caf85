"""What a process may keep unused over another's peak of the same config (`pipeline.knobs.slack`, the allocator
knob's rule) and the answer's line where its headroom is less (`answer.slack`): on the seed's setting's figures
(Qwen3-1.7B's vocabulary, 512-token rows, 4x1, the model's loss at 13.31 GiB of a 14 GiB cap, as seed 1's answer on
an H100: BENCHMARKS.md) and on the chats' longest micro-batch."""

from __future__ import annotations

from optuna.trial import TrialState

from pipeline import knobs
from pipeline.answer.slack import AnswerSlack, slack_line
from pipeline.search import TrialRecord

VOCAB, CAP = 151_936, 14 * 2**30


def answer(peak: float = 13.31) -> TrialRecord:
    return TrialRecord(1, TrialState.COMPLETE, label="answer", peak_gib=peak)


def test_the_cached_allocator_beside_a_loss_that_builds_the_logits_may_keep_one_fp32_copy_of_them():
    for loss in ("model", "compiled"):
        found = knobs.slack([("train.loss", loss)])  # the allocator at its default: cached
        assert found.logit_bytes == 4.0 and found.why.endswith(f"beside train.loss={loss}")
        assert (
            found.instead
            == "train.allocator=unsplit keeps none (no slower than cached under CUDA graphs on an H100: BENCHMARKS.md)"
        )
    assert knobs.slack([("train.loss", "model"), ("train.allocator", "expandable")]) is None
    assert knobs.slack([("train.loss", "compiled"), ("train.allocator", "unsplit")]) is None
    assert knobs.slack([("train.loss", "trl")]) is None and knobs.slack([("train.loss", "liger")]) is None
    assert knobs.slack([]) is None  # TRL's loss, the default, keeps no logits whole


def test_an_answer_with_less_headroom_than_that_copy_says_its_fit_can_change_from_process_to_process():
    found = AnswerSlack.of(knobs.slack([("train.loss", "model")]), 4 * 512, VOCAB)
    assert slack_line(answer(), CAP, found) == (
        "its fit can change from process to process: 0.69 GiB left under the cap, less than one fp32 copy of its "
        "micro-batch's logits, which the cached allocator can keep unused beside train.loss=model (1.16 GiB); "
        "train.allocator=unsplit keeps none (no slower than cached under CUDA graphs on an H100: BENCHMARKS.md)"
    )
    assert slack_line(answer(peak=12.8), CAP, found) is None  # 1.20 GiB left: the copy fits
    assert slack_line(answer(), None, found) is None  # nothing caps the run
    assert AnswerSlack.of(None, 4 * 512, VOCAB) is None


def test_a_run_of_varying_lengths_is_judged_on_its_longest_micro_batch():
    """The chats at 8x1: the longest micro-batch holds 8,112 tokens (4.59 GiB of fp32 logits), not 8 x max_length."""
    found = AnswerSlack.of(knobs.slack([("train.loss", "compiled")]), 8112, VOCAB)
    assert "2.00 GiB left under the cap" in slack_line(answer(peak=18.0), 20 * 2**30, found)
    assert f"{found.gib:.2f}" == "4.59"


def test_the_cached_allocator_on_micro_batches_of_varying_shape_may_keep_a_tenth_of_the_peak():
    """The chats answer (bucketed, eager, TRL's loss) peaked at 19.07 GiB of a 20 GiB cap in its trial, where the run's
    longest micro-batch trains first on returned segments; 16-step runs met it after shorter ones and ran out of
    memory at step 10 with 1.80 GiB reserved and unused, under cached and unsplit alike: its answer says so and names
    what kept none."""
    varying = [("train.padding", "buckets"), (knobs.VARYING, True)]
    found = AnswerSlack.of(knobs.slack(varying), 8192, VOCAB, peak_gib=19.07)
    assert slack_line(answer(peak=19.07), 20 * 2**30, found) == (
        "its fit can change from process to process: 0.93 GiB left under the cap, less than what "
        "train.allocator=cached can keep unused where a run meets its longest micro-batch after shorter ones, 10% of "
        "its trial's peak (1.91 GiB); train.allocator=expandable keeps none (no slower on one unpaired pass of the "
        "chats' eager answer; a compiled loss at one shape ran 1.3x slower: BENCHMARKS.md)"
    )
    assert slack_line(answer(peak=17.5), 20 * 2**30, AnswerSlack.of(knobs.slack(varying), 8192, VOCAB, 17.5)) is None
    unsplit = knobs.slack([*varying, ("train.allocator", "unsplit")])
    assert unsplit.peak_share == 0.1 and "train.allocator=unsplit can keep unused" in unsplit.why
    assert knobs.slack([*varying, ("train.allocator", "expandable")]) is None
    assert knobs.slack([("train.padding", "buckets"), (knobs.VARYING, False)]) is None  # one shape: nothing


def test_beside_a_loss_that_builds_the_logits_both_slacks_add_up_where_shapes_vary():
    """4 x 512 tokens of the model's loss at 13.31 GiB: one fp32 copy of the logits (1.16 GiB) and a tenth of the peak
    (1.33 GiB), 2.49 GiB together, said as one figure; the line names what keeps neither. Under CUDA graphs only the
    copy lets a config predicted over the cap be measured (`capped_fit`): the share is a run's draw, not a process's."""
    found = knobs.slack([("train.loss", "model"), (knobs.VARYING, True)])
    sized = AnswerSlack.of(found, 4 * 512, VOCAB, peak_gib=13.31)
    assert slack_line(answer(), CAP, sized) == (
        "its fit can change from process to process: 0.69 GiB left under the cap, less than one fp32 copy of its "
        "micro-batch's logits beside train.loss=model and 10% of its trial's peak where a run meets its longest "
        "micro-batch after shorter ones, which train.allocator=cached can keep unused (2.49 GiB); "
        "train.allocator=expandable keeps none (no slower on one unpaired pass of the chats' eager answer; a compiled "
        "loss at one shape ran 1.3x slower: BENCHMARKS.md)"
    )
    graphs = [("train.torch_compile", "regional"), ("train.compile_mode", "reduce-overhead")]
    assert knobs.slack([("train.loss", "model"), (knobs.VARYING, True), *graphs]).capped_fit
    assert not knobs.slack([("train.padding", "buckets"), (knobs.VARYING, True), *graphs]).capped_fit
