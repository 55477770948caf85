"""The study's answer: a table of every trial, and the best feasible config as a Hydra override line and as
SFTConfig keyword arguments; or, when nothing fits, the smallest predicted need."""

from __future__ import annotations

from omegaconf import OmegaConf
from optuna.trial import TrialState

from pipeline.build.sft_args import sft_kwargs
from pipeline.reporting.table import comparison_rows, format_table, markdown_table, num
from pipeline.search import workers
from pipeline.search.predictor import GIB
from pipeline.search.space import SPLIT_KEY, apply
from pipeline.tracking.store import STATUS_TAG


def trial_rows(study) -> list[dict]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        if "label" not in t.user_attrs:
            continue  # duplicates closed before evaluation
        ci = t.user_attrs.get("ci") or [None, None]
        rows.append(
            {
                "trial": t.number,
                "config": t.user_attrs["label"],
                "state": t.state.name.lower(),
                "status": t.user_attrs.get("status", t.state.name.lower()),
                "median": t.user_attrs.get("step_time_median_s"),
                "low": ci[0],
                "high": ci[1],
                "peak_gib": t.user_attrs.get("peak_gib"),
                "predicted_gib": t.user_attrs.get("predicted_gib"),
                "feasible": t.user_attrs.get("feasible"),
                "reason": t.user_attrs.get("reason", ""),
                "gpu_seconds": t.user_attrs.get("gpu_seconds", 0.0),
                "predictor_error": t.user_attrs.get("predictor_error"),
            }
        )
    return rows


def format_trials(rows: list[dict]) -> str:
    header = ["#", "config", "status", "step s (median [95% CI])", "peak GiB", "predicted GiB", "fits", "note"]
    lines = [header]
    for r in sorted(rows, key=lambda r: (r["median"] is None, r["median"] or 0.0)):
        step = "-" if r["median"] is None else f"{r['median']:.4f} [{num(r['low'], '.4f')}, {num(r['high'], '.4f')}]"
        fits = {True: "yes", False: "no", None: "-"}[r["feasible"]]
        if r["status"] == "skipped":
            fits = "no (predicted)"
        lines.append(
            [
                str(r["trial"]),
                r["config"],
                r["status"],
                step,
                num(r["peak_gib"], ".3f"),
                num(r["predicted_gib"], ".3f"),
                fits,
                r["reason"][:60],
            ]
        )
    return markdown_table(lines)


def best_trial(study):
    feasible = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("feasible") and t.user_attrs.get("step_time_median_s") is not None
    ]
    return min(feasible, key=lambda t: t.user_attrs["step_time_median_s"]) if feasible else None


def finish(driver, parent: str, status: str) -> dict:
    """Close the study's loose ends, print and log the answer; return it."""
    study, tracker = driver.study, driver.tracker
    workers.release_own(study)  # interrupted mid-trial: not decided, may run again
    rows = trial_rows(study)
    table = format_trials(rows)
    best = best_trial(study)
    errors = [abs(r["predictor_error"]) for r in rows if r["predictor_error"] is not None]
    gpu_seconds = sum(r["gpu_seconds"] or 0.0 for r in rows) + study.user_attrs.get("calibration", {}).get(
        "gpu_seconds", 0
    )
    answer: dict = {
        "study": study.study_name,
        "table": table,
        "rows": rows,
        "gpu_seconds": gpu_seconds,
        "predictor_error_max": max(errors) if errors else None,
        "predictor_error_mean": sum(errors) / len(errors) if errors else None,
    }
    from pipeline.reporting.report import collect

    measured, _ = collect(tracker, tracker.run(parent))
    ranked = comparison_rows([r for r in measured if r["summary"].get("step_time_median_s")])
    comparison = format_table(ranked)
    ties = {r["config"].split(": ", 1)[-1] for r in ranked if r.get("rank") == "tie"}
    lines = [
        "",
        table,
        "",
        "measured trials (rank among those that fit; loss deviation from the first trial):",
        comparison,
        "",
    ]
    if best is not None:
        cfg = apply(driver.cfg, _candidate(best))
        micro, accumulation = (int(x) for x in cfg.batch.split.split("x"))
        dtype = cfg.train.dtype if cfg.train.dtype != "auto" else (driver.placement_dtype or "auto")
        kwargs = sft_kwargs(
            "out", micro, accumulation, OmegaConf.to_container(cfg.train, resolve=True), dtype, driver.device or "cuda"
        )
        kwargs = {k: v for k, v in kwargs.items() if k not in ("output_dir", "report_to", "disable_tqdm")}
        override = " ".join(
            best.user_attrs["overrides"] + ([f"mem_cap={driver.cfg.mem_cap}"] if driver.cfg.mem_cap else [])
        )
        answer.update(
            best=best.user_attrs["label"],
            override=override,
            sft_kwargs=kwargs,
            step_time_median_s=best.user_attrs["step_time_median_s"],
            peak_gib=best.user_attrs["peak_gib"],
        )
        lines += [
            f"best feasible: {best.user_attrs['label']}  ({best.user_attrs['step_time_median_s']:.4f} s/step, "
            f"peak {best.user_attrs['peak_gib']:.2f} GiB of {driver.cap / GIB:.2f} GiB)",
            *(
                [f"  tied with (overlapping 95% intervals): {', '.join(sorted(ties - {best.user_attrs['label']}))}"]
                if len(ties) > 1
                else []
            ),
            f"  python -m pipeline.train {override}",
            "  SFTConfig(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")",
        ]
    else:
        needs = [r["predicted_gib"] for r in rows if r["predicted_gib"] is not None]
        measured = [r["peak_gib"] for r in rows if r["peak_gib"]]
        smallest = min(needs + measured) if needs or measured else None
        message = f"nothing fits under {driver.cap / GIB:.2f} GiB"
        if smallest is not None:
            message += f": the smallest need is {smallest:.2f} GiB; raise mem_cap or widen optimize.space"
        answer["message"] = message
        lines.append(message)
    if answer["predictor_error_max"] is not None:
        lines.append(
            f"memory predictor error: mean {100 * answer['predictor_error_mean']:.1f}%, max "
            f"{100 * answer['predictor_error_max']:.1f}% of measured peak over {len(errors)} trials"
        )
    lines.append(f"device time used by jobs (probes included): {gpu_seconds:.0f} s")
    print("\n".join(lines), flush=True)
    tracker.artifact_text(parent, "answer.md", "\n".join(lines) + "\n")
    metrics = {"trials_decided": len(rows), "gpu_seconds": gpu_seconds}
    if best is not None:
        metrics.update(best_step_time_median_s=answer["step_time_median_s"], best_peak_gib=answer["peak_gib"])
        tracker.tags(parent, {"answer": answer["override"]})
    if answer["predictor_error_max"] is not None:
        metrics.update(
            predictor_error_max=answer["predictor_error_max"], predictor_error_mean=answer["predictor_error_mean"]
        )
    tracker.metrics(parent, metrics)
    tracker.tags(parent, {STATUS_TAG: "done" if status == "FINISHED" else "interrupted"})
    tracker.end(parent, status)
    return answer


def _candidate(trial):
    from pipeline.search.space import Candidate

    params = dict(trial.params)
    split = params.pop(SPLIT_KEY)
    return Candidate(((SPLIT_KEY, split), *params.items()))
