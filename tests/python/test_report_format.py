#!/usr/bin/env python3
"""dit_block's JSON report against its description, docs/report-format.md: the key table there
(key, type, null when) is read and every report made here is checked against it, so the
document and the writer cannot drift apart. Two CPU runs on a tiny block: synthetic inputs
(seed and profile) and --input FILE with --check full --repeat 2 --warmup 1. Checked:
  - "format" is "h3block-report/1"; every documented key is present (in objects that are
    not null), every key present is documented, each value has its documented type;
  - null only where the table allows it ("never" rows are never null), and the rules the
    format states: gpu null on the CPU path, seed null exactly when the inputs are a file,
    checks and all_pass null together exactly when checks_not_run is a string, tflops null
    exactly when flops is, gb_per_s when bytes is, and no 0 standing for "not applicable"
    (flops, bytes, rates, peaks, graph_ms, peak_mem_gb are > 0 when present);
  - the provenance: argv is the command line given, created_utc an ISO-8601 UTC time, the
    weights' and inputs' size_bytes their files' sizes and header_fnv1a64 the FNV-1a 64 of
    their first 8 + N bytes, computed here.

Run alone: python3 tests/python/test_report_format.py build/dit_block build/tools/gen_weights \\
    build/tools/gen_inputs docs/report-format.md WORKDIR
Exit 0 pass, 1 fail, 77 skip (a binary missing or unable to start). Standard library only."""
import json
import os
import re
import subprocess
import sys

from checks import FAILS, check
from fnv import fnv1a64


def read_table(doc):
    """{key: (type, nullable)} from the '## Keys' table of docs/report-format.md."""
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    sec = text.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    keys = {}
    for line in sec.splitlines():
        m = re.match(r"^\| `([^`]+)` \| ([a-z ]+) \| ([^|]+) \|", line)
        if m:
            keys[m.group(1)] = (m.group(2).strip(), m.group(3).strip() != "never")
    return keys


def type_ok(v, t):
    if t == "string":
        return isinstance(v, str)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "object":
        return isinstance(v, dict)
    if t == "array of string":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if t == "array of object":
        return isinstance(v, list) and all(isinstance(x, dict) for x in v)
    return False


def validate(doc, table, name):
    """Every documented key present with its type and null rule; no undocumented key."""
    def walk(obj, prefix):
        for k, v in obj.items():
            path = prefix + k
            if not check(path in table, f"{name}: key '{path}' is not in docs/report-format.md"):
                continue
            t, nullable = table[path]
            if v is None:
                check(nullable, f"{name}: '{path}' is null, which the table never allows")
                continue
            check(type_ok(v, t), f"{name}: '{path}' is {type(v).__name__} {v!r:.60}, not {t}")
            if t == "object":
                walk(v, path + ".")
            elif t == "array of object":
                for x in v:
                    walk(x, path + "[].")

    def present(obj, prefix):
        """The documented keys directly under prefix must all be in obj."""
        for key in table:
            if key.startswith(prefix) and "." not in key[len(prefix):] and "[]" not in key[len(prefix):]:
                check(key[len(prefix):] in obj, f"{name}: documented key '{key}' is missing")
        for k, v in obj.items():
            t = table.get(prefix + k, ("", False))[0]
            if isinstance(v, dict) and t == "object":
                present(v, prefix + k + ".")
            elif isinstance(v, list) and t == "array of object":
                for x in v:
                    present(x, prefix + k + "[].")

    walk(doc, "")
    present(doc, "")


def header_hash(path):
    with open(path, "rb") as f:
        b = f.read()
    n = int.from_bytes(b[:8], "little")
    return fnv1a64(b[:8 + n])


def rules(r, name, argv, weights, inputs):
    """The null rules and provenance the format states, beyond the table's types."""
    check(r["format"] == "h3block-report/1", f"{name}: format {r['format']!r}")
    check(r["argv"] == argv, f"{name}: argv {r['argv']} is not the command line {argv}")
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["created_utc"] or "") is not None,
          f"{name}: created_utc {r['created_utc']!r}")
    check(r["tool"]["name"] == "dit_block", f"{name}: tool.name {r['tool']['name']!r}")
    check((r["tool"]["cuda_compiler"] is None) == (r["tool"]["cuda_targets"] is None),
          f"{name}: tool.cuda_compiler and cuda_targets are not null together")
    check(r["path"] == "cpu" and r["gpu"] is None, f"{name}: the CPU path with gpu {r['gpu']!r}")
    check(r["weights"]["size_bytes"] == os.path.getsize(weights), f"{name}: weights.size_bytes")
    check(r["weights"]["header_fnv1a64"] == header_hash(weights),
          f"{name}: weights.header_fnv1a64 {r['weights']['header_fnv1a64']} != {header_hash(weights)}")
    ins = r["inputs"]
    if inputs:
        check(ins["source"] == "file" and r["seed"] is None and ins["profile"] is None,
              f"{name}: inputs from a file: source {ins['source']!r}, seed {r['seed']!r}, profile {ins['profile']!r}")
        check(ins["size_bytes"] == os.path.getsize(inputs) and ins["header_fnv1a64"] == header_hash(inputs),
              f"{name}: inputs size_bytes / header_fnv1a64")
    else:
        check(ins["source"] == "synthetic" and isinstance(r["seed"], int) and ins["profile"] in ("model", "uniform")
              and ins["path"] is None and ins["size_bytes"] is None,
              f"{name}: synthetic inputs: {ins}, seed {r['seed']!r}")
    check((r["checks"] is None) == (r["all_pass"] is None) == isinstance(r["checks_not_run"], str),
          f"{name}: checks {r['checks'] is None}, all_pass {r['all_pass']!r}, checks_not_run {r['checks_not_run']!r}")
    for key in ("graph_ms", "peak_mem_gb"):
        check(r[key] is None or r[key] > 0, f"{name}: {key} is {r[key]!r}: 0 does not stand for n/a")
    for s in r["stages"]:
        sn = f"{name}: stage {s['name']}"
        check((s["tflops"] is None) == (s["flops"] is None), f"{sn}: tflops and flops not null together")
        check((s["gb_per_s"] is None) == (s["bytes"] is None), f"{sn}: gb_per_s and bytes not null together")
        for key in ("flops", "bytes", "tflops", "gb_per_s", "peak_tflops", "peak_gb_per_s"):
            check(s[key] is None or s[key] > 0, f"{sn}: {key} is {s[key]!r}: 0 does not stand for n/a")
        check(s["once_per"] in (None, "timestep", "sequence"), f"{sn}: once_per {s['once_per']!r}")
        check(s["check"] in (None, "pass", "FAIL"), f"{sn}: check {s['check']!r}")
    for c in r["checks"] or []:
        check((c["tol_rms"] is None) == (c["pass"] is None) == (not c["asserted"]),
              f"{name}: check {c['stage']} {c['against']}: tolerance and verdict null exactly when not asserted")


def main():
    if len(sys.argv) != 6:
        print(__doc__.split("Run alone:")[1])
        return 2
    dit, genw, geni, doc, work = sys.argv[1:]
    for b in (dit, genw, geni):
        if not os.access(b, os.X_OK):
            print(f"skip: {b} not built")
            return 77
    os.makedirs(work, exist_ok=True)
    table = read_table(doc)
    check(len(table) > 60, f"docs/report-format.md: only {len(table)} keys read from its table")
    w, i = os.path.join(work, "tiny_w.safetensors"), os.path.join(work, "tiny_in.safetensors")
    for cmd in ([genw, "--config", "tiny", "--seed", "7", "--force", "--out", w],
                [geni, "--config", "tiny", "--tokens", "24", "--seed", "8", "--force", "--out", i]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode == 127:
            print(f"skip: {cmd[0]} cannot start here")
            return 77
        if not check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-300:]}"):
            return 1
    runs = [("synthetic", [dit, "--cpu", "--quiet", "--weights", w, "--tokens", "16", "--seed", "3"], None),
            ("--input", [dit, "--cpu", "--quiet", "--weights=" + w, "--input", i, "--check", "full", "--repeat", "2",
                         "--warmup=1"], i)]
    for name, cmd, inputs in runs:
        js = os.path.join(work, f"report_{name.strip('-')}.json")
        if os.path.exists(js):
            os.remove(js)
        cmd = cmd + ["--json", js]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if not check(p.returncode == 0, f"{name}: dit_block exit {p.returncode}: {p.stderr.strip()[-300:]}"):
            continue
        with open(js, encoding="utf-8") as f:
            r = json.load(f)
        validate(r, table, name)
        rules(r, name, cmd, w, inputs)
        if name == "--input":
            check(r["repeat"] == 2 and r["warmup"] == 1, f"{name}: repeat {r['repeat']}, warmup {r['warmup']}")
        print(f"ok   {name}: {len(r['stages'])} stages, {sum(1 for _ in r)} top-level keys, format {r['format']}")
    print(f"test_report_format: {len(table)} documented keys, {len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
