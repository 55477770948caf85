"""A real Jupyter kernel (ipykernel, started by jupyter_client) running code as a notebook cell would."""

from __future__ import annotations

import contextlib
import queue
from pathlib import Path

import psutil
from jupyter_client.manager import start_new_kernel

from tests.helpers.env import child_env


@contextlib.contextmanager
def kernel(cwd: Path, **env: str):
    """A started python3 kernel in `cwd` (its environment the tool's processes get, with `env` set) and its client;
    shut down at the end. `client.manager` is its manager (to interrupt it, to find its process)."""
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cwd), env=child_env(**env))
    client.manager = manager
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def kernel_process(client) -> psutil.Process:
    """The kernel's own process."""
    return psutil.Process(client.manager.provisioner.process.pid)


def run_cell(client, code: str, timeout: float) -> tuple[str, str | None]:
    """Execute `code` as one cell; (what it printed on stdout, the error's `ename: evalue` or None)."""
    return cell_output(client, client.execute(code), timeout)


def cell_output(client, msg_id: str, timeout: float) -> tuple[str, str | None]:
    """What the cell `msg_id` (started with `client.execute`) printed on stdout, and its error's `ename: evalue` or
    None, once it has ended."""
    out, error = [], None
    while True:
        try:
            msg = client.get_iopub_msg(timeout=timeout)
        except queue.Empty as empty:
            raise AssertionError(f"the kernel said nothing for {timeout:g} s") from empty
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            out.append(content["text"])
        elif kind == "error":
            error = f"{content['ename']}: {content['evalue']}"
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out), error


def cell_running(client, msg_id: str):
    """A check for `wait_until(..., alive=)`: True while the kernel lives and the cell `msg_id` has not replied. A
    cell that ended in an error fails the wait with that error at once, rather than the wait running out its time."""

    def running() -> bool:
        if not client.manager.is_alive():
            return False
        while True:
            try:
                reply = client.get_shell_msg(timeout=0)
            except queue.Empty:
                return True
            if reply["parent_header"].get("msg_id") == msg_id:
                content = reply["content"]
                assert content["status"] == "ok", f"the cell ended: {content.get('ename')}: {content.get('evalue')}"
                return False

    return running
