"""`flint serve` against the official openai client: chat, completions, streaming (the client's
own stream accumulator), n>1, stop strings, logprobs, seed reproducibility, usage, models,
tokenize/detokenize, health, version, metrics and API keys. Token-level expectations come from
the `tokenizers` package reading the same tokenizer.json."""

from __future__ import annotations

import math

import openai
import pytest
import requests
from tokenizers import Tokenizer

from conftest import COMMON_ARGS, FlintServer, metric

MODEL = "flint-tiny"


@pytest.fixture(scope="module")
def server(random_model, log_dir):
    with FlintServer(random_model, *COMMON_ARGS, "--seed", "0", log_dir=log_dir) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tok(random_model):
    return Tokenizer.from_file(f"{random_model}/tokenizer.json")


def chat(client, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("messages", [{"role": "user", "content": "Hello, world!"}])
    kw.setdefault("max_tokens", 8)
    return client.chat.completions.create(**kw)


def test_health_version_models(server):
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
    assert requests.get(server.url + "/version", timeout=5).json()["version"]
    models = openai.OpenAI(base_url=server.url + "/v1", api_key="x").models.list()
    assert [m.id for m in models.data] == ["flint-tiny", "flint-alias"]
    assert models.data[0].max_model_len == 512


def test_chat_completion_shape_and_usage(client, tok, random_model):
    r = chat(client, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == MODEL
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 6
    # The prompt is the chat template's rendering, tokenized without special-token additions.
    rendered = requests.post(str(client.base_url).replace("/v1/", "/tokenize"),
                             json={"model": MODEL, "messages": [{"role": "user",
                                                                 "content": "Hello, world!"}]},
                             timeout=10).json()
    assert r.usage.prompt_tokens == rendered["count"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + 6


def test_chat_alias_model_name_is_echoed(client):
    r = chat(client, model="flint-alias", max_tokens=2)
    assert r.model == "flint-alias"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        chat(client, model="nope")
    assert "nope" in e.value.message


def test_greedy_chat_stream_matches_non_stream(client):
    kw = dict(max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    full = chat(client, **kw).choices[0].message.content
    with client.chat.completions.stream(model=MODEL, messages=[
            {"role": "user", "content": "Hello, world!"}], **kw) as stream:
        for _ in stream:
            pass
        # get_final_completion() refuses finish_reason "length"; the accumulated snapshot is the
        # same state without that check.
        final = stream.current_completion_snapshot
    assert final.choices[0].message.content == full
    assert final.choices[0].finish_reason == "length"


def test_stream_chunks_role_first_finish_last_usage_done(server):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    with requests.post(server.url + "/v1/chat/completions", json=body, stream=True,
                       timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in r.iter_lines(decode_unicode=True)
                  if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    import json
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len({c["id"] for c in chunks}) == 1
    with_choices = [c for c in chunks if c["choices"]]
    assert with_choices[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in with_choices[:-1])
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5


def test_completions_and_stream(client):
    r = client.completions.create(model=MODEL, prompt="The quick brown", max_tokens=7,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert r.usage.completion_tokens == 7
    text = r.choices[0].text
    pieces = []
    finish = None
    for chunk in client.completions.create(model=MODEL, prompt="The quick brown", max_tokens=7,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}):
        for c in chunk.choices:
            pieces.append(c.text)
            finish = c.finish_reason or finish
    assert "".join(pieces) == text
    assert finish == "length"


def test_completion_token_prompt_and_echo(client, tok):
    ids = tok.encode("Hello, world!").ids
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=3, temperature=0,
                                  echo=True, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == len(ids)
    assert r.choices[0].text.startswith("Hello, world!")


def test_n_choices_are_independent_and_indexed(client):
    r = chat(client, n=3, max_tokens=10, temperature=1.0, seed=11,
             extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 30
    texts = {c.message.content for c in r.choices}
    assert len(texts) > 1  # sampled at temperature 1 over a random model


def test_seed_reproducible(client):
    kw = dict(max_tokens=16, temperature=1.0, extra_body={"ignore_eos": True})
    a = chat(client, seed=1234, **kw).choices[0].message.content
    b = chat(client, seed=1234, **kw).choices[0].message.content
    c = chat(client, seed=4321, **kw).choices[0].message.content
    assert a == b
    assert a != c


def test_stop_string_is_excluded(client):
    full = client.completions.create(model=MODEL, prompt="Hello", max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    assert len(full) > 6
    stop = full[3:5]
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=24, temperature=0,
                                  stop=[stop], extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.text == full[:full.index(stop)]


def test_chat_logprobs(client, tok):
    r = chat(client, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3,
             extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    joined = "".join(t.token for t in content)
    if "\ufffd" not in joined:  # tokens can split a UTF-8 character
        assert joined == r.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 3
        assert t.logprob <= 0.0
        # Greedy: the chosen token is the most likely one.
        assert math.isclose(t.logprob, t.top_logprobs[0].logprob, abs_tol=1e-4)
        assert bytes(t.bytes) == t.token.encode()
        probs = [math.exp(x.logprob) for x in t.top_logprobs]
        assert probs == sorted(probs, reverse=True) and sum(probs) <= 1.0 + 1e-4


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0,
                                  logprobs=2, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    if "\ufffd" not in "".join(lp.tokens):
        assert "".join(lp.tokens) == r.choices[0].text
    for t, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert top[t] == pytest.approx(l)


def test_tokenize_detokenize_match_tokenizers(server, tok):
    text = "The quick brown fox, 123!"
    r = requests.post(server.url + "/tokenize", json={"model": MODEL, "prompt": text,
                                                      "add_special_tokens": False}, timeout=10)
    assert r.status_code == 200
    j = r.json()
    assert j["tokens"] == tok.encode(text, add_special_tokens=False).ids
    assert j["count"] == len(j["tokens"]) and j["max_model_len"] == 512
    d = requests.post(server.url + "/detokenize", json={"model": MODEL, "tokens": j["tokens"]},
                      timeout=10)
    assert d.json() == {"prompt": text}


def test_metrics_names_and_counts(server, client):
    before = metric(server.url, "vllm:generation_tokens_total")
    chat(client, max_tokens=4, extra_body={"ignore_eos": True})
    text = requests.get(server.url + "/metrics", timeout=10).text
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count"]:
        assert f'{name}{{model_name="flint-tiny"' in text, name
    assert metric(server.url, "vllm:generation_tokens_total") >= before + 4
    assert metric(server.url, "vllm:e2e_request_latency_seconds_count") >= 1


def test_api_key(random_model, log_dir):
    with FlintServer(random_model, *COMMON_ARGS, "--api-key", "sekrit", log_dir=log_dir) as s:
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0)
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        assert good.chat.completions.create(model=MODEL, max_tokens=2, messages=[
            {"role": "user", "content": "hi"}]).choices
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model=MODEL, max_tokens=2,
                                        messages=[{"role": "user", "content": "hi"}])
        r = requests.get(s.url + "/v1/models", timeout=5)
        assert r.status_code == 401 and r.json()["error"]["code"] == 401
        assert requests.get(s.url + "/health", timeout=5).status_code == 200
