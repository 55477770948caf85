"""A Ctrl-C held across a call that must not be cut in half, and raised once the call is done.

Python raises KeyboardInterrupt between any two bytecodes of the main thread. A few calls leave something broken when
cut there: a store call between its write and its commit (its SQLite transaction stays open and every later write of
the command waits on its lock), or a fork-server start between connecting and sending its descriptors (the server
reads half a request, raises EOFError and dies, printing its traceback on the user's console).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def call(patience: int = 1) -> Iterator[None]:
    """Hold the first `patience` Ctrl-Cs that land within until the block is done, then raise the first; one more
    takes effect at once (a call that hangs stays interruptible by a user who insists). Main thread only: Python runs
    signal handlers there, and elsewhere nothing is held."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    pending = []

    def later(signum, frame) -> None:
        if len(pending) >= patience:  # one more than held: now
            signal.signal(signal.SIGINT, previous)
            previous(signum, frame)
        pending.append(frame)

    signal.signal(signal.SIGINT, later)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is later:
            signal.signal(signal.SIGINT, previous)
    if pending:
        previous(signal.SIGINT, pending[0])
