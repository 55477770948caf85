"""A job reads only the records its steps use: setting it up costs the same whatever the size of the jsonl file, and
its memory is its training's. The up-front check still reads every line."""

from __future__ import annotations

import functools
import json

import pytest

from pipeline.builders.batches import whole_batches
from pipeline.builders.dataset import take_records, token_count
from pipeline.builders.order import RunOrder
from pipeline.config.data import check_data
from pipeline.config.errors import ConfigError
from pipeline.config.validate import validate
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from pipeline.records import Status

LINES = 100_000
QUIET = ["train.progress_bar=false", "measure.warmup_steps=1"]


@pytest.fixture(scope="module")
def large_jsonl(tmp_path_factory):
    """100,000 chat records (about 17 MB)."""
    path = tmp_path_factory.mktemp("data") / "large.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for i in range(LINES):
            messages = [
                {"role": "user", "content": f"question {i}: what is {i} times three?"},
                {"role": "assistant", "content": f"{i} times three is {3 * i}."},
            ]
            out.write(json.dumps({"messages": messages}) + "\n")
    return path


def test_a_large_jsonl_starts_training_within_10_s(tmp_path, large_jsonl, compose):
    """3 steps of batch 4 use 12 of the 100,000 records: the job reads those, and its first step begins within 10 s
    of its start (its own recorded timing; TRL used to prepare every record first: 390 s for 904k)."""
    cfg = compose("data=jsonl", f"data.path={large_jsonl}", "train.steps=3", *QUIET)
    workdir = tmp_path / "job"
    workdir.mkdir()
    job = Job(job_spec(validate(cfg)), workdir)
    result = job.run()
    assert result.status is Status.OK, result.traceback
    assert len(job.dataset) == 12
    assert [s.samples for s in result.steps] == [4, 4, 4]
    assert result.timings["first_step_s"] < 10, result.timings


def test_packing_reads_the_records_that_fill_its_sequences(tmp_path, large_jsonl, compose):
    """With packing, a step's samples are sequences of max_length tokens: the job reads as many records as fill the
    steps' sequences, and every step still gets its full batch of them."""
    overrides = ["train.padding=packing", "train.max_length=256", "train.steps=2"]
    cfg = compose("data=jsonl", f"data.path={large_jsonl}", *overrides, *QUIET)
    workdir = tmp_path / "job"
    workdir.mkdir()
    job = Job(job_spec(validate(cfg)), workdir)
    result = job.run()
    assert result.status is Status.OK, result.traceback
    count = functools.partial(token_count, job.tokenizer, job.cfg.train.max_length)
    tokens = sum(count(record) for record in job.dataset)
    assert 8 < len(job.dataset) < 200 and tokens >= 8 * 256
    assert tokens - count(job.dataset[-1]) < 8 * 256  # not one record more than needed
    assert len(job.trainer.train_dataset) >= 8  # packed: enough sequences for 2 steps of 4, none seen twice
    assert len(result.steps) == 2 and all(s.tokens > 3 * 256 for s in result.steps)  # 4 sequences of up to 256


def test_take_records_stops_as_soon_as_samples_and_tokens_suffice():
    records = iter([{"text": "x" * n} for n in (5, 5, 5, 5, 5, 5)])
    assert len(take_records(records, 2)) == 2
    assert len(take_records(iter([{"text": "x" * 5}] * 6), 2, lambda r: len(r["text"]), tokens=12)) == 3
    assert len(take_records(iter([{"text": "x" * 5}] * 2), 4, lambda r: len(r["text"]), tokens=100)) == 2


def test_records_fewer_than_the_steps_read_are_cut_to_whole_batches():
    """5 records at an effective batch of 4 trained 4, 1, 4, 1 samples a step, each step counted as whole: the run
    keeps whole batches (4 of 5; 198 of 200 at 6), and every record where they cover the steps. With packing the
    samples are sequences: no cut."""
    assert [whole_batches(n, 24, 4) for n in (5, 8, 24, 30)] == [4, 8, 24, 30]
    assert whole_batches(200, 216, 6) == 198
    assert len(take_records(iter([{"text": "x"}] * 5), 24, effective=4)) == 4
    assert len(take_records(iter([{"text": "x"}] * 5), 24, lambda r: 1, tokens=100, effective=4)) == 5


@pytest.mark.slow
def test_a_run_whose_data_runs_out_trains_whole_batches_and_its_order_reads_the_same_records(tmp_path, compose):
    """The job (6 steps of 4 from 5 records) trains 4 samples every step, and the run's order, which names its
    longest micro-batch and the step that trains it, reads the same 4 records the job does."""
    path = tmp_path / "five.jsonl"
    path.write_text("".join(json.dumps({"text": "hello " * (3 + i)}) + "\n" for i in range(5)), encoding="utf-8")
    cfg = validate(compose("data=jsonl", f"data.path={path}", "train.steps=6", *QUIET))
    workdir = tmp_path / "job"
    workdir.mkdir()
    job = Job(job_spec(cfg), workdir)
    result = job.run()
    assert result.status is Status.OK, result.traceback
    assert [s.samples for s in result.steps] == [4] * 6
    assert len(RunOrder(job.cfg, epoch=False, tokenizer=job.tokenizer).lengths(False)) == len(job.dataset) == 4


def test_the_up_front_check_still_reads_every_line(tmp_path, large_jsonl, compose):
    """A bad last line is found before anything runs, though no job reads that far."""
    path = tmp_path / "bad-end.jsonl"
    path.write_bytes(large_jsonl.read_bytes() + b"not json\n")
    cfg = compose("data=jsonl", f"data.path={path}")
    with pytest.raises(ConfigError, match=rf"line {LINES + 1} is not JSON"):
        check_data(cfg.data, cfg.train.max_length, cfg.batch.effective)


def test_a_hub_dataset_is_cut_to_the_records_used(tmp_path, monkeypatch, compose):
    """A hub dataset (here a local folder of data files, read as the hub's are) is cut to its first records before
    TRL prepares it."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "hub"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"record {i}"}) + "\n" for i in range(1000)))
    hub = ["data=capybara", f"data.name={folder}", "data.subset=null", "data.split=train", "train.steps=2"]
    workdir = tmp_path / "job"
    workdir.mkdir()
    job = Job(job_spec(validate(compose(*hub, *QUIET))), workdir)
    result = job.run()
    assert result.status is Status.OK, result.traceback
    assert job.dataset["text"] == [f"record {i}" for i in range(8)]


def test_a_hub_dataset_smaller_than_one_batch_is_refused_where_it_is_read(tmp_path, monkeypatch, compose):
    """3 records at an effective batch of 4 would train 3 samples a step counted as 4. A local folder is refused up
    front (`config.folder_data`); a hub id only its job can read, so the reader refuses it too, in one line naming
    the field, the count and the accepted form (here on the local folder, which the reader takes as it takes a
    downloaded dataset)."""
    import datasets

    from pipeline.builders.dataset import build_dataset

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "hub"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"record {i}"}) + "\n" for i in range(3)))
    cfg = compose("data=capybara", f"data.name={folder}", "data.subset=null", "data.split=train", *QUIET)
    message = (
        f"data.name: '{folder}' split train has 3 records, fewer than batch.effective 4; accepted: a dataset of 4 "
        "records or more, or a smaller batch.effective"
    )
    with pytest.raises(ConfigError) as up_front:
        validate(cfg)
    with pytest.raises(ConfigError) as in_the_job:
        build_dataset(cfg.data, 256, 0, needed=8, effective=4)
    assert str(up_front.value) == str(in_the_job.value) == message


def test_a_jsonl_file_that_starts_with_a_byte_order_mark_is_read_as_its_records(tmp_path, compose):
    """Windows editors save UTF-8 with a byte-order mark: its first line was 'not JSON'. The check and the reader
    both take the mark for what it is, and both end a line where the other reads one end."""
    from pipeline.builders.dataset import jsonl_dataset

    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps({"text": f"record {i}"}) + "\r\n" for i in range(4)).encode())
    cfg = compose("data=jsonl", f"data.path={path}")
    check_data(cfg.data, cfg.train.max_length, cfg.batch.effective)
    assert jsonl_dataset(str(path), 4)["text"] == [f"record {i}" for i in range(4)]
    old_mac = tmp_path / "cr.jsonl"  # a lone carriage return ends a line for the job's reader: for the check too
    old_mac.write_bytes("".join(json.dumps({"text": f"record {i}"}) + "\r" for i in range(4)).encode())
    check_data(compose("data=jsonl", f"data.path={old_mac}").data, cfg.train.max_length, cfg.batch.effective)
    assert jsonl_dataset(str(old_mac), 4)["text"] == [f"record {i}" for i in range(4)]


@pytest.mark.slow
def test_packed_sequences_fewer_than_the_steps_read_are_cut_to_whole_batches(tmp_path, compose):
    """Packing 10 records of one sequence each for 6 steps of 4 trained 4, 4, 2, 4, 4, 2 sequences a step, each
    counted whole: the job keeps 8 of the 10 (every step 4), and data that packs into fewer sequences than one batch
    fails its job in one line."""
    path = tmp_path / "ten.jsonl"
    path.write_text("".join(json.dumps({"text": chr(97 + i) * 59}) + "\n" for i in range(10)), encoding="utf-8")
    packed = ["data=jsonl", f"data.path={path}", "train.padding=packing", "train.max_length=64", *QUIET]
    workdir = tmp_path / "job"
    workdir.mkdir()
    job = Job(job_spec(validate(compose(*packed, "train.steps=6"))), workdir)
    result = job.run()
    assert result.status is Status.OK, result.traceback
    assert len(job.trainer.train_dataset) == 8
    assert [s.samples for s in result.steps] == [4] * 6
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps({"text": "ab"}) + "\n" for _ in range(4)), encoding="utf-8")
    (tmp_path / "job2").mkdir()
    cfg = validate(compose(*packed, f"data.path={short}", "train.steps=2"))
    failed = Job(job_spec(cfg), tmp_path / "job2").run()
    assert failed.status is Status.FAILED
    assert failed.error == (
        "ValueError: packing made 1 sequence of the data, fewer than batch.effective 4: more records, "
        "a smaller train.max_length or a smaller batch.effective"
    )


def test_a_local_folder_that_the_library_cannot_read_is_one_line_whatever_it_raises(tmp_path, monkeypatch):
    """Each raised something the first check did not catch (a traceback): an empty data file (StopIteration), a
    card with broken front matter (a YAML error), bytes where 'text' is (json.dumps failed on them showing it); a
    split given as a slice it cannot parse blamed data.name."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.config.folder_data import check_folder

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "train.jsonl").write_text("")
    card = tmp_path / "card"
    card.mkdir()
    (card / "train.jsonl").write_text("".join(json.dumps({"text": f"r{i}"}) + "\n" for i in range(4)))
    (card / "README.md").write_text("---\nconfigs: [unclosed\n---\n")
    raw = tmp_path / "raw"
    raw.mkdir()
    pq.write_table(pa.table({"text": [b"\xff\xfe", b"ab"]}), raw / "train.parquet")
    said = {}
    for folder, split in ((empty, "train"), (card, "train"), (raw, "train"), (card.parent / "raw", "train[:abc]")):
        with pytest.raises(ConfigError) as refused:
            check_folder(str(folder), None, split, 4)
        said[(folder.name, split)] = str(refused.value)
    assert said[("empty", "train")].startswith(f"data.name: '{empty}' cannot be read (a data file in it is empty)")
    assert "cannot be read" in said[("card", "train")]
    assert said[("raw", "train")].startswith(f"data.name: '{raw}' split train record 1 'text' is \"b'\\\\xff\\\\xfe'\"")
    assert said[("raw", "train[:abc]")].startswith("data.split: got 'train[:abc]'; accepted: a split that")


def test_a_folder_given_as_a_home_path_trains_where_it_was_checked(tmp_path, monkeypatch):
    """`~/data` passed the check (which expands it) and failed in the job, which handed the raw name to
    `load_dataset` (a hub id, refused)."""
    import datasets

    from pipeline.builders.dataset import hub_dataset

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps({"text": f"r{i}"}) + "\n" for i in range(4)))
    assert hub_dataset("~/data", None, "train", 4)["text"] == ["r0", "r1", "r2", "r3"]


TOOL_CHAT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris."},
]


def _tool_chats(path, count=4):
    path.write_text("".join(json.dumps({"messages": TOOL_CHAT}) + "\n" for _ in range(count)), encoding="utf-8")
    return path


def test_an_assistant_turn_that_calls_a_tool_is_accepted_and_trained_on_with_its_call(tmp_path, compose):
    """OpenAI's form of a tool call (content null, 'tool_calls' beside it) was refused as 'a content of null'; it is
    accepted, and the built-in template renders the call as Qwen's templates do, so its tokens are trained on."""
    from pipeline.builders.dataset import record_ids
    from pipeline.builders.tokenizer import byte_level_tokenizer

    cfg = compose("data=jsonl", f"data.path={_tool_chats(tmp_path / 'tools.jsonl')}")
    check_data(cfg.data, cfg.train.max_length, cfg.batch.effective)
    tokenizer = byte_level_tokenizer()
    rendered = tokenizer.decode(record_ids(tokenizer, {"messages": TOOL_CHAT}))
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>" in rendered
    )
    assert "None" not in rendered


def test_tool_calls_are_trained_as_written_whatever_their_arguments_in_other_records(tmp_path, compose):
    """Arguments as an object in one record and as text in another made one Arrow table refuse the file inside the
    job; objects of other keys were merged, each record trained with the other's keys as null. Each record's tokens
    are its own template's, as the up-front check and the run's order count them."""
    from pipeline.builders.dataset import jsonl_dataset, record_ids
    from pipeline.builders.tokenizer import byte_level_tokenizer

    def chat(arguments):
        call = {"type": "function", "function": {"name": "f", "arguments": arguments}}
        return {
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
        }

    records = [chat({"city": "Paris"}), chat('{"tz": "CET"}'), chat({"tz": "UTC"}), {"messages": TOOL_CHAT[:1]}]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    tokenizer = byte_level_tokenizer()
    trained = [record_ids(tokenizer, row) for row in jsonl_dataset(str(path), 4)]
    assert trained == [record_ids(tokenizer, r) for r in records]
    texts = [tokenizer.decode(ids) for ids in trained]
    assert '{"name": "f", "arguments": {"city": "Paris"}}' in texts[0] and "null" not in texts[0]
    assert '{"name": "f", "arguments": {"tz": "CET"}}' in texts[1]
