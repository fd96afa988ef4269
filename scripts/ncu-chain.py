#!/usr/bin/env python3
"""The per-warp instruction chain of profiled kernels, from Nsight Compute's SASS source page.

A latency-bound decode kernel costs roughly (instructions each warp executes) x (cycles per issued
instruction), so this prints, for each profiled launch: the warp instructions per warp, split at
the kernel's landmarks (the PDL wait ACQBULK, block and cluster barriers, cp.async waits, exits),
with the stall samples of each segment; the opcode mix per warp; and the SASS lines with the most
stall samples. Input: `ncu -i REPORT --page source --csv --print-source sass` (plain or .gz), one
section per launch. Used by `scripts/gpu.sh ncu`.

Usage: scripts/ncu-chain.py SASS.csv[.gz] [--top N]
"""
import argparse
import collections
import csv
import gzip
import sys

LANDMARKS = ("ACQBULK", "BAR", "UCGABAR", "DEPBAR", "LDGDEPBAR", "EXIT", "REDUX", "ATOM", "RED")
STALL = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def opcode(sass):
    words = sass.split()
    if not words:
        return ""
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def read_sections(path):
    """[(kernel name, [row dicts])] in file order."""
    opener = gzip.open if path.endswith(".gz") else open
    sections, header, name = [], None, None
    with opener(path, "rt", newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                name = row[1] if len(row) > 1 else "?"
                sections.append((name, []))
            elif row[0] == "Address":
                header = row
            elif header is not None and sections and len(row) == len(header):
                sections[-1][1].append(dict(zip(header, row)))
    return sections


def as_int(text):
    try:
        return int(float(text.replace(",", "")))
    except ValueError:
        return 0


def report(name, rows, top, out):
    if not rows:
        return
    executed = [as_int(r.get(EXECUTED, "0")) for r in rows]
    stalls = [as_int(r.get(STALL, "0")) for r in rows]
    sass = [r.get("Source", "").strip() for r in rows]
    warps = executed[0]  # every warp runs the kernel's first instruction once
    if warps <= 0:
        print(f"{name}: no executed instructions", file=out)
        return
    total_stall = max(1, sum(stalls))
    print(f"\n{name}", file=out)
    print(f"warps {warps}, warp instructions per warp {sum(executed) / warps:.1f}, "
          f"stall samples {sum(stalls)}", file=out)
    print("| up to (SASS line) | landmark | instr/warp | cumulative | stall samples |", file=out)
    print("|---:|---|---:|---:|---:|", file=out)
    start, cumulative = 0, 0.0
    for i, line in enumerate(sass):
        op = opcode(line)
        if not op.startswith(LANDMARKS) or executed[i] == 0:
            continue
        seg = sum(executed[start:i + 1]) / warps
        cumulative += seg
        share = 100.0 * sum(stalls[start:i + 1]) / total_stall
        print(f"| {i} | {op} | {seg:.1f} | {cumulative:.1f} | {share:.1f}% |", file=out)
        start = i + 1
    if start < len(sass) and sum(executed[start:]) > 0:
        seg = sum(executed[start:]) / warps
        share = 100.0 * sum(stalls[start:]) / total_stall
        print(f"| {len(sass) - 1} | (end) | {seg:.1f} | {cumulative + seg:.1f} | {share:.1f}% |",
              file=out)
    mix = collections.Counter()
    for e, line in zip(executed, sass):
        mix[opcode(line).split(".")[0]] += e / warps
    print("opcodes per warp: " + ", ".join(f"{k} {v:.0f}" for k, v in mix.most_common(16)),
          file=out)
    print("most stall samples (line, samples, executed per warp, SASS):", file=out)
    ranked = sorted(range(len(sass)), key=lambda i: -stalls[i])[:top]
    for i in sorted(ranked):
        if stalls[i] > 0:
            print(f"  {i:5d} {stalls[i]:5d} {executed[i] / warps:6.2f}  {sass[i][:100]}", file=out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--top", type=int, default=15, help="SASS lines with the most stalls")
    args = parser.parse_args(argv)
    try:
        sections = read_sections(args.csv)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:
        print(f"ncu-chain: cannot read {args.csv}: {e}", file=sys.stderr)
        return 1
    if not sections:
        print(f"ncu-chain: no kernel sections in {args.csv}", file=sys.stderr)
        return 1
    previous = None
    for name, rows in sections:
        # ncu lists each launch's SASS page twice: print each launch once.
        key = (name, [(r.get(EXECUTED), r.get(STALL)) for r in rows])
        if key != previous:
            report(name, rows, args.top, sys.stdout)
        previous = key
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
