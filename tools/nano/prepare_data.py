"""Builds flint-nano's training data: collects Python sources and /usr/share/doc texts from this
machine, generates chat examples (chat_data.py), trains the byte-level BPE tokenizer, and writes
packed uint16 token streams. Deterministic for a given machine. Partner: train.py reads the output.

Usage: .venv/bin/python tools/nano/prepare_data.py [--out tools/nano/data] [--max-tokens 24000000]
Output: tokenizer.json, train.bin, heldout.bin (uint16 token ids, documents separated by
<|endoftext|>), heldout_files.txt, meta.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chat_data  # noqa: E402

SPECIAL_TOKENS = [
    "<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>",
]
EOT = "<|endoftext|>"

CODE_ROOTS = ["/usr/lib/python3.11", "/usr/lib/python3/dist-packages",
              str(HERE.parents[1] / ".venv/lib/python3.11/site-packages")]
DOC_ROOT = "/usr/share/doc"
MAX_FILE_BYTES = 120_000


def readable(text: str) -> bool:
    """Skips generated tables and minified data: very long lines or few letters."""
    if not text.strip():
        return False
    lines = text.splitlines()
    if max(len(x) for x in lines) > 400:
        return False
    letters = sum(c.isalpha() for c in text)
    return letters > 0.35 * len(text)


def collect_code() -> list[tuple[str, str]]:
    seen, out = set(), []
    for root in CODE_ROOTS:
        for p in sorted(Path(root).rglob("*.py")):
            try:
                if not p.is_file() or p.stat().st_size > MAX_FILE_BYTES:
                    continue
                text = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            h = hashlib.sha1(text.encode()).hexdigest()
            if h in seen or not readable(text):
                continue
            seen.add(h)
            out.append((str(p), text))
    return out


def collect_docs() -> list[tuple[str, str]]:
    seen, out = set(), []
    for p in sorted(Path(DOC_ROOT).rglob("*")):
        try:
            if not p.is_file() or p.is_symlink():
                continue
            name = p.name.lower()
            if name.endswith(".gz"):
                if p.stat().st_size > 60_000:
                    continue
                raw = gzip.decompress(p.read_bytes())
            elif name.endswith((".txt", ".md", ".rst")) or name in ("copyright", "readme", "news"):
                raw = p.read_bytes()
            else:
                continue
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        text = text[:MAX_FILE_BYTES]
        h = hashlib.sha1(text.encode()).hexdigest()
        if h in seen or not readable(text):
            continue
        seen.add(h)
        out.append((str(p), text))
    return out


def is_heldout(path: str) -> bool:
    return int(hashlib.sha1(path.encode()).hexdigest(), 16) % 50 == 0


def train_tokenizer(texts, vocab_size: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    n = tok.get_vocab_size()
    if n < vocab_size:
        tok.add_special_tokens([AddedToken(f"<|reserved_{i}|>", special=True, normalized=False)
                                for i in range(vocab_size - n)])
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    return tok


def encode_docs(tok, texts: list[str]) -> np.ndarray:
    """Documents joined by <|endoftext|>; special-token strings inside texts stay special."""
    eot = tok.token_to_id(EOT)
    parts = []
    for i in range(0, len(texts), 512):
        for enc in tok.encode_batch(texts[i:i + 512], add_special_tokens=False):
            parts.append(np.asarray(enc.ids, np.uint16))
            parts.append(np.asarray([eot], np.uint16))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "data"))
    ap.add_argument("--vocab-size", type=int, default=6144)
    ap.add_argument("--max-tokens", type=int, default=24_000_000, help="train.bin size cap")
    ap.add_argument("--chat-fraction", type=float, default=0.15)
    ap.add_argument("--doc-fraction", type=float, default=0.12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    t0 = time.time()

    code = collect_code()
    docs = collect_docs()
    held = [(p, t) for p, t in code if is_heldout(p)]
    code = [(p, t) for p, t in code if not is_heldout(p)]
    rng.shuffle(code)
    rng.shuffle(docs)
    chats = chat_data.examples(40_000, seed=args.seed)
    print(f"collected {len(code)} code files ({sum(len(t) for _, t in code) / 1e6:.1f} MB), "
          f"{len(held)} held out, {len(docs)} docs ({sum(len(t) for _, t in docs) / 1e6:.1f} MB), "
          f"{len(chats)} chats [{time.time() - t0:.0f}s]", flush=True)

    # Tokenizer: trained on a sample of every source so that code, prose and chat all compress.
    sample = [t for _, t in code[:3000]] + [t for _, t in docs[:1500]] + chats[:6000]
    tok = train_tokenizer(sample, args.vocab_size)
    tok.save(str(out / "tokenizer.json"))
    print(f"tokenizer: {tok.get_vocab_size()} tokens [{time.time() - t0:.0f}s]", flush=True)

    # Token budget per source; the chat examples are cheap to generate, so they are cut to fit.
    n_chat = int(args.max_tokens * args.chat_fraction)
    n_doc = int(args.max_tokens * args.doc_fraction)
    n_code = args.max_tokens - n_chat - n_doc

    def take(texts, budget, bytes_per_token=3.0):
        chosen, est = [], 0.0
        for t in texts:
            if est >= budget * 1.15:
                break
            chosen.append(t)
            est += len(t) / bytes_per_token
        ids = encode_docs(tok, chosen)
        return ids[:budget], len(chosen)

    code_ids, n_code_files = take([t for _, t in code], n_code)
    doc_ids, n_doc_files = take([t for _, t in docs], n_doc)
    chat_ids, n_chats = take(chats, n_chat, bytes_per_token=3.5)
    print(f"encoded code {len(code_ids)}, docs {len(doc_ids)}, chat {len(chat_ids)} tokens "
          f"[{time.time() - t0:.0f}s]", flush=True)

    # Interleave the three streams in chunks so every region of train.bin has all three kinds.
    chunk = 1 << 16
    pieces = []
    for src in (code_ids, doc_ids, chat_ids):
        pieces += [src[i:i + chunk] for i in range(0, len(src), chunk)]
    rng.shuffle(pieces)
    train = np.concatenate(pieces).astype(np.uint16)
    train.tofile(out / "train.bin")
    heldout = encode_docs(tok, [t for _, t in held])
    heldout.tofile(out / "heldout.bin")
    (out / "heldout_files.txt").write_text("".join(p + "\n" for p, _ in held))
    meta = {
        "vocab_size": tok.get_vocab_size(), "train_tokens": int(len(train)),
        "heldout_tokens": int(len(heldout)), "code_tokens": int(len(code_ids)),
        "doc_tokens": int(len(doc_ids)), "chat_tokens": int(len(chat_ids)),
        "code_files": n_code_files, "doc_files": n_doc_files, "chat_examples": n_chats,
        "heldout_files": len(held), "code_roots": CODE_ROOTS, "doc_root": DOC_ROOT,
        "seed": args.seed,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    print(json.dumps(meta), f"[{time.time() - t0:.0f}s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
