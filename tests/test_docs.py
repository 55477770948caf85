"""The documentation: the README stays short, the site builds strict, the configuration reference lists every key
and choice the schema and conf/ accept, and every command of the README and of Getting started runs as written and
prints what its block shows (in form: numbers, ids and config names free).

The commands come from the pages themselves (`console` blocks, `python` scripts; docs/examples.py parses and runs
them), so a new one is tested without a line here. Their real runs are slow (a sweep, a study, a script of the API):
the default tier checks that each is accepted as written (composed and validated, as the command's own check does)
and runs `make ui` to its link; the slow tier runs every page in order in one folder, as a user would.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import socket
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from docs import examples
from pipeline import knobs
from pipeline.commands.optimize import check_study
from pipeline.config import reference
from pipeline.config.accepted import choices_of
from pipeline.config.compose import CONF_DIR
from pipeline.config.plan import plan_sweep
from pipeline.config.schema import INTERNAL_KEYS, Config

REPO = examples.REPO
README = REPO / "README.md"
START = REPO / "docs" / "getting-started.md"
TESTED = (README, START)
README_MAX_LINES = 150
# Commands the pages show that no test runs, each with why.
NOT_RUN = {
    "make test": "the test suite itself, this test among it (.ci/run runs it)",
    "python3.11 -m venv .venv": "makes the environment the test runs in",
    ".venv/bin/python -m pip install torch==2.13.0": "installs into the environment the test runs in",
    '.venv/bin/python -m pip install -c constraints.txt -e ".[dev,cluster,docs]"': "the same",
}


def typed(command: examples.Command) -> str:
    """The command as the shell runs it: its text without a trailing comment (`make demo    # sweep ...` is `make
    demo`, which another page shows bare)."""
    return command.text.split("  #")[0].strip()


def runs_in_a_test(command: examples.Command) -> bool:
    return typed(command) not in NOT_RUN


def commands(page: Path) -> list[tuple[examples.Block, examples.Command]]:
    """Every command of the page's runnable blocks that a test runs."""
    return [(b, c) for b in examples.blocks(page) for c in b.commands if runs_in_a_test(c)]


def test_the_readme_is_short_and_links_into_the_docs():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"
    linked = set(re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)))
    missing = [str(p) for p in linked if not (REPO / p).exists()]
    assert not missing and {"docs/getting-started.md", "docs/reference/configuration.md"} <= linked, (missing, linked)


PLACEHOLDER = re.compile(r"\bOWNER\b|\bYOUR[-_][A-Z]|<your[ -][a-z]|github\.com/[A-Z]+/")


def test_no_page_or_notebook_holds_a_placeholder_the_reader_must_replace():
    """A command shown or run with a made-up owner (github.com/OWNER/...) fails for whoever copies it."""
    pages = [README, *sorted((REPO / "docs").rglob("*.md")), REPO / "docs" / "quickstart.ipynb"]
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in pages for m in PLACEHOLDER.finditer(p.read_text("utf-8"))]
    assert not found, found


def test_the_site_builds_strict_with_no_warning(tmp_path):
    """`make docs`'s build: a broken link or anchor, a page missing from the navigation or a failed include fails."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not re.search(r"^(WARNING|ERROR)", proc.stderr, re.M), proc.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "optimize.sampler" in page and "generated: configuration reference" not in page


# ---- the configuration reference ---------------------------------------------------------------------------------
def schema_keys(schema: type = Config, prefix: str = "") -> list[str]:
    """Every key the schema accepts from a user, walked from its dataclasses (not from what the reference reads)."""
    keys = []
    for name, hint in typing.get_type_hints(schema).items():
        if not prefix and name in INTERNAL_KEYS:
            continue
        if dataclasses.is_dataclass(hint):
            keys += schema_keys(hint, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def group_options() -> dict[str, list[str]]:
    """Every config group of conf/ (a folder of YAML files, `hydra/launcher` among them) and its options."""
    found: dict[str, list[str]] = {}
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        if path.parent != CONF_DIR:
            found.setdefault(path.parent.relative_to(CONF_DIR).as_posix(), []).append(path.stem)
    return found


def reference_gaps(text: str) -> list[str]:
    """What the reference's text leaves out of what the tool accepts: a key without its row, a value missing from
    a key's row, a group option without its row, a speed knob without its section."""
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `([\w.]+)` \|.*$", text, re.M)}
    gaps = []
    for key in schema_keys():
        if key not in rows:
            gaps.append(f"{key}: no row")
            continue
        accepted = rows[key].split(" | ")[3]
        gaps += [f"{key}: {value} missing" for value in choices_of(key) or () if f"`{value}`" not in accepted]
    for group, options in group_options().items():
        gaps += [f"{group}={o}: no row" for o in options if not re.search(rf"^\| `{group}` \| `{o}`", text, re.M)]
    gaps += [f"{k.key}: no section" for k in knobs.registry() if f"### `{k.key}`" not in text]
    return gaps


def test_the_configuration_reference_lists_every_key_choice_option_and_knob():
    text = reference.markdown()
    assert reference_gaps(text) == []
    assert len(schema_keys()) > 60 and "optimize.sampler" in schema_keys()
    assert {"model", "optimize", "experiment", "hydra/launcher"} <= set(group_options())


def test_a_key_or_a_choice_missing_from_the_reference_is_found():
    text = reference.markdown()
    without_row = re.sub(r"^\| `train.loss` \|.*\n", "", text, flags=re.M)
    without_value = text.replace("`gp`", "`gaussian`")
    without_option = re.sub(r"^\| `optimize` \| `fastest`.*\n", "", text, flags=re.M)
    assert reference_gaps(without_row) == ["train.loss: no row"]
    assert reference_gaps(without_value) == ["optimize.sampler: gp missing"]
    assert reference_gaps(without_option) == ["optimize=fastest: no row"]


# ---- the pages' commands: found, well-formed, accepted as written ------------------------------------------------
def test_every_command_block_of_the_tested_pages_is_found_and_every_example_is_known():
    for page in TESTED:
        text = page.read_text(encoding="utf-8")
        untagged = [m.start() for m in re.finditer(r"^```\n(?:\$ |>>> |python -m|make )", text, re.M)]
        assert not untagged, f"{page.name}: a block of commands without `console` is run by no test"
    found = [b.example for p in examples.pages() for b in examples.blocks(p) if b.example]
    assert set(found) == set(examples.EXAMPLES), set(found) ^ set(examples.EXAMPLES)
    for page in examples.pages():
        for block in examples.blocks(page):
            shown = [line for c in block.commands for line in c.shown if line != examples.OMITTED]
            assert shown or not block.example, f"{block.where}: no output kept yet (make docs-examples)"
    texts = {c.text for page in TESTED for _, c in commands(page)}
    assert {"python -m pipeline.train -m batch.split=1x4,2x2,4x1", "make ui"} <= texts
    assert any(t.startswith("make optimize PRESET=fastest MEM_CAP=14GiB") for t in texts)


def _entry(command: str, folder: Path) -> list[str] | None:
    """`python -m pipeline.X ARGS` as the command runs it (a make target through `make -n`: what make would run,
    nothing run), or None for a command that composes no config."""
    words = shlex.split(command, comments=True)
    if words[0] == "make":
        dry = subprocess.run([*words, "-n"], cwd=folder, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        lines = [line for line in dry.stdout.splitlines() if line.startswith(".venv/bin/python -m pipeline.")]
        assert "pip install" not in dry.stdout, dry.stdout  # the folder's environment counts as installed
        words = shlex.split(lines[-1]) if lines else []
    if len(words) > 2 and words[1] == "-m" and words[2] in ("pipeline.train", "pipeline.optimize"):
        return words[2:]
    return None


def test_every_command_of_the_readme_and_getting_started_is_accepted_as_written(tmp_path, monkeypatch):
    """Each training or study command composes and passes the check its command makes before anything runs (every
    job's config, and a study's space, cap and storage), with the overrides as the page shows them."""
    folder = examples.prepare(tmp_path / "repo")
    monkeypatch.chdir(folder)
    checked = []
    for page in TESTED:
        for block, command in commands(page):
            if block.lang != "console":
                continue
            entry = _entry(command.text, folder)
            if entry is None:
                continue
            module, *args = entry
            multirun = "-m" in args
            overrides = [a for a in args if a != "-m"]
            plan = plan_sweep("optimize" if module == "pipeline.optimize" else "config", overrides, multirun)
            for cfg, job in zip(plan.configs, plan.checked, strict=True):
                if module == "pipeline.optimize":
                    check_study(cfg, job)
            checked.append(command.text)
    assert any(c.startswith("make optimize PRESET=fastest") for c in checked) and "make demo" in checked, checked


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _seed_store(folder: Path) -> None:
    """A store with the project's experiment in it, as the pages' sweeps leave it (MLflow's own sqlite store)."""
    code = (
        "import mlflow; mlflow.set_tracking_uri('sqlite:///mlruns/mlflow.db'); "
        "mlflow.create_experiment('batch-split', artifact_location='mlruns/artifacts')"
    )
    (folder / "mlruns").mkdir()
    subprocess.run([sys.executable, "-c", code], cwd=folder, check=True, timeout=120, env=examples.environment(folder))


@pytest.mark.slow
def test_make_ui_prints_the_link_the_pages_show(tmp_path):
    """`make ui` as written, over a store with runs: the link line, then the server, stopped once the link is out."""
    folder = examples.prepare(tmp_path / "repo")
    _seed_store(folder)
    block, command = next((b, c) for b, c in commands(README) if c.text == "make ui")
    ran = examples.run_block(block, folder, examples.environment(folder, PORT=str(_free_port())))
    assert ran.returncode is None, "\n".join(ran.outputs[0])  # stopped once the link was printed, not ended
    assert form_problems(command.shown, ran.outputs[0]) == []


# ---- the form of an output -----------------------------------------------------------------------------------------
def normalized(line: str) -> str:
    """A line with what changes from run to run made alike: paths, ids, key=value pairs (a config's name),
    numbers."""
    line = re.sub(r"(?<![\w/])(mlruns|cards|/tmp)/\S+", "<path>", line)
    line = re.sub(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b", "<id>", line)
    line = re.sub(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", "<id>", line)
    line = re.sub(r"\S+=\S+", "<k=v>", line)
    return re.sub(r"\d+(?:[.,]\d+)*(?:e[+-]\d+)?", "N", line)


# a speed-up, or why none is claimed, and a round's pair told apart or not: the rounds decide which
CLAIM = re.compile(r"^(\S+ \S+: )?(Nx the |no speed-up )|^[^:]+ and [^:]+: |^[^:]+ is Nx .*faster than ")


def _head(line: str) -> str:
    """What a line is: its indent and first two words, normalized; a claim (`tiny 4x1: 1.39x the tokens/s of ...`,
    `2.04x the baseline's ...`, `no speed-up ... is claimed: ...`) is a claim whichever the rounds made."""
    indent = " " * (len(line) - len(line.lstrip()))
    text = normalized(line).strip()
    return indent + ("<claim>" if CLAIM.match(text) else " ".join(text.split()[:2]))


def _items(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Lines and tables: ("line", its lines) or ("table", its rows), without `...` and blank lines; lines of one
    kind in a row are one item (a study's trials, what each knob bought: how many is the run's)."""
    items: list[tuple[str, list[str]]] = []
    for line in lines:
        kind = "table" if line.startswith("|") else "line"
        if not line.strip() or line == examples.OMITTED:
            continue
        if items and items[-1][0] == kind and (kind == "table" or _head(items[-1][1][-1]) == _head(line)):
            items[-1][1].append(line)
        else:
            items.append((kind, [line]))
    return items


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _same(shown: tuple[str, list[str]], actual: tuple[str, list[str]]) -> bool:
    if shown[0] != actual[0]:
        return False
    if shown[0] == "line":
        return _head(shown[1][0]) == _head(actual[1][0])
    header = [normalized(c) for c in _cells(shown[1][0])]
    if header != [normalized(c) for c in _cells(actual[1][0])]:
        return False
    if header[0] != "config":  # a study's trials: which configs it decided is the search's
        return len(actual[1]) > 2
    return sorted(_cells(r)[0] for r in shown[1][2:]) == sorted(_cells(r)[0] for r in actual[1][2:])


# Lines a run prints only where its data allow: what each knob bought needs more configs measured than keys varied,
# and how many a short study measures depends on what its predictor skips.
OPTIONAL = re.compile(r"^  what each knob bought |^    \S+=\S+ \(from \S+\): ")


def as_searched(shown: list[str], actual: list[str]) -> list[str]:
    """The lines a study's output must show as its search went: a study whose search measured no config but the
    baseline in full (the others pruned or over the cap: the CPU study of the docs prunes 4x2, 1.14x slower than
    1x8 there, in about one run of three) has no confirmation round, so the round's line and its pairs under it are
    not asked for. Left as they are, the pair (`tiny 4x2 and tiny 1x8: ...`) would be matched by the answer's own
    claim line and the answer's lines found missing."""
    if any(line.startswith("confirmation round: ") for line in actual):
        return shown
    kept, in_round = [], False
    for line in shown:
        in_round = line.startswith("confirmation round: ") or (in_round and line.startswith("  "))
        if not in_round:
            kept.append(line)
    return kept


def test_a_study_without_a_round_is_not_asked_for_one_and_is_for_its_answer():
    shown = [
        "[study] s: 4 valid configs",
        "...",
        "confirmation round: 6 rounds of 4 steady steps, 27 s: tiny 1x8 (baseline), tiny 4x2",
        "  tiny 4x2 and tiny 1x8: not told apart (within ±32% either way) (95%, paired over 6 rounds)",
        "...",
        "best feasible: tiny 1x8  (0.2485 s/step in the search)",
        "  no speed-up over the baseline is claimed: the baseline itself is the fastest that fits",
    ]
    pruned = [shown[0], shown[5], "  python -m pipeline.train batch.split=1x8", shown[6]]  # the run of the CI's failure
    assert form_problems(shown, pruned) != []  # before: the answer's lines found missing
    assert form_problems(as_searched(shown, pruned), pruned) == []
    assert form_problems(as_searched(shown, pruned[:2]), pruned[:2]) != []  # its answer is still asked for
    with_round = [shown[0], shown[2], shown[3], *pruned[1:]]
    assert as_searched(shown, with_round) == shown  # a study that had its round is asked for it


def form_problems(shown: list[str], actual: list[str]) -> list[str]:
    """How `actual` differs in form from what a block shows: each shown line's kind (its head) and each shown
    table (its header, and the configs of its rows) must come, in this order, in the output (an OPTIONAL line may be
    missing)."""
    found, problems = _items(actual), []
    at = 0
    for item in _items(shown):
        match = next((i for i in range(at, len(found)) if _same(item, found[i])), None)
        if match is None and OPTIONAL.match(item[1][0]):
            continue
        if match is None:
            problems.append(f"not in the output (after its item {at}): {item[1][0][:160]}")
        else:
            at = match + 1
    return problems


SHOWN = [
    "[sweep] 20261203-071500-ab12cd: 3 jobs, MLflow parent run 0123456789abcdef0123456789abcdef",
    "...",
    "| config   | status | step s (median [95% CI of one run's steps]) | rank |",
    "|----------|--------|---------------------------------------------|------|",
    "| tiny 4x1 | ok     | 0.0226 [0.0214, 0.0234]                     | -    |",
    "| tiny 1x4 | ok     | 0.0259 [0.0249, 0.0277]                     | -    |",
    "Lowest median: tiny 4x1, 0.0226 s/step (one run per config: not ranked)",
    "  tiny 4x1: 1.39x the tokens/s of tiny 1x4 [1.20, 1.62] (95%, paired)",
    "  2.39x the baseline's tokens/s [1.39, 4.11] (95%, paired over 4 rounds)",
]


def test_the_form_check_takes_other_figures_and_finds_another_form():
    rerun = [
        "[sweep] 20261204-101010-ffee00: 3 jobs, MLflow parent run fedcba9876543210fedcba9876543210",
        "[job] tiny 1x4: ok, step 0.03 s",
        "| config | status | step s (median [95% CI of one run's steps]) | rank |",
        "|---|---|---|---|",
        "| tiny 1x4 | ok | 0.0301 [0.0290, 0.0330] | - |",
        "| tiny 4x1 | ok | 0.0280 [0.0270, 0.0291] | - |",
        "drift/cv: the machine was not quiet",
        "Lowest median: tiny 1x4, 0.0301 s/step (one run per config: not ranked)",
        "  no speed-up is claimed: 3 paired rounds could not tell tiny 1x4 from tiny 4x1 (within 4.4x either way)",
        "  no speed-up over the baseline is claimed: 4 paired rounds could not tell them apart",
    ]
    assert form_problems(SHOWN, rerun) == []
    gains = [
        "  what each knob bought (a model of log step time over 4 configs):",
        "    batch.split=4x1 (from 1x4): 2.0x [1.1, 3.0]",
    ]
    assert form_problems(SHOWN + gains, rerun) == []  # printed only where the data allow
    undecided = ["  tiny 1x8 and tiny 2x4: not told apart (within 3.7x either way) (95%, paired over 3 rounds)"]
    decided = ["  tiny 2x4 is 2.31x faster than tiny 1x8 [1.52, 3.50] (95%, paired over 3 rounds)"]
    assert form_problems(undecided, decided) == [] and form_problems(decided, undecided) == []
    renamed = [line.replace("Lowest median", "Lowest step") for line in rerun]
    assert len(form_problems(SHOWN, renamed)) == 1
    other_header = [line.replace("| rank |", "| place |") for line in rerun]
    assert len(form_problems(SHOWN, other_header)) == 1
    fewer = [line for line in rerun if "tiny 4x1 |" not in line]
    assert len(form_problems(SHOWN, fewer)) == 1
    unindented = [line.lstrip() for line in rerun]
    assert len(form_problems(SHOWN, unindented)) == 1  # the claims (one kind in a row) at another indent
    assert len(form_problems(SHOWN, rerun[:2])) == 3  # stopped early: the table and the lines after it missing


# ---- the pages run as shown (slow) ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_command_of_the_pages_runs_as_written_and_prints_what_it_shows(tmp_path):
    """The README's commands, then Getting started's, in order, in one folder laid out as the repository after `make
    install` (the tiny model on this CPU): each ends as its example allows and prints the lines and tables its block
    shows. A command both pages show runs once (a trailing comment aside), and its output is checked against each
    page's block."""
    folder = examples.prepare(tmp_path / "repo")
    env = examples.environment(folder, PORT=str(_free_port()), DASHBOARD_PORT=str(_free_port()))
    outputs: dict[str, list[str]] = {}
    checked = 0
    for page in TESTED:
        for block in examples.blocks(page):
            todo = [c for c in block.commands if runs_in_a_test(c)]
            fresh = [c for c in todo if typed(c) not in outputs]
            if fresh:
                # a script or a session runs whole; a console block runs the commands not run yet
                run = block if block.lang != "console" else dataclasses.replace(block, commands=fresh)
                run = dataclasses.replace(run, commands=[c for c in run.commands if runs_in_a_test(c)])
                ran = examples.run_block(run, folder, env, timeout=1800)
                allowed = examples.EXAMPLES.get(block.example or "", examples.Example()).exit_codes
                last = "\n".join(ran.outputs[-1][-60:]) if ran.outputs else ""
                assert ran.returncode is None or ran.returncode in allowed, (page.name, block.where, last)
                assert len(ran.outputs) == len(run.commands), (page.name, block.where)
                outputs.update((typed(c), out) for c, out in zip(run.commands, ran.outputs, strict=True))
            for command in todo:
                output = outputs[typed(command)]
                assert output, f"{page.name} {block.where}: {command.text} printed nothing"
                problems = form_problems(as_searched(command.shown, output), output)
                assert problems == [], (page.name, block.where, command.text, "\n".join(output[-80:]))
                checked += 1
    assert checked >= 8


def test_an_examples_left_out_lines_are_one_ellipsis_however_many_runs_and_blanks_between():
    """Lines left out, a blank line kept, more left out: one `...`, never three in a row (the README's study showed
    three)."""
    lines = ["[study] x", "[job] a", "", "[job] b", "", "", "[job] c", "best feasible: y", "", "done"]
    assert examples.kept(lines, (r"^\[study\]", r"^best", r"^done")) == [
        "[study] x",
        "...",
        "best feasible: y",
        "",
        "done",
    ]
    pages = [REPO / "README.md", *examples.pages()]
    assert not [p.name for p in pages if re.search(r"^\.\.\.\n\.\.\.$", p.read_text(encoding="utf-8"), re.M)]
