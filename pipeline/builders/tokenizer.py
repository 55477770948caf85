"""The tokenizer: the pretrained one for `source: pretrained`, otherwise a byte-level one built offline.

A byte-level tokenizer (256 byte tokens and four specials) fits in every vocabulary here, needs no download, and lets
jsonl or hub text train a random-weight model with the same TRL preprocessing as a real one.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from pipeline.config.choices import ModelSource
from pipeline.config.schema import ModelConfig

SPECIALS = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML; an assistant's tool calls as Qwen3's template writes them (one <tool_call> of JSON each after the content,
# arguments given as text written as they are)
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] or '' }}"
    "{% for call in message.get('tool_calls') or [] %}{% set f = call.function or call %}"
    "{% if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    '{{ \'<tool_call>\\n{"name": "\' }}{{ f.name }}{{ \'", "arguments": \' }}'
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
    "{{ '}\\n</tool_call>' }}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    alphabet = ByteLevel.alphabet()
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for char in sorted(alphabet):
        vocab[char] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<|pad|>",
        eos_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def build_tokenizer(model: ModelConfig) -> PreTrainedTokenizerBase:
    if model.source == ModelSource.PRETRAINED:
        tokenizer = AutoTokenizer.from_pretrained(model.name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer
    return byte_level_tokenizer()
