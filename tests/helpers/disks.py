"""A small disk of its own for one command: a tmpfs mounted in a user and mount namespace (`unshare`), so a test can
fill it, or run it out of inodes, without root and without touching the machine's disks. The mount lives as long as
the command; what the command left on it is listed before it goes."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.env import child_env

SCRIPT = """
set -e
mount -t tmpfs -o "$DISK_OPTIONS" tmpfs "$DISK"
if [ "$DISK_FILL" = 1 ]; then dd if=/dev/zero of="$DISK/fill" bs=4k >/dev/null 2>&1 || true; fi
cd "$WORKDIR"
set +e
"$PYTHON" -m "$@" >"$OUT/stdout" 2>"$OUT/stderr"
echo $? >"$OUT/rc"
cd "$DISK" && find . -mindepth 1 | sort >"$OUT/listing"
"""


@functools.cache
def can_mount() -> bool:
    """Whether this machine lets a process mount a tmpfs in a namespace of its own."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt || exit 1"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


@dataclass(frozen=True)
class DiskRun:
    returncode: int
    stdout: str
    stderr: str
    left: list[str]  # what the command left on the disk, relative to it


def run_on_small_disk(
    folder: Path, module: str, *args: str, size: str = "256k", inodes: int | None = None, fill: bool = True
) -> DiskRun:
    """`python -m MODULE ARGS` in `folder`, with a tmpfs of `size` (and `inodes`) at `folder/disk`, filled to the
    last byte first unless `fill` is False. The disk's path is in the environment as DISK for the arguments."""
    disk, out = folder / "disk", folder / "out"
    disk.mkdir(parents=True)
    out.mkdir()
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    env = child_env(
        DISK=str(disk),
        DISK_OPTIONS=options,
        DISK_FILL="1" if fill else "0",
        WORKDIR=str(folder),
        PYTHON=sys.executable,
        OUT=str(out),
    )
    command = ["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", SCRIPT, "disk", module, *args]
    subprocess.run(command, env=env, timeout=300, check=True)
    return DiskRun(
        returncode=int((out / "rc").read_text()),
        stdout=(out / "stdout").read_text(),
        stderr=(out / "stderr").read_text(),
        left=[line[2:] for line in (out / "listing").read_text().splitlines()],
    )
