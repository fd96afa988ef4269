"""Bad input and abuse against one `flint serve`, which must stay up and healthy after each:
malformed JSON, wrong types, huge bodies, invalid UTF-8, negative/NaN/absurd parameters,
unsupported parameters, prompts over --max-model-len, 100 parallel requests, and clients that
disconnect mid-stream (KV usage back to zero afterwards, read from /metrics). Also CLI errors."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import socket
import subprocess
import time

import pytest
import requests

from conftest import COMMON_ARGS, FlintServer, flint_bin, metric

MODEL = "flint-tiny"


@pytest.fixture(scope="module")
def server(random_model, log_dir):
    with FlintServer(random_model, *COMMON_ARGS, "--max-request-body", "1M",
                     log_dir=log_dir) as s:
        yield s


@pytest.fixture(autouse=True)
def healthy_after(request):
    yield
    if "server" in request.fixturenames:
        s = request.getfixturevalue("server")
        assert s.alive(), s.logs()
        assert requests.get(s.url + "/health", timeout=10).status_code == 200


def post(server, path, data, headers=None):
    h = {"Content-Type": "application/json", **(headers or {})}
    return requests.post(server.url + path, data=data, headers=h, timeout=60)


def chat_body(**kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    body.update(kw)
    return body


def expect_400(r, param=None, text=None):
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == 400 and err["type"] == "BadRequestError"
    if param is not None:
        assert err["param"] == param, err
    if text is not None:
        assert text in err["message"], err


@pytest.mark.parametrize("data", [b"{", b"not json", b"[1, 2]", b"", b'{"model": "flint-tiny",}'])
def test_malformed_json(server, data):
    expect_400(post(server, "/v1/chat/completions", data))
    expect_400(post(server, "/v1/completions", data))


def test_invalid_utf8(server):
    expect_400(post(server, "/v1/chat/completions",
                    b'{"model": "flint-tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}'),
               text="UTF-8")


@pytest.mark.parametrize("field,value", [
    ("temperature", -1), ("temperature", "hot"), ("top_p", 0), ("top_p", 1.5), ("max_tokens", -5),
    ("max_tokens", 0), ("n", 0), ("n", 100000), ("top_k", -7), ("min_p", 2),
    ("presence_penalty", 3), ("frequency_penalty", -2.5), ("repetition_penalty", 0),
    ("seed", "x"), ("stop", 5), ("stop", [1, 2]), ("logit_bias", {"999999": 1}),
    ("logit_bias", {"1": 1000}), ("top_logprobs", 3), ("messages", []), ("messages", "hi"),
    ("stream", "yes"), ("best_of", 3), ("stream_options", {"include_usage": True}),
    ("response_format", {"type": "json_object"}), ("tools", []),
    ("tool_choice", "sometimes"), ("chat_template_kwargs", 5), ("functions", []),
    ("guided_json", {}), ("made_up_param", 1),
])
def test_bad_parameters_name_the_param(server, field, value):
    expect_400(post(server, "/v1/chat/completions", json.dumps(chat_body(**{field: value}))),
               param=field)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinite_numbers(server, literal):
    raw = '{"model": "flint-tiny", "messages": [{"role": "user", "content": "hi"}], ' \
          f'"temperature": {literal}}}'
    expect_400(post(server, "/v1/chat/completions", raw.encode()))


def test_wrong_message_shapes(server):
    for messages in [[{"content": "no role"}], [{"role": "wizard", "content": "x"}],
                     [{"role": "user", "content": 5}],
                     [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]]:
        expect_400(post(server, "/v1/chat/completions", json.dumps(chat_body(messages=messages))),
                   param="messages")


def test_completion_bad_prompts(server):
    for prompt in [None, "", [], [-1], [10 ** 9], {"a": 1}, ["a", "b"]]:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
        expect_400(post(server, "/v1/completions", json.dumps(body)), param="prompt")
    expect_400(post(server, "/v1/completions", json.dumps(
        {"model": MODEL, "prompt": "hi", "suffix": "x"})), param="suffix")


def test_huge_body_is_rejected(server):
    big = json.dumps(chat_body(messages=[{"role": "user", "content": "a" * (2 << 20)}]))
    r = post(server, "/v1/chat/completions", big.encode())
    assert r.status_code == 413
    assert r.json()["error"]["message"] == "request body too large"


def test_prompt_over_max_model_len(server):
    body = chat_body(messages=[{"role": "user", "content": "hello " * 600}], max_tokens=10)
    r = post(server, "/v1/chat/completions", json.dumps(body))
    expect_400(r, text="This model's maximum context length is 512 tokens. However, you requested "
               "10 output tokens and your prompt contains at least")
    r = post(server, "/v1/completions", json.dumps(
        {"model": MODEL, "prompt": "hello " * 600}))
    expect_400(r, text="maximum context length is 512 tokens")


def test_unknown_route_and_method(server):
    r = requests.get(server.url + "/v1/nothing", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


def test_hundred_parallel_requests(server):
    def one(i):
        stream = i % 2 == 0
        body = chat_body(max_tokens=8, stream=stream, ignore_eos=True, seed=i)
        r = requests.post(server.url + "/v1/chat/completions", json=body, timeout=300,
                          stream=stream)
        if stream:
            lines = [l for l in r.iter_lines(decode_unicode=True) if l.startswith("data: ")]
            return r.status_code, lines[-1] == "data: [DONE]"
        return r.status_code, r.json()["usage"]["completion_tokens"] == 8
    with concurrent.futures.ThreadPoolExecutor(100) as ex:
        results = list(ex.map(one, range(100)))
    assert results == [(200, True)] * 100


def wait_idle(server, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (metric(server.url, "vllm:num_requests_running") == 0
                and metric(server.url, "vllm:num_requests_waiting") == 0
                and metric(server.url, "vllm:kv_cache_usage_perc") == 0):
            return True
        time.sleep(0.1)
    return False


def raw_request(server, body: dict) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def aborted(server) -> float:
    text = requests.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise KeyError("abort counter")


# Long requests (16 choices of up to 480 tokens each) so that they are still running when the
# client leaves; the abort counter proves they were cut short rather than finished.
LONG = dict(n=16, max_tokens=480, ignore_eos=True)


def test_disconnect_mid_stream_frees_kv(server):
    assert wait_idle(server)
    before = aborted(server)
    socks = []
    for i in range(4):
        s = raw_request(server, chat_body(stream=True, **LONG))
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        socks.append(s)
    deadline = time.time() + 10
    while metric(server.url, "vllm:kv_cache_usage_perc") == 0 and time.time() < deadline:
        time.sleep(0.02)
    assert metric(server.url, "vllm:kv_cache_usage_perc") > 0
    for s in socks:
        s.close()
    assert wait_idle(server, timeout=20), "requests were not aborted after the clients left"
    assert aborted(server) == before + 4


def test_disconnect_non_streaming_frees_kv(server):
    assert wait_idle(server)
    before = aborted(server)
    s = raw_request(server, chat_body(**LONG))
    deadline = time.time() + 10
    while metric(server.url, "vllm:num_requests_running") < 1 and time.time() < deadline:
        time.sleep(0.02)
    s.close()
    assert wait_idle(server, timeout=20)
    assert aborted(server) == before + 1


def test_stream_request_errors_come_before_the_stream(server):
    # Validation happens before any SSE is sent, so the client gets a real 400 and the envelope.
    r = post(server, "/v1/chat/completions", json.dumps(chat_body(stream=True, n=0)))
    expect_400(r, param="n")


def run_cli(*args, timeout=30):
    return subprocess.run([flint_bin(), "serve", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_unknown_flag_exits_1(random_model):
    p = run_cli(random_model, "--no-such-flag")
    assert p.returncode == 1
    assert "--no-such-flag" in p.stderr + p.stdout


def test_cli_bad_values_exit_1(random_model):
    for args in [["--tool-call-parser", "hermes"], ["--enable-auto-tool-choice"],
                 ["--default-chat-template-kwargs", "{not json"], ["--max-model-len", "lots"],
                 ["--gpu-memory-utilization", "1.5"]]:
        p = run_cli(random_model, "--port", "0", *args)
        assert p.returncode == 1, (args, p.stderr)


def test_cli_missing_model_exits_1(tmp_path):
    p = run_cli(str(tmp_path / "nope"), "--port", "0")
    assert p.returncode == 1
    assert "nope" in p.stderr


def test_health_is_503_while_loading(random_model, log_dir):
    # The port opens before the model loads: /health answers 503 "Loading model" (when polled
    # early enough; loading the tiny model takes well under a second) and then 200.
    with FlintServer(random_model, *COMMON_ARGS, log_dir=log_dir, wait_ready=False) as s:
        deadline = time.time() + 30
        seen = set()
        while time.time() < deadline and 200 not in seen:
            try:
                r = requests.get(s.url + "/health", timeout=2)
                seen.add(r.status_code)
                if r.status_code == 503:
                    assert r.json()["error"]["message"] == "Loading model"
            except requests.RequestException:
                pass
        assert 200 in seen
