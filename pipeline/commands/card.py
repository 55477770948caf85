"""Result card of a recorded sweep or study: JSON and Markdown with the device, versions, setting, the table with
its intervals, and the answer with its reproduce line; cards of several machines merge with
`python -m pipeline.report --cards a.json b.json`.

python -m pipeline.card                                    # the latest sweep or study
python -m pipeline.card --sweep 20261129-153045-d37c3b --out cards
python -m pipeline.card --study tiny-e8-cap0.6GiB-1a2b3c4d
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline import exits
from pipeline.commands.arguments import Parser
from pipeline.commands.report import not_recorded, refuse_bad_store, source_arguments


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m pipeline.card", description=__doc__.splitlines()[0])
    source_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("cards"), help="folder for <name>.json and <name>.md")
    args = parser.parse_args(argv)

    refuse_bad_store(args.tracking_uri)
    from pipeline.answer import results
    from pipeline.answer.card import build, write
    from pipeline.config.errors import ConfigError
    from pipeline.render.document import ReportError, find_parent
    from pipeline.tracking.runs import FilterValueError
    from pipeline.tracking.store import ExperimentNotFound, Tracker

    try:
        tracker = Tracker(args.tracking_uri, args.experiment, str(args.out / "artifacts"), create=False)
        parent = find_parent(tracker, args.sweep, args.study)
        card = build(results.read(tracker, parent.info.run_id))
    except ReportError as err:  # the sweep or study asked for is not recorded: the recorded ones named, as report does
        print(f"error: {not_recorded(tracker, args) or err}", file=sys.stderr)
        sys.exit(exits.BAD_INPUT)
    except (ConfigError, ExperimentNotFound) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(exits.BAD_INPUT)
    except FilterValueError as err:
        print(f"error: --sweep/--study: {err}; accepted: a sweep id or study name as printed", file=sys.stderr)
        sys.exit(exits.BAD_INPUT)
    json_path, md_path = write(card, args.out)
    print(card.markdown(), end="")
    print(f"card: {json_path} and {md_path}")
