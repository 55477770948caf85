"""Result cards: a sweep's or study's table with the machine and the setting it was measured on, small enough to
share (JSON for tools, Markdown for people), and the merge of cards from several machines into one table by GPU.

A card holds the device (name, memory, driver, how many), the versions, the setting (every key of the config that
defines what was trained and measured, where all its rows agree; `varying` names the keys that differ between its
rows), the table (`pipeline.answer.results` rows), and the answer with its reproduce line. Cards merge by a row's name
without its model (`4x1 ckpt=off`). The figures of cards with the same setting stand side by side; where settings
differ the merge names the keys that differ and says that those columns cannot be compared: a ratio within one card
still can be.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from pipeline import knobs
from pipeline.answer.results import Answer, Result
from pipeline.compare.paired import bound
from pipeline.config.identity import identity_tree
from pipeline.records import JobResult
from pipeline.render.table import format_table
from pipeline.tracking.figures import RunDevice
from pipeline.tracking.readback import read_text
from pipeline.tracking.store import flatten
from pipeline.tracking.uris import SQLITE, sqlite_file

FORMAT = "batch-split result card 1"
VERSIONS = ("python", "torch", "transformers", "trl", "peft", "datasets", "cuda")
# shown on the card's setting line, in this order, when they are part of it (the speed knobs' after the length)
SETTING_LINE = (
    ("model.name", "model {}"),
    ("batch.effective", "effective batch {}"),
    ("batch.split", "split {}"),
    ("world_size", "world size {}"),
    ("train.max_length", "{} tokens"),
    ("data.kind", "data {}"),
    ("data.name", "{}"),
    ("lora.r", "LoRA r {}"),
    ("train.steps", "{} steps"),
    ("measure.warmup_steps", "warm-up {}"),
    ("mem_cap", "cap {}"),
    ("gpu.name", "gpu profile {}"),
)


class CardError(ValueError):
    """A file that is not a result card this version reads."""


@dataclass(frozen=True)
class Device:
    """What a card's jobs ran on. `memory_gib` None: not known (a CPU, or a run without a placement); `driver`
    "none" on a CPU, None on a card written before it was recorded; `count` the devices (world size), 1 if missing."""

    type: str  # cuda or cpu (`tracking.figures.NOT_RECORDED` where no job placed its model)
    name: str
    memory_gib: float | None = None
    driver: str | None = None
    count: int = 1

    @classmethod
    def from_json(cls, data: dict) -> Device:
        count = int(data.get("count") or 1)
        return cls(str(data["type"]), str(data["name"]), data.get("memory_gib"), data.get("driver"), count)

    @property
    def text(self) -> str:
        """`2x NVIDIA H200, 139.8 GiB, driver 570.86`."""
        name = f"{self.count}x {self.name}" if self.count > 1 else self.name
        memory = f", {self.memory_gib:g} GiB" if self.memory_gib else ""
        driver = f", driver {self.driver}" if self.driver not in (None, "none") else ""
        return f"{name}{memory}{driver}"


@dataclass(frozen=True)
class Card:
    kind: str  # sweep or study
    name: str  # its sweep id or study name
    run_id: str
    date: str
    command: str
    device: Device
    versions: dict[str, str]
    setting: dict[str, object]
    varying: list[str]
    confidence: float
    rows: list[dict[str, object]]  # `results.row_record` of each config, in the table's order
    table: str  # the table as the console prints it
    answer: Answer
    source: str  # where the figures were read: an MLflow run in a store
    format: str = FORMAT

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "answer": self.answer.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> Card:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CardError(f"not a '{FORMAT}'")
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(fields - set(data))
        if missing:
            raise CardError(f"a result card without {', '.join(missing)}")
        typed = {"answer": Answer.from_json(data["answer"]), "device": Device.from_json(data["device"])}
        return cls(**{**{k: data[k] for k in fields}, **typed})

    @property
    def device_text(self) -> str:
        return self.device.text

    def markdown(self) -> str:
        versions = " · ".join(f"{k} {v}" for k, v in self.versions.items())
        lines = [f"# {self.kind.capitalize()} {self.name} on {self.device.name}", ""]
        lines += [f"Device: {self.device_text} · {versions}", "", f"Setting: {setting_line(self)}", ""]
        lines += [f"`{self.command}`", "", self.table, "", f"Answer: {answer_line(self.answer)}"]
        if self.answer.reproduce:
            lines += ["", f"`{self.answer.reproduce}`"]
        lines += ["", f"Recorded: {self.source}, {self.date}"]
        return "\n".join(lines) + "\n"

    def _repr_markdown_(self) -> str:
        return self.markdown()


def setting_line(card: Card) -> str:
    """The setting's main keys in a few words (a key that is not set is left out, but a cap is always said)."""
    at = [key for key, _ in SETTING_LINE].index("train.max_length") + 1
    forms = [*SETTING_LINE[:at], *knobs.card_lines(), *SETTING_LINE[at:]]  # each knob's own words (`Knob.card`)
    shown = [
        form.format(_text(card.setting[key]))
        for key, form in forms
        if key in card.setting and (card.setting[key] is not None or key == "mem_cap")
    ]
    if card.varying:
        shown.append(f"varied: {', '.join(card.varying)}")
    return " · ".join(shown)


def claimed(answer: Answer) -> bool:
    """A speed-up whose interval excludes 1: the only one given as a figure."""
    if answer.speedup is None or answer.low is None or answer.high is None:
        return False
    return answer.low > 1 or answer.high < 1


def answer_line(answer: Answer) -> str:
    """The answer in one line: its config and its speed-up, or why none is claimed (with its headline)."""
    if answer.config is None:
        return answer.text
    if not claimed(answer):  # no figure whose interval holds 1, even from a card written before this rule
        why = answer.claim if answer.claim.startswith("no speed-up") else "no speed-up is claimed"
        return f"{answer.config}; {why} ({answer.text})"
    return (
        f"{answer.config}: {answer.speedup:.2f}x the tokens/s of {answer.against} [{bound(answer.low)}, "
        f"{bound(answer.high)}] ({100 * answer.confidence:g}%, paired)"
    )


def _text(value: object) -> str:
    if value is None:
        return "none"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def build(result: Result) -> Card:
    """The card of a result read from its store (`pipeline.answer.results.read`, or what `pipeline.sweep` returned)."""
    tracker = result.tracker
    runs_of_rows = [r.measured[0].run_id for r in result.rows]
    configs = [_identity(tracker, run_id) for run_id in runs_of_rows]
    keys = list(dict.fromkeys(k for c in configs for k in c))
    varying = [k for k in keys if len({_text(c.get(k)) for c in configs}) > 1]
    setting = {k: configs[0][k] for k in keys if k not in varying} if configs else {}
    ran = next((r.measured[0].run_id for r in result.rows if r.ok_runs), runs_of_rows[0] if runs_of_rows else None)
    params = tracker.run(ran).data.params if ran else {}
    parent = tracker.run(result.run_id)
    return Card(
        kind=result.kind,
        name=result.name,
        run_id=result.run_id,
        date=datetime.datetime.fromtimestamp(parent.info.start_time / 1000).strftime("%Y-%m-%d %H:%M"),
        command=result.command,
        device=_device(tracker, ran, params),
        versions={k: params[f"version.{k}"] for k in VERSIONS if params.get(f"version.{k}") not in (None, "None")},
        setting=setting,
        varying=varying,
        confidence=result.criteria.confidence,
        rows=[_plain(record) for record in result.table.to_dict(orient="records")],
        table=format_table(result.rows, result.criteria),
        answer=result.answer,
        source=f"MLflow run {result.run_id} in {shown_uri(result.tracking_uri)}",
    )


def shown_uri(uri: str) -> str:
    """A store as the command line names it: an SQLite file under the working folder by its relative path
    (`sqlite:///mlruns/mlflow.db`), so that a card says where it was recorded without the folder it ran in."""
    file = sqlite_file(uri)
    if file is None or not Path(file).is_absolute():
        return uri
    try:
        return SQLITE + str(Path(file).relative_to(Path.cwd().resolve()))
    except ValueError:
        return uri


def _identity(tracker, run_id: str) -> dict[str, object]:
    """A job's config as it ran, what defines it only (`config.identity`), flattened."""
    text = read_text(tracker, run_id, "config.yaml")
    return flatten(identity_tree(OmegaConf.create(text))) if text else {}


def _device(tracker, run_id: str | None, params: dict[str, str]) -> Device:
    """What the jobs ran on: from a job's params and its result's placement (the device's real memory)."""
    run = RunDevice.from_params(params)
    return Device(run.type, run.name, _memory_gib(tracker, run_id), run.driver, run.count)


def _memory_gib(tracker, run_id: str | None) -> float | None:
    """The device's real memory, from the job's recorded result; None where it has none (or one this version does not
    read)."""
    text = read_text(tracker, run_id, "result.json") if run_id else None
    try:
        result = JobResult.from_json(json.loads(text)) if text else None
    except (ValueError, KeyError, TypeError):
        return None
    return result.placement.device_memory_gib if result and result.placement else None


def _plain(record: dict) -> dict:
    """A DataFrame record as JSON values: NaN becomes null."""
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in record.items()}


def write(card: Card, folder: Path) -> tuple[Path, Path]:
    """`<folder>/<name>.json` and `.md`; the two paths."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = card.name.replace("/", "_")
    json_path, md_path = folder / f"{stem}.json", folder / f"{stem}.md"
    json_path.write_text(json.dumps(card.to_json(), indent=1) + "\n", encoding="utf-8")
    md_path.write_text(card.markdown(), encoding="utf-8")
    return json_path, md_path


def write_card(result: Result, folder: str | Path = "cards") -> Card:
    """The result card of `result`, written as JSON and Markdown under `folder`; returned (a notebook shows it)."""
    card = build(result)
    write(card, Path(folder))
    return card


def load(path: Path) -> Card:
    """A card from its JSON file; CardError (with the reason) for anything else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CardError(f"{path}: cannot be read as JSON ({type(err).__name__}: {err})") from None
    try:
        return Card.from_json(data)
    except (CardError, TypeError, KeyError) as err:
        raise CardError(f"{path}: {err}") from None
