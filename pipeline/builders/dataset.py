"""The training dataset: synthetic token ids, a local jsonl file, or a hub dataset (id or local folder).

Synthetic data is pre-tokenized (`input_ids`), which TRL's SFTTrainer takes as is; text and chat records go through
TRL's own tokenization with the job's tokenizer.

A job reads only the records its steps use: `needed` (train.steps x batch.effective, the world size included), and
with packing as many as fill `needed` sequences of train.max_length tokens. A jsonl file is read line by line up to
there and never as a whole, so setting up a job costs the same for a file of a thousand records or of a million, and
the job's memory is its training's, not the file's. (The up-front check, `config.data`, still reads every line.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable

import numpy as np
from datasets import Dataset, load_dataset

from pipeline.builders.batches import whole_batches
from pipeline.config.choices import DataKind, Distribution
from pipeline.config.errors import fewer_than_batch
from pipeline.config.schema import DataConfig

FIRST_ORDINARY_ID = 4  # ids below are the byte-level tokenizer's specials
FIELDS = ("messages", "text")  # what a text or chat record trains on (config.data checks each record has one)


def _lengths(rng: np.random.Generator, num_samples: int, length: int, min_length: int | None, uniform: bool):
    return rng.integers(min_length, length + 1, size=num_samples) if uniform else np.full(num_samples, length)


def synthetic_dataset(
    num_samples: int, length: int, min_length: int | None, uniform: bool, vocab_size: int, seed: int
) -> Dataset:
    """`num_samples` rows of token ids, each `length` long, or of a length drawn from min_length..length."""
    rng = np.random.default_rng(seed)
    lengths = _lengths(rng, num_samples, length, min_length, uniform)
    high = max(vocab_size, FIRST_ORDINARY_ID + 1)
    rows = [rng.integers(FIRST_ORDINARY_ID, high, size=int(n)).tolist() for n in lengths]
    return Dataset.from_dict({"input_ids": rows})


def synthetic_lengths(num_samples: int, length: int, min_length: int | None, uniform: bool, seed: int) -> list[int]:
    """The lengths of `synthetic_dataset`'s rows, without making them."""
    return [int(n) for n in _lengths(np.random.default_rng(seed), num_samples, length, min_length, uniform)]


def take_records(
    records: Iterable[dict],
    needed: int,
    count_tokens: Callable[[dict], int] | None = None,
    tokens: int = 0,
    effective: int = 1,
) -> list[dict]:
    """The first records that cover `needed` samples and, when `count_tokens` is given (packing), `tokens` tokens;
    where there are fewer, whole batches of `effective` of them (not with packing: its samples are sequences)."""
    taken: list[dict] = []
    counted = 0
    for record in records:
        if len(taken) >= needed and counted >= tokens:
            break
        taken.append(record)
        if count_tokens is not None:
            counted += count_tokens(record)
    return taken if count_tokens is not None else taken[: whole_batches(len(taken), needed, effective)]


def _field(record: dict) -> str:
    return next(name for name in FIELDS if name in record)


def calls_as_text(value: object) -> object:
    """A record's field with every tool call in OpenAI's form and its arguments as JSON text, written as Qwen3's
    template writes an object (`tojson`), which prints text as it is: one Arrow type for every call, where objects of
    other keys would be merged (a missing key trained as null) or refused beside text."""
    if not isinstance(value, list):
        return value
    out = []
    for message in value:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function", call)
                arguments = function.get("arguments", {})
                text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                calls.append({"type": "function", "function": {"name": function["name"], "arguments": text}})
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def jsonl_dataset(
    path: str, needed: int, count_tokens: Callable[[dict], int] | None = None, tokens: int = 0, effective: int = 1
) -> Dataset:
    """The first records of a jsonl file that the steps consume, read one line at a time and only as far as
    needed."""
    with open(path, encoding="utf-8-sig") as handle:
        records = (json.loads(line) for line in handle if line.strip())
        taken = take_records(records, needed, count_tokens, tokens, effective)
    keep = _field(taken[0])
    return Dataset.from_dict({keep: [calls_as_text(record[keep]) for record in taken]})


def hub_dataset(
    name: str,
    subset: str | None,
    split: str,
    needed: int,
    count_tokens: Callable[[dict], int] | None = None,
    tokens: int = 0,
    effective: int = 1,
) -> Dataset:
    """The first records of a hub dataset (or a local folder) that the steps consume."""
    dataset = load_dataset(os.path.expanduser(name), subset, split=split)  # a folder as ~/...: no hub id
    keep = "messages" if "messages" in dataset.column_names else "text"
    dataset = dataset.select_columns([keep])
    taken = take_records(iter(dataset), needed, count_tokens, tokens, effective)
    return dataset.select(range(len(taken)))


def build_dataset(
    data: DataConfig,
    vocab_size: int,
    seed: int,
    needed: int,
    count_tokens: Callable[[dict], int] | None = None,
    tokens: int = 0,
    effective: int = 1,
) -> Dataset:
    """`data` is the data group; `needed` is how many samples the steps consume (steps x `effective`, the effective
    batch); `count_tokens` and `tokens`: with packing, a record's token count and how many tokens the steps
    consume. Fewer records than `needed` (not packed) are cut to whole batches (`whole_batches`); a hub dataset of
    fewer than one batch is refused."""
    if data.kind == DataKind.SYNTHETIC:
        uniform = data.distribution == Distribution.UNIFORM
        return synthetic_dataset(data.num_samples or needed, data.length, data.min_length, uniform, vocab_size, seed)
    if data.kind == DataKind.JSONL:
        return jsonl_dataset(data.path, needed, count_tokens, tokens, effective)
    dataset = hub_dataset(data.name, data.subset, data.split, needed, count_tokens, tokens, effective)
    if count_tokens is None and len(dataset) < effective:  # only loading it tells (a jsonl file is refused up front)
        raise fewer_than_batch("data.name", f"'{data.name}' split {data.split}", len(dataset), effective, "a dataset")
    return dataset


def record_ids(tokenizer, record: dict) -> list[int]:
    """A record's token ids as TRL's preparation makes them: a chat through its template, a text with an
    end-of-sequence token, token ids as they are."""
    if "input_ids" in record:
        return list(record["input_ids"])
    if "messages" in record:
        return tokenizer.apply_chat_template(record["messages"], tokenize=True, return_dict=True)["input_ids"]
    eos = tokenizer.eos_token or ""
    text = record["text"] if record["text"].endswith(eos) else record["text"] + eos
    return tokenizer(text)["input_ids"]


def truncated(dataset: Dataset, tokenizer, max_length: int) -> Dataset:
    """Records as token ids of at most `max_length`, tokenized as TRL would (`record_ids`): padding-free training
    without packing takes its inputs truncated already."""
    if "input_ids" in dataset.column_names:
        return dataset.map(lambda r: {"input_ids": r["input_ids"][:max_length]})
    return dataset.map(
        lambda r: {"input_ids": record_ids(tokenizer, r)[:max_length]}, remove_columns=dataset.column_names
    )


def run_records(
    data: DataConfig, needed: int | None, count_tokens: Callable[[dict], int] | None, tokens: int, effective: int = 1
):
    """The records a run reads, as plain dicts: the first that its steps consume (`needed`, and with packing
    `tokens` as `count_tokens` counts them), or every one (`needed` None: one pass over the data). Synthetic data is
    not read here (`synthetic_lengths`)."""
    if data.kind == DataKind.JSONL:
        with open(data.path, encoding="utf-8-sig") as handle:
            records = (json.loads(line) for line in handle if line.strip())
            return list(records) if needed is None else take_records(records, needed, count_tokens, tokens, effective)
    dataset = load_dataset(os.path.expanduser(data.name), data.subset, split=data.split)
    keep = "messages" if "messages" in dataset.column_names else "text"
    records = ({keep: r[keep]} for r in dataset)
    return list(records) if needed is None else take_records(records, needed, count_tokens, tokens, effective)


def records_at(data: DataConfig, vocab_size: int, seed: int, of_records: int, indices: list[int]) -> Dataset:
    """The records at `indices` of a run's data of `of_records` records (a jsonl file's or hub dataset's first, or
    that many synthetic rows), in that order."""
    if data.kind == DataKind.SYNTHETIC:
        uniform = data.distribution == Distribution.UNIFORM
        rows = synthetic_dataset(of_records, data.length, data.min_length, uniform, vocab_size, seed)
        return rows.select(indices)
    if data.kind == DataKind.JSONL:
        wanted, found = set(indices), {}
        with open(data.path, encoding="utf-8-sig") as handle:
            for index, line in enumerate(line for line in handle if line.strip()):
                if index in wanted:
                    found[index] = json.loads(line)
                if len(found) == len(wanted):
                    break
        taken = [found[i] for i in indices]
    else:
        taken = [dict(r) for r in hub_dataset(data.name, data.subset, data.split, of_records).select(indices)]
    keep = _field(taken[0])
    return Dataset.from_dict({keep: [calls_as_text(record[keep]) for record in taken]})


def token_count(tokenizer, max_length: int, record: dict) -> int:
    """A text or chat record's tokens as TRL sees them, at most max_length (TRL's packing truncates the rest)."""
    if "messages" in record:
        ids = tokenizer.apply_chat_template(record["messages"], tokenize=True)["input_ids"]
    else:
        ids = tokenizer(record["text"])["input_ids"]
    return min(len(ids), max_length)
