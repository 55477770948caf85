"""Who owns a run, a trial or a job folder, and whether that owner is still alive.

An owner is a process on a host: `host:pid:start`, the start time telling a process from a later one that reused its
pid. On the same host the process table answers; from another host it cannot, so owners there also beat a heartbeat
(a timestamp they refresh while they work) and are taken for dead only once it is older than a grace period, never
while they still beat.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from dataclasses import dataclass

import psutil

HOST_ENV = "BATCH_SPLIT_HOST"  # overrides the host name (a test plays a second machine with it)
HEARTBEAT_S = float(os.environ.get("BATCH_SPLIT_HEARTBEAT_S", 15.0))  # how often a live owner refreshes it
GRACE_S = float(os.environ.get("BATCH_SPLIT_GRACE_S", 120.0))  # a heartbeat older than this: its owner is gone


def host() -> str:
    return os.environ.get(HOST_ENV) or socket.gethostname()


@functools.cache
def _start_time(pid: int) -> float:
    return round(psutil.Process(pid).create_time(), 2)


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    started: float

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started:.2f}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        try:
            name, pid, started = text.rsplit(":", 2)
            return cls(name, int(pid), float(started))
        except ValueError:
            return None

    @classmethod
    def current(cls) -> Owner:
        return cls(host(), os.getpid(), _start_time(os.getpid()))

    def alive(self, heartbeat: float | None = None, now: float | None = None) -> bool:
        """On this host: the process exists, is no zombie, and started when this owner did. Elsewhere: its
        heartbeat is fresh (with no heartbeat to go by, it is taken for alive)."""
        if self.host != host():
            return heartbeat is None or (now or time.time()) - heartbeat < GRACE_S
        try:
            process = psutil.Process(self.pid)
            return process.status() != psutil.STATUS_ZOMBIE and abs(process.create_time() - self.started) < 1.0
        except psutil.NoSuchProcess:
            return False
