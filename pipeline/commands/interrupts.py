"""Ctrl-C and SIGTERM in a command: what the first does (it stops the command), what one more does while it stops,
and how an error a library raised where the interrupt struck is read as that interrupt."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from typing import Any

from pipeline import exits


class Interrupts:
    """Ctrl-C (SIGINT) and SIGTERM. The first stops the command: its job is killed, its runs end KILLED, exit code
    130 (`run_hydra`). One more while it does so is said and let be: breaking off that clean-up would leave runs
    open and print a traceback from wherever it struck. A third stops at once, and leaves the runs it did not end to
    the next command's clean-up (`tracking.runs.end_orphans`). Once the command is ending anyway (its work done, its
    exit handlers ending runs), the first already counts as the one more.

    The KeyboardInterrupt strikes wherever the command is, inside a library too: OmegaConf's clean-up in a `finally`
    then fails on the state it left half made (`'NoneType' object has no attribute '_invalidate_flags_cache'`) and
    that error replaces the interrupt. `signalled` says a signal came first, so such an error is read as the
    interrupt it follows (`_refuse`, `interrupted`)."""

    stopping = False
    warned = False
    signalled = False
    last = signal.SIGINT
    unraisable_before: Any = None  # the hook that says what else Python ignored
    in_hook = False

    @classmethod
    def install(cls) -> None:
        cls.stopping = cls.warned = cls.signalled = False
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, cls.heard)
        if sys.unraisablehook != cls.unraisable:
            cls.unraisable_before, sys.unraisablehook = sys.unraisablehook, cls.unraisable
        atexit.register(cls.ignore)  # the first exit handler registered runs last

    @classmethod
    def unraisable(cls, unraisable: Any) -> None:
        """The interrupt raised where Python ignores what is raised (a garbage collector's callback, SQLAlchemy's
        among them, or a `__del__`): Python printed `Exception ignored in ...` and the command went on to its end as
        if it had never been interrupted. It is heard again, as the first, once that callback is done."""
        if not (cls.stopping and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            cls.unraisable_before(unraisable)
            return
        cls.stopping, cls.in_hook = False, True
        # signalled from here, it would be raised here and ignored again: a thread signals once the hook is done
        threading.Thread(target=cls._again, name="interrupt-again", daemon=True).start()
        cls.in_hook = False

    @classmethod
    def _again(cls) -> None:
        while cls.in_hook:
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident, cls.last)

    @staticmethod
    def ignore() -> None:
        """Once the exit handlers have ended the runs: the interpreter's shutdown gives the signals their default
        action back, and one then would kill the command (exit status -2 in place of its own)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)

    @classmethod
    def heard(cls, signum: int, frame: Any) -> None:
        cls.signalled, cls.last = True, signum
        if not cls.stopping:
            cls.stopping = True
            raise KeyboardInterrupt(f"signal {signum}")
        if not cls.warned:
            cls.warned = True
            # a raw write: the signal may have struck inside a print to stderr, whose buffer does not re-enter
            os.write(2, b"interrupted again: ending the runs in progress first; once more stops at once\n")
            return
        os._exit(exits.INTERRUPTED)


def terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def interrupted(err: BaseException) -> bool:
    """Whether `err` is the interrupt, or an error of a library it struck in (`Interrupts`)."""
    return isinstance(err, KeyboardInterrupt) or (Interrupts.signalled and isinstance(err, Exception))
