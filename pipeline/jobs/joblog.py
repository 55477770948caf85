"""A job's log (`job.log` in its work folder): everything its process prints, kept off the console and recorded as an
artifact of its run whatever happens to it.

The job's standard output and error go there at the file descriptors, so what torch's C++ side (TORCH_WARN), Triton
and the compile workers write lands there too: a forked job points them there itself, first thing (`redirect`: the
fork server's own stay on the console), a `subprocess` or `torchrun` job is started with them there (`runner.start`;
a torchrun job's log holds rank 0's output, each rank's is kept in `ranks/` as well). The file is written as it
goes: a job that crashes, is killed or runs out of memory leaves every line it wrote. The console shows it as it
grows with `launcher.verbose` (`follow`), and the last lines of a job that died without a word of its own (`tail`).
Nothing here imports torch.
"""

from __future__ import annotations

import codecs
import contextlib
import faulthandler
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

FOLLOW_S = 0.2  # how often the console's copy catches up
TAIL_BYTES = 64 * 1024
TAIL_WIDTH = 240  # characters of a line of the tail (a crash's list of extension modules is one line of thousands)


def redirect(path: Path) -> bool:
    """In a forked job, before anything else: its standard output and error appended to `path`. False, with nothing
    changed, where its folder is gone: the command that started the job removed it (interrupted while the job was
    forked), and the job has nothing left to do."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()  # what the fork server held back goes where it was meant to
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except FileNotFoundError:
        return False
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return True


def steady_streams() -> None:
    """In every job process: each line printed reaches the log at once (a crash loses no line held in a buffer), and
    a crash (segmentation fault, abort) writes the Python stack it struck in (its thread's: the others are waiting)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.reconfigure(line_buffering=True)
    with contextlib.suppress(AttributeError, OSError, ValueError, RuntimeError):
        faulthandler.enable(all_threads=False)


@contextlib.contextmanager
def follow(path: Path, stream: TextIO) -> Iterator[None]:
    """Copy what the job writes to `path` onto `stream` as it comes, until the block ends (its process has ended:
    what it wrote is all in the file, and the rest is copied then)."""
    stop = threading.Event()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    at = 0

    def catch_up() -> None:
        nonlocal at
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as log:
            log.seek(at)
            while chunk := log.read(1 << 16):
                at += len(chunk)
                stream.write(decoder.decode(chunk))
        stream.flush()

    def run() -> None:
        with contextlib.suppress(OSError, ValueError):  # an output gone: the command's own end says so
            while not stop.wait(FOLLOW_S):
                catch_up()

    thread = threading.Thread(target=run, name="job-log", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        catch_up()
        stream.write(decoder.decode(b"", final=True))


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last `lines` lines of the log that are not blank, each cut to TAIL_WIDTH (none where it is missing)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    said = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return [line if len(line) <= TAIL_WIDTH else line[: TAIL_WIDTH - 1] + "…" for line in said[-lines:]]
