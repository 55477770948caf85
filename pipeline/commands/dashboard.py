"""optuna-dashboard over the project's studies, its best trial the fastest config that fits (`make dashboard`).

python -m pipeline.dashboard                                    # mlruns/optuna.db on http://127.0.0.1:8080
python -m pipeline.dashboard --storage postgresql+psycopg://user@db-host/optuna --port 8081
"""

from __future__ import annotations

import sys

from pipeline import exits
from pipeline.commands.arguments import Parser

DEFAULT_STORAGE = "sqlite:///mlruns/optuna.db"


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m pipeline.dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="the studies' Optuna storage (optimize.storage)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)

    from pipeline.config.errors import ConfigError
    from pipeline.config.store_checks import check_store

    try:
        check_store("--storage", args.storage)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(exits.BAD_INPUT)
    try:
        from wsgiref.simple_server import make_server

        import optuna_dashboard
        from optuna.storages import RDBStorage

        from pipeline.answer.study_pages import FeasibleBest
        from pipeline.tracking.store import store_lock
    except ImportError as err:
        print(f"error: {err.name} is not installed: pip install -e '.[dev]' (make install)", file=sys.stderr)
        sys.exit(exits.FAILED)
    with store_lock(args.storage):  # a fresh store's tables, made by whoever gets there first: never two at once
        storage = RDBStorage(args.storage)
    app = FeasibleBest(optuna_dashboard.wsgi(storage), storage)
    with make_server(args.host, args.port, app) as server:
        print(f"optuna-dashboard: http://{args.host}:{args.port}/dashboard/ (Ctrl-C stops it)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            sys.exit(exits.INTERRUPTED)
