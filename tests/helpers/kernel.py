"""A real Jupyter kernel (ipykernel, started by jupyter_client) running code as a notebook cell would."""

from __future__ import annotations

import contextlib
import queue
from pathlib import Path

from jupyter_client.manager import start_new_kernel


@contextlib.contextmanager
def kernel(cwd: Path):
    """A started python3 kernel in `cwd` and its client; shut down at the end."""
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cwd))
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_cell(client, code: str, timeout: float) -> tuple[str, str | None]:
    """Execute `code` as one cell; (what it printed on stdout, the error's `ename: evalue` or None)."""
    msg_id = client.execute(code)
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
