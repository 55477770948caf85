"""Report over a recorded sweep or study: Markdown and HTML with plots, also logged on its MLflow run.

python -m pipeline.report                                   # the latest sweep or study
python -m pipeline.report --sweep 20261129-153045-d37c3b
python -m pipeline.report --study tiny-e8-cap0.6GiB-1a2b3c4d
python -m pipeline.report --cards t4.json h200.json          # result cards of several machines, one table by GPU
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from pipeline import exits
from pipeline.commands.arguments import Parser, level

DEFAULT_URI = "sqlite:///mlruns/mlflow.db"


def source_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that pick a recorded sweep or study and its store (`pipeline.report`, `pipeline.card`)."""
    parser.add_argument("--sweep", help="sweep id (tag sweep_id); default: the latest sweep or study")
    parser.add_argument("--study", help="study name (tag study), as printed by pipeline.optimize")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI))
    parser.add_argument("--experiment", default="batch-split")


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m pipeline.report", description=__doc__.splitlines()[0])
    source_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("mlruns/reports"), help="folder for the reports")
    parser.add_argument(
        "--confidence", type=level, help="of the intervals that rank configs (default: the level the jobs ran with)"
    )
    parser.add_argument("--cards", nargs="+", type=Path, help="result cards (python -m pipeline.card) to merge")
    args = parser.parse_args(argv)
    if args.cards:
        from pipeline.answer.card_merge import merge_cards

        sys.exit(merge_cards(args.cards, args.out))

    refuse_bad_store(args.tracking_uri)
    from pipeline.config.errors import ConfigError
    from pipeline.jobs.task import clean_up
    from pipeline.render.document import ReportError, write_report
    from pipeline.tracking.runs import FilterValueError
    from pipeline.tracking.store import ExperimentNotFound, Tracker

    try:
        tracker = Tracker(args.tracking_uri, args.experiment, str(args.out.parent / "artifacts"), create=False)
        clean_up(tracker)  # runs a killed command left RUNNING are ended before they are reported
        out = write_report(tracker, args.sweep, args.out, study=args.study, confidence=args.confidence)
    except ConfigError as err:
        _refuse(str(err))
    except ExperimentNotFound as err:
        if err.experiments is None:
            _refuse(
                f"--tracking-uri: {err}; accepted: the store a sweep or study recorded into ({DEFAULT_URI}, "
                "relative to the folder it ran in)"
            )
        accepted = ", ".join(err.experiments) or "none yet: a sweep or study makes batch-split"
        _refuse(f"--experiment: {err}; accepted: an experiment recorded there: {accepted}")
    except ReportError as err:
        _refuse(not_recorded(tracker, args) or f"{_asked(args)}: {err}")
    except FilterValueError as err:
        _refuse(f"--sweep/--study: {err}; accepted: a sweep id or study name as printed")
    print(f"report: {out / 'report.md'} and {out / 'report.html'} (also logged on its MLflow parent run)")


def refuse_bad_store(uri: str) -> None:
    """A store the reading commands cannot read (`--tracking-uri`) refused in one line, before they import MLflow,
    the plots and the results (seconds)."""
    from pipeline.config.errors import ConfigError
    from pipeline.config.store_checks import check_store

    try:
        check_store("--tracking-uri", uri)
    except ConfigError as err:
        _refuse(str(err))


def _refuse(line: str) -> NoReturn:
    print(f"error: {line}", file=sys.stderr)
    sys.exit(exits.BAD_INPUT)


def _asked(args: argparse.Namespace) -> str:
    return "--sweep" if args.sweep else "--study" if args.study else "--tracking-uri"


def not_recorded(tracker, args: argparse.Namespace) -> str | None:
    """The sweep or study asked for is not in the store, which has others: named, newest first. None where the store
    has none of that kind (the report's own line then says how to record one)."""
    from pipeline.records import RunKind
    from pipeline.tracking import runs

    if not (args.sweep or args.study):
        return None
    kind, tag = (RunKind.SWEEP, runs.SWEEP) if args.sweep else (RunKind.STUDY, runs.STUDY)
    names = list(dict.fromkeys(r.data.tags.get(tag) for r in runs.find_parents(tracker, kind, limit=50)))[:5]
    if not names:
        return None
    what, asked = (f"sweep '{args.sweep}'", "--sweep") if args.sweep else (f"study '{args.study}'", "--study")
    return f"{asked}: no record of {what} in {tracker.uri}; accepted: one recorded there (newest first): " + (
        ", ".join(names)
    )
