"""Shared fixtures for the model tests: the flint binary and tiny checkpoints from tiny_flint."""

import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("FLINT_SOURCE_DIR", Path(__file__).resolve().parents[3]))


@pytest.fixture(scope="session")
def flint_bin() -> str:
    b = os.environ.get("FLINT_BIN")
    if not b:
        b = str(SOURCE_DIR / "build" / "bin" / "flint")
    assert Path(b).exists(), f"flint binary not found at {b}; set FLINT_BIN"
    return b


def run_flint(flint_bin: str, *args, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([flint_bin, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
