"""Chat-template parity: every template in shared/data/chat-templates rendered by our C++ interpreter
(tests/support/tools/chat_template_tool) and by Python Jinja2 set up as transformers'
apply_chat_template sets it up, over a suite of conversations. Output must be byte-identical, or
both must raise."""
import copy
import datetime
import json
import os
import subprocess
import tempfile
from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

SOURCE_DIR = Path(os.environ.get("FLINT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
BUILD_DIR = Path(os.environ.get("FLINT_BUILD_DIR", SOURCE_DIR / "build"))
TOOL = BUILD_DIR / "tests" / "chat_template_tool"
TEMPLATE_DIR = Path(os.environ.get("FLINT_CHAT_TEMPLATES", "/work/shared/data/chat-templates"))
if not TEMPLATE_DIR.is_dir():
    TEMPLATE_DIR = SOURCE_DIR.parent / "shared" / "data" / "chat-templates"
NOW = 1767225600 + 13 * 3600 + 5 * 60  # a fixed clock for strftime_now (2026-01-01 13:05 UTC)


def reference_env():
    """jinja2 as transformers' _compile_jinja_template builds it."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_COMPILED = {}


def reference_render(source, context):
    try:
        if source not in _COMPILED:
            _COMPILED[source] = reference_env().from_string(source)
        return True, _COMPILED[source].render(**copy.deepcopy(context))
    except Exception as e:  # any Jinja2 or Python error counts as "raises"
        return False, f"{type(e).__name__}: {e}"


def ours(template_path, cases):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
        cases_path = f.name
    try:
        out = subprocess.run([str(TOOL), str(template_path), cases_path, str(NOW)],
                             capture_output=True, check=True, timeout=120)
    finally:
        os.unlink(cases_path)
    return json.loads(out.stdout.decode("utf-8"))


# ---- the conversation suite ----

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city. Uses \"metric\" units & <tags>.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search documents.\nReturns the top matches.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "score": {"type": "number", "description": "minimum score"},
                        "exact": {"type": "boolean"},
                    },
                },
                "limit": {"type": ["integer", "null"]},
            },
            "required": ["query", "filters"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]
NESTED_ARGS = {"query": "flint \"MoE\" 模型", "filters": {"tags": ["a", "b\\c", "😀"], "score": 0.75,
                                                        "exact": True, "extra": None},
               "limit": 10}


def call(name, args, as_string, call_id="a1B2c3D4e"):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)
                         if as_string else args}}


def conversations():
    sys_msg = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
    user = {"role": "user", "content": "What is the weather in Paris?"}
    convs = {
        "user_only": [user],
        "system_user": [sys_msg, user],
        "multi_turn": [sys_msg, user, {"role": "assistant", "content": "It is sunny, 21°C."},
                       {"role": "user", "content": "And tomorrow?\nGive details."}],
        "reasoning": [user, {"role": "assistant", "content": "Sunny.",
                             "reasoning_content": "The user asks about weather. I recall it."},
                      {"role": "user", "content": "Thanks! And Rome?"}],
        "think_in_content": [user, {"role": "assistant",
                                    "content": "<think>\nLet me think.\n</think>\n\nSunny."},
                             {"role": "user", "content": "ok"}],
        "unicode": [{"role": "system", "content": "Réponds en français 🇫🇷 — «ok»."},
                    {"role": "user", "content": "你好，世界！こんにちは 🌍 e\u0301 \\n 'q' \"dq\" \t tab"},
                    {"role": "assistant", "content": "Ça va 😀 ✓ Ω≈ç√"},
                    {"role": "user", "content": "  spaces around  \n\n"}],
        "content_parts": [sys_msg, {"role": "user", "content": [
            {"type": "text", "text": "Describe this:"}, {"type": "text", "text": " two parts."}]}],
        "only_system": [sys_msg],
        "empty": [],
        "double_user": [user, {"role": "user", "content": "Hello again"}],
        "prefill": [user, {"role": "assistant", "content": "The weather is"}],
    }
    for as_string in (False, True):
        tag = "str" if as_string else "dict"
        convs[f"tool_calls_{tag}"] = [
            sys_msg, user,
            {"role": "assistant", "content": "", "tool_calls": [
                call("get_weather", {"city": "Paris", "unit": "celsius", "days": 2}, as_string)]},
            {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "get_weather",
             "content": json.dumps({"temp": 21.5, "sky": "clear"})},
            {"role": "assistant", "content": "It is 21.5°C and clear."},
            {"role": "user", "content": "Search the docs too."}]
        convs[f"parallel_calls_{tag}"] = [
            user,
            {"role": "assistant", "content": None, "reasoning_content": "Two calls needed.",
             "tool_calls": [call("get_weather", {"city": "Paris"}, as_string, "Zz9Yy8Xx7"),
                            call("search_docs", NESTED_ARGS, as_string, "Qq1Ww2Ee3")]},
            {"role": "tool", "tool_call_id": "Zz9Yy8Xx7", "content": "sunny"},
            {"role": "tool", "tool_call_id": "Qq1Ww2Ee3", "content": "[\"doc1\", \"doc2\"]"}]
        convs[f"calls_empty_content_{tag}"] = [
            sys_msg, user,
            {"role": "assistant", "content": "",
             "tool_calls": [call("search_docs", NESTED_ARGS, as_string, "Qq1Ww2Ee3")]},
            {"role": "tool", "tool_call_id": "Qq1Ww2Ee3", "content": "no results"},
            {"role": "assistant", "content": "Nothing found.", "reasoning_content": "Empty."}]
    return convs


def contexts():
    out = []
    for name, messages in conversations().items():
        for gen in (True, False):
            for kw_name, kwargs in (("plain", {}), ("no_think", {"enable_thinking": False}),
                                    ("think", {"enable_thinking": True})):
                for tools_name, tools in (("notools", None), ("tools", TOOLS)):
                    if tools_name == "tools" and kw_name == "think":
                        continue
                    ctx = {"messages": messages, "tools": tools, "documents": None,
                           "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>",
                           "unk_token": "<unk>", "pad_token": "<pad>", **kwargs}
                    out.append((f"{name}/gen={int(gen)}/{kw_name}/{tools_name}", ctx))
    # A context without the tools key at all, and one with an extra custom kwarg.
    out.append(("no_tools_key", {"messages": conversations()["multi_turn"],
                                 "add_generation_prompt": True, "bos_token": "<s>",
                                 "eos_token": "</s>"}))
    out.append(("custom_kwarg", {"messages": conversations()["system_user"], "tools": TOOLS,
                                 "add_generation_prompt": True, "bos_token": "<s>",
                                 "eos_token": "</s>", "reasoning_effort": "high",
                                 "clear_thinking": False}))
    return out


TEMPLATES = sorted(TEMPLATE_DIR.glob("*.jinja"))


def test_templates_found():
    assert len(TEMPLATES) >= 14, f"chat templates missing from {TEMPLATE_DIR}"


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.stem for t in TEMPLATES])
def test_template_matches_jinja2(template):
    source = template.read_bytes().decode("utf-8")
    cases = contexts()
    got = ours(template, [c for _, c in cases])
    assert len(got) == len(cases)
    failures = []
    rendered = 0
    for (name, ctx), mine in zip(cases, got):
        ok, want = reference_render(source, ctx)
        if ok:
            rendered += 1
            if not mine["ok"]:
                failures.append(f"{name}: jinja2 rendered, we failed: {mine['error']}")
            elif mine["text"] != want:
                a, b = mine["text"], want
                k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
                failures.append(f"{name}: differs at {k}: ours {a[max(0, k-40):k+40]!r} "
                                f"want {b[max(0, k-40):k+40]!r}")
        elif mine["ok"]:
            failures.append(f"{name}: jinja2 raised ({want}), we rendered")
    print(f"{template.name}: {len(cases) - len(failures)}/{len(cases)} cases pass "
          f"({rendered} rendered, {len(cases) - rendered} raise in jinja2)")
    assert not failures, f"{len(failures)} of {len(cases)} differ:\n" + "\n".join(failures[:15])
