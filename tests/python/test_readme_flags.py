#!/usr/bin/env python3
"""README.md's flag lists against the tools' --help:
  - the usage block under "## dit_block" is, word for word, the synopsis `dit_block --help`
    starts with, and that synopsis names every flag the help's option list describes (and no
    other);
  - each row of the "## Tools" table that names a built binary (build/tools/...) or a Python
    tool (python3 tools/bench/...) lists exactly the flags of that tool's --help synopsis,
    --help and --version aside (every tool has both, and its synopsis must show them).
A row whose binary this build does not have (bench_attn without CUDA) is noted, not failed.

Run alone: python3 tests/python/test_readme_flags.py README.md BUILD_DIR
Exit 0 pass, 1 fail, 77 skip (no dit_block, or it cannot start). Standard library only."""
import os
import re
import subprocess
import sys

import checks
from checks import FAILS, check

checks.show_ok = True

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
COMMON = {"--help", "--version"}


def section(text, title):
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def synopsis(help_text):
    """The usage block: the 'usage:' line and the indented lines that continue it."""
    lines = help_text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("usage:"))
    block = [lines[start]]
    for l in lines[start + 1:]:
        if not l.startswith("   "):  # continuations are indented under the name; text after it by two
            break
        block.append(l)
    return " ".join(block)


def run_help(cmd):
    p = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("Run alone:")[1])
        return 2
    readme, build = sys.argv[1:]
    root = os.path.dirname(os.path.abspath(readme))
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    dit = os.path.join(build, "dit_block")
    if not os.access(dit, os.X_OK):
        print(f"skip: {dit} not built")
        return 77
    rc, out, err = run_help([dit])
    if rc == 127:
        print(f"skip: {dit} cannot start here")
        return 77
    check(rc == 0 and not err, f"dit_block --help: exit {rc}, stderr {err.strip()[:100]!r}")

    # 1. dit_block: README's block is the help's synopsis, word for word
    sec = section(text, "dit_block")
    block = []
    for l in sec.splitlines():
        if l.startswith("    "):
            block.append(l)
        elif block:
            break
    words_readme = " ".join(block).split()
    words_help = synopsis(out).split()[1:]  # without "usage:"
    if not check(words_readme == words_help, "README's dit_block usage block is dit_block --help's synopsis"):
        print("    README: " + " ".join(words_readme))
        print("    --help: " + " ".join(words_help))
    described = set(re.findall(r"^  (--[a-z0-9-]+)", out, re.M))
    listed = set(FLAG.findall(" ".join(words_help)))
    check(described == listed, "dit_block --help describes every flag of its synopsis and no other"
          + (f": only described {sorted(described - listed)}, only listed {sorted(listed - described)}"
             if described != listed else f" ({len(listed)} flags)"))

    # 2. the Tools table
    rows = [l for l in section(text, "Tools").splitlines() if l.startswith("| `")]
    checked = 0
    for row in rows:
        cell = row.split("` |", 1)[0][3:].replace("\\|", "|")
        m = re.match(r"(?:python3 )?(\S+)", cell)
        tool = m.group(1)
        if tool.startswith("build/"):
            cmd = [os.path.join(build, tool[len("build/"):])]
            if not os.access(cmd[0], os.X_OK):
                print(f"note {tool}: not in this build, not compared")
                continue
        elif cell.startswith("python3 "):
            cmd = [sys.executable, os.path.join(root, tool)]
        else:
            continue  # shell scripts: their own --help, no synopsis to compare
        rc, out, err = run_help(cmd)
        if not check(rc == 0 and out.startswith("usage:"), f"{tool} --help: exit {rc}, usage on stdout"):
            print("    " + (err or out).strip()[-300:])
            continue
        syn = synopsis(out)
        have = set(FLAG.findall(syn))
        want = set(FLAG.findall(cell))
        check("--version" in have and ("--help" in have or "[-h]" in syn),
              f"{tool}: its --help synopsis shows --help (or -h) and --version")
        have -= COMMON
        want -= COMMON
        check(have == want, f"{tool}: README's flags are its --help's"
              + (f": README only {sorted(want - have)}, --help only {sorted(have - want)}" if have != want
                 else f" ({len(have)} flags)"))
        checked += 1
    check(checked >= 10, f"{checked} rows of the Tools table compared")
    print(f"test_readme_flags: {len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
