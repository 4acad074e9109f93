#!/usr/bin/env python3
"""Instructions per iteration of a kernel's main loop, from the SASS of an object file (issue 9).

  python3 bench/gpu/sass_loop.py OBJECT NAME_PART [--anchor REGEX] [--list]

Runs `cuobjdump -sass OBJECT` (the object of a .cu file in build/, e.g.
build/src/backend/cuda/CMakeFiles/deepinfer_backend_cuda.dir/k_moe_block128_rs.cu.o) and, for
every kernel whose mangled name contains NAME_PART, finds the loop: the widest backward branch
whose range holds the first instruction matching --anchor (default: a warpgroup MMA, GMMA). It
prints the loop's static instruction count and its mix by opcode; --list prints the loop.
The count includes rarely taken paths inside the loop (a barrier's retry branch), so the
executed count per iteration is a little lower.

cuobjdump: $CUOBJDUMP or the one on PATH. The CUDA toolkit here has none; PyPI's wheel brings it
(a developer tool, not a dependency of the project):
  python3 -m pip download --no-deps -d /tmp/whl nvidia-cuda-cuobjdump &&
  unzip -o /tmp/whl/nvidia_cuda_cuobjdump-*.whl -d /tmp/cuobjdump   # then PATH=/tmp/cuobjdump/nvidia/cu13/bin:$PATH
Standard library only; --self-test checks the parser on a built-in sample.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def functions(sass_text):
    """{mangled name: [(address, instruction text)]} of every function in cuobjdump's output."""
    out, name = {}, None
    for line in sass_text.splitlines():
        if "Function :" in line:
            name = line.split("Function :", 1)[1].strip()
            out[name] = []
        elif name is not None:
            m = INSTR.match(line)
            if m:
                out[name].append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def main_loop(instrs, anchor):
    """(start, end) addresses of the widest backward branch around the first anchor, or None."""
    hits = [a for a, t in instrs if re.search(anchor, t)]
    if not hits:
        return None
    best = None
    for a, t in instrs:
        m = BRANCH.search(t)
        if m:
            target = int(m.group(1), 16)
            if target <= hits[0] <= a and (best is None or a - target > best[1] - best[0]):
                best = (target, a)
    return best


def report(name, instrs, anchor, listing):
    loop = main_loop(instrs, anchor)
    if loop is None:
        return f"{name}: no loop around /{anchor}/"
    body = [t for a, t in instrs if loop[0] <= a <= loop[1]]
    mix = collections.Counter(opcode(t) for t in body).most_common()
    lines = [f"{name}: loop {loop[0]:#x}-{loop[1]:#x}, {len(body)} instructions",
             "  " + ", ".join(f"{op} {n}" for op, n in mix)]
    if listing:
        lines += [f"  {a:#06x} {t}" for a, t in instrs if loop[0] <= a <= loop[1]]
    return "\n".join(lines)


SAMPLE = """
        Function : _Z6kernelv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDS R2, [R3] ;
        /*0020*/                   PRMT R4, R2, 0x7654, R5 ;
        /*0030*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, R56, gdesc[UR4], RZ, !UPT ;
        /*0040*/                   FFMA R6, R24, R7, R6 ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   EXIT ;
        Function : _Z5otherv
        /*0000*/                   EXIT ;
"""


def self_test():
    fns = functions(SAMPLE)
    assert list(fns) == ["_Z6kernelv", "_Z5otherv"], fns
    assert main_loop(fns["_Z6kernelv"], "GMMA") == (0x10, 0x50)
    text = report("_Z6kernelv", fns["_Z6kernelv"], "GMMA", False)
    assert "5 instructions" in text and "QGMMA 1" in text and "BRA 1" in text, text
    assert main_loop(fns["_Z5otherv"], "GMMA") is None
    print("sass_loop self-test: ok")


def find_cuobjdump():
    for candidate in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")):
        if candidate and os.path.exists(candidate):
            return candidate
    sys.exit("cuobjdump not found: set CUOBJDUMP or see this script's docstring")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("object", nargs="?")
    parser.add_argument("name_part", nargs="?")
    parser.add_argument("--anchor", default="GMMA")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.object or not args.name_part:
        parser.error("OBJECT and NAME_PART are required")
    sass = subprocess.run([find_cuobjdump(), "-sass", args.object], check=True,
                          capture_output=True, text=True).stdout
    for name, instrs in functions(sass).items():
        if args.name_part in name:
            print(report(name, instrs, args.anchor, args.list))


if __name__ == "__main__":
    main()
