"""The Python API as a notebook or a script uses it: `pipeline.sweep` from standard input, `python -c` and a real
Jupyter kernel, each returning a DataFrame whose rows are the table the console printed for the same sweep (in full,
with `wide=true`); bad input raises with the command line's own line and records nothing."""

from __future__ import annotations

import json
import math
import re

import pytest

import pipeline
from pipeline.compare.paired import bound
from pipeline.search import _confirmation as confirmation
from tests.helpers.cli import run_cli, run_python
from tests.helpers.kernel import cell_output, cell_running, kernel, kernel_process, run_cell
from tests.helpers.runs import mlflow_runs, study_so_far
from tests.helpers.settings import ROUND_STUDY
from tests.helpers.wait import process_gone, wait_for_steps, wait_until

FAST = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false"]
MARK = "RESULT "
SCRIPT = f"""
import json, pipeline
result = pipeline.sweep({["batch.split=1x4,4x1", "repeats=2", "wide=true", *FAST]!r})
print({MARK!r} + json.dumps({{"records": result.table.to_dict(orient="records"), "run_id": result.run_id,
    "name": result.name, "summary": result.summary, "exit_code": result.exit_code, "line": result.line,
    "answer": result.answer.to_json()}}))
"""


def printed_table(out: str) -> list[list[str]]:
    """The data rows of the last table the console printed, as cells."""
    lines = out.splitlines()
    header = max(i for i, line in enumerate(lines) if line.startswith("| config "))
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def close(cell: str, value: float | None, digits: int) -> bool:
    return value is not None and not math.isnan(value) and float(cell.replace(",", "")) == round(value, digits)


def assert_rows_match(out: str, result: dict) -> None:
    """Every row of the DataFrame is the printed row of the same place, cell by cell."""
    printed, records = printed_table(out), result["records"]
    assert [row[0] for row in printed] == [r["config"] for r in records], out[-3000:]
    assert len(records) == 2
    for row, r in zip(printed, records, strict=True):
        config, status, step, paired, tokens, _mfu, peak, cap, loss, rank, notes = row
        assert status == r["status"] == "ok"
        assert step == f"{r['step_s']:.4f} ({r['runs']} runs)" and r["runs"] == 2
        if paired == "fastest":
            assert r["time_vs_fastest"] == r["time_low"] == r["time_high"] == 1.0
        else:
            ratio, low, high = re.fullmatch(r"(\S+)x \[(\S+), (\S+)\]", paired).groups()
            # a bound near 1 is printed to as many decimals as it takes not to read as 1 (`0.996`)
            assert close(ratio, r["time_vs_fastest"], 2) and low == bound(r["time_low"])
            assert high == "inf" and r["time_high"] == math.inf or high == bound(r["time_high"])
        assert close(tokens, r["tokens_per_s"], 0) and close(peak, r["peak_gib"], 2)
        assert cap == r["cap"] == "no-cap" and rank == r["rank"] and notes == r["notes"]
        assert f"{r['loss_dev']:.1e}" == loss
    assert result["summary"] in out  # the table the console printed, verbatim
    # the answer in one line, as the console ended with it (a tie's too), and its claim under it
    lines = out.splitlines()
    answer = result["answer"]
    assert answer["text"] in lines and lines[lines.index(answer["text"]) + 1] == f"  {answer['claim']}", out[-2000:]
    figure = re.search(r"x the tokens/s of .* \[(\S+), (\S+)\]", answer["claim"])
    assert (float(figure[1]) > 1 or float(figure[2]) < 1) if figure else "no speed-up is claimed: " in answer["claim"]


def assert_recorded(folder, result: dict) -> None:
    """The run id is the sweep's MLflow parent run, and its summary artifact's table is the result's."""
    runs = mlflow_runs(folder)
    parents = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert [p.info.run_id for p in parents] == [result["run_id"]]
    assert parents[0].data.tags["sweep_id"] == result["name"]
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs if r not in parents} == {result["run_id"]}
    answer = result["answer"]
    assert answer["config"] == result["records"][0]["config"]
    assert answer["reproduce"] == f"python -m pipeline.train batch.split={answer['config'].split()[1]} " + " ".join(
        o.replace("false", "False") for o in FAST
    )
    assert result["exit_code"] == 0 and result["line"] == "4 of 4 jobs finished"


def parsed(out: str) -> dict:
    line = next(line for line in out.splitlines() if line.startswith(MARK))
    return json.loads(line[len(MARK) :])


@pytest.mark.slow
def test_a_sweep_from_standard_input_returns_the_printed_table(tmp_path):
    """`python - < script.py`: its __main__'s file is `<stdin>`, which jobs once failed to find."""
    proc = run_python("-", input=SCRIPT, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "No such file" not in proc.stderr and "failed" not in proc.stdout
    result = parsed(proc.stdout)
    assert_rows_match(proc.stdout, result)
    assert_recorded(tmp_path, result)


@pytest.mark.slow
def test_a_sweep_from_python_c_returns_the_printed_table(tmp_path):
    proc = run_python("-c", SCRIPT, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = parsed(proc.stdout)
    assert_rows_match(proc.stdout, result)
    assert_recorded(tmp_path, result)


@pytest.mark.slow
def test_a_sweep_from_a_jupyter_kernel_returns_the_printed_table(tmp_path):
    """A kernel's __main__ is no script; the kernel goes on after the sweep (a second cell runs in it)."""
    with kernel(tmp_path) as client:
        out, error = run_cell(client, SCRIPT, timeout=600)
        assert error is None, error
        after, error = run_cell(client, "import sys; print(len(sys.argv) > 1, sys.argv[0].endswith('.py'))", 30)
    assert error is None and after.split() == ["True", "True"]  # the kernel's own argv is back
    result = parsed(out)
    assert_rows_match(out, result)
    assert_recorded(tmp_path, result)


def _interrupt_once_it_trains(client, call: str, jobs, timeout: float = 300) -> str | None:
    """Start `call` in a cell, interrupt the kernel (a notebook's stop button) once its first job has logged a step,
    wait for the cell's end and for the job's; the cell's error."""
    cell = client.execute(f"import pipeline\n{call}")
    steps = wait_for_steps(jobs, 1, timeout, alive=cell_running(client, cell))
    job = json.loads((steps.parent / "process.json").read_text())["pid"]
    client.manager.interrupt_kernel()
    _, error = cell_output(client, cell, timeout)
    assert wait_until(lambda: process_gone(job), 15, "the job's end")
    return error


def _left_behind(client, folder) -> list[str]:
    """What an interrupted call left: runs still RUNNING, and processes under the kernel but multiprocessing's
    resource tracker (one per interpreter, kept for its life): the fork server, a job."""
    running = [f"{r.data.tags['kind']} run {r.info.status}" for r in mlflow_runs(folder) if r.info.status == "RUNNING"]
    processes = [
        " ".join(p.cmdline())[:120]
        for p in kernel_process(client).children(recursive=True)
        if "resource_tracker" not in " ".join(p.cmdline())
    ]
    return running + processes


@pytest.mark.slow
def test_an_interrupted_sweep_or_study_in_a_jupyter_kernel_ends_its_runs_and_processes(tmp_path):
    """The kernel's interrupt once a job trains: the call raises KeyboardInterrupt with every run it opened ended
    KILLED (the sweep's parent run stayed RUNNING while the kernel lived: only the exit handlers ended it), its fork
    server and job gone, while the kernel lives on; the next sweep in the same kernel runs normally; a study
    interrupted in its first probe ends the same way."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    endless = ["train.steps=100000,6", "data.num_samples=64", *FAST[1:]]
    with kernel(tmp_path, TMPDIR=str(jobs)) as client:
        error = _interrupt_once_it_trains(client, f"pipeline.sweep({endless!r})", jobs)
        assert error == "KeyboardInterrupt: interrupted: runs in progress were marked KILLED"
        assert _left_behind(client, tmp_path) == []
        assert sorted((r.data.tags["kind"], r.info.status) for r in mlflow_runs(tmp_path)) == [
            ("job", "KILLED"),
            ("sweep", "KILLED"),
        ]

        out, error = run_cell(client, f"print(pipeline.sweep({['batch.split=4x1', *FAST]!r}).line)", 300)
        assert error is None and out.strip().splitlines()[-1] == "1 of 1 jobs finished", out[-3000:]
        again = [r for r in mlflow_runs(tmp_path) if r.info.status == "FINISHED"]
        (parent,) = [r.info.run_id for r in again if r.data.tags["kind"] == "sweep"]
        assert [r.data.tags.get("mlflow.parentRunId") for r in again if r.data.tags["kind"] == "job"] == [parent]

        study = ["mem_cap=4GiB", "batch.effective=2", "optimize.probe_steps=100000", *FAST[1:]]
        error = _interrupt_once_it_trains(client, f"pipeline.study({study!r})", jobs)
        assert error is not None and error.startswith("KeyboardInterrupt"), error
        assert _left_behind(client, tmp_path) == []
        assert client.manager.is_alive()
    kinds = sorted((r.data.tags["kind"], r.info.status) for r in mlflow_runs(tmp_path) if r.info.status == "KILLED")
    assert kinds == [("job", "KILLED"), ("probe", "KILLED"), ("study", "KILLED"), ("sweep", "KILLED")]


def _study_attrs(folder) -> dict:
    """The user attributes of the one study of `folder`'s store; empty while it is being created."""
    study = study_so_far(f"sqlite:///{folder / 'mlruns' / 'optuna.db'}")
    return study.user_attrs if study else {}


def _round_runs_kept(folder) -> set[tuple[str, int]]:
    """The (finalist, round) of every run the study's confirmation round has kept on the study so far."""
    attrs = _study_attrs(folder)
    if confirmation.PARTIAL not in attrs:
        return set()
    times = confirmation.ConfirmationRecord.of(attrs[confirmation.PARTIAL]).state.times
    return {(name, number) for name, rounds in times.items() for number in rounds}


@pytest.mark.slow
def test_a_study_interrupted_in_its_round_goes_on_from_there_when_called_again_in_the_kernel(tmp_path):
    """The kernel's interrupt once a run of the confirmation round has finished (and been kept on the study), then
    the same call in the same kernel: the round goes on where it stopped. In the MLflow store every run the round had
    kept is there once, FINISHED, never measured again, and every run of the finished round is there once."""
    study = [*ROUND_STUDY, "optimize.confirm_rounds=3", "optimize.confirm_share=0.85"]
    with kernel(tmp_path) as client:
        cell = client.execute(f"import pipeline\npipeline.study({study!r})")
        kept = wait_until(
            lambda: _round_runs_kept(tmp_path), 600, "a run of the round kept", alive=cell_running(client, cell)
        )
        client.manager.interrupt_kernel()
        _, error = cell_output(client, cell, 300)
        assert error is not None and error.startswith("KeyboardInterrupt"), error
        kept = _round_runs_kept(tmp_path)  # one more may have ended before the interrupt landed
        out, error = run_cell(client, f"found = pipeline.study({study!r})\nprint(found.exit_code)", 600)
    assert error is None and out.strip().endswith("0"), out[-3000:]
    assert "it goes on from there" in out, out[-3000:]
    confirm = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("kind") == "confirm"]
    finished = [
        (r.data.tags["display_name"], int(r.data.tags["round"])) for r in confirm if r.info.status == "FINISHED"
    ]
    assert len(finished) == len(set(finished)), sorted(finished)  # no run of the round measured twice
    assert kept and kept <= set(finished), (kept, finished)
    assert [r.info.status for r in confirm if r.info.status != "FINISHED"] in ([], ["KILLED"])
    final = confirmation.ConfirmationRecord.of(_study_attrs(tmp_path)[confirmation.ATTR])
    assert final.finished and {(n, r) for n, rounds in final.state.times.items() for r in rounds} == set(finished)


def cli_error(tmp_path, *args: str, module: str = "pipeline.train") -> str:
    proc = run_cli(*args, cwd=tmp_path, module=module, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr
    return proc.stderr.strip().removeprefix("error: ")


@pytest.mark.parametrize(
    ("call", "overrides", "cli_args", "module"),
    [
        ("sweep", ["batch.split=1x4,3x3"], ["-m", "batch.split=1x4,3x3"], "pipeline.train"),
        ("sweep", ["train.stepz=3"], ["-m", "train.stepz=3"], "pipeline.train"),
        ("study", ["optimize.trials=2"], ["optimize.trials=2"], "pipeline.optimize"),
        ("study", ["mem_cap=14GiB", "repeats=3"], ["mem_cap=14GiB", "repeats=3"], "pipeline.optimize"),
    ],
)
def test_bad_input_raises_the_command_lines_one_line_and_records_nothing(tmp_path, call, overrides, cli_args, module):
    expected = cli_error(tmp_path, *cli_args, module=module)
    with pytest.raises(pipeline.BadInput) as raised:
        getattr(pipeline, call)(overrides)
    assert str(raised.value) == expected and raised.value.exit_code == 2
    assert "\n" not in expected and not (tmp_path / "mlruns").exists()


def test_what_is_not_a_list_of_overrides_is_refused_in_one_line(tmp_path, capsys):
    for bad in ("batch.split=1x4", ["--help"], ["-m", "batch.split=1x4"], [3]):
        with pytest.raises(pipeline.BadInput, match=r"^overrides: .*; accepted: a list of overrides"):
            pipeline.sweep(bad)
    assert capsys.readouterr().err == "" and not (tmp_path / "mlruns").exists()


@pytest.mark.slow  # a script's job in its own process
def test_a_job_does_not_import_the_module_that_started_it(tmp_path):
    """multiprocessing imports the parent's `__main__` again in each child (`python -m` by its name): the jobs of
    `pipeline.optimize` carried Optuna and SQLAlchemy, 75 MiB more resident on CPU than the same config's job under
    `pipeline.train`, and a study's cap judged them so."""
    (tmp_path / "starter.py").write_text(
        "import os, pathlib\n"
        "with pathlib.Path('imported').open('a') as marker:\n"
        "    marker.write(f'{os.getpid()}\\n')\n"
        "if __name__ == '__main__':\n"
        "    import pipeline\n"
        f"    print(os.getpid(), pipeline.sweep(['batch.split=1x4', 'train.steps=2', *{FAST[1:]!r}]).line)\n",
        encoding="utf-8",
    )
    proc = run_python("-m", "starter", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pid, line = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert line == "1 of 1 jobs finished"
    assert (tmp_path / "imported").read_text().split() == [pid]  # imported once: by the command itself
