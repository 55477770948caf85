"""What every entry point does around Hydra: validate the whole command line first, then hand over to `hydra.main`.

Bad input ends here with one line on stderr and exit code 2, before Hydra creates a folder or MLflow a run.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import hydra
from hydra._internal.utils import get_args_parser

from pipeline import exits
from pipeline.config.compose import CONF_DIR, precheck
from pipeline.config.errors import ConfigError
from pipeline.config.help import help_text
from pipeline.config.schema import register_configs
from pipeline.config.stores import check_stores
from pipeline.measure.estimate import long_cpu_job_warning


def _with_repeats(overrides: list[str], multirun: bool) -> tuple[list[str], bool]:
    """`repeats=N` becomes a leading `repeat=0,..,N-1` sweep: Hydra's basic sweeper makes the first override the
    outer loop, so every config runs once before any runs twice (interleaved repeats)."""
    repeats = [o for o in overrides if o.split("=", 1)[0] == "repeats"]
    if not repeats or any(o.split("=", 1)[0] == "repeat" for o in overrides):
        return overrides, multirun
    value = repeats[-1].split("=", 1)[1]
    if not value.isdigit() or int(value) <= 1:
        return overrides, multirun
    return [f"repeat={','.join(str(i) for i in range(int(value)))}", *overrides], True


def _refuse(err: ConfigError) -> NoReturn:
    """Bad input: its one line, exit code 2."""
    print(f"error: {err}", file=sys.stderr)
    sys.exit(exits.BAD_INPUT)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_entry(
    prog: str,
    config_name: str,
    task: Callable[[Any], Any],
    doc: str,
    argv: list[str] | None = None,
    extra_check: Callable[[Any], None] | None = None,
    base_overrides: list[str] | None = None,
    sweeps: bool = True,
) -> None:
    """Precheck `argv` (default sys.argv[1:]) for `config_name` (and `extra_check` on every job's config), then run
    `task` through hydra.main, as `python -m prog`. `base_overrides` go first unless the command line sets the same key. `doc` (the entry
    module's docstring: a summary, a blank line, example commands) is the start of `--help`. `sweeps`: whether the
    entry takes -m (a study searches its own space: it does not)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    register_configs()
    args, _ = get_args_parser().parse_known_args(argv)
    if args.help:
        print(help_text(prog, doc, sweeps))
        sys.exit(exits.OK)
    informational = args.hydra_help or args.cfg or args.info or args.shell_completion
    given = {o.split("=", 1)[0].lstrip("+~") for o in args.overrides}
    base = [o for o in base_overrides or [] if o.split("=", 1)[0] not in given]
    overrides, multirun = _with_repeats([*base, *args.overrides], bool(args.multirun))
    if multirun and not sweeps:
        _refuse(
            ConfigError(
                "-m",
                f"{prog} runs one study, which searches optimize.space itself; accepted: the command without -m "
                "and without repeats, once per study",
            )
        )
    if informational:
        argv = [*[a for a in argv if a not in args.overrides], *overrides]
    else:
        try:
            configs = precheck(args.config_name or config_name, overrides, multirun)
            for root, uri in dict.fromkeys((c.paths.root, c.tracking.uri) for c in configs):
                check_stores(root, uri)
            for cfg in configs:
                if extra_check is not None:
                    extra_check(cfg)
        except ConfigError as err:
            _refuse(err)
        warning = long_cpu_job_warning(max(configs, key=lambda c: c.train.steps * c.batch.effective))
        if warning:
            print(warning, file=sys.stderr, flush=True)
        rest = [a for a in argv if a not in args.overrides]
        argv = [*rest, *(["--multirun"] if multirun and not args.multirun else []), *overrides]
    signal.signal(signal.SIGTERM, _terminate)
    sys.argv = [sys.argv[0], *argv]
    exits.Outcome.reset()

    @functools.wraps(task)
    def guarded(cfg: Any) -> Any:
        with exits.guard_stores(exits.store_uris(cfg)):
            return task(cfg)

    main = hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")(guarded)
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: runs in progress were marked KILLED", file=sys.stderr)
        sys.exit(exits.INTERRUPTED)
    sys.exit(exits.Outcome.code)
