"""Model arguments by Hugging Face repo id: the shared HF cache (checked against the real
huggingface_hub package, offline), downloads against a local fake Hub, offline mode, and errors."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download, try_to_load_from_cache

from support.fake_hub import FakeHub

FLINT = os.environ.get("FLINT_BIN", "build/src/cli/flint")


def shard_bytes(i: int, n: int) -> bytes:
    return hashlib.sha256(b"shard%d" % i).digest() * (n // 32)


def model_files() -> dict[str, bytes]:
    index = {"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                             "b.weight": "model-00002-of-00002.safetensors"}}
    return {
        "config.json": json.dumps({"architectures": ["FlintForCausalLM"]}).encode(),
        "generation_config.json": b'{"temperature": 1.0}',
        "tokenizer.json": b'{"model": {}}',
        "tokenizer_config.json": b"{}",
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": shard_bytes(1, 300_000),
        "model-00002-of-00002.safetensors": shard_bytes(2, 200_000),
        "README.md": b"# not needed\n",
        "original/consolidated.safetensors": b"x" * 1000,
    }


def run_flint(args, env_extra, check=True):
    env = dict(os.environ)
    for k in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE",
              "HF_TOKEN_PATH", "TRANSFORMERS_OFFLINE"):
        env.pop(k, None)
    env.update(env_extra)
    p = subprocess.run([FLINT, *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def hub():
    with FakeHub() as h:
        yield h


def env_for(hub, cache: Path, **extra):
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache)}
    env.update(extra)
    return env


def test_download_writes_a_cache_that_huggingface_hub_reads(hub, tmp_path, monkeypatch):
    files = model_files()
    commit = hub.repo("org/model").add_commit(files)
    cache = tmp_path / "hub"
    out = run_flint(["download", "org/model"], env_for(hub, cache)).stdout.strip()
    assert out == str(cache / "models--org--model" / "snapshots" / commit)
    # Only what the model needs was fetched.
    fetched = sorted(p.relative_to(out).as_posix() for p in Path(out).rglob("*") if p.is_file())
    assert fetched == sorted(set(files) - {"README.md", "original/consolidated.safetensors"})
    for name in fetched:
        assert (Path(out) / name).read_bytes() == files[name]
        assert os.path.islink(Path(out) / name) and not os.path.isabs(os.readlink(Path(out) / name))

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    info = scan_cache_dir(cache)
    assert not info.warnings
    (repo,) = info.repos
    assert repo.repo_id == "org/model" and repo.repo_type == "model"
    (rev,) = repo.revisions
    assert rev.commit_hash == commit and rev.refs == frozenset({"main"})
    assert sorted(f.file_name for f in rev.files) == sorted(Path(f).name for f in fetched)
    assert repo.size_on_disk == sum(len(files[f]) for f in fetched)
    for name in fetched:
        got = try_to_load_from_cache("org/model", name, cache_dir=cache)
        assert Path(got).read_bytes() == files[name]
    assert snapshot_download("org/model", cache_dir=cache, local_files_only=True) == out


def test_cache_from_huggingface_hub_is_used_offline(hub, tmp_path):
    files = model_files()
    commit = hub.repo("org/model").add_commit(files)
    cache = tmp_path / "hub"
    for name in files:
        if name not in ("README.md", "original/consolidated.safetensors"):
            hf_hub_download("org/model", name, cache_dir=cache, endpoint=hub.url)
    hub.requests.clear()
    # No network at all: the endpoint points at a closed port, and offline mode is on.
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    out = run_flint(["download", "org/model"], env).stdout.strip()
    assert out == str(cache / "models--org--model" / "snapshots" / commit)
    assert hub.requests == []


def test_offline_with_incomplete_cache_names_the_missing_files(hub, tmp_path):
    files = model_files()
    hub.repo("org/model").add_commit(files)
    cache = tmp_path / "hub"
    out = Path(run_flint(["download", "org/model"], env_for(hub, cache)).stdout.strip())
    (out / "model-00002-of-00002.safetensors").unlink()
    p = run_flint(["download", "org/model"], {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}, check=False)
    assert p.returncode == 1
    assert "lacks: model-00002-of-00002.safetensors" in p.stderr
    p = run_flint(["download", "org/other"], {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}, check=False)
    assert p.returncode == 1 and "not in the HF cache" in p.stderr


def test_second_resolve_downloads_nothing(hub, tmp_path):
    hub.repo("org/model").add_commit(model_files())
    cache = tmp_path / "hub"
    run_flint(["download", "org/model"], env_for(hub, cache))
    hub.requests.clear()
    run_flint(["download", "org/model"], env_for(hub, cache))
    assert [r[1] for r in hub.requests] == ["/api/models/org/model/revision/main"]


def test_gguf_tag_picks_the_matching_file(hub, tmp_path):
    files = {"flint-NVFP4.gguf": b"G" * 5000, "flint-Q4_1.gguf": b"Q" * 4000, "README.md": b"hi"}
    hub.repo("org/gguf").add_commit(files)
    cache = tmp_path / "hub"
    out = run_flint(["download", "org/gguf:NVFP4"], env_for(hub, cache)).stdout.strip()
    assert out.endswith("/flint-NVFP4.gguf") and Path(out).read_bytes() == files["flint-NVFP4.gguf"]
    assert not (Path(out).parent / "flint-Q4_1.gguf").exists()
    p = run_flint(["download", "org/gguf"], env_for(hub, cache), check=False)
    assert p.returncode == 1 and "flint-NVFP4.gguf" in p.stderr and "flint-Q4_1.gguf" in p.stderr
    p = run_flint(["download", "org/gguf:Q8_0"], env_for(hub, cache), check=False)
    assert p.returncode == 1 and "no GGUF file matches tag 'Q8_0'" in p.stderr


def test_single_gguf_and_shard_sets(hub, tmp_path):
    cache = tmp_path / "hub"
    hub.repo("org/one").add_commit({"model.gguf": b"1" * 100, "config.json": b"{}"})
    out = run_flint(["download", "org/one"], env_for(hub, cache)).stdout.strip()
    assert out.endswith("/model.gguf")
    assert (Path(out).parent / "config.json").exists()
    shards = {f"NVFP4/flint-NVFP4-0000{i}-of-00003.gguf": bytes([i]) * 700 for i in (1, 2, 3)}
    hub.repo("org/sharded").add_commit({**shards, "BF16/flint-BF16.gguf": b"b" * 10})
    out = run_flint(["download", "org/sharded:NVFP4"], env_for(hub, cache)).stdout.strip()
    assert out.endswith("NVFP4/flint-NVFP4-00001-of-00003.gguf")
    for name, data in shards.items():
        assert (Path(out).parents[1] / name).read_bytes() == data


def test_revisions_and_commit_hashes(hub, tmp_path):
    repo = hub.repo("org/model")
    old = repo.add_commit({"config.json": b'{"v": 1}'}, ref="v1")
    new = repo.add_commit({"config.json": b'{"v": 2}'}, ref="main")
    cache = tmp_path / "hub"
    p1 = run_flint(["download", "org/model@v1", "--need", "config"], env_for(hub, cache)).stdout.strip()
    p2 = run_flint(["download", "org/model", "--need", "config"], env_for(hub, cache)).stdout.strip()
    p3 = run_flint(["download", f"org/model@{old}", "--need", "config"], env_for(hub, cache)).stdout.strip()
    assert (Path(p1) / "config.json").read_bytes() == b'{"v": 1}'
    assert (Path(p2) / "config.json").read_bytes() == b'{"v": 2}'
    assert p1 == p3 and p1.endswith(old) and p2.endswith(new)
    refs = cache / "models--org--model" / "refs"
    assert (refs / "v1").read_text() == old and (refs / "main").read_text() == new
    info = scan_cache_dir(cache)
    assert {r.commit_hash: set(r.refs) for r in next(iter(info.repos)).revisions} == {old: {"v1"}, new: {"main"}}


def test_private_repo_needs_a_token(hub, tmp_path):
    hub.repo("org/private").add_commit(model_files())
    hub.repo("org/private").private_token = "hf_secret"
    cache = tmp_path / "hub"
    p = run_flint(["download", "org/private"], env_for(hub, cache), check=False)
    assert p.returncode == 1 and "HF_TOKEN" in p.stderr
    run_flint(["download", "org/private"], env_for(hub, cache, HF_TOKEN="hf_secret"))
    # The token file under HF_HOME works too.
    home = tmp_path / "home"
    home.mkdir()
    (home / "token").write_text("hf_secret\n")
    run_flint(["download", "org/private"], env_for(hub, tmp_path / "hub2", HF_HOME=str(home)))
    # The token goes to the Hub, never to the CDN host that LFS downloads redirect to.
    assert any(r[2].get("authorization") == "Bearer hf_secret" for r in hub.requests if "/resolve/" in r[1])
    cdn = [r for r in hub.requests if r[1].startswith("/cdn/")]
    assert cdn and not any("authorization" in r[2] for r in cdn)


def test_unknown_repo_and_revision_are_named(hub, tmp_path):
    hub.repo("org/model").add_commit(model_files())
    cache = tmp_path / "hub"
    p = run_flint(["download", "org/nope"], env_for(hub, cache), check=False)
    assert p.returncode == 1 and "repo org/nope" in p.stderr and "not found" in p.stderr
    p = run_flint(["download", "org/model@nope"], env_for(hub, cache), check=False)
    assert p.returncode == 1 and "revision 'nope'" in p.stderr


def test_dropped_connection_resumes_with_a_range_request(hub, tmp_path):
    files = model_files()
    hub.repo("org/model").add_commit(files)
    data = files["model-00001-of-00002.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    hub.drop_after[sha] = 100_000
    cache = tmp_path / "hub"
    out = Path(run_flint(["download", "org/model"], env_for(hub, cache)).stdout.strip())
    assert (out / "model-00001-of-00002.safetensors").read_bytes() == data
    ranges = [r[2].get("range") for r in hub.requests if r[1] == f"/cdn/{sha}" and r[0] == "GET"]
    assert ranges == [None, "bytes=100000-"]


def test_partial_blob_from_an_earlier_run_is_resumed(hub, tmp_path):
    files = model_files()
    hub.repo("org/model").add_commit(files)
    data = files["model-00002-of-00002.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    blobs = tmp_path / "hub" / "models--org--model" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{sha}.incomplete").write_bytes(data[:12345])
    out = Path(run_flint(["download", "org/model"], env_for(hub, tmp_path / "hub")).stdout.strip())
    assert (out / "model-00002-of-00002.safetensors").read_bytes() == data
    ranges = [r[2].get("range") for r in hub.requests if r[1] == f"/cdn/{sha}" and r[0] == "GET"]
    assert ranges == ["bytes=12345-"]
    assert not (blobs / f"{sha}.incomplete").exists()


def test_corrupted_body_is_rejected_by_hash(hub, tmp_path):
    files = model_files()
    hub.repo("org/model").add_commit(files)
    sha = hashlib.sha256(files["model-00002-of-00002.safetensors"]).hexdigest()
    hub.corrupt.add(sha)
    cache = tmp_path / "hub"
    p = run_flint(["download", "org/model"], env_for(hub, cache), check=False)
    assert p.returncode == 1 and "corrupted" in p.stderr and sha in p.stderr
    blobs = cache / "models--org--model" / "blobs"
    assert not (blobs / sha).exists() and not (blobs / f"{sha}.incomplete").exists()
    snap = next((cache / "models--org--model" / "snapshots").iterdir())
    assert not (snap / "model-00002-of-00002.safetensors").exists()


def test_no_network_suggests_offline_mode(tmp_path):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = run_flint(["download", "org/model"], {"HF_ENDPOINT": f"http://127.0.0.1:{port}",
                                              "HF_HUB_CACHE": str(tmp_path)}, check=False)
    assert p.returncode == 1 and "HF_HUB_OFFLINE=1" in p.stderr


def test_local_paths_are_used_as_they_are(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert run_flint(["download", str(tmp_path)], {"HF_HUB_OFFLINE": "1"}).stdout.strip() == str(tmp_path)
    p = run_flint(["download", "not a repo"], {}, check=False)
    assert p.returncode == 1 and "neither an existing local path nor a Hugging Face repo id" in p.stderr
