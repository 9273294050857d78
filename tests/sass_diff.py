#!/usr/bin/env python3
"""sass_diff.py — are two kernels' machine code the same, instruction for instruction?

Usage: sass_diff.py OLD.sass OLD_PREFIX NEW.sass NEW_PREFIX [--loop]

Reads `cuobjdump -sass` listings, takes the function whose mangled name starts
with each prefix, and compares their instructions with the addresses and branch
targets made relative to the function's start (so a kernel moved to another file
or renamed compares equal when its code is). With --loop only the main loop
(tests/sass_loop_check.py's definition: the shortest backward branch holding >= 8
QGMMA) is compared. Prints "identical: N instructions" or the first differences;
exit 0 when identical, 1 otherwise, 2 on a usage error.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_loop_check as slc  # noqa: E402

HEX = re.compile(r"0x[0-9a-f]+")


def body(path, prefix, loop):
    funcs = slc.functions(path)
    names = [n for n in funcs if n.startswith(prefix)]
    if len(names) != 1:
        sys.exit(f"sass_diff: {len(names)} functions named {prefix}* in {path} (expected 1)")
    insns = funcs[names[0]]
    if loop:
        insns = slc.main_loop(insns)
        if insns is None:
            sys.exit(f"sass_diff: no main loop in {names[0]}")
    start = insns[0][0]

    def norm(text):
        # branch targets and other code addresses relative to the start
        if "BRA" in text or "CALL" in text or "BSSY" in text or "BSYNC" in text:
            return HEX.sub(lambda m: hex(int(m.group(0), 16) - start), text)
        return text
    return names[0], [norm(t) for _, t in insns]


def main(argv):
    args = [a for a in argv[1:] if a != "--loop"]
    if len(args) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    loop = "--loop" in argv
    na, a = body(args[0], args[1], loop)
    nb, b = body(args[2], args[3], loop)
    if a == b:
        print(f"identical: {len(a)} instructions ({'main loop' if loop else 'whole function'}) of {na} and {nb}")
        return 0
    diffs = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
    print(f"DIFFERENT: {len(a)} vs {len(b)} instructions, {len(diffs)} positions differ; first:")
    for i in diffs[:8]:
        print(f"  [{i}] {a[i] if i < len(a) else '-'}  |  {b[i] if i < len(b) else '-'}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
