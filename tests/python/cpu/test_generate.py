"""`flint generate` on tiny random checkpoints (tests/support/tiny_flint.py, HF and GGUF forms)
against the NumPy reference (tests/reference/flint_ref.py): prompt and decode logits, sampling
reproducibility, and clear errors for bad prompts."""

import os
import re
import subprocess

import numpy as np
import pytest

from reference import flint_ref
from support import tiny_flint

FLINT = os.environ.get("FLINT_BIN", "build/src/cli/flint")


def run(args, check=True):
    p = subprocess.run([FLINT, "generate", "--device", "cpu", *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def generated_ids(stderr):
    m = re.search(r"generated ids: \[([0-9,]*)\]", stderr)
    assert m, stderr
    return [int(x) for x in m.group(1).split(",") if x]


def reference_logits(res, tokens):
    cfg = flint_ref.Config(tiny_flint.hf_config_json(res["config"]))
    return flint_ref.forward(cfg, res["weights"], tokens)


# (id, form, tiny_flint overrides, prompt length). Tolerance: max |got - want| / max |want|.
CASES = [
    ("hf_f32", "hf", {"dtype": "F32", "sink_scale": 3.0}, 12),
    ("hf_bf16_bias", "hf", {"expert_bias": True, "num_experts_per_tok": 3}, 11),
    ("hf_window1_top1", "hf", {"dtype": "F32", "sliding_window": 1, "num_experts_per_tok": 1,
                               "norm_topk_prob": False, "routed_scaling_factor": 2.0}, 9),
    ("hf_window2_all_experts", "hf", {"dtype": "F32", "sliding_window": 2, "num_experts": 4,
                                      "num_experts_per_tok": 4, "expert_bias": True,
                                      "shared_expert_intermediate_size": 0}, 10),
    ("hf_pattern", "hf", {"dtype": "F32", "num_hidden_layers": 6, "mlp_only_layers": [0, 1],
                          "layer_types": ["full_attention", "sliding_attention",
                                          "sliding_attention", "full_attention",
                                          "sliding_attention", "sliding_attention"],
                          "num_key_value_heads": 1}, 14),
    ("hf_window513", "hf", {"dtype": "F32", "sliding_window": 513, "num_hidden_layers": 2,
                            "layer_types": ["sliding_attention", "full_attention"],
                            "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
                            "head_dim": 16, "moe_intermediate_size": 16,
                            "shared_expert_intermediate_size": 16, "intermediate_size": 32,
                            "num_experts": 4}, 560),
    ("gguf_bf16", "gguf-bf16", {"expert_bias": True}, 13),
    ("gguf_nvfp4", "gguf-nvfp4", {"seed": 3}, 13),
]


@pytest.mark.parametrize("name,form,overrides,prompt_len", CASES, ids=[c[0] for c in CASES])
def test_logits_match_reference(tmp_path, name, form, overrides, prompt_len):
    out = tmp_path / ("model" if form == "hf" else "model.gguf")
    res = tiny_flint.write(out, form, overrides)
    vocab = res["config"]["vocab_size"]
    rng = np.random.default_rng(prompt_len)
    prompt = [int(x) for x in rng.integers(0, vocab, prompt_len)]
    dump = tmp_path / "logits.f32"
    args = [res["path"], "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", 4,
            "--temperature", 0, "--ignore-eos", "--dump-logits", dump, "--threads", 2]
    if form != "hf":
        args += ["--tokenizer", tmp_path]
        tiny_flint.write_tokenizer_files(tmp_path, tiny_flint.build_tokenizer(vocab))
    p = run(args)
    gen = generated_ids(p.stderr)
    assert len(gen) == 4
    got = np.fromfile(dump, dtype=np.float32).reshape(-1, vocab)
    tokens = prompt + gen[:-1]
    assert got.shape[0] == len(tokens)  # every prompt position, then each decode step
    want = reference_logits(res, tokens)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-4, f"relative error {err}"
    # Greedy decoding picked the reference's argmax at every step.
    assert gen[:-1] == [int(x) for x in want[prompt_len - 1:-1].argmax(axis=1)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_flint.write(tmp_path_factory.mktemp("m") / "hf", "hf",
                            {"max_position_embeddings": 32})


def ids_of(model, *extra):
    p = run([model["path"], "--prompt", "Hello, world!", "--max-tokens", 12, "--ignore-eos",
             *extra])
    return generated_ids(p.stderr), p


def test_greedy_is_deterministic(model):
    a, pa = ids_of(model, "--temperature", 0)
    b, pb = ids_of(model, "--temperature", 0)
    assert a == b and pa.stdout == pb.stdout
    assert re.search(r"prompt: \d+ tokens in .* tokens/s\); decode: 12 tokens", pa.stderr)


def test_fixed_seed_reproduces_and_seeds_differ(model):
    a, _ = ids_of(model, "--temperature", 1.0, "--seed", 7)
    b, _ = ids_of(model, "--temperature", 1.0, "--seed", 7)
    c, _ = ids_of(model, "--temperature", 1.0, "--seed", 8)
    assert a == b
    assert a != c


def test_top_k_one_equals_greedy(model):
    greedy, _ = ids_of(model, "--temperature", 0)
    top1, _ = ids_of(model, "--temperature", 1.5, "--top-k", 1, "--seed", 3)
    assert top1 == greedy


def test_chat_prompt_runs_through_template(model):
    p = run([model["path"], "--chat", "Hi there", "--max-tokens", 3, "--temperature", 0])
    n = int(re.search(r"prompt: (\d+) tokens", p.stderr).group(1))
    tok = model["tokenizer"]
    assert n > len(tok.encode("Hi there", add_special_tokens=False).ids)


def test_empty_prompt_is_an_error(model):
    p = run([model["path"], "--prompt", ""], check=False)
    assert p.returncode == 1
    assert "generate: the prompt is empty" in p.stderr


def test_prompt_over_max_length_is_an_error(model):
    ids = ",".join(["5"] * 40)
    p = run([model["path"], "--prompt-ids", ids], check=False)
    assert p.returncode == 1
    assert "generate: the prompt has 40 tokens, the model's maximum length is 32" in p.stderr


def test_token_outside_vocab_is_an_error(model):
    vocab = model["config"]["vocab_size"]
    p = run([model["path"], "--prompt-ids", f"1,2,{vocab}"], check=False)
    assert p.returncode == 1
    assert f"generate: prompt token id {vocab} is outside the vocabulary [0, {vocab})" in p.stderr


def test_hf_config_path_replaces_the_config_and_a_bad_one_is_named(model, tmp_path):
    # The model's own config.json passed as --hf-config-path gives the same tokens; one that is not
    # a Flint config is refused naming the flag and the file.
    same, _ = ids_of(model, "--temperature", 0, "--hf-config-path", model["path"])
    greedy, _ = ids_of(model, "--temperature", 0)
    assert same == greedy
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"hidden_size": 64}')
    p = run([model["path"], "--prompt", "Hi", "--hf-config-path", bad], check=False)
    assert p.returncode == 1
    assert f"generate: --hf-config-path {bad}:" in p.stderr
    assert "missing required field 'architectures'" in p.stderr
