"""GLM-4.7 tool calls and reasoning end to end, on a scripted tiny model whose weights emit
    <think>The weather</think>Sure.<tool_call>get_weather<arg_key>city</arg_key>
    <arg_value>Paris</arg_value></tool_call>
(the prompt ends in <think>, as GLM-4.7's template writes it; with thinking off it ends in
</think> and the model continues from "Sure."). Checked with the official openai client, streaming
through its accumulator and not."""

from __future__ import annotations

import json

import openai
import pytest
import requests

from conftest import COMMON_ARGS, FlintServer

MODEL = "flint-tiny"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(scripted_model, log_dir):
    with FlintServer(scripted_model, *COMMON_ARGS, "--enable-auto-tool-choice",
                     "--tool-call-parser", "glm47", "--reasoning-parser", "glm47",
                     log_dir=log_dir) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)


def check_call(message):
    assert message.tool_calls is not None and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("chatcmpl-tool-")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.function.arguments == '{"city": "Paris"}'


def test_tool_call_and_reasoning_non_streaming(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=64)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content == "Sure."
    check_call(c.message)
    extra = c.message.model_extra
    assert extra["reasoning"] == "The weather"
    assert extra["reasoning_content"] == "The weather"


def test_tool_call_and_reasoning_streaming_accumulator(client):
    with client.chat.completions.stream(model=MODEL, messages=MESSAGES, tools=TOOLS,
                                        max_tokens=64) as stream:
        reasoning = ""
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                delta = event.chunk.choices[0].delta
                reasoning += (delta.model_extra or {}).get("reasoning") or ""
        final = stream.get_final_completion()
    c = final.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content == "Sure."
    check_call(c.message)
    assert reasoning == "The weather"


def test_stream_tool_deltas_name_once_then_arguments(server):
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 64, "stream": True}
    with requests.post(server.url + "/v1/chat/completions", json=body, stream=True,
                       timeout=60) as r:
        events = [l[6:] for l in r.iter_lines(decode_unicode=True) if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [d for e in events[:-1] for c in json.loads(e)["choices"]
              for d in c["delta"].get("tool_calls", [])]
    assert deltas[0]["index"] == 0 and deltas[0]["type"] == "function"
    assert deltas[0]["function"]["name"] == "get_weather" and deltas[0]["id"]
    assert all("name" not in d.get("function", {}) and "id" not in d for d in deltas[1:])
    assert "".join(d["function"]["arguments"] for d in deltas) == '{"city": "Paris"}'
    content = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                      for e in events[:-1] if json.loads(e)["choices"])
    assert content == "Sure."  # no tag text leaked


def test_thinking_disabled_has_no_reasoning(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=64,
                                       extra_body={"chat_template_kwargs":
                                                   {"enable_thinking": False}})
    c = r.choices[0]
    assert c.message.model_extra.get("reasoning") is None
    assert c.message.content == "Sure."
    check_call(c.message)


def test_tool_choice_none_returns_text(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS,
                                       tool_choice="none", max_tokens=64)
    c = r.choices[0]
    assert not c.message.tool_calls
    assert c.finish_reason == "stop"
    assert "get_weather" in c.message.content


def test_exclude_tools_when_tool_choice_none(scripted_model, log_dir, server):
    def prompt_tokens(url):
        r = requests.post(url + "/v1/chat/completions", json={
            "model": MODEL, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "none",
            "max_tokens": 1}, timeout=60)
        return r.json()["usage"]["prompt_tokens"]
    plain = requests.post(server.url + "/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 1}, timeout=60).json()
    with_tools = prompt_tokens(server.url)
    assert with_tools > plain["usage"]["prompt_tokens"]  # tools are rendered by default
    with FlintServer(scripted_model, *COMMON_ARGS, "--enable-auto-tool-choice",
                     "--tool-call-parser", "glm47", "--exclude-tools-when-tool-choice-none",
                     log_dir=log_dir) as s:
        assert prompt_tokens(s.url) == plain["usage"]["prompt_tokens"]


def test_auto_tool_choice_needs_flags(scripted_model, log_dir):
    with FlintServer(scripted_model, *COMMON_ARGS, log_dir=log_dir) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
        assert "--enable-auto-tool-choice" in e.value.message
        # Without the reasoning parser, the think block stays in the content.
        r = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3)
        assert r.choices[0].message.model_extra.get("reasoning") is None
