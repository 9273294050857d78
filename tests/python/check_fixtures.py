#!/usr/bin/env python3
"""The official safetensors package agrees with our fixtures: it opens every
good_*.safetensors and rejects every bad_*.safetensors, except the few where
our loader is deliberately stricter (listed below with the reason).
This checks the fixtures themselves, independently of our loader.

Run alone: $H3_PYTHON tests/python/check_fixtures.py tests/data
Exit 0 pass, 1 fail, 77 skip (safetensors not importable)."""
import glob
import os
import sys

try:
    from safetensors import deserialize
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

# Files the official reader accepts but we reject, on purpose.
STRICTER = {
    "bad_extra_field.safetensors": "serde ignores unknown fields; we reject them (brief)",
    "bad_leading_space.safetensors": "serde skips leading whitespace; we require '{' first",
    "bad_meta_duplicate.safetensors": "serde keeps the last duplicate metadata key",
    "bad_nul_escape.safetensors": "\\u0000 is valid JSON but our names are C strings",
    "bad_rank9.safetensors": "the official format has no rank limit; we cap at 8",
}


def official_accepts(path):
    with open(path, "rb") as f:
        b = f.read()
    try:
        deserialize(b)
        return True, ""
    except Exception as e:  # SafetensorError, or anything the binding raises
        return False, str(e).splitlines()[0][:100]


def main():
    data = sys.argv[1]
    fails = 0
    files = sorted(glob.glob(os.path.join(data, "*.safetensors")))
    listed = set()
    with open(os.path.join(data, "expected_errors.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                listed.add(line.split(" ", 1)[0])
    for p in files:
        name = os.path.basename(p)
        ok, why = official_accepts(p)
        if name.startswith("good_"):
            if not ok:
                print(f"FAIL {name}: official reader rejects a good fixture: {why}")
                fails += 1
        elif name.startswith("bad_"):
            if name not in listed:
                print(f"FAIL {name}: not listed in expected_errors.txt")
                fails += 1
            if ok and name not in STRICTER:
                print(f"FAIL {name}: official reader accepts it, and it is not in STRICTER")
                fails += 1
            elif ok:
                print(f"note {name}: official accepts ({STRICTER[name]})")
    for name in listed:
        if not os.path.exists(os.path.join(data, name)):
            print(f"FAIL {name}: listed but missing")
            fails += 1
    print(f"{len(files)} fixtures checked against the official reader, {fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
