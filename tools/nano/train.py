"""Trains flint-nano on the H200 and records everything the repo needs from PyTorch, in one run:
held-out perplexity, reference logits on fixed prompts (BF16-rounded weights and NVFP4
fake-quantized weights, FP64 math), per-token NLL on fixture windows, greedy completions, and the
trained weights (BF16, sinks FP32) in HF names. Partner: export.py turns the output into
models/flint-nano and tests/data/nano.

Usage (device): python3 tools/nano/train.py --data tools/nano/data --out $OUT [--minutes 6.5]
Needs torch, numpy, safetensors, tokenizers; imports tests/support/tiny_flint.py (NVFP4 quantizer)
and tests/reference/flint_ref.py (cross-check).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "reference"))

from model import FlintNano, hf_state_dict, load_hf_state_dict  # noqa: E402

LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


def bf16_round_t(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(t.dtype)


def is_fp32_name(name: str) -> bool:
    return name.endswith("self_attn.sinks")


def nvfp4_eligible_hf(name: str) -> bool:
    """HF-name twin of tiny_flint.nvfp4_eligible: every linear except embedding, head and router."""
    if name in ("model.embed_tokens.weight", "lm_head.weight") or name.endswith("mlp.gate.weight"):
        return False
    return name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                          "gate_proj.weight", "up_proj.weight", "down_proj.weight"))


def stored_weights(model) -> dict:
    """HF name -> float32 CPU tensor holding exactly what model.safetensors stores (BF16-rounded,
    sinks FP32)."""
    out = {}
    for n, t in hf_state_dict(model).items():
        t = t.detach().float().cpu()
        out[n] = t.clone() if is_fp32_name(n) else bf16_round_t(t)
    return out


def nvfp4_weights(stored: dict) -> dict:
    """Fake-quantizes the eligible tensors exactly as export.py writes the NVFP4 GGUF (ggml block
    quantizer from tiny_flint, one global scale per tensor or per expert)."""
    import tiny_flint
    out = {}
    for n, t in stored.items():
        if not nvfp4_eligible_hf(n):
            out[n] = t
            continue
        a = t.numpy().astype(np.float32)
        g = np.float32(np.abs(a).max() / (6.0 * 200.0))
        g = np.float32(1.0) if g == 0 else g
        _, deq = tiny_flint.nvfp4_quantize(a / g)
        out[n] = torch.from_numpy((deq * g).astype(np.float32))
    return out


def ref_model(cfg, weights: dict, device) -> FlintNano:
    m = FlintNano(cfg)
    load_hf_state_dict(m, weights)  # FP32 values, then an exact widening to FP64
    return m.to(device=device, dtype=torch.float64).eval()


@torch.no_grad()
def logits_of(model, ids, device) -> torch.Tensor:
    return model(torch.tensor([ids], dtype=torch.long, device=device))[0]


@torch.no_grad()
def token_nll(model, ids, device) -> np.ndarray:
    """-log p(ids[t+1] | ids[:t+1]) for t = 0..len-2, in float64."""
    lg = logits_of(model, ids, device).double()
    lp = torch.log_softmax(lg[:-1], dim=-1)
    tgt = torch.tensor(ids[1:], device=device)
    return (-lp.gather(1, tgt[:, None])[:, 0]).cpu().numpy()


@torch.no_grad()
def heldout_ppl(model, heldout: torch.Tensor, seq: int, batch: int, autocast: bool) -> float:
    n = (len(heldout) - 1) // seq
    tot, cnt = 0.0, 0
    for b in range(0, n, batch):
        idx = torch.arange(b, min(n, b + batch), device=heldout.device) * seq
        x = heldout[idx[:, None] + torch.arange(seq + 1, device=heldout.device)]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            lg = model(x[:, :-1])
        loss = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1),
                               reduction="sum")
        tot += loss.item()
        cnt += x[:, 1:].numel()
    return math.exp(tot / cnt)


@torch.no_grad()
def greedy(model, ids, n_new, device, stop_ids) -> list[int]:
    ids = list(ids)
    out = []
    for _ in range(n_new):
        nxt = int(logits_of(model, ids, device)[-1].argmax())
        out.append(nxt)
        ids.append(nxt)
        if nxt in stop_ids:
            break
    return out


def save_weights(stored: dict, out: Path, order: list[str]):
    """Two safetensors shards (the device returns files of at most 16 MiB): BF16, sinks FP32."""
    from safetensors.torch import save_file
    half = len(order) // 2
    for k, names in enumerate((order[:half], order[half:])):
        d = {n: (stored[n].float() if is_fp32_name(n) else stored[n].to(torch.bfloat16)).contiguous()
             for n in names}
        save_file(d, str(out / f"weights_{k}.safetensors"), metadata={"format": "pt"})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(HERE / "data"))
    ap.add_argument("--config", default=str(HERE / "config.json"))
    ap.add_argument("--out", default=os.environ.get("OUT", str(HERE / "runs" / "local")))
    ap.add_argument("--minutes", type=float, default=6.5)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop early (smoke tests)")
    ap.add_argument("--resume", help="a previous run's output: load its weights, skip training")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True

    cfg = json.loads(Path(args.config).read_text())
    data = Path(args.data)
    prompts = json.loads((data / "prompts.json").read_text())
    train = torch.from_numpy(np.fromfile(data / "train.bin", dtype=np.uint16).astype(np.int64)).to(device)
    heldout = torch.from_numpy(np.fromfile(data / "heldout.bin", dtype=np.uint16).astype(np.int64)).to(device)
    log(f"train tokens {len(train)}, heldout {len(heldout)}, torch {torch.__version__}, "
        f"{torch.cuda.get_device_name()}")
    assert int(train.max()) < cfg["vocab_size"] and int(heldout.max()) < cfg["vocab_size"]

    model = FlintNano(cfg)
    model.init_weights(args.seed)
    if args.resume:
        from safetensors.torch import load_file
        sd = {}
        for k in (0, 1):
            sd.update(load_file(str(Path(args.resume) / f"weights_{k}.safetensors")))
        load_hf_state_dict(model, {k: v.float() for k, v in sd.items()})
        args.max_steps = -1
        log(f"resumed from {args.resume}")
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"parameters {n_params}")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    budget = args.minutes * 60.0
    gen = torch.Generator(device=device).manual_seed(args.seed)
    ar = torch.arange(args.seq + 1, device=device)
    step, t0 = 0, time.time()
    history = []
    while True:
        elapsed = time.time() - t0
        frac = elapsed / budget
        if frac >= 1.0 or args.max_steps < 0 or (args.max_steps and step >= args.max_steps):
            break
        # Linear warmup, then cosine decay to 10% over the wall-clock budget.
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, len(train) - args.seq - 1, (args.batch,), device=device, generator=gen)
        x = train[idx[:, None] + ar]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(x[:, :-1])
        loss = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1))
        aux = model.aux_loss()
        total = loss + args.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0 or step == 1:
            l = loss.item()
            tps = step * args.batch * args.seq / (time.time() - t0)
            log(f"step {step} loss {l:.4f} aux {aux.item():.4f} gnorm {gn.item():.3f} lr {lr:.2e} "
                f"tok/s {tps:.0f} t {time.time() - t0:.0f}s")
            history.append({"step": step, "loss": l, "t": time.time() - t0})
    train_s = time.time() - t0
    tokens_seen = step * args.batch * args.seq
    log(f"trained {step} steps, {tokens_seen} tokens in {train_s:.0f}s")
    model.eval()
    torch.backends.cuda.matmul.allow_tf32 = False  # evaluation in true FP32/FP64
    metrics = {"config": cfg, "parameters": n_params, "steps": step, "tokens_seen": tokens_seen,
               "train_seconds": train_s, "history": history, "batch": args.batch,
               "seq": args.seq, "lr": args.lr, "aux_coef": args.aux_coef}

    order = list(hf_state_dict(model))
    stored = stored_weights(model)
    save_weights(stored, out, order)
    log("saved weights")

    def attempt(name, fn):
        try:
            fn()
        except Exception:  # keep going: every part that works still comes back
            log(f"FAILED {name}:\n{traceback.format_exc()}")
            metrics.setdefault("failed", []).append(name)

    def ppl_part():
        metrics["heldout_ppl_train_bf16_autocast"] = heldout_ppl(model, heldout, args.seq, 32, True)
        m32 = FlintNano(cfg)
        load_hf_state_dict(m32, stored)
        m32.to(device).eval()
        metrics["heldout_ppl_bf16_weights_fp32"] = heldout_ppl(m32, heldout, args.seq, 32, False)
        log(f"heldout ppl: autocast {metrics['heldout_ppl_train_bf16_autocast']:.3f}, "
            f"bf16 weights fp32 math {metrics['heldout_ppl_bf16_weights_fp32']:.3f}")
    attempt("ppl", ppl_part)

    from safetensors.torch import save_file
    fixtures = {}
    refs = {}

    def fixture_part(kind, weights):
        m = ref_model(cfg, weights, device)
        refs[kind] = m
        for p in prompts["prompts"]:
            fixtures[f"{kind}.logits.{p['name']}"] = logits_of(m, p["ids"], device).float().cpu().contiguous()
        nlls = []
        for k, w in enumerate(prompts["windows"]):
            nll = token_nll(m, w, device)
            fixtures[f"{kind}.nll.window{k}"] = torch.from_numpy(nll).contiguous()
            nlls.append(nll)
        allnll = np.concatenate(nlls)
        metrics[f"window_ppl_{kind}"] = float(np.exp(allnll.mean()))
        if kind == "nvfp4":
            metrics["heldout_ppl_nvfp4_fp64"] = heldout_ppl(m, heldout, args.seq, 8, False)
        log(f"fixtures {kind}: window ppl {metrics[f'window_ppl_{kind}']:.4f}")

    attempt("fixtures_bf16", lambda: fixture_part("bf16", stored))
    attempt("fixtures_nvfp4", lambda: fixture_part("nvfp4", nvfp4_weights(stored)))
    for kind in ("bf16", "nvfp4"):  # one file per kind: each returned file must stay < 16 MiB
        part = {k: v for k, v in fixtures.items() if k.startswith(kind + ".")}
        if part:
            save_file(part, str(out / f"fixtures_{kind}.safetensors"))
            log(f"saved {len(part)} {kind} fixture tensors")

    def crosscheck_part():
        # The PyTorch model against the NumPy spec reference, on the stored weights.
        import flint_ref
        W = {k: v.double().numpy() for k, v in stored.items()}
        p = prompts["prompts"][0]
        want = flint_ref.forward(flint_ref.Config(cfg), W, p["ids"])
        got = fixtures[f"bf16.logits.{p['name']}"].double().numpy()
        err = float(np.abs(got - want).max() / np.abs(want).max())
        metrics["torch_vs_flint_ref_rel_err"] = err
        log(f"torch vs flint_ref (prompt {p['name']}, {len(p['ids'])} tokens): rel err {err:.3e}")
    attempt("crosscheck", crosscheck_part)

    def greedy_part():
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(data / "tokenizer.json"))
        stops = set(prompts["stop_ids"])
        comps = []
        for p in prompts["generate"]:
            for kind in ("bf16", "nvfp4"):
                if kind not in refs:
                    continue
                ids = greedy(refs[kind], p["ids"], p.get("max_new", 64), device, stops)
                text = tok.decode(ids, skip_special_tokens=False)
                comps.append({"name": p["name"], "kind": kind, "prompt": p["text"], "ids": ids,
                              "completion": text})
                log(f"--- {p['name']} [{kind}]\n{p['text']!r}\n=> {text!r}")
        metrics["completions"] = comps
    attempt("greedy", greedy_part)

    metrics["total_seconds"] = time.time() - t_start
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (out / "train.log").write_text("\n".join(LOG) + "\n")
    log(f"done in {metrics['total_seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
