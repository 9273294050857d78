#!/usr/bin/env python3
"""sass_loop_check.py — checks the main loop of kernels in `cuobjdump -sass` output.

Usage: sass_loop_check.py SASS_FILE MAX_MUFU_RUN LABEL=NAME_PREFIX [LABEL=NAME_PREFIX ...]

For each function whose name starts with NAME_PREFIX (a mangled-name prefix,
e.g. _Z28h3k_attn_fp8_sm90_wg3_kernelILi2ELi0ELj65664E) the main loop is the
shortest backward branch whose body holds at least 8 QGMMA instructions (the
QK^T and PV wgmmas of one key tile). It fails if there is no such loop, if the
loop touches local memory (LDL/STL: spills), or if the loop issues more than
MAX_MUFU_RUN MUFU instructions back to back: ptxas can sink the row sums past
a branch and issue a tile's 64 exps as one run, which measured 3-15% slower
than the interleaved schedule (docs/perf.md, 2026-12-04 third session).
Prints one line per kernel; exit status 1 on any failure.
"""
import re
import sys

FUNC = re.compile(r"\s+Function : (\S+)")
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA(?:\.[A-Z.]+)?\s+(?:!?U?P[T0-9]+,\s*)?(?:`\(\.L_x_\d+\)\s+)?(0x[0-9a-f]+)")


def functions(path):
    funcs, cur = {}, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = FUNC.match(line)
            if m:
                cur = m.group(1)
                funcs[cur] = []
                continue
            m = INSN.search(line)
            if cur and m:
                funcs[cur].append((int(m.group(1), 16), m.group(2)))
    return funcs


def opcode(text):
    parts = text.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


def main_loop(insns):
    index = {addr: i for i, (addr, _) in enumerate(insns)}
    best = None
    for i, (addr, text) in enumerate(insns):
        m = BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr or target not in index:
            continue
        body = insns[index[target]:i + 1]
        if sum("QGMMA" in t for _, t in body) >= 8 and (best is None or len(body) < len(best)):
            best = body
    return best


def longest_run(body, prefix):
    run = best = 0
    for _, text in body:
        run = run + 1 if opcode(text).startswith(prefix) else 0
        best = max(best, run)
    return best


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    funcs = functions(argv[1])
    limit = int(argv[2])
    fail = 0
    for spec in argv[3:]:
        label, _, prefix = spec.partition("=")
        names = [n for n in funcs if n.startswith(prefix)]
        if len(names) != 1:
            print(f"FAIL {label}: {len(names)} functions named {prefix}* in the SASS (expected 1)")
            fail = 1
            continue
        body = main_loop(funcs[names[0]])
        if body is None:
            print(f"FAIL {label}: no loop with >= 8 QGMMA in {names[0]}")
            fail = 1
            continue
        qgmma = sum("QGMMA" in t for _, t in body)
        local = sum(opcode(t).startswith(("LDL", "STL")) for _, t in body)
        mufu = sum(opcode(t).startswith("MUFU") for _, t in body)
        run = longest_run(body, "MUFU")
        ok = local == 0 and run <= limit
        print(f"{'ok  ' if ok else 'FAIL'} {label}: main loop {len(body)} instructions, {qgmma} QGMMA, "
              f"{mufu} MUFU (longest run {run}, limit {limit}), {local} local loads/stores")
        fail |= not ok
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
