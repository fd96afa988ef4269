"""flint-nano's data pipeline (tools/nano, no torch): generated chat examples are what the server
would feed plus what the model should answer, tool calls are well formed, and the tokenizer
trainer gives single-id special tokens and lossless round trips."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("FLINT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(SOURCE_DIR / "tools" / "nano"))

import chat_data  # noqa: E402
import prepare_data  # noqa: E402

TOOL_BLOCK = re.compile(r"<tool_call>([^<\s]+)((?:<arg_key>[^<]*</arg_key><arg_value>[^<]*</arg_value>)*)"
                        r"</tool_call>")


@pytest.fixture(scope="module")
def examples():
    return chat_data.examples(300, seed=11)


def test_chat_examples_start_and_stop_like_served_turns(examples):
    for ex in examples:
        assert ex.startswith("[gMASK]<sop>")
        assert ex.endswith(("<|user|>", "<|observation|>"))
        assert ex.count("<|assistant|>") >= 1


def test_chat_examples_tool_calls_name_a_declared_tool_with_its_arguments(examples):
    calls = 0
    for ex in examples:
        declared = {}
        for line in re.findall(r"^\{.*\}$", ex, re.M):
            fn = json.loads(line)["function"]
            declared[fn["name"]] = set(fn["parameters"]["properties"])
        turns = ex[ex.index("<|user|>"):]  # after the system prompt's format description
        for name, args in TOOL_BLOCK.findall(turns):
            keys = re.findall(r"<arg_key>([^<]*)</arg_key>", args)
            assert name in declared, (name, ex)
            assert set(keys) == declared[name], (keys, ex)
            calls += 1
        assert turns.count("<tool_call>") == len(TOOL_BLOCK.findall(turns))  # all well formed
    assert calls > 50


def test_generation_prompt_is_prefix_of_training_text():
    """The server renders messages[:-1] with add_generation_prompt; the trained text must continue
    exactly that prompt (thinking on: '<think>'; thinking off: '</think>')."""
    r = chat_data.Renderer()
    tools = [chat_data.TOOLS["get_weather"][0]]
    user = [{"role": "user", "content": "What's the weather in Oslo?"}]
    with_reasoning = {"role": "assistant", "content": "", "reasoning_content": "Call it.",
                      "tool_calls": [{"type": "function", "function": {
                          "name": "get_weather", "arguments": {"city": "Oslo"}}}]}
    full = r.render(user + [with_reasoning], tools=tools)
    prompt = r.render(user, tools=tools, add_generation_prompt=True)
    assert full.startswith(prompt) and prompt.endswith("<|assistant|><think>")
    assert full[len(prompt):] == ("Call it.</think><tool_call>get_weather<arg_key>city</arg_key>"
                                  "<arg_value>Oslo</arg_value></tool_call>")
    plain = {"role": "assistant", "content": "Hi!"}
    full = r.render(user + [plain])
    prompt = r.render(user, add_generation_prompt=True, enable_thinking=False)
    assert full == prompt + "Hi!"


def test_tokenizer_trainer_keeps_special_tokens_whole_and_round_trips():
    texts = chat_data.examples(40, seed=3) + [
        "def add(a, b):\n    return a + b\n", "Ünïcode text — with ✓ symbols\n\tand tabs  "]
    tok = prepare_data.train_tokenizer(texts, 600)
    assert tok.get_vocab_size() == 600
    for t in prepare_data.SPECIAL_TOKENS:
        assert tok.encode(t, add_special_tokens=False).ids == [tok.token_to_id(t)]
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == t


def test_readable_filter_drops_tables_and_keeps_code():
    assert prepare_data.readable("def f(x):\n    return x + 1\n")
    assert not prepare_data.readable("x = [" + "1, " * 300 + "]\n")
    assert not prepare_data.readable("0123 4567 89ab cdef\n" * 50)
    assert not prepare_data.readable("   \n")
