#!/usr/bin/env python3
"""dit_block on edited copies of a tiny block file: what the official
safetensors library loads, dit_block loads; what it refuses, dit_block
refuses with one line; and names from the file never reach the terminal raw.

  official: an odd header length (data not 2-byte aligned in the file), an
      odd-sized extra tensor before the block's (its tensors misaligned),
      extra tensors of every dtype the format defines (U16, U32, F8_E8M0, F4,
      ...), a 'blocks.007.' prefix: loaded (exit 0; extras: one warning line
      each). Overlong UTF-8, an encoded surrogate, lone \\ud800 / \\udc00
      escapes in an extra tensor's name, a shape entry -0: refused (exit 2,
      one line). When the official package is importable, its verdict on each
      file must be the one expected here.
  names: an extra tensor named with a newline and a terminal escape (valid
      JSON) gives one warning line with both escaped; a block error naming
      such a name (the block under two prefixes) or such a qkv_layout value is
      one escaped line, exit 2; 'blocks.0.' and 'blocks.007.' in one file are
      two blocks (refused without --block), 'blocks.7.' and 'blocks.007.' one
      block spelt two ways (refused naming both spellings).

Run alone: python3 tests/python/test_block_files.py official|names build/dit_block build/tools/gen_weights WORKDIR
Exit 0 pass, 1 fail, 77 skip (the binaries cannot start here). Standard
library only; the official package (safetensors) is used when importable."""
import json
import os
import struct
import subprocess
import sys

try:
    from safetensors import deserialize
except ImportError:
    deserialize = None

import checks
from checks import FAILS, check

checks.show_ok = True


def read_st(path):
    """(header dict in file order, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def tensors_of(hdr, data):
    """[(name, dtype, shape, bytes)] in data order, and the metadata."""
    out = [(k, e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]])
           for k, e in hdr.items() if k != "__metadata__"]
    out.sort(key=lambda t: hdr[t[0]]["data_offsets"][0])
    return out, hdr.get("__metadata__")


def write_st(path, tensors, meta=None, pad=True, raw_names=None, shape_text=None, extra_space=0):
    """tensors: [(name, dtype, shape, bytes)] laid out in this order.
    raw_names: {placeholder: raw bytes} put into the header text as is (for
    names that are not valid UTF-8); shape_text: {placeholder: text} for a
    shape entry json cannot write (-0). pad: spaces to a multiple of 8 as the
    official writer does; extra_space: spaces added after that."""
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, b in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr, separators=(",", ":"), ensure_ascii=False).encode()
    for k, v in (raw_names or {}).items():
        h = h.replace(k.encode(), v)
    for k, v in (shape_text or {}).items():
        h = h.replace(k.encode(), v.encode())
    if pad:
        h += b" " * (-len(h) % 8)
    h += b" " * extra_space
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def official_loads(path):
    if deserialize is None:
        return None
    with open(path, "rb") as f:
        b = f.read()
    try:
        deserialize(b)
        return True
    except Exception:  # SafetensorError or whatever the binding raises
        return False


def run(dit, weights, work):
    r = subprocess.run([dit, "--cpu", "--quiet", "--weights", weights, "--tokens", "8", "--json",
                        os.path.join(work, "r.json")], capture_output=True)
    return r.returncode, r.stderr


def raw_bytes_ok(stderr):
    """No control byte but the line ends, no ESC, valid UTF-8."""
    try:
        stderr.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c >= 0x20 or c == 0x0A for c in stderr)


def expect_loads(dit, path, work, desc, warnings=0):
    rc, err = run(dit, path, work)
    lines = err.decode("utf-8", "replace").splitlines()
    nwarn = sum(1 for ln in lines if ln.startswith("dit_block: warning: "))
    check(rc == 0 and nwarn == warnings and raw_bytes_ok(err),
          f"{desc}: loads (exit {rc}, {nwarn} warning lines, want 0 and {warnings})")
    if rc != 0:
        print("    " + "\n    ".join(lines[-3:]))
    return lines


def expect_refused(dit, path, work, desc, want):
    rc, err = run(dit, path, work)
    lines = err.decode("utf-8", "replace").splitlines()
    check(rc == 2 and len(lines) == 1 and want in lines[0] and raw_bytes_ok(err),
          f"{desc}: refused, one line with '{want}' (exit {rc}): {lines[-1] if lines else ''}")
    return lines


def official(path, want, desc):
    got = official_loads(path)
    if got is not None:
        check(got == want, f"{desc}: the official safetensors library {'loads' if got else 'refuses'} it too")


def main():
    mode, dit, gen, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    if subprocess.run([dit, "--help"], capture_output=True).returncode == 127:
        print(f"skip: {dit} cannot start here")
        return 77
    base = os.path.join(work, "tiny.safetensors")
    if os.path.exists(base):
        os.remove(base)
    subprocess.run([gen, "--config", "tiny", "--seed", "3", "--out", base], check=True, capture_output=True)
    hdr, data = read_st(base)
    block, meta = tensors_of(hdr, data)
    p = lambda name: os.path.join(work, name)
    if deserialize is None:
        print("note: safetensors not importable: the official library's verdicts are not compared")

    if mode == "official":
        # an odd header length: the data region starts at an odd file offset
        write_st(p("odd_header.st"), block, meta, extra_space=1)
        n = struct.unpack("<Q", open(p("odd_header.st"), "rb").read(8))[0]
        check(n % 2 == 1, f"odd_header.st: header length {n} is odd")
        official(p("odd_header.st"), True, "odd header length")
        expect_loads(dit, p("odd_header.st"), work, "odd header length")
        # an odd-sized extra first: every block tensor at an odd data offset
        write_st(p("odd_extra.st"), [("blocks.0.extra", "U8", [3], b"\1\2\3")] + block, meta)
        official(p("odd_extra.st"), True, "3-byte extra before the block")
        expect_loads(dit, p("odd_extra.st"), work, "3-byte extra before the block (tensors misaligned)", 1)
        # extras of dtypes the block never reads
        others = [("U16", [2], 4), ("U32", [1], 4), ("U64", [1], 8), ("I16", [2], 4), ("F8_E8M0", [2], 2),
                  ("F8_E4M3FNUZ", [1], 1), ("F8_E5M2FNUZ", [1], 1), ("C64", [1], 8), ("F4", [4], 2),
                  ("F6_E2M3", [4], 3), ("F6_E3M2", [4], 3)]
        for dt, shape, nb in others:
            f = p(f"extra_{dt}.st")
            write_st(f, block + [(f"blocks.0.extra_{dt.lower()}", dt, shape, bytes(range(1, nb + 1)))], meta)
            official(f, True, f"extra {dt} tensor")
            lines = expect_loads(dit, f, work, f"extra {dt} tensor", 1)
            check(any(f"extra_{dt.lower()}" in ln and dt in ln for ln in lines), f"extra {dt}: the warning names it")
        # the prefix as spelt in the file
        write_st(p("prefix007.st"), [("blocks.007." + n.split(".", 2)[2], d, s, b) for n, d, s, b in block], meta)
        official(p("prefix007.st"), True, "blocks.007. prefix")
        expect_loads(dit, p("prefix007.st"), work, "blocks.007. prefix")
        # names that are not valid UTF-8 (json-c lets them through) and -0
        bad = [("overlong", {"@N@": b"blocks.0.x\xc0\xaf"}, "invalid utf-8"),
               ("encoded_surrogate", {"@N@": b"blocks.0.x\xed\xa0\x80"}, "invalid utf-8"),
               ("lone_high_escape", {"@N@": b"blocks.0.x\\ud800"}, "lone high surrogate"),
               ("lone_low_escape", {"@N@": b"blocks.0.x\\udc00"}, "lone low surrogate")]
        for desc, raw, want in bad:
            f = p(f"name_{desc}.st")
            write_st(f, block + [("@N@", "U8", [1], b"\0")], meta, raw_names=raw)
            official(f, False, f"extra tensor name: {desc}")
            expect_refused(dit, f, work, f"extra tensor name: {desc}", want)
        f = p("shape_minus_zero.st")
        write_st(f, block + [("blocks.0.empty", "U8", ["@Z@"], b"")], meta, shape_text={'"@Z@"': "-0"})
        official(f, False, "shape entry -0")
        expect_refused(dit, f, work, "shape entry -0", "-0 is not a size")
    elif mode == "names":
        evil = "blocks.0.evil\nname\x1b[31mred"
        f = p("evil_extra.st")
        write_st(f, block + [(evil, "U8", [1], b"\0")], meta)
        lines = expect_loads(dit, f, work, "extra tensor named with a newline and ESC [31m", 1)
        w = [ln for ln in lines if ln.startswith("dit_block: warning: ")]
        check(bool(w) and "evil\\x0aname\\x1b[31mred" in w[0], f"the warning escapes the name: {w[0] if w else ''}")
        f = p("evil_mixed.st")  # the block under two prefixes, one with a newline and an OSC escape
        evil_pre = "evil\nname\x1b]0;title\x07."
        write_st(f, block + [(evil_pre + n, d, s, b) for n, d, s, b in block], meta)
        lines = expect_refused(dit, f, work, "the block under two prefixes, one with a newline and an OSC escape",
                               "two prefixes")
        check(bool(lines) and "evil\\x0aname\\x1b]0;title\\x07" in lines[0], "the error escapes the name")
        f = p("evil_layout.st")  # a metadata value in an error
        write_st(f, block, dict(meta or {}, qkv_layout="grouped\n\x1b[2J"))
        lines = expect_refused(dit, f, work, "qkv_layout with a newline and ESC [2J", "qkv_layout")
        check(bool(lines) and "grouped\\x0a\\x1b[2J" in lines[0], "the error escapes the metadata value")
        f = p("two_spellings.st")
        write_st(f, block + [("blocks.007.extra", "U8", [1], b"\0")], meta)
        expect_refused(dit, f, work, "blocks.0. and blocks.007. in one file", "2 blocks")
        f = p("same_block_two_spellings.st")
        write_st(f, [("blocks.7." + n.split(".", 2)[2], d, s, b) for n, d, s, b in block] +
                 [("blocks.007.extra", "U8", [1], b"\0")], meta)
        expect_refused(dit, f, work, "blocks.7. and blocks.007. in one file", "'blocks.7.")
    else:
        print(f"unknown mode {mode}")
        return 2
    print(f"test_block_files {mode}: {len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
