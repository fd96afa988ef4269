"""Helpers shared by the formats interop tests: run tests/support/tools/formats_dump."""

import json
import os
import subprocess
from pathlib import Path


def tool() -> str:
    build = Path(os.environ.get("FLINT_BUILD_DIR", Path(__file__).resolve().parents[3] / "build"))
    path = build / "tests" / "formats_dump"
    assert path.exists(), f"{path} is missing: build the formats_dump target"
    return str(path)


def run(*args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([tool(), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, f"formats_dump {args} failed: {r.stderr}"
    return r


def dump(kind: str, path) -> dict:
    return json.loads(run(kind, path).stdout)
