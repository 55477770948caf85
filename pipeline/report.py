"""Report over a recorded sweep: Markdown and HTML with plots, also logged on the sweep's MLflow run.

python -m pipeline.report                      # the latest sweep
python -m pipeline.report --sweep 20261129-153045-d37c3b
make report
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_URI = "sqlite:///mlruns/mlflow.db"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.report", description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", help="sweep id (tag sweep_id); default: the latest sweep or study")
    parser.add_argument("--study", help="study name (tag study), as printed by pipeline.optimize")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI))
    parser.add_argument("--experiment", default="batch-split")
    parser.add_argument("--out", type=Path, default=Path("mlruns/reports"), help="folder for the reports")
    args = parser.parse_args(argv)

    from pipeline.reporting.report import ReportError, write_report
    from pipeline.tracking.store import Tracker

    tracker = Tracker(args.tracking_uri, args.experiment, str(args.out.parent / "artifacts"))
    try:
        out = write_report(tracker, args.sweep, args.out, study=args.study)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"report: {out / 'report.md'} and {out / 'report.html'} (also logged on its MLflow parent run)")


if __name__ == "__main__":
    main()
