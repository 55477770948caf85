"""The example outputs of the README and the docs pages, from real runs on this machine (`make docs-examples`).

A fenced `console` block holds commands (`$ ...`) with the output each printed, a `pycon` block a Python session
(`>>> `, `... `) with its output, and a `python` block a script. A block under `<!-- example: NAME -->` is written
by this script: its commands run as a user types them in the repository's root, the tiny model on the CPU, and the
lines EXAMPLES keeps of each command's output replace what the block showed (`...` where lines were left out). A
page's blocks run in order in one fresh folder, so `make ui` finds the sweep that ran above it. tests/test_docs.py
runs the README's and Getting started's commands with the same folder and runner and checks the output's form.

    python docs/examples.py              # every example, then the pages rewritten
    python docs/examples.py sweep ui     # only those (and the examples they need run first)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- example: ([\w-]+) -->$")
FENCE = re.compile(r"^```(\w*)\s*$")
RUNNABLE = ("console", "pycon", "python")
OMITTED = "..."
# what the folder a page runs in does not take from the repository: the installed state (.venv) and the stores
NOT_LINKED = {".git", ".venv", "pyproject.toml", "constraints.txt", "mlruns", "outputs", "multirun", "site"}


@dataclass(frozen=True)
class Example:
    """How an example runs and what its block keeps of the output."""

    keep: tuple[str, ...] = ()  # regexes of the output lines shown (every line where empty)
    until: str | None = None  # a server: stopped once a line matches this, or after first_s
    first_s: float = 90
    needs: tuple[str, ...] = ()  # one of these must have run in the page's folder first (else the first is run)
    files: tuple[tuple[str, str], ...] = ()  # files its commands read: (name, text)
    exit_codes: tuple[int, ...] = (0,)  # how each of its commands may end


MAKE = r"^\.venv/bin/python -m "  # the command a make target runs, which make prints first
SWEEP = (r"^\[sweep\] \S+: \d+ jobs", r"^\|", r"^Lowest median")
# a sweep's answer: its fastest and claim, then (a winner only) its command and script
ANSWER = (
    r"^Fastest: ",
    r"^  (\S+ \S+: \d|no speed-up)",
    r"^winner: ",
    r"^  python -m pipeline\.train ",
    r"^  script: ",
)
STUDY = (r"^\[study\] \S+: \d+ valid configs", r"^best feasible: ", r"^  python -m pipeline\.train ")
CLAIM = (r"^  (\d+\.\d+x the|no speed-up)", r"^  what each knob bought", r"^    \S+=\S+ \(from ")
JOB_ENDS = r"^\[job\] (probe|trial) .*: (ok|over-cap|pruned|oom|failed|skipped)\b"  # not its start
BROKEN_JSONL = '{"text": "a first record"}\n{"text": "a second record"}\n{"text": "a third, cut\n'

RECORDS = ("sweep", "demo", "study-cpu", "study-fastest")  # what leaves runs for `make ui` and `make report`

EXAMPLES: dict[str, Example] = {
    "sweep": Example(keep=(*SWEEP, r"^\[sweep\] \d+ of \d+ jobs")),
    "demo": Example(keep=(MAKE, r"^\[sweep\] \S+: \d+ jobs", r"^\|", *ANSWER[:2], r"^\[sweep\] \d+ of \d+ jobs")),
    "sweep-8": Example(keep=(r"^\[sweep\] \S+: \d+ jobs", r"^\|", r"^\[sweep\] every", *ANSWER, r"^\[sweep\] \d+ of")),
    "bad-input": Example(files=(("chats.jsonl", BROKEN_JSONL),), exit_codes=(2,)),
    "study-cpu": Example(
        keep=(*STUDY, JOB_ENDS, r"^\|", r"^confirmation round: ", r"^  \S.*\(95%, ")
        + CLAIM
        + (r"^memory predictor error", r"^device time used"),
        exit_codes=(0, 3),
    ),
    "study-fastest": Example(keep=(MAKE, *STUDY, *CLAIM, r"^device time used"), exit_codes=(0, 3)),
    "export": Example(),
    "world-sizes": Example(keep=(r"^\[sweep\] left out", r"^\[sweep\] \S+: \d+ jobs", r"^\|")),
    "report": Example(keep=(MAKE, r"^report: "), needs=RECORDS),
    "ui": Example(keep=(MAKE, r"^ui: "), until=r"^ui: ", needs=RECORDS),
    "cards": Example(keep=(r"^Every card", r"^\|", r"^- ", r"^merged: ")),
    "api": Example(keep=(r"^(?!\[(job|sweep)\] |W\d{4} ).*",)),  # not the jobs' lines, nor torch's warnings
}


@dataclass
class Command:
    """One command of a block as typed (a Python statement, or a whole script), and the output lines shown."""

    text: str
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    """A fenced block of a page that runs: `first` and `last` are the line indexes of its fences."""

    page: Path
    lang: str
    first: int
    last: int
    example: str | None
    commands: list[Command]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.first + 1}"


def blocks(page: Path) -> list[Block]:
    """The page's runnable blocks (`console`, `pycon`, `python`), each with the example that writes it, if any."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, example, i = [], None, 0
    while i < len(lines):
        marker, fence = MARKER.match(lines[i]), FENCE.match(lines[i])
        if marker:
            example = marker[1]
        elif fence and fence[1]:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence[1] in RUNNABLE:
                commands = PARSERS[fence[1]](lines[i + 1 : end])
                found.append(Block(page, fence[1], i, end, example, commands))
            example, i = None, end
        elif fence:  # a block without a language: shown, never run
            example, i = None, next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        elif lines[i].strip() and not lines[i].startswith("<!--"):
            example = None  # a marker belongs to the block right under it
        i += 1
    return found


def _console(lines: list[str]) -> list[Command]:
    commands: list[Command] = []
    for line in lines:
        if line.startswith("$ "):
            commands.append(Command(line[2:]))
        elif commands and commands[-1].text.endswith("\\") and not commands[-1].shown:
            commands[-1].text += "\n" + line
        elif commands:
            commands[-1].shown.append(line)
    return commands


def _pycon(lines: list[str]) -> list[Command]:
    commands: list[Command] = []
    for line in lines:
        if line.startswith(">>> "):
            commands.append(Command(line[4:]))
        elif line.startswith("... ") and commands and not commands[-1].shown:
            commands[-1].text += "\n" + line[4:]
        elif commands:
            commands[-1].shown.append(line)
    return commands


def _python(lines: list[str]) -> list[Command]:
    return [Command("\n".join(lines))]


PARSERS = {"console": _console, "pycon": _pycon, "python": _python}


# ---- running -----------------------------------------------------------------------------------------------------
def prepare(folder: Path) -> Path:
    """`folder` as the repository's root looks to a user who has run `make install`: the repository's files linked,
    `.venv` the installed one, and `.venv/.installed` newer than the (stub) files make checks it against, so a make
    target never installs again from here (that would point the installed package at this folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED and not entry.name.startswith("."):
            (folder / entry.name).symlink_to(entry)
    for stub in ("pyproject.toml", "constraints.txt"):
        (folder / stub).write_text("# the installed state is .venv's; this stub only keeps make from installing\n")
        os.utime(folder / stub, (0, 0))
    venv = folder / ".venv"
    venv.mkdir()
    for entry in (REPO / ".venv").resolve().iterdir():
        if not entry.name.startswith("."):
            (venv / entry.name).symlink_to(entry)
    (venv / ".installed").touch()
    return folder


def environment(folder: Path, **extra: str) -> dict[str, str]:
    """A user's shell in `folder`: its `.venv/bin` first on PATH, this checkout's code importable, no MLflow URI, and
    nothing of an enclosing make (`make docs-examples ARGS=...` would pass ARGS on to the pages' make commands)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO), **extra}
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS"):
        env.pop(name, None)
    env["PATH"] = f"{folder / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("VIRTUAL_ENV", None)
    return env


SESSION = """
import code, json, sys
console = code.InteractiveConsole()
for source in json.loads(sys.argv[1]):
    print(SEPARATOR, flush=True)
    more = False
    for line in source.splitlines():
        more = console.push(line)
    if more:
        console.push("")
"""
SEPARATOR = "<<< docs.examples: next statement >>>"


@dataclass
class Ran:
    """What a block's commands printed, one list of lines per command, and how the last of them ended."""

    outputs: list[list[str]]
    returncode: int | None  # None: stopped on purpose (a server), after it printed what was waited for


def run_block(block: Block, folder: Path, env: dict[str, str], timeout: float = 1800) -> Ran:
    """Run a block's commands in `folder`, in order, as typed (a console block's through bash, a Python session in
    one interpreter, a script as a file); stop at the first command that fails."""
    example = EXAMPLES.get(block.example or "", Example())
    for name, text in example.files:
        (folder / name).write_text(text, encoding="utf-8")
    if block.lang == "python":
        script = folder / f"example_{block.first + 1}.py"
        script.write_text(block.commands[0].text + "\n", encoding="utf-8")
        code, lines = _run([sys.executable, script.name], folder, env, timeout)
        return Ran([lines], code)
    if block.lang == "pycon":
        session = SESSION.replace("SEPARATOR", repr(SEPARATOR))
        argv = [sys.executable, "-c", session, json.dumps([c.text for c in block.commands])]
        code, lines = _run(argv, folder, env, timeout)
        failed = any(line.startswith("Traceback (most recent call last)") for line in lines)
        return Ran(_split(lines), 1 if failed else code)
    outputs, code = [], 0
    for command in block.commands:
        until = example.until if command is block.commands[-1] else None
        code, lines = _run(["bash", "-c", command.text], folder, env, example.first_s if until else timeout, until)
        outputs.append(lines)
        if code is not None and code not in example.exit_codes:
            break
    return Ran(outputs, code)


def _split(lines: list[str]) -> list[list[str]]:
    parts: list[list[str]] = []
    for line in lines:
        if line == SEPARATOR:
            parts.append([])
        elif parts:
            parts[-1].append(line)
    return parts


def _run(
    argv: list[str], folder: Path, env: dict, timeout: float, until: str | None = None
) -> tuple[int | None, list[str]]:
    """Run `argv` in its own process group, its output (stdout and stderr together) read as it comes. With `until`,
    the group is stopped once a line matches it (returncode None); else it runs to its end within `timeout`."""
    proc = subprocess.Popen(
        argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline, buffer, lines = time.monotonic() + timeout, b"", []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                said = "\n".join(lines[-40:])
                raise TimeoutError(f"{' '.join(argv)[:200]}: no end within {timeout:g} s; its output:\n{said}")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
            if ready and not chunk:
                break
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            lines += [_clean(raw) for raw in done]
            if until and any(re.search(until, line) for line in lines):
                return None, lines
        if buffer:
            lines.append(_clean(buffer))
        return proc.wait(timeout=max(deadline - time.monotonic(), 1)), lines
    finally:
        _stop(proc)


def _clean(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").split("\r")[-1]  # a progress bar's last state
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).rstrip()


def _stop(proc: subprocess.Popen) -> None:
    """The process group gone: SIGTERM, then SIGKILL for what is still there after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            if sig == signal.SIGTERM:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # what the command left behind in its group
                break
    if proc.stdout:
        proc.stdout.close()


# ---- writing -----------------------------------------------------------------------------------------------------
def kept(lines: list[str], keep: tuple[str, ...]) -> list[str]:
    """The lines an example shows: those matching `keep` (all where it is empty) and the blank lines between them,
    `...` for each run left out; no blank line first, last, or next to another or to a `...`."""
    if keep:
        picked: list[str] = []
        for line in lines:
            if not line or any(re.search(pattern, line) for pattern in keep):
                picked.append(line)
            elif not picked or picked[-1] != OMITTED:
                picked.append(OMITTED)
        lines = picked
    out: list[str] = []
    for line in lines:
        if line == "" and (not out or out[-1] in ("", OMITTED)):
            continue
        if line == OMITTED and out and out[-1] == "":
            out.pop()
        if line == OMITTED and out and out[-1] == OMITTED:
            continue  # two runs left out with only blank lines between them: one `...`
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return out


def rendered(block: Block, ran: Ran) -> list[str]:
    """The block's new body: its commands as typed, each followed by what it printed, as the example keeps it."""
    example = EXAMPLES.get(block.example or "", Example())
    body: list[str] = []
    for command, lines in zip(block.commands, ran.outputs, strict=True):
        first, *rest = command.text.split("\n")
        if block.lang == "console":
            body += [f"$ {first}", *rest]
        else:
            body += [f">>> {first}", *(f"... {line}" for line in rest)]
        body += kept(lines, example.keep)
    return body


def write(page: Path, new: dict[int, tuple[int, list[str]]]) -> None:
    """Replace the bodies of the page's blocks (by the index of their opening fence) with new ones."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for first in sorted(new, reverse=True):
        last, body = new[first]
        lines[first + 1 : last] = body
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")


def pages() -> list[Path]:
    """The README, then Getting started, then the other pages: the order examples are run and reused in."""
    docs = sorted((REPO / "docs").rglob("*.md"))
    start = REPO / "docs" / "getting-started.md"
    return [REPO / "README.md", start, *(p for p in docs if p != start)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/examples.py", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"examples to run (default: all): {', '.join(EXAMPLES)}")
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(EXAMPLES)
    if unknown:
        print(f"error: names: {', '.join(sorted(unknown))} unknown; accepted: {', '.join(EXAMPLES)}", file=sys.stderr)
        return 2
    results: dict[str, Ran] = {}
    for page in pages():
        marked = [b for b in blocks(page) if b.example and (not args.names or b.example in args.names)]
        if not marked:
            continue
        with tempfile.TemporaryDirectory(prefix="docs-examples-") as tmp:
            folder = prepare(Path(tmp) / "repo")
            env = environment(folder)
            ran_here: set[str] = set()
            new = {}
            for block in marked:
                example = EXAMPLES.get(block.example, Example())
                if block.example not in results or len(results[block.example].outputs) != len(block.commands):
                    if example.needs and not ran_here & set(example.needs):
                        _run_needed(example.needs[0], folder, env)
                        ran_here.add(example.needs[0])
                    print(f"[docs-examples] {block.where}: {block.example}", flush=True)
                    started = time.monotonic()
                    results[block.example] = run_block(block, folder, env)
                    ran_here.add(block.example)
                    print(f"[docs-examples]   {time.monotonic() - started:.0f} s", flush=True)
                ran = results[block.example]
                if ran.returncode is not None and ran.returncode not in example.exit_codes:
                    print("\n".join(ran.outputs[-1][-40:]), file=sys.stderr)
                    print(f"error: {block.where}: {block.example} failed (exit code {ran.returncode})", file=sys.stderr)
                    return 1
                new[block.first] = (block.last, rendered(block, ran))
            write(page, new)
    return 0


def _run_needed(name: str, folder: Path, env: dict[str, str]) -> None:
    """An example another one needs (a sweep before `make ui`), run from the first page that shows it."""
    block = next(b for p in pages() for b in blocks(p) if b.example == name)
    print(f"[docs-examples] {block.where}: {name}, needed first", flush=True)
    ran = run_block(block, folder, env)
    if ran.returncode not in (0, None):
        raise SystemExit(f"error: {block.where}: {name}, needed first, failed (exit code {ran.returncode})")


if __name__ == "__main__":
    sys.exit(main())
