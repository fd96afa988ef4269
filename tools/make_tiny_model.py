"""Writes the bundled tiny random Flint model (models/flint-tiny, an HF directory with tokenizer and
chat template) with tests/support/tiny_flint.py. Deterministic: rerunning gives identical files.

Usage: .venv/bin/python tools/make_tiny_model.py [OUT_DIR]   (default: models/flint-tiny)
"""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import tiny_flint  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "models" / "flint-tiny"
    if out.exists():
        shutil.rmtree(out)
    res = tiny_flint.write_hf(out, preset="bundled")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {out} ({size / 1e6:.2f} MB, {len(res['weights'])} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
