"""The knob model and the sampler built on it: what each knob gains is recovered from a screening design, a pair the
trials never showed together is uncertain, and the sampler proposes the combination of what won."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import optuna
import pytest
from optuna.trial import TrialState

from pipeline.records import Status
from pipeline.search import _knob_model as knob_model
from pipeline.search import _sampler as sampler
from pipeline.search import _trials as trials
from pipeline.search._screening import Tried, together

SPACE = {
    "batch.split": ["1x4", "2x2", "4x1"],
    "train.torch_compile": ["off", "regional"],
    "train.loss": ["trl", "compiled"],
    "train.optimizer": ["adamw_torch", "adamw_torch_fused"],
}
SPLIT = {"1x4": 3.0, "2x2": 1.8, "4x1": 1.0}


def truth(p: dict) -> float:
    """Step seconds of a multiplicative space with one interaction: a compiled loss helps only beside compiled
    layers (and costs a little without them)."""
    t = 0.4 * SPLIT[p["batch.split"]] * (0.5 if p["train.torch_compile"] == "regional" else 1.0)
    if p["train.loss"] == "compiled":
        t *= 0.7 if p["train.torch_compile"] == "regional" else 1.05
    return t * (0.98 if p["train.optimizer"] == "adamw_torch_fused" else 1.0)


POINTS = [dict(zip(SPACE, combo, strict=True)) for combo in itertools.product(*SPACE.values())]
CENTRE = {"batch.split": "4x1", "train.torch_compile": "off", "train.loss": "trl", "train.optimizer": "adamw_torch"}


class View:
    def __init__(self, points=POINTS, fits=lambda p: True, centre=CENTRE):
        self.space, self._points, self._fits, self._centre = SPACE, points, fits, centre

    def points(self):
        return self._points

    def fits(self, params):
        return self._fits(params)

    def centre(self):
        return self._centre

    def seconds(self, trial):
        return trials.measured_seconds(trials.TrialRecord.of(trial))

    def spread(self, trial):
        return trials.measured_spread(trials.TrialRecord.of(trial))


def screening(centre: dict, points: list[dict]) -> list[dict]:
    """The screening design with its anchor held at the centre (every move slower than the centre)."""
    design: list[dict] = []
    while (point := sampler.next_screen(centre, centre, points, design)) is not None:
        design.append(point)
    return design


def test_the_screening_design_moves_each_knob_once_from_the_centre_and_repairs_what_cannot_run_alone():
    # a compiled loss runs only beside compiled layers here: moving the loss alone cannot run, so the nearest valid
    # point moves the compile choice with it
    valid = [p for p in POINTS if not (p["train.loss"] == "compiled" and p["train.torch_compile"] == "off")]
    design = screening(CENTRE, valid)
    moved = [{k for k in CENTRE if p[k] != CENTRE[k]} for p in design]
    assert design[0] == CENTRE
    assert moved[1:] == [
        {"batch.split"},
        {"batch.split"},
        {"train.torch_compile"},
        {"train.torch_compile", "train.loss"},
        {"train.optimizer"},
    ]


def test_the_fit_recovers_each_knobs_factor_from_the_screening_design():
    """Each knob moved once from the centre: the model's factor of each move is the true ratio, within its interval
    and within 5%."""
    design = screening(CENTRE, POINTS)
    fitted = knob_model.fit(knob_model.Encoding.of(SPACE, CENTRE), [(p, truth(p)) for p in design], noise_sd=0.02)
    for moved in design[1:]:
        (key,) = [k for k in CENTRE if moved[k] != CENTRE[k]]
        found = fitted.factor(moved, key, CENTRE[key])
        expected = truth(CENTRE) / truth(moved)
        assert found.low <= expected <= found.high, (key, found, expected)
        assert found.ratio == pytest.approx(expected, rel=0.05), (key, found, expected)


def test_a_pair_never_measured_together_is_predicted_from_its_parts_with_the_doubt_its_prior_leaves():
    design = screening(CENTRE, POINTS)
    fitted = knob_model.fit(knob_model.Encoding.of(SPACE, CENTRE), [(p, truth(p)) for p in design], noise_sd=0.02)
    both = {**CENTRE, "train.torch_compile": "regional", "train.loss": "compiled"}
    mean, sd = fitted.predict(both)
    _, measured_sd = fitted.predict({**CENTRE, "train.torch_compile": "regional"})
    alone = truth({**CENTRE, "train.torch_compile": "regional"}) * truth({**CENTRE, "train.loss": "compiled"})
    assert math.exp(mean) == pytest.approx(alone / truth(CENTRE), rel=0.05)  # the parts multiplied
    assert sd > 3 * measured_sd  # and wide: the pair's own term is its prior's


def _told(study: optuna.Study, params: dict, seconds: float) -> None:
    trial = study.ask()
    for key, choices in SPACE.items():
        trial.suggest_categorical(key, choices)
    trials.write(trial, {trials.STATUS: Status.OK, trials.MEDIAN: seconds})
    study.tell(trial, seconds)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sampler_screens_each_move_on_top_of_the_fastest_so_far(seed):
    """In an Optuna study: the centre, then each value moved once from the fastest config measured so far, so the
    compiled loss is tried beside the compiled layers that won, and the fused optimizer on top of both: the best
    config is among the screening design's own proposals."""
    rng = random.Random(seed)
    chosen = sampler.KnobModelSampler(seed=seed)
    chosen.bind(View())
    study = optuna.create_study(direction="minimize", sampler=chosen)
    proposed = []
    for _ in range(6):
        trial = study.ask()
        params = {key: trial.suggest_categorical(key, choices) for key, choices in SPACE.items()}
        proposed.append(params)
        seconds = truth(params) * math.exp(rng.gauss(0, 0.05))
        trials.write(trial, {trials.STATUS: Status.OK, trials.MEDIAN: seconds})
        study.tell(trial, seconds)
    moved = [{k for k in CENTRE if p[k] != CENTRE[k]} for p in proposed]
    assert proposed[0] == CENTRE
    assert moved[1:] == [
        {"batch.split"},
        {"batch.split"},
        {"train.torch_compile"},
        {"train.torch_compile", "train.loss"},  # from the compiled layers: the loss alone moved
        {"train.torch_compile", "train.loss", "train.optimizer"},
    ]
    assert proposed[-1] == min(POINTS, key=truth)


def test_a_gain_within_the_tie_tolerance_does_not_move_the_screenings_anchor():
    """A move that bought less than one process's noise (5%) is not carried into the later moves: the anchor stays
    with the config nearer the centre until a move beats it by more (on an H200 a 0.5% 'gain' of flex attention
    became the anchor, and compiled layers were then tried only beside it)."""
    fused = {**CENTRE, "train.optimizer": "adamw_torch_fused"}
    compiled = {**CENTRE, "train.torch_compile": "regional"}
    both = {**compiled, "train.optimizer": "adamw_torch_fused"}
    assert sampler.anchor(CENTRE, []) == CENTRE
    assert sampler.anchor(CENTRE, [(CENTRE, 0.40), (fused, 0.398)]) == CENTRE
    assert sampler.anchor(CENTRE, [(CENTRE, 0.40), (fused, 0.398), (compiled, 0.20)]) == compiled
    assert sampler.anchor(CENTRE, [(CENTRE, 0.40), (compiled, 0.20), (both, 0.199)]) == compiled
    assert sampler.anchor(CENTRE, [(CENTRE, 0.40), (compiled, 0.20), (both, 0.17)]) == both
    assert sampler.anchor(CENTRE, [(CENTRE, 0.40), (fused, 0.398)], tolerance=0.0) == fused
    # the next move of the screening starts from the anchor: compiled layers beside the plain optimizer
    taken = [CENTRE, fused] + [{**CENTRE, "batch.split": s} for s in ("1x4", "2x2")]
    observed = [(CENTRE, 0.40), (fused, 0.398), (taken[2], 1.2), (taken[3], 0.72)]
    found = sampler.propose(View(), observed, {sampler.key(p) for p in taken}, random.Random(0))
    assert found == compiled


def test_a_gain_past_the_tolerance_but_inside_the_steps_noise_does_not_move_the_anchor():
    """A rival measured 5.9% faster than the centre, past the 5% tolerance, with the two configs' steps overlapping
    (the figures of flex attention against sdpa in an H200 study): the anchor stays at the centre; a gain whose steps
    do not overlap the fastest's moves it. The intervals ([0.2109, 0.2460] and [0.2062, 0.2268], as there) reach the
    anchor from the trials' own steps."""
    rival = {**CENTRE, "train.optimizer": "adamw_torch_fused"}
    compiled = {**CENTRE, "train.torch_compile": "regional"}
    steps = {
        "centre": [0.2460, 0.2050, 0.2300, 0.2109, 0.2230, 0.2600, 0.2150, 0.2252, 0.2080, 0.2400, 0.2200, 0.2500],
        "rival": [0.2124, 0.2010, 0.2268, 0.2062, 0.2150, 0.2350, 0.2080, 0.2110, 0.2040, 0.2300, 0.2100, 0.2200],
        "compiled": [0.0595, 0.0601, 0.0588, 0.0611, 0.0592, 0.0597, 0.0603, 0.0590, 0.0599, 0.0594, 0.0606, 0.0591],
    }
    chosen = sampler.KnobModelSampler(seed=0)
    chosen.bind(View())
    study = optuna.create_study(direction="minimize", sampler=chosen)

    def measure(params, name):
        study.enqueue_trial(params)
        trial = study.ask()
        assert {k: trial.suggest_categorical(k, v) for k, v in SPACE.items()} == params
        median = statistics.median(steps[name])
        trials.write(trial, {trials.STATUS: Status.OK, trials.MEDIAN: median, trials.STEP_TIMES: steps[name]})
        study.tell(trial, median)

    measure(CENTRE, "centre")
    measure(rival, "rival")
    observed, spreads = _measured(chosen, study)
    assert observed[0][1] / observed[1][1] > 1 + sampler.TOLERANCE
    assert sampler.anchor(CENTRE, observed) == rival  # the tolerance alone would move it
    assert (spreads[0].low, spreads[0].high, spreads[1].low, spreads[1].high) == (0.2109, 0.2460, 0.2062, 0.2268)
    assert sampler.anchor(CENTRE, observed, spreads=spreads) == CENTRE
    measure(compiled, "compiled")
    observed, spreads = _measured(chosen, study)
    assert sampler.anchor(CENTRE, observed, spreads=spreads) == compiled


def test_one_stalled_step_does_not_tie_a_gain_with_the_config_it_stalled_in():
    """The chats study's baseline on an H100 stalled one of its 8 steady steps (1.92 s among 0.26-0.34 s); bucketed
    padding ran 1.5x faster. Its 95% interval was the whole range, which tied the two, and compiled layers were then
    screened beside the baseline's padding. The screening's interval leaves each end out at 8 steps: the anchor moves."""
    bucketed = {**CENTRE, "train.optimizer": "adamw_torch_fused"}
    steps = {
        "centre": [0.292, 1.921, 0.306, 0.342, 0.33, 0.259, 0.294, 0.318],
        "bucketed": [0.332, 0.204, 0.2, 0.195, 0.246, 0.284, 0.17, 0.195],
    }
    chosen = sampler.KnobModelSampler(seed=0)
    chosen.bind(View())
    study = optuna.create_study(direction="minimize", sampler=chosen)
    for params, name in ((CENTRE, "centre"), (bucketed, "bucketed")):
        study.enqueue_trial(params)
        trial = study.ask()
        assert {k: trial.suggest_categorical(k, v) for k, v in SPACE.items()} == params
        trials.write(trial, {trials.STATUS: Status.OK, trials.MEDIAN: statistics.median(steps[name])})
        trials.write(trial, {trials.STEP_TIMES: steps[name]})
        study.tell(trial, statistics.median(steps[name]))
    observed, spreads = _measured(chosen, study)
    assert (spreads[0].low, spreads[0].high, spreads[1].low, spreads[1].high) == (0.292, 0.342, 0.195, 0.284)
    assert sampler.anchor(CENTRE, observed, spreads=spreads) == bucketed


def _measured(chosen: sampler.KnobModelSampler, study: optuna.Study) -> tuple[list, list]:
    """The sampler's observations of a study: (params, seconds) and each one's interval."""
    tried, _ = chosen.history(study.get_trials(deepcopy=False))
    return [(t.params, t.seconds) for t in tried if t.seconds], [t.spread for t in tried if t.seconds]


def test_after_screening_the_sampler_proposes_the_combination_the_model_expects_fastest():
    """Past the screening design: the untried config the model fitted to the design expects fastest, the compiled
    loss on top of compiled layers and the fused optimizer, which no point of the design held together."""
    design = screening(CENTRE, POINTS)
    observed = [(p, truth(p)) for p in design]
    view = View(centre=None)
    found = sampler.propose(view, observed, {sampler.key(p) for p in design}, random.Random(0))
    best = min(POINTS, key=truth)
    assert found == best and best not in design


def test_the_sampler_proposes_only_what_fits_and_nothing_taken_twice():
    fits = lambda p: p["batch.split"] != "4x1" or p["train.torch_compile"] == "off"  # noqa: E731
    chosen = sampler.KnobModelSampler(seed=3)
    chosen.bind(View(fits=fits))
    study = optuna.create_study(direction="minimize", sampler=chosen)
    seen = []
    for _ in range(len([p for p in POINTS if fits(p)])):
        trial = study.ask()
        params = {key: trial.suggest_categorical(key, choices) for key, choices in SPACE.items()}
        seen.append(sampler.key(params))
        assert fits(params), params
        trials.write(trial, {trials.STATUS: Status.OK, trials.MEDIAN: truth(params)})
        study.tell(trial, truth(params))
    assert len(set(seen)) == len(seen)
    # a trial stopped as slow teaches the model by the steps it ran; a skipped one (no job) does not count
    pruned = optuna.trial.create_trial(
        state=TrialState.PRUNED,
        params=CENTRE,
        distributions={k: optuna.distributions.CategoricalDistribution(v) for k, v in SPACE.items()},
        user_attrs={trials.STATUS: Status.PRUNED, trials.WARMUP_TIMES: [9.0, 0.5, 0.7, 0.6]},
    )
    assert trials.measured_seconds(trials.TrialRecord.of(pruned)) == 0.6
    skipped = optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs={trials.STATUS: Status.SKIPPED})
    assert trials.measured_seconds(trials.TrialRecord.of(skipped)) is None


def test_the_answer_names_what_each_knob_it_moved_from_the_baseline_bought():
    from pipeline.answer.gains import knob_gains

    def record(number, params, role=trials.Role.TRIAL):
        overrides = tuple(f"{k}={v}" for k, v in params.items())
        seconds = truth(params)
        return trials.TrialRecord(
            number, TrialState.COMPLETE, label=str(number), config_id=str(number), overrides=overrides,
            status=Status.OK, median=seconds, feasible=True, role=role,
        )  # fmt: skip

    design = screening(CENTRE, POINTS)
    best = min(POINTS, key=truth)
    records = [record(i, p, trials.Role.BASELINE if i == 0 else trials.Role.TRIAL) for i, p in enumerate(design)]
    records.append(record(len(records), best))
    gains = knob_gains(records, records[-1], records[0])
    moved = {f.key: f for f in gains.factors}
    assert set(moved) == {k for k in CENTRE if best[k] != CENTRE[k]}
    assert moved["train.torch_compile"].before == "off" and moved["train.torch_compile"].after == "regional"
    assert (
        moved["train.torch_compile"].ratio > 1.5 and moved["train.optimizer"].low < 1.0 < moved["train.optimizer"].high
    )
    assert gains.lines()[1].startswith("    train.torch_compile=regional (from off): ")
    assert knob_gains(records, records[-1], None).factors == ()


def test_the_brute_force_sampler_tries_every_valid_config_once_beside_a_baseline_outside_the_space():
    """Every valid point once, in the space's order, also with a trial of no params in the study (the baseline
    outside the space), where Optuna's brute force failed (`param_name mismatch`); the loop, not the sampler, ends
    the study once every point was taken."""
    valid = [p for p in POINTS if not (p["batch.split"] == "1x4" and p["train.loss"] == "compiled")]
    chosen = sampler.make_sampler("bruteforce", 0)
    chosen.bind(View(points=valid))
    study = optuna.create_study(sampler=chosen)
    study.tell(study.ask(), 1.0)  # the baseline: measured, no params of the space
    seen = []
    for _ in range(len(valid)):
        trial = study.ask()
        params = {key: trial.suggest_categorical(key, choices) for key, choices in SPACE.items()}
        seen.append(params)
        study.tell(trial, truth(params))
    assert seen == valid


TRIO = {
    "train.liger_kernel": [True, False],
    "train.loss": ["trl", "compiled"],
    "train.torch_compile": ["off", "regional"],
}
TRIO_POINTS = [dict(zip(TRIO, combo, strict=True)) for combo in itertools.product(*TRIO.values())]


def _trio(liger: bool, loss: str, compiled: str) -> dict:
    return {"train.liger_kernel": liger, "train.loss": loss, "train.torch_compile": compiled}


def test_a_value_that_measured_nothing_beside_a_value_that_lost_is_tried_again_beside_the_winners():
    """The centre holds Liger kernels; the compiled loss beside them ran out of memory (it builds the logits); Liger
    off then gained, and compiled layers on top of it: the compiled loss is tried again beside the winners."""
    centre = _trio(True, "trl", "off")
    tried = [
        Tried(centre, 1.0),
        Tried(_trio(True, "compiled", "off")),  # out of memory: no step time
        Tried(_trio(False, "trl", "off"), 0.8),
        Tried(_trio(False, "trl", "regional"), 0.5),
    ]
    taken = {sampler.key(t.params) for t in tried}
    assert sampler.next_screen(centre, tried[-1].params, TRIO_POINTS, [t.params for t in tried]) is None
    assert together(centre, tried, 0.05, TRIO_POINTS, taken) == _trio(False, "compiled", "regional")
    # a value that lost, told apart slower, is not tried again: nothing more to propose
    lost = [*tried[:1], Tried(_trio(True, "compiled", "off"), 1.4), *tried[2:]]
    assert together(centre, lost, 0.05, TRIO_POINTS, taken) is None


def test_two_values_that_gained_from_one_anchor_at_once_are_tried_together():
    """Two workers moved from the centre at once, Liger off and compiled layers: both gained on it, and the
    screening's anchor then moved to the faster alone. The config holding both comes before the model's proposals."""
    centre = _trio(True, "trl", "off")
    tried = [Tried(centre, 1.0), Tried(_trio(False, "trl", "off"), 0.8), Tried(_trio(True, "trl", "regional"), 0.5)]
    tried.append(Tried(_trio(True, "compiled", "regional"), 0.49))  # the loss, screened on the anchor: a tie
    taken = {sampler.key(t.params) for t in tried}
    assert together(centre, tried, 0.05, TRIO_POINTS, taken) == _trio(False, "trl", "regional")
    view = View(points=TRIO_POINTS, centre=centre)
    view.space = TRIO
    observed = [(t.params, t.seconds) for t in tried]
    assert sampler.propose(view, observed, taken, random.Random(0)) == _trio(False, "trl", "regional")


def test_a_value_over_the_cap_at_the_anchor_is_screened_at_the_equally_near_point_the_measured_configs_say_is_fast():
    """grid-small's shape (BENCHMARKS.md): from 8x1 compiled layers with TRL's loss, the compiled loss alone is over
    the cap at 8x1; two points fit one key further, 4x2 (a split the probes measured slow) and 8x1 under CUDA graphs
    (measured fast). The space's order alone picked 4x2, where the trial was pruned and the grid's best, 8x1 with CUDA
    graphs and the compiled loss, went unmeasured in a quarter of the replays (CUDA graphs alone within the tie
    tolerance of the anchor, which stays); the knob model's estimate picks it."""
    space = {
        "batch.split": ["4x2", "8x1"],
        "train.compile_mode": ["default", "reduce-overhead"],
        "train.loss": ["trl", "compiled"],
    }
    points = [dict(zip(space, combo, strict=True)) for combo in itertools.product(*space.values())]
    points = [p for p in points if not (p["batch.split"] == "4x2" and p["train.compile_mode"] == "reduce-overhead")]

    def fits(p):
        return not (
            p["batch.split"] == "8x1" and p["train.compile_mode"] == "default" and p["train.loss"] == "compiled"
        )

    centre = {"batch.split": "8x1", "train.compile_mode": "default", "train.loss": "trl"}
    observed = [
        (centre, 0.113),
        ({**centre, "batch.split": "4x2"}, 0.171),
        ({**centre, "train.compile_mode": "reduce-overhead"}, 0.110),  # tied with the centre: the anchor stays
    ]
    taken = [p for p, _ in observed]
    anchor = centre
    screened = {**centre, "train.loss": "compiled", "train.compile_mode": "reduce-overhead"}
    assert sampler.next_screen(centre, anchor, points, taken, fits) == {
        **centre,
        "batch.split": "4x2",
        "train.loss": "compiled",
    }
    model = knob_model.fit(knob_model.Encoding.of(space, centre), observed)
    assert sampler.next_screen(centre, anchor, points, taken, fits, model.seconds) == screened

    view = View(points, fits, centre)
    view.space = space
    assert sampler.propose(view, observed, {sampler.key(p) for p in taken}, random.Random(0)) == screened


CHATS = {  # keys in the registry's order: attention before compilation, padding last
    "batch.split": ["8x1"],
    "model.attn_implementation": ["sdpa", "flex_attention"],
    "train.compile_mode": ["default", "reduce-overhead"],
    "train.padding": ["longest", "buckets"],
    "train.torch_compile": ["off", "regional"],
}


def chats_truth(p: dict) -> float:
    """The chats on an H100 (BENCHMARKS.md), in shape: flex attention 1.6x faster eagerly (the study: 0.363 against
    0.589 s) and slow beside compiled layers, which recompile (0.412 s, pruned); buckets eagerly 0.36x the longest
    (the grid: 0.182 against 0.510 s); compiled layers in the default mode fast beside buckets (0.14 s in fresh
    processes), CUDA graphs slow there in a trial's first steps, which record graphs for each new shape (0.40 s,
    pruned), and padded to the longest (0.27 s)."""
    flex, compiled = p["model.attn_implementation"] == "flex_attention", p["train.torch_compile"] == "regional"
    buckets, graphs = p["train.padding"] == "buckets", p["train.compile_mode"] == "reduce-overhead"
    if compiled and flex:
        return 0.42
    if compiled:
        return (0.40 if buckets else 0.27) if graphs else (0.14 if buckets else 0.35)
    return (0.36 if flex else 0.59) * (0.36 if buckets else 1.0)


def test_the_screening_moves_the_padding_and_compiled_layers_before_the_other_knobs():
    """The space's order moved flex attention first; it won eagerly and became the anchor, compiled layers were tried
    only beside it, lost, and the study answered 2.6-2.9x slower than the grid's three fastest. Padding, then compiled
    layers, then their mode, are screened first (`Knob.screen`), so flex attention is screened beside what won there.
    Compiled layers come before their mode: CUDA graphs screened first moved both keys, lost, and compiled layers in
    the default mode, the fastest, were never tried (the chats study again)."""
    valid = [
        p
        for p in (dict(zip(CHATS, c, strict=True)) for c in itertools.product(*CHATS.values()))
        if not (p["train.compile_mode"] == "reduce-overhead" and p["train.torch_compile"] == "off")
    ]
    centre = {
        "batch.split": "8x1",
        "model.attn_implementation": "sdpa",
        "train.compile_mode": "default",
        "train.padding": "longest",
        "train.torch_compile": "off",
    }
    taken: list[dict] = []
    observed: list[tuple[dict, float]] = []
    for _ in range(5):
        start = sampler.anchor(centre, observed, 0.05)
        point = sampler.next_screen(centre, start, valid, taken)
        if point is None:
            break
        taken.append(point)
        observed.append((point, chats_truth(point)))
    changed = [sorted(k for k in centre if p[k] != centre[k]) for p in taken]
    assert changed[:3] == [[], ["train.padding"], ["train.padding", "train.torch_compile"]]
    assert changed[3] == ["train.compile_mode", *changed[2]]  # CUDA graphs, beside the compiled anchor
    assert changed[4] == ["model.attn_implementation", *changed[2]]  # flex attention, moved from the compiled anchor
    assert min(observed, key=lambda o: o[1])[0] == {
        **centre,
        "train.padding": "buckets",
        "train.torch_compile": "regional",
    }
