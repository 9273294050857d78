#!/usr/bin/env python3
"""block_probe.py OUT_DIR — the tables of tools/bench/block_probe.sh's run:
clock and power while attention runs alone and while the block runs, and
ncu's per-kernel view of one block run. Writes OUT_DIR/block_probe.json."""
import csv
import json
import re
import statistics
import sys
from pathlib import Path

# nvidia-smi's clock-event reason bits (nvml.h, nvmlClocksEventReason*)
REASONS = {0x1: "idle", 0x2: "app clocks", 0x4: "sw power cap", 0x8: "hw slowdown", 0x10: "sync boost",
           0x20: "sw thermal", 0x40: "hw thermal", 0x80: "hw power brake", 0x100: "display clocks"}


def samples(path, min_watts=150.0):
    """Median (and mean) SM clock (MHz), power (W), temperature (C) over the samples
    drawn above min_watts, and how often each clock-event reason was set."""
    rows = []
    for line in Path(path).read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            clk, watts, temp, bits = float(f[1]), float(f[2]), float(f[3]), int(f[4], 16)
        except (IndexError, ValueError):
            continue
        if watts > min_watts:
            rows.append((clk, watts, temp, bits))
    if not rows:
        return {"samples": 0}
    reasons = {}
    for *_, bits in rows:
        for bit, name in REASONS.items():
            if bits & bit:
                reasons[name] = reasons.get(name, 0) + 1
    return {"samples": len(rows), "sm_mhz": statistics.median(r[0] for r in rows),
            "sm_mhz_mean": statistics.fmean(r[0] for r in rows),
            "watts": statistics.median(r[1] for r in rows), "temp_c": statistics.median(r[2] for r in rows),
            "reasons": {k: round(v / len(rows), 3) for k, v in reasons.items()}}


def one_block(rows):
    """The launches of one block out of dit_block --warmup 0 --repeat 1: the
    cached ops (adaLN, RoPE table), then the block op by op, its CUDA-graph
    warm-up and its replay, so the launches end in three copies of one
    block's sequence. Returns the cached ops' launches and one copy, and
    whether that pattern was found (else every row)."""
    names = [r.get("Kernel Name", "?") for r in rows]
    for k in range(1, len(names) // 3 + 1):
        if names[-k:] == names[-2 * k:-k] == names[-3 * k:-2 * k]:
            return rows[:len(rows) - 3 * k] + rows[-k:], True
    return rows, False


def ncu_kernels(path):
    """ncu --csv --page raw: one row per launch; one block's launches summed
    per kernel name."""
    text = Path(path).read_text(errors="replace").splitlines()
    start = next((i for i, l in enumerate(text) if l.startswith('"ID"')), None)
    if start is None:
        return [], False
    rows, found = one_block(list(csv.DictReader(text[start:]))[1:])  # the second row holds the units
    per = {}
    for r in rows:
        name = re.sub(r"\(.*", "", r.get("Kernel Name", "?")).replace("void ", "")[:60]
        try:
            ms = float(r["gpu__time_duration.sum"]) / 1e6  # ns in the raw page
            sm = float(r["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
            dram = float(r["dram__throughput.avg.pct_of_peak_sustained_elapsed"])
            gb = float(r["dram__bytes.sum"]) / 1e9
            mhz = float(r["sm__cycles_elapsed.avg.per_second"]) / 1e6
        except (KeyError, ValueError):
            continue
        k = per.setdefault(name, {"kernel": name, "launches": 0, "ms": 0.0, "sm_pct": 0.0, "dram_pct": 0.0,
                                  "dram_gb": 0.0, "mhz": 0.0})
        k["launches"] += 1
        k["ms"] += ms
        k["sm_pct"] += sm * ms  # time-weighted, divided below
        k["dram_pct"] += dram * ms
        k["dram_gb"] += gb
        k["mhz"] += mhz * ms
    out = sorted(per.values(), key=lambda k: -k["ms"])
    for k in out:
        for f in ("sm_pct", "dram_pct", "mhz"):
            k[f] = k[f] / k["ms"] if k["ms"] > 0 else 0.0
    return out, found


def show(path, pattern, prefix):
    """Prints the lines of the log at path that match pattern, after prefix
    (nothing when the run did not happen)."""
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if re.search(pattern, line):
                print(prefix, line.strip())


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "out/block_probe")
    runs = [k for k in ("attn_alone", "fa3_fp8_alone", "cudnn_fp8_alone", "block") if (d / f"{k}.smi").exists()]
    res = {k: samples(d / f"{k}.smi") for k in runs}
    print("| run | samples > 150 W | SM clock MHz, median (mean) | power W | temp C | clock-event reasons (share of samples) |")
    print("|---|---|---|---|---|---|")
    for k in runs:
        s = res[k]
        if not s["samples"]:
            print(f"| {k} | 0 | | | | |")
            continue
        why = ", ".join(f"{n} {v:.0%}" for n, v in s["reasons"].items()) or "none"
        print(f"| {k} | {s['samples']} | {s['sm_mhz']:.0f} ({s['sm_mhz_mean']:.0f}) | {s['watts']:.0f} | {s['temp_c']:.0f} | {why} |")
    show(d / "attn_alone.log", r"h3_fp8_sm90", "alone:")
    for k in ("fa3_fp8", "cudnn_fp8"):
        show(d / f"{k}_alone.log", rf"^{k} ", "alone:")
    show(d / "block.log", r"^(attention|block total)", "block:")
    ks, found = ncu_kernels(d / "ncu.csv")
    res["ncu"] = ks
    res["ncu_one_block"] = found
    if ks:
        total = sum(k["ms"] for k in ks)
        what = "one block run" if found else "every launch (one block's could not be told apart)"
        print(f"\nncu, {what}, {total:.3f} ms of kernels (each replayed alone):")
        print("| kernel | launches | ms | share | SM % of peak | DRAM % of peak | DRAM GB | SM MHz |")
        print("|---|---|---|---|---|---|---|---|")
        for k in ks:
            print(f"| {k['kernel']} | {k['launches']} | {k['ms']:.3f} | {k['ms'] / total:.1%} | {k['sm_pct']:.1f} "
                  f"| {k['dram_pct']:.1f} | {k['dram_gb']:.3f} | {k['mhz']:.0f} |")
    else:
        print("ncu: no kernel rows (see ncu_tool.log and ncu.err)")
    (d / "block_probe.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
