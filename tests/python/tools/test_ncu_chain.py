"""scripts/ncu-chain.py (the per-warp instruction chain of Nsight Compute's SASS source page) on
small pages written in ncu's CSV layout: segment sums per warp, stall shares, the page ncu
repeats printed once, and clear errors for a file with no kernel, a missing file and a file
that is not what its name says."""
import gzip
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.environ.get("FLINT_SOURCE_DIR", "."), "scripts", "ncu-chain.py")
HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","Instructions Executed"')


def section(name, lines):
    """One launch's page: lines of (SASS, stall samples, warp instructions executed)."""
    out = [f'"Kernel Name","{name}"', HEADER]
    for i, (sass, stall, executed) in enumerate(lines):
        out.append(f'"0x{16 * i:x}","{sass}","{stall}","0","{executed}"')
    return out


# 4 warps: 16 instructions up to the PDL wait, 6 more to the barrier, 4 to the exit.
KERNEL = [("LDC R1, c[0x0][0x28]", 2, 4), ("IMAD R2, R3, R4, RZ", 6, 8), ("ACQBULK", 0, 4),
          ("@P0 FFMA R2, R2, R3, R4", 10, 2), ("BAR.SYNC.DEFER_BLOCKING 0x0", 2, 4),
          ("EXIT", 0, 4)]


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, str(path), *args], capture_output=True,
                          text=True, timeout=60)


def test_segments_per_warp_split_at_the_pdl_wait_and_barriers(tmp_path):
    page = tmp_path / "sass.csv"
    page.write_text("\n".join(section("k(A)", KERNEL) + section("k(A)", KERNEL)) + "\n")
    r = run(page)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("warps 4, warp instructions per warp 6.5, stall samples 20") == 1
    assert "| 2 | ACQBULK | 4.0 | 4.0 | 40.0% |" in r.stdout
    assert "| 4 | BAR.SYNC.DEFER_BLOCKING | 1.5 | 5.5 | 60.0% |" in r.stdout
    assert "| 5 | EXIT | 1.0 | 6.5 | 0.0% |" in r.stdout
    assert "opcodes per warp: IMAD 2, LDC 1, ACQBULK 1, BAR 1, EXIT 1" in r.stdout
    assert "3    10   0.50  @P0 FFMA R2, R2, R3, R4" in r.stdout


def test_two_different_launches_are_both_reported_from_gzip(tmp_path):
    other = [(sass, stall, 2 * executed) for sass, stall, executed in KERNEL]
    page = tmp_path / "sass.csv.gz"
    with gzip.open(page, "wt") as f:
        f.write("\n".join(section("k(A)", KERNEL) + section("k(A)", other)) + "\n")
    r = run(page, "--top", "1")
    assert r.returncode == 0, r.stderr
    assert "warps 4," in r.stdout and "warps 8," in r.stdout
    assert r.stdout.count("@P0 FFMA") == 2  # the one line with the most stalls, per launch


@pytest.mark.parametrize("text", ["", "not,a,report\n1,2,3\n"])
def test_a_file_without_kernels_is_an_error(tmp_path, text):
    page = tmp_path / "empty.csv"
    page.write_text(text)
    r = run(page)
    assert r.returncode == 1
    assert "no kernel sections" in r.stderr


def test_a_missing_or_unreadable_file_is_an_error(tmp_path):
    r = run(tmp_path / "absent.csv")
    assert r.returncode == 1
    assert "cannot read" in r.stderr and "absent.csv" in r.stderr
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"not gzip at all")
    r = run(bad)
    assert r.returncode == 1
    assert "cannot read" in r.stderr
