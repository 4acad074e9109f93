#!/usr/bin/env python3
"""Summarises where one kernel's warps stall, from Nsight Compute's source page:

    ncu --kernel-name regex:K --launch-count 1 --section WarpStateStats --section SourceCounters \\
        --page source --print-source sass --csv <app> > k.csv
    ncu_stalls.py k.csv [--top 40] [--phases] [--listing out.txt]
    ncu_stalls.py --self-test

Per SASS instruction: its share of the warp stall samples ("Warp Stall Sampling (All Samples)"),
its executions and excess shared-memory wavefronts. --top prints the instructions with the most
samples; --phases prints the instruction stream cut at landmark instructions (barriers, MMAs,
wgmma fences and waits, global / shared loads and stores, shuffles, SFU ops, branches) with the
samples of each run summed (ex= is the executions of the run's last instruction), which shows a
kernel's phases (staging, MMAs, softmax, ...) in order; --listing writes every instruction, one line each. Used for the issue 9 notes (run 157:
bench/gpu/results/2026-12-02-t/run157).
"""
import argparse
import csv
import io
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
EXCESS = "L1 Wavefronts Shared Excessive"
LANDMARK = re.compile(r"^(BAR|HGMMA|WARPGROUP|LDGSTS|LDGDEPBAR|DEPBAR|SHFL|MUFU|VOTE|BRA|EXIT|"
                      r"LDS|STS|LDG|STG|ATOM|SYNCS)")


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def read_instructions(text):
    """[(address, sass, samples, executed, excess wavefronts)] of the first kernel in the file
    (everything before its table's header line, which starts with "Address", is skipped)."""
    match = re.search(r'^"Address",', text, re.MULTILINE)
    start = match.start() if match else -1
    if start < 0:
        raise ValueError('no source table (a line starting with "Address") found')
    rows = list(csv.reader(io.StringIO(text[start:])))
    header = {name: i for i, name in enumerate(rows[0])}
    for column in ("Address", "Source", SAMPLES):
        if column not in header:
            raise ValueError(f"column {column!r} missing")
    out = []
    for row in rows[1:]:
        if len(row) != len(rows[0]):
            break  # the next kernel's table (or the end)
        get = lambda c: row[header[c]] if c in header else ""
        out.append((get("Address"), get("Source").strip(), number(get(SAMPLES)),
                    int(number(get(EXECUTED))), int(number(get(EXCESS)))))
    return out


def phases(instructions, min_share=0.8):
    """Runs of instructions, each ending at a landmark (or at an instruction with at least
    min_share % of the samples): [(share %, count, executions, last instruction)]."""
    total = sum(i[2] for i in instructions) or 1.0
    out, share, count = [], 0.0, 0
    for _, sass, samples, executed, _ in instructions:
        share += 100.0 * samples / total
        count += 1
        if LANDMARK.match(sass) or 100.0 * samples / total >= min_share:
            out.append((share, count, executed, sass))
            share, count = 0.0, 0
    if count:
        out.append((share, count, 0, "(end)"))
    return out


def render_top(instructions, top):
    total = sum(i[2] for i in instructions) or 1.0
    lines = [f"{len(instructions)} instructions, {total:.0f} samples"]
    for address, sass, samples, executed, excess in sorted(instructions, key=lambda i: -i[2])[:top]:
        lines.append(f"{address} {100 * samples / total:5.1f}% ex={executed:>10d} xs={excess:>8d} | "
                     f"{sass[:80]}")
    return "\n".join(lines) + "\n"


def render_phases(instructions):
    return "".join(f"{share:5.1f}% ({count:3d} instr) ex={executed:>9d} {sass[:80]}\n"
                   for share, count, executed, sass in phases(instructions))


def render_listing(instructions):
    total = sum(i[2] for i in instructions) or 1.0
    return "".join(f"{a} {s:6.0f} {100 * s / total:5.1f}% ex={e:>10d} xs={x:>8d} | {sass}\n"
                   for a, sass, s, e, x in instructions)


SAMPLE = '''==PROF== Connected to process 1
"Kernel Name","K(int)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","L1 Wavefronts Shared Excessive"
"0x10","LDG.E R2, desc[UR4][R2.64]","10","8","100","0"
"0x20","IMAD R3, R2, R2, RZ","50","40","100","0"
"0x30","BAR.SYNC.DEFER_BLOCKING 0x0","20","20","100","0"
"0x40","HGMMA.64x32x16.F32.BF16 R8, gdesc[UR8], R8","1,000","900","3,200","0"
"0x50","FMUL R4, R3, R3","5","5","100","0"
"0x60","EXIT","15","15","100","0"
'''


def self_test():
    instructions = read_instructions(SAMPLE)
    assert len(instructions) == 6, instructions
    assert instructions[3][2] == 1000.0 and instructions[3][3] == 3200, instructions[3]
    runs = phases(instructions)
    # LDG (landmark) | IMAD (4.5% >= 0.8) | BAR | HGMMA | FMUL + EXIT
    assert [r[1] for r in runs] == [1, 1, 1, 1, 2], runs
    assert abs(sum(r[0] for r in runs) - 100.0) < 1e-9
    assert runs[3][3].startswith("HGMMA") and abs(runs[3][0] - 1000 / 1100 * 100) < 1e-9
    top = render_top(instructions, 2)
    assert top.splitlines()[1].startswith("0x40  90.9%"), top
    assert "1100 samples" in top
    try:
        read_instructions("no table")
        raise AssertionError("a file without the source table must be rejected")
    except ValueError:
        pass
    print("ncu_stalls self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="?", help="ncu --page source --print-source sass --csv output")
    parser.add_argument("--top", type=int, default=40, help="instructions to print (default 40)")
    parser.add_argument("--phases", action="store_true", help="the stream cut at landmarks")
    parser.add_argument("--listing", help="write every instruction to this file")
    parser.add_argument("--self-test", action="store_true", help="check on a built-in sample")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.csv:
        parser.error("a CSV file is required (or --self-test)")
    with open(args.csv, encoding="utf-8", errors="replace") as f:
        instructions = read_instructions(f.read())
    sys.stdout.write(render_phases(instructions) if args.phases else
                     render_top(instructions, args.top))
    if args.listing:
        with open(args.listing, "w", encoding="utf-8") as f:
            f.write(render_listing(instructions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
